"""Training across processes: how `judgeforge train` launches them and what each one agrees on.

`judgeforge train --num-gpus N` (N > 1) re-runs itself under `accelerate launch` with the
accelerate config (`accelerate_config`, configs/train/accelerate/). Inside a launch, whoever started
it, the launched world size W is the process count: gradient accumulation becomes
batch_size / (micro_batch_size x W), so the global batch is the configured one on any W.

accelerate shards the seeded sampler's batches round-robin (batch i to rank i mod W), so one
optimizer step trains the same examples, in the same order, on every W. When the examples do not
fill whole micro-batches on every rank, accelerate repeats the first ones of the epoch
(`even_batches`, so no rank waits on a collective another never reaches): `padded_examples` says how
many, and train() logs it.

On a machine without a GPU, DDP runs on the CPU with gloo. accelerate's own MULTI_CPU type starts
its processes through mpirun only (a single process without it), so ddp_cpu.yaml uses the
torchrun launcher (`MULTI_GPU`) and the trainer runs each process on the CPU (TrainingArguments
`use_cpu`), with the cores split between the processes.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from judgeforge.config import ConfigError, shipped_path
from judgeforge.train.config import TrainConfig

ACCELERATE_DIR = "configs/train/accelerate"
log = logging.getLogger(__name__)


def launched_world(env: Mapping[str, str] = os.environ) -> int:
    """The process count of the launch this process is part of (1 outside one)."""
    try:
        return max(1, int(env.get("WORLD_SIZE", "1")))
    except ValueError:
        raise ConfigError(f"WORLD_SIZE={env['WORLD_SIZE']!r} is not a process count") from None


def inside_launch(env: Mapping[str, str] = os.environ) -> bool:
    return "LOCAL_RANK" in env


def resolve_world(cfg: TrainConfig, env: Mapping[str, str] = os.environ) -> TrainConfig:
    """`cfg` with `num_gpus` = the launched world size, the global batch checked against it."""
    world = launched_world(env)
    if world == cfg.num_gpus:
        return cfg
    o = cfg.optim
    if o.batch_size % (o.micro_batch_size * world):
        raise ConfigError(f"this run has {world} processes: optim.batch_size ({o.batch_size}) must be a "
                          f"multiple of micro_batch_size x processes ({o.micro_batch_size} x {world}) to keep "
                          "the global batch; change the process count or the batch sizes")
    if env.get("RANK", "0") == "0":  # once, not once a rank
        # num_gpus left at 1 is an outside `accelerate launch`; another count disagrees with the launch.
        log.log(logging.INFO if cfg.num_gpus == 1 else logging.WARNING,
                "num_gpus=%d, launched on %d processes: training on %d, gradient accumulation %d keeps the "
                "global batch of %d", cfg.num_gpus, world, world, o.batch_size // (o.micro_batch_size * world),
                o.batch_size)
    return cfg.model_copy(update={"num_gpus": world})


def padded_examples(n: int, micro_batch_size: int, world: int) -> int:
    """Examples accelerate repeats at the end of each epoch so every rank gets whole micro-batches."""
    return (-n) % (micro_batch_size * world) if world > 1 else 0


def default_accelerate_config(gpu: bool) -> str:
    return f"{ACCELERATE_DIR}/{'zero3' if gpu else 'ddp_cpu'}.yaml"


def launch_command(cfg: TrainConfig, argv: list[str], gpu: bool) -> list[str]:
    """`accelerate launch` of `judgeforge train` with the same arguments, `num_gpus` processes."""
    import yaml

    acc = shipped_path(cfg.accelerate_config or default_accelerate_config(gpu)).resolve()
    if not acc.is_file():
        raise ConfigError(f"accelerate_config {cfg.accelerate_config} not found")
    spec = yaml.safe_load(acc.read_text()) or {}
    if spec.get("distributed_type") == "DEEPSPEED" and not gpu:
        raise ConfigError(f"accelerate_config {acc} is DeepSpeed, which needs GPUs; on the CPU use "
                          f"accelerate_config={default_accelerate_config(False)} (DDP, gloo)")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(acc),
           "--num_processes", str(cfg.num_gpus)]
    if spec.get("num_machines", 1) == 1 and "main_process_port" not in spec:
        cmd += ["--main_process_port", "0"]  # a free port: two runs on one machine must not collide
    ds = (spec.get("deepspeed_config") or {}).get("deepspeed_config_file")
    if ds:  # the launch config names its DeepSpeed JSON relative to itself
        cmd += ["--deepspeed_config_file", str(ds if Path(ds).is_absolute() else acc.parent / Path(ds).name)]
    # Through the CLI, so a worker's config error is a message, not a traceback.
    return cmd + ["-m", "judgeforge.cli", "train", *argv]


def launch_env(env: Mapping[str, str], processes: int, cpus: int, gpu: bool) -> dict[str, str]:
    """The launch's environment: on the CPU each process takes its share of the cores (torchrun
    would leave each one thread); an OMP_NUM_THREADS of the caller's is kept."""
    out = dict(env)
    if not gpu and "OMP_NUM_THREADS" not in out:
        out["OMP_NUM_THREADS"] = str(max(1, cpus // processes))
    return out


def launch(cfg: TrainConfig, argv: list[str], gpu: bool) -> int:
    from judgeforge.hardware import cpu_info

    cmd = launch_command(cfg, argv, gpu)
    env = launch_env(os.environ, cfg.num_gpus, len(cpu_info().cpus), gpu)
    log.info("launching %d processes: %s", cfg.num_gpus, " ".join(cmd))
    return subprocess.run(cmd, env=env).returncode


def barrier() -> None:
    """Wait for every rank (a no-op in one process)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def gather(obj) -> list:
    """`obj` from every rank, in rank order ([obj] in one process)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out
