"""Serve test fixtures (the test doubles live in judgeforge.serve.testing)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


@pytest.fixture(scope="session")
def lora_adapters(default_model_dir, tmp_path_factory):
    """Two small LoRA adapters on the embedded SmolLM2, recording the current template version."""
    from judgeforge.serve.testing import make_lora_adapter

    root = tmp_path_factory.mktemp("adapters")
    return {name: str(make_lora_adapter(default_model_dir, root / name, r=8, seed=i))
            for i, name in enumerate(("judge_a", "judge_b"))}
