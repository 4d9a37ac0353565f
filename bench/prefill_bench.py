"""Prefills per unit of a score-only evaluation: this checkout against an earlier commit, in one
invocation.

    .venv/bin/python bench/prefill_bench.py --previous 794fd94 [--units 64] [--kv-gb 1] [--write-results]

`eval.judges.grade_units` over `--units` real MT-Bench gradings with `score_only: true`, on an
engine whose KV cache (`--kv-gb`) is smaller than the set's prompts, so the prefix cache cannot hold
them all. Each arm runs in a fresh child process (the earlier commit's code through a PYTHONPATH shim,
as bench/eval_vs_previous.py does); the engine's own prefill count comes from a vLLM stat logger the
child attaches (prompt tokens looked up minus prefix-cache hits, recomputation after preemption
included), so both commits are counted the same way. Arms:
- previous: the sampled pass (n=1, `--max-tokens`), then the score-only pass over the whole set;
- current: the same, batch by batch (the score-only read right after its batch's sampled pass);
- current, `sampled: false`: the score-only read alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import _common as C

HERE = Path(__file__).resolve()
TITLE = "eval: prefills per unit of a score-only evaluation"


def _attach_counter(counts: dict) -> None:
    """Every AsyncLLM built from here on logs stats into `counts` (works on either commit)."""
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.metrics.loggers import StatLoggerBase

    class Counts(StatLoggerBase):
        def __init__(self, vllm_config, engine_index=0):
            pass

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
            pc = getattr(scheduler_stats, "prefix_cache_stats", None)
            if pc is not None:
                counts["queried"] += pc.queries + pc.preempted_queries
                counts["hits"] += pc.hits + pc.preempted_hits
            if iteration_stats is not None:
                counts["preempted"] += iteration_stats.num_preempted_reqs

        def log_engine_initialized(self):
            pass

    original = AsyncLLM.from_engine_args.__func__

    def patched(cls, args, *a, **kw):
        args.disable_log_stats = False
        return original(cls, args, *a, stat_loggers=[Counts], **{k: v for k, v in kw.items() if k != "stat_loggers"})

    AsyncLLM.from_engine_args = classmethod(patched)


def child(a) -> None:
    from judgeforge.eval.config import EvalSampling
    from judgeforge.eval.judges import Unit, grade_units
    from judgeforge.judge.config import EngineConfig
    from judgeforge.judge.engines import build_engine

    counts = dict.fromkeys(("queried", "hits", "preempted"), 0)
    _attach_counter(counts)
    items = C.mt_bench_items(a.units)
    units = [Unit("mt_bench", "absolute", "item", str(i), it, {"ref": it.gpt4}) for i, it in enumerate(items)]
    kw = {"sampled": False} if a.arm == "score-only only" else {}
    sampling = EvalSampling(max_tokens=a.max_tokens, score_only=True, **kw)
    # float32 on every arm: what `dtype: auto` resolves to on a CPU without native bf16 today, while
    # the earlier commit's `auto` meant bf16 there (5x slower); the prefill count does not depend on it.
    with build_engine(EngineConfig(kind="vllm", model="default-judge", max_model_len=4096,
                                   kv_cache_gb=a.kv_gb, dtype="float32")) as eng:
        from judgeforge.judge.engines import prompt_token_ids

        prompt = sum(len(prompt_token_ids(eng.tokenizer, u.item.messages())) for u in units)
        base = dict(counts)
        t0 = time.perf_counter()
        recs, _ = grade_units(eng, units, n=1, sampling=sampling)
        wall = time.perf_counter() - t0
    done = sum(r.get("score_only_probs") is not None for r in recs)
    C.emit({"wall_s": wall, "prompt_tokens": prompt, "prefilled": (counts["queried"] - base["queried"])
            - (counts["hits"] - base["hits"]), "preempted": counts["preempted"] - base["preempted"],
            "score_only_read": done, "units": len(units)})


def run_arm(a, arm: str, pythonpath: str | None, cwd: Path) -> dict:
    env = {"JUDGEFORGE_PROGRESS_INTERVAL": "3600", "VLLM_CPU_KVCACHE_SPACE": str(a.kv_gb)}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + str(HERE.parent)
    log = C.REPO / "runs" / "bench" / f"prefill-{arm.replace(' ', '_')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    r = C.run_child(HERE, ["--child", "--arm", arm, "--units", str(a.units), "--kv-gb", str(a.kv_gb),
                           "--max-tokens", str(a.max_tokens)], env, timeout=3600, log=log)
    print(arm, json.dumps(r), flush=True)
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--previous", default="794fd94")
    ap.add_argument("--units", type=int, default=64)
    ap.add_argument("--kv-gb", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--work", default="/tmp/judgeforge-prefill-previous")
    ap.add_argument("--write-results", action="store_true")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--arm", default="current")
    a = ap.parse_args(argv)
    if a.child:
        child(a)
        return 0
    from eval_vs_previous import shim

    tree, pkg = shim(a.previous, Path(a.work))
    out = {"date": C.now(), "load_start": C.loadavg(), "runs": {}}
    for arm, pp in (("previous", str(pkg)), ("current", None), ("score-only only", None)):
        out["runs"][arm] = run_arm(a, arm, pp, tree if pp else C.REPO)
    out["load_end"] = C.loadavg()
    C.save_results("prefill", out, a)
    return C.publish("prefill_bench.py", argv, TITLE, lambda cmd: render(a, out, cmd), a.write_results)


def render(a, out: dict, command: str) -> str:
    rows = ["| arm | units | prompt tokens | engine prefilled tokens | prefills per unit | preempted | wall s |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for arm, r in out["runs"].items():
        label = f"{a.previous} (previous)" if arm == "previous" else arm
        rows.append(f"| {label} | {r['units']} | {r['prompt_tokens']:,} | {r['prefilled']:,} | "
                    f"**{r['prefilled'] / r['prompt_tokens']:.2f}** | {r['preempted']} | {r['wall_s']:.1f} |")
    return (f"## {TITLE}\n\nCPU: **{C.cpu()}**. {a.units} real MT-Bench gradings of the shipped default-judge, "
            f"`score_only: true`, sampled pass n=1 of {a.max_tokens} tokens, KV cache {a.kv_gb} GiB (smaller than "
            f"the set's prompts); *prefills per unit* = tokens the engine prefilled (after prefix-cache hits, "
            f"recomputation included) over the prompts' tokens: a sampled pass plus a score-only read that finds "
            f"its prompt cached cost ~1, one that does not ~2. Each arm a fresh process.\n\n" + "\n".join(rows)
            + "\n\n" + C.command_footer(command, out) + "\n")


if __name__ == "__main__":
    sys.exit(main())
