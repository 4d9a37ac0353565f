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

The launch is tied to the `judgeforge train` that started it: killed (kill -9 included), a watchdog
ends the launcher and every rank within seconds; stopped with SIGTERM or Ctrl-C, it SIGTERMs the
launcher, which ends its ranks (judgeforge.watchdog.run_owned).

On a machine without a GPU, DDP runs on the CPU with gloo. accelerate's own MULTI_CPU type starts
its processes through mpirun only (a single process without it), so ddp_cpu.yaml uses the
torchrun launcher (`MULTI_GPU`) and the trainer runs each process on the CPU (TrainingArguments
`use_cpu`), with the cores split between the processes. DeepSpeed ZeRO-3 runs there too
(accelerate_config=configs/train/accelerate/zero3.yaml): on its CPU accelerator (DS_ACCELERATOR=cpu)
over the same gloo group, without its shared-memory comm op (`prepare_deepspeed_cpu`).
"""

from __future__ import annotations

import logging
import os
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
    if spec.get("distributed_type") == "DEEPSPEED":
        import importlib.util

        if importlib.util.find_spec("deepspeed") is None:
            raise ConfigError(f"accelerate_config {acc} is DeepSpeed, which is not installed: install the "
                              f"`deepspeed` extra, or use accelerate_config={default_accelerate_config(gpu)}")
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
    if not gpu:  # DeepSpeed (an accelerate_config of its) runs on its CPU accelerator, with gloo
        out.setdefault("DS_ACCELERATOR", "cpu")
    return out


def launch(cfg: TrainConfig, argv: list[str], gpu: bool) -> int:
    """Run the launch to its end. The launcher and its ranks die with this process, kill -9 included,
    and a SIGTERM or Ctrl-C here stops them in order (judgeforge.watchdog.run_owned)."""
    from judgeforge.hardware import cpu_info
    from judgeforge.watchdog import run_owned

    cmd = launch_command(cfg, argv, gpu)
    env = launch_env(os.environ, cfg.num_gpus, len(cpu_info().cpus), gpu)
    log.info("launching %d processes: %s", cfg.num_gpus, " ".join(cmd))
    return run_owned(cmd, env=env)


def deepspeed_on_cpu(env: Mapping[str, str] = os.environ) -> bool:
    """Whether this process is a rank of a DeepSpeed launch on a machine without a GPU."""
    from judgeforge import hardware

    return env.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true" and hardware.accelerator() is None


def prepare_deepspeed_cpu() -> None:
    """Before DeepSpeed's communication starts in a rank on the CPU: no shared-memory comm op.

    DeepSpeed's torch backend builds that C++ op (JIT, torch.utils.cpp_extension) in every rank at once
    when it starts, into one shared build folder, and a rank can abort on the other's half-built files.
    Training never uses it: it serves `inference_all_reduce` (tensor-parallel inference) only; gradients
    and ZeRO-3's gathers go through torch.distributed (gloo). Marking it incompatible (DeepSpeed's table
    of ops this machine can build, computed once a process) skips the build."""
    if not deepspeed_on_cpu():
        return
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


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
