"""A tiny random Llama (SmolLM2's tokenizer and chat template) for the transformers engine, and one
local Ray per module (its start costs ~10 s on 2 cores)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model(tiny_llama):
    """tests/conftest.py's tiny Llama: replicas and the local path can be compared record for record."""
    return tiny_llama


@pytest.fixture(scope="module")
def ray_cluster(monkeypatch_module):
    """A local Ray of 2 CPUs for the module's tests; run_batches uses it and leaves it running."""
    from judgeforge.scale.config import RuntimeConfig
    from judgeforge.scale.ray_runner import ray_session

    monkeypatch_module.delenv("RAY_ADDRESS", raising=False)
    with ray_session(RuntimeConfig(kind="ray", replicas=2, num_cpus=1)) as cpus:
        yield cpus


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp
