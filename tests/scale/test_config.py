"""The pure parts of scaling out: RuntimeConfig's checks, replica placement, the journal."""

from __future__ import annotations

import pytest

from judgeforge.config import ConfigError, load_config
from judgeforge.hardware import Binding, plan_binding
from judgeforge.judge.config import EngineConfig
from judgeforge.scale.config import RuntimeConfig
from judgeforge.scale.journal import Journal
from judgeforge.scale.placement import replica_engine_config, wants_lease


def runtime(*overrides: str) -> RuntimeConfig:
    return load_config(RuntimeConfig, None, list(overrides))


@pytest.mark.parametrize("overrides, why", [
    (["replicas=2"], "replicas=2 needs kind: ray"),
    (["kind=ray", "tensor_parallel_size=2", "num_gpus=1"], "needs num_gpus >= 2 per replica"),
    (["kind=ray", "tensor_parallel_size=2"], "needs num_gpus >= 2 per replica \\(got 0\\)"),
    (["kind=ray", "num_gpus=1.5"], "must be a whole number"),
    (["kind=ray", "max_restarts=0"], "max_task_retries=3 needs max_restarts != 0"),
    (["kind=ray", "num_cpus=0"], "num_cpus: Input should be greater than 0"),
    (["kind=ray", "replicas=0"], "replicas: Input should be greater than or equal to 1"),
    (["kind=dask"], "kind: Input should be 'local' or 'ray'"),
    (["kind=ray", "replica=2"], "replica: unknown key"),
])
def test_bad_runtime_is_refused_with_its_reason(overrides, why):
    with pytest.raises(ConfigError, match=why):
        runtime(*overrides)


def test_good_runtimes_and_their_cpu_share(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    rt = runtime("kind=ray", "replicas=2")
    assert rt.cpus_per_replica(2) == 1 and rt.cpus_per_replica(16) == 8 and rt.cpus_per_replica(1) == 1
    assert runtime("kind=ray", "replicas=2", "num_cpus=0.5").cpus_per_replica(16) == 0.5
    gpu = runtime("kind=ray", "num_gpus=2", "tensor_parallel_size=2")
    assert gpu.on_gpu and gpu.cpus_per_replica(64) == 1
    assert runtime("kind=ray", "num_gpus=0.5").on_gpu
    assert runtime("kind=ray", "max_restarts=0", "max_task_retries=0").max_restarts == 0
    assert rt.cluster_address() is None  # a local Ray, started for the run
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert rt.cluster_address() == "10.0.0.5:6379"
    assert runtime("kind=ray", "address=ray://head:10001").cluster_address() == "ray://head:10001"


def test_replicas_lease_disjoint_cores_and_never_share_one():
    alone = plan_binding([0, 1], [])
    assert alone.env == "auto" and plan_binding([0, 1], [], count=2).env == "auto"  # as the local path
    first = plan_binding([0, 1, 2, 3], [], count=2)
    second = plan_binding([0, 1, 2, 3], [first.cores], count=2)
    assert (first.env, second.env) == ("0-1", "2-3")
    assert plan_binding([0, 1], [[0], [1]], count=1).env == "nobind"  # none free: not pinned at all
    assert plan_binding([0, 1, 2], [[0]], count=1).cores == (1,)


def test_a_replica_engine_follows_its_binding():
    vllm, hf = EngineConfig(kind="vllm"), EngineConfig(kind="transformers")
    rt = runtime("kind=ray", "replicas=2")
    pinned, unbound = Binding((1,), "1", "r"), Binding((), "nobind", "r")
    assert replica_engine_config(vllm, rt, pinned, 1).cpu_threads_bind == "1"
    assert replica_engine_config(vllm, rt, unbound, 1).cpu_threads_bind == "nobind"
    assert replica_engine_config(hf, rt, pinned, 1).cpu_threads == 1
    assert replica_engine_config(hf, rt, Binding((0, 1), "auto", "r"), 2).cpu_threads == 2
    gpu = runtime("kind=ray", "num_gpus=2", "tensor_parallel_size=2")
    assert replica_engine_config(vllm, gpu, None, 0).tensor_parallel_size == 2
    assert wants_lease(vllm, rt, {}) and wants_lease(hf, rt, {})
    assert not wants_lease(vllm, gpu, {}) and not wants_lease(EngineConfig(kind="openai"), rt, {})
    assert not wants_lease(EngineConfig(kind="vllm", cpu_threads_bind="0"), rt, {})
    assert not wants_lease(vllm, rt, {"VLLM_CPU_OMP_THREADS_BIND": "0-1"})  # the user's, not ours
    assert wants_lease(vllm, rt, {"VLLM_CPU_OMP_THREADS_BIND": "0", "JUDGEFORGE_CPU_BIND": "0"})
    assert not wants_lease(EngineConfig(kind="transformers", cpu_threads=2), rt, {})


def test_journal_keeps_complete_lines_and_the_first_of_a_key(tmp_path, caplog):
    path = tmp_path / "j.jsonl"
    with Journal(path) as j:
        j.append("a", {"x": 1})
        j.append("b", [1, 2])
        j.append("a", {"x": 2})
    with open(path, "a") as f:
        f.write('{"key": "c", "resu')  # killed mid-write
    assert Journal(path).load() == {"a": {"x": 1}, "b": [1, 2]}
    assert "dropped 1 incomplete line" in caplog.text
    Journal(path).remove()
    assert not path.exists() and Journal(path).load() == {}


def test_a_replica_releases_its_core_lease_when_dropped(tmp_path, monkeypatch):
    """Ray Data drops a replica on a graceful shutdown: its cores are free at once. One whose engine
    failed to build gives them back too."""
    from judgeforge.judge import engines
    from judgeforge.scale import placement, ray_runner

    lease = tmp_path / "lease.json"
    monkeypatch.setattr(placement, "place_replica", lambda ecfg, rt: (ecfg, lease))
    monkeypatch.setattr(engines, "build_engine", lambda cfg: object())
    lease.write_text("{}")
    replica = ray_runner._Replica(EngineConfig(kind="vllm"), runtime(), lambda engine, items: items)
    assert lease.exists()
    del replica
    assert not lease.exists()

    def fail(cfg):
        raise RuntimeError("no engine")

    monkeypatch.setattr(engines, "build_engine", fail)
    lease.write_text("{}")
    try:
        ray_runner._Replica(EngineConfig(kind="vllm"), runtime(), lambda engine, items: items)
    except RuntimeError:
        pass
    assert not lease.exists()
