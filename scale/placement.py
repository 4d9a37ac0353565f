"""What a replica's engine runs on, decided inside the replica before its engine is built.

GPU replicas: Ray gives each its `num_gpus` (CUDA_VISIBLE_DEVICES) and vLLM splits the model over
`tensor_parallel_size` of them, with its multiprocessing executor (vLLM picks its Ray executor only
inside a placement group, which a Ray Data replica is not in). CPU replicas: each leases `num_cpus` cores through the machine's
core leases (judgeforge.hardware.CoreLeases), so replicas on one machine, and any other engine
there, never have their threads pinned to the same core: a replica alone on the machine with all
of its cores keeps vLLM's own `auto` binding, as the local path has it; several get disjoint cores
(their process's affinity set to them, the engine's threads bound to them); a replica that finds
no free core is not bound at all. An explicit binding (`engine.cpu_threads_bind`, $VLLM_CPU_OMP_
THREADS_BIND, `engine.cpu_threads` for transformers) always wins and leases nothing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from judgeforge import hardware as hw
from judgeforge.scale.config import RuntimeConfig

log = logging.getLogger(__name__)

PLACED_KINDS = ("vllm", "transformers")
"""Engine kinds that compute on this machine's CPU (an `openai` replica only waits on HTTP)."""
_UNBOUND = ("auto", "nobind")


def replica_engine_config(ecfg, runtime: RuntimeConfig, binding: hw.Binding | None, cores: int):
    """The engine config a replica builds (pure): tensor parallelism on GPUs; on a CPU, the leased
    binding for vLLM and the thread count for transformers (`cores` when nothing is pinned), with no
    warm start (`EngineConfig.for_batches`)."""
    ecfg = ecfg.for_batches()
    if runtime.on_gpu:
        return ecfg.model_copy(update={"tensor_parallel_size": runtime.tensor_parallel_size})
    if binding is None:
        return ecfg
    if ecfg.kind == "vllm":
        return ecfg.model_copy(update={"cpu_threads_bind": binding.env})
    threads = len(binding.cores) if binding.env not in _UNBOUND else cores
    return ecfg.model_copy(update={"cpu_threads": threads})


def wants_lease(ecfg, runtime: RuntimeConfig, environ=os.environ) -> bool:
    """A CPU replica of an engine that computes here, with no binding set by the user."""
    if runtime.on_gpu or ecfg.kind not in PLACED_KINDS:
        return False
    if ecfg.kind == "transformers":
        return ecfg.cpu_threads is None
    # The vLLM engine marks what it set itself (inherited by child processes): only a user's counts.
    user_bind = environ.get("VLLM_CPU_OMP_THREADS_BIND") not in (None, environ.get("JUDGEFORGE_CPU_BIND"))
    return ecfg.cpu_threads_bind is None and not user_bind


def place_replica(ecfg, runtime: RuntimeConfig) -> tuple[object, Path | None]:
    """(the engine config this replica builds, its core lease or None). Leases `num_cpus` cores of
    this machine and pins this process to them when they are a strict subset of its CPUs."""
    if not wants_lease(ecfg, runtime):
        return replica_engine_config(ecfg, runtime, None, 0), None
    cpu = hw.cpu_info()
    allowed = cpu.cpus or tuple(range(os.cpu_count() or 1))
    cores = max(1, int(runtime.cpus_per_replica(len(allowed))))
    lease, binding = hw.CoreLeases().acquire(allowed, count=cores)
    if binding.env not in _UNBOUND:
        os.sched_setaffinity(0, binding.cores)
    log.info("replica %d: cores %s (%s)", os.getpid(), binding.env, binding.reason)
    return replica_engine_config(ecfg, runtime, binding, cores), lease
