"""A tiny random Llama (SmolLM2's tokenizer and chat template) for the transformers engine, and one
local Ray per module (its start costs ~10 s on 2 cores)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model(default_model_dir, tmp_path_factory):
    """A randomly initialised 2-layer Llama: the engine builds in a second and greedy grading is
    deterministic, so replicas and the local path can be compared record for record."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("models") / "tiny-llama"
    tok = AutoTokenizer.from_pretrained(default_model_dir)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    LlamaForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


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
