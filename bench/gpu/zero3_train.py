"""ZeRO-3 LoRA training of a released judge on every GPU of one machine, through `judgeforge train`'s own
launch (accelerate + DeepSpeed ZeRO-3, configs/train/accelerate/zero3.yaml). For a GPU machine
(`make EXTRAS=gpu,model,train,serve,eval,test`); not run on the CPU machines.

    .venv/bin/python bench/gpu/zero3_train.py [--recipe configs/train/prometheus-bgb-7b.yaml] [--gpus N]
        [--steps 20] [--warmup 5] [--params-b 7.24] [--peak-tflops 989]
    .venv/bin/python bench/gpu/zero3_train.py --recipe configs/train/prometheus-bgb-8x7b.yaml --params-b 12.9

The recipe's model (a hub download: prometheus-eval/prometheus-7b-v2.0, 14.5 GB; the 8x7B, 93 GB),
its LoRA, bf16, max length 4096 and batch 8 (micro 1 x accumulation 8 / GPUs), gradient
checkpointing, on the default data build's MT-Bench GPT-4 judgments (~700-1,400 tokens each).
The processes come from `judgeforge train --num-gpus N` (train/distributed.py), with this script's
worker in place of `-m judgeforge.cli train` to time the steps. The run takes a checkpoint halfway
(`--checkpoint-every`): DeepSpeed's engine checkpoint with every rank's shards, marked complete
(train/checkpoints.py), outside the timed steps. Reported: median seconds per
optimizer step after `--warmup`, trained tokens/s in all and per GPU, MFU = tokens/s x 6 x active
params / (GPUs x peak dense bf16 FLOP/s), peak GPU memory of rank 0.

Expected on paper (training FLOPs per token ~= 6 x active params: the forward 2N; with LoRA on a
frozen base the backward computes activation gradients only, 2N; gradient checkpointing recomputes
the forward, 2N; attention at these lengths and the adapters are not credited). ZeRO-3 gathers
every layer's weights for the forward, the recompute and the backward: ~3 x the bf16 weights x
(N-1)/N received per GPU per micro-batch, at ~400 GB/s of NVLink all-gather bandwidth, overlapped
with compute only in part at accumulation 8/N. Per 1,000-token micro-batch (MT-Bench judgments
are ~700-1,400 tokens):
- Prometheus-2 7B (Mistral-7B, 7.24B): 43.4 TFLOP of compute, 0.11 s at 40% of an H100/H200's 989
  dense bf16 TFLOP/s; gathers 3 x 14.5 GB x 7/8 = 38 GB, ~0.1 s. Stated MFU 20-35%: 4.6k-8.0k
  tokens/s per GPU, 36k-64k tokens/s on 8 GPUs; a batch-8 step (~8k tokens) 0.13-0.22 s; the
  default build's 678 records (~0.7M tokens) an epoch in 11-19 s.
- Prometheus-2 8x7B (Mixtral, 12.9B active of 46.7B): 77.4 TFLOP, 0.2 s at 40%; but every expert is
  gathered, routed or not: 3 x 93 GB x 7/8 = 245 GB, ~0.6 s, so at these lengths ZeRO-3 is bound
  by the gathers. Stated MFU 10-15%: 1.3k-1.9k tokens/s per GPU, 10k-15k on 8 GPUs (longer
  sequences raise it: compute grows with the tokens, the gathers do not). LoRA r=256 on the experts
  adds ~16% to their matmuls (2 x r x (4096 + 14336) against 4096 x 14336 per matrix), not credited.
Peak memory per GPU: the partitioned weights (14.5 GB / N, 93 GB / N), the LoRA weights with their
fp32 Adam states (r=256 on the 8x7B: ~0.9B adapter parameters, ~14 GB in all, partitioned too),
one gathered layer (plus a prefetched one) and the checkpointed activations of one sequence.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 125.0, "L4": 121.0}


def worker(cfg_file: str, result: str) -> int:
    """Train `cfg_file` in this rank; rank 0 writes step times, token counts and memory to `result`."""
    import torch
    from transformers import TrainerCallback

    from judgeforge.config import load_config
    from judgeforge.logs import configure_logging
    from judgeforge.train.config import TrainConfig
    from judgeforge.train.run import read_samples, train

    class Clock(TrainerCallback):
        def __init__(self):
            self.wall, self.lengths = [], {}

        def on_train_begin(self, args, state, control, train_dataloader=None, **kw):
            ds = train_dataloader.dataset
            self.lengths = dict(zip(ds["id"], map(len, ds["input_ids"])))

        def on_step_begin(self, args, state, control, **kw):
            torch.cuda.synchronize()
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            torch.cuda.synchronize()
            self.wall.append(time.perf_counter() - self.t)

    configure_logging()
    cfg = load_config(TrainConfig, cfg_file)
    clock = Clock()
    train(cfg, callbacks=[clock])
    if os.environ.get("RANK", "0") == "0":
        tokens = [sum(clock.lengths[i] for i in s["ids"]) for s in read_samples(cfg.out)]
        Path(result).write_text(json.dumps({"wall": clock.wall, "tokens": tokens, "gpus": cfg.num_gpus,
                                            "peak_mem_gb": torch.cuda.max_memory_allocated() / 2**30}))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="configs/train/prometheus-bgb-7b.yaml")
    p.add_argument("--gpus", type=int, help="default: every visible GPU")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--params-b", type=float, default=7.24, help="active parameters, billions (8x7B: 12.9)")
    p.add_argument("--peak-tflops", type=float, help="peak dense bf16 TFLOP/s of one GPU (default: by name)")
    p.add_argument("--checkpoint-every", type=int,
                   help="checkpoint every this many steps (default: half the steps): DeepSpeed's own checkpoint, "
                        "marked complete; the save runs after a step's clock stops")
    p.add_argument("--timeout", type=float, default=7200)
    p.add_argument("--worker", nargs=2, metavar=("CONFIG", "RESULT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return worker(*a.worker)
    import torch

    from judgeforge.hardware import cuda_available

    if not cuda_available():
        print("no CUDA GPU: this benchmark is for a GPU machine", file=sys.stderr)
        return 2
    from judgeforge.config import load_config, save_resolved
    from judgeforge.data.build import run_build
    from judgeforge.data.config import BuildConfig
    from judgeforge.train import distributed
    from judgeforge.train.config import TrainConfig

    gpus = a.gpus or torch.cuda.device_count()
    name = torch.cuda.get_device_name()
    peak = a.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        run_build(load_config(BuildConfig, REPO / "configs/data/default.yaml", ["progress=false"]), tmp / "data")
        cfg = load_config(TrainConfig, REPO / a.recipe, [
            f"out={tmp / 'run'}", f"data.sources=[{{path: {tmp / 'data'}}}]", "data.eval_limit=0",
            f"optim.max_steps={a.steps}", f"checkpoint.every={a.checkpoint_every or a.steps // 2 or 1}",
            "tracking.wandb=false", f"num_gpus={gpus}",
            "accelerate_config=configs/train/accelerate/zero3.yaml"])
        cfg_file, result = save_resolved(cfg, tmp, "cmd.yaml"), tmp / "result.json"
        launch = distributed.launch_command(cfg, [], gpu=True)
        cmd = launch[:launch.index("judgeforge.cli") - 1] + [str(HERE), "--worker", str(cfg_file), str(result)]
        env = {**distributed.launch_env(os.environ, gpus, os.cpu_count() or 1, gpu=True), "WANDB_MODE": "disabled"}
        print(" ".join(cmd), file=sys.stderr)
        done = subprocess.run(cmd, env=env, cwd=REPO, timeout=a.timeout)
        if done.returncode != 0:
            return done.returncode
        r = json.loads(result.read_text())
    wall, tokens = r["wall"][a.warmup:], r["tokens"][a.warmup:]
    tps = sum(tokens) / sum(wall)
    flops = tps * 6 * a.params_b * 1e9
    out = {"device": name, "gpus": gpus, "recipe": a.recipe, "timed_steps": len(wall),
           "s_per_step": round(statistics.median(wall), 3), "tokens_per_s": round(tps),
           "tokens_per_s_per_gpu": round(tps / gpus), "mfu": round(flops / (gpus * peak * 1e12), 4) if peak else None,
           "peak_mem_gb_rank0": round(r["peak_mem_gb"], 1)}
    print(json.dumps(out, indent=2))
    print(f"| ZeRO-3 LoRA, {a.recipe}, {gpus}x {name} | {out['s_per_step']} | {out['tokens_per_s']:,} | "
          f"{out['tokens_per_s_per_gpu']:,} | {out['mfu']} | {out['peak_mem_gb_rank0']} GB |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
