"""Ray batch grading on GPUs: one upstream-vLLM engine locally against Ray replicas over every GPU,
on the same items, in one invocation. For a GPU machine (`make EXTRAS=gpu,model,train,serve,eval,ray,test`);
not run on the CPU machines.

    .venv/bin/python bench/gpu/ray_grading.py [--model prometheus-eval/prometheus-7b-v2.0] [--tp 1]
        [--items 1024] [--n 5] [--max-tokens 512] [--batch 64] [--active-params-b 7.24] [--peak-tflops 989]
    .venv/bin/python bench/gpu/ray_grading.py --model prometheus-eval/prometheus-8x7b-v2.0 --tp 2 \
        --active-params-b 12.9

Arms, each in a fresh child process: `local` (one engine over `--tp` GPUs, batches one after the
other) and `ray` (`judgeforge.scale.run_batches`, GPUs // tp replicas with num_gpus=tp and
tensor_parallel_size=tp each). Items: real MT-Bench gradings (bench/_common), cycled to `--items`;
n samples at temperature 1.0, every sample's score completed. Reported per arm: wall time, steady
items/s (after the first batch), prompt and generated tokens/s, tokens/s per GPU, and MFU =
tokens/s x 2 x active params / (GPUs x peak dense bf16 FLOP/s).

Expected on paper (FLOPs per token ~= 2 x active params; a prompt token costs the same as a
generated one; attention's share is small at these lengths):
- Prometheus-2 7B (Mistral-7B, 7.24B): 14.5 GFLOP/token. An H100/H200 (989 dense bf16 TFLOP/s)
  at peak: 68k tokens/s. Decoding at large batch is near the compute bound: one step reads the
  14.5 GB of weights once (3.0 ms at the H200's 4.8 TB/s) for every sequence in flight, so 256
  sequences cost as much memory time as compute time (256 x 14.5 GFLOP = 3.7 TFLOP = 3.8 ms).
  vLLM reaches 20-40% MFU there: 14k-27k tokens/s per GPU.
  A grading at judgeforge's defaults: a ~700-token prompt prefilled once (the n samples share it),
  n=5 samples of ~250 feedback tokens (`[RESULT]` ends most before max_tokens) and one read each:
  ~1,950 token passes, so 7-14 items/s per GPU, and 8 GPUs of 1-GPU replicas 56-112 items/s:
  a release's 100k responses in 15-30 minutes.
- Prometheus-2 8x7B (Mixtral, 12.9B active of 46.7B): 25.8 GFLOP/token, 38k tokens/s per GPU at
  peak; MoE routing keeps MFU lower (15-30%): 5.7k-11k tokens/s per GPU, 3-6 items/s per GPU;
  its 93 GB of bf16 weights need TP=2 on 80 GB GPUs (one H200 holds them, with little KV cache).
- Ray's overhead: a batch of 64 items takes seconds on a replica, Ray's per-task cost is
  milliseconds, so the replicas' steady rate should be GPUs/tp times the local one within ~2%.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1]))  # bench/_common

import _common as C  # noqa: E402


def grade_batch(engine, items, *, sampling) -> list[dict]:
    """A batch through the judge core, with its token counts (pickled by value from __main__)."""
    from judgeforge.judge.judge import Judge

    judge = Judge(engine, sampling)
    reqs = [judge.requests(it) for it in items]
    grades = judge.grade(items, [r[0] for r in reqs])
    return [{"score": g.score, "prompt_tokens": len(r[0].prompt_ids),
             "generated_tokens": sum(j.n_tokens for j in g.judged)} for g, r in zip(grades, reqs)]


def child(a) -> None:
    import torch

    from judgeforge.judge.config import EngineConfig, SamplingConfig

    base = C.mt_bench_items(10_000)
    items = [base[i % len(base)] for i in range(a.items)]
    gpus = torch.cuda.device_count()
    ecfg = EngineConfig(kind="vllm", model=a.model, max_model_len=8192, tensor_parallel_size=a.tp,
                        max_num_seqs=256)
    batch_fn = partial(grade_batch, sampling=SamplingConfig(n=a.n, max_tokens=a.max_tokens, max_resample_rounds=0))
    done, results, t0 = [], [], time.perf_counter()
    if a.arm == "local":
        from judgeforge.judge.engines import build_engine

        used = a.tp
        with build_engine(ecfg) as engine:
            for k in range(0, len(items), a.batch):
                results += batch_fn(engine, items[k:k + a.batch])
                done += [time.perf_counter() - t0] * (len(results) - len(done))
    else:
        from judgeforge.scale.config import RuntimeConfig
        from judgeforge.scale.ray_runner import run_batches

        used = gpus // a.tp * a.tp
        rt = RuntimeConfig(kind="ray", replicas=gpus // a.tp, num_gpus=a.tp, tensor_parallel_size=a.tp,
                           batch_size=a.batch)

        def keep(key, res):
            results.append(res)
            done.append(time.perf_counter() - t0)

        run_batches([(str(i), it) for i, it in enumerate(items)], batch_fn, engine_cfg=ecfg, runtime=rt,
                    on_result=keep, desc=None)
    steady_s = done[-1] - done[a.batch - 1]
    tokens = sum(r["prompt_tokens"] + r["generated_tokens"] for r in results)
    C.emit({"arm": a.arm, "gpus": used, "gpu": torch.cuda.get_device_name(0), "items": len(results),
            "wall_s": done[-1], "steady_items_per_s": (len(results) - a.batch) / steady_s,
            "prompt_tokens": sum(r["prompt_tokens"] for r in results),
            "generated_tokens": sum(r["generated_tokens"] for r in results),
            "tokens_per_s": tokens / done[-1]})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="prometheus-eval/prometheus-7b-v2.0")
    ap.add_argument("--tp", type=int, default=1, help="tensor parallelism per engine (replica)")
    ap.add_argument("--items", type=int, default=1024)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--active-params-b", type=float, default=7.24, help="active parameters, billions (MFU)")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak per GPU (H100/H200)")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--arm", choices=("local", "ray"), default="local")
    a = ap.parse_args(argv)
    if a.child:
        child(a)
        return 0
    out = {"date": C.now(), "runs": []}
    for arm in ("local", "ray"):
        args = ["--child", "--arm", arm, *sys.argv[1:]] if argv is None else ["--child", "--arm", arm, *argv]
        r = C.run_child(HERE, args, {"JUDGEFORGE_PROGRESS_INTERVAL": "3600"}, timeout=4 * 3600)
        r["tokens_per_s_per_gpu"] = r["tokens_per_s"] / r["gpus"]
        r["mfu"] = r["tokens_per_s_per_gpu"] * 2 * a.active_params_b * 1e9 / (a.peak_tflops * 1e12)
        print(json.dumps(r), flush=True)
        out["runs"].append(r)
    local, ray = out["runs"]
    out["ray_scaling"] = ray["steady_items_per_s"] / local["steady_items_per_s"]
    out["ray_overhead"] = 1 - out["ray_scaling"] / (ray["gpus"] / local["gpus"])
    print(json.dumps({k: out[k] for k in ("ray_scaling", "ray_overhead")}))
    C.save_results("ray_gpu", out, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
