"""Fixtures for the training tests: a real data build and tiny models built from configs."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def build_default_data(out: Path) -> Path:
    """The default data build (960 MT-Bench GPT-4 judgments, wizardlm_13b held out) into `out`."""
    from judgeforge.config import load_config
    from judgeforge.data.build import run_build
    from judgeforge.data.config import BuildConfig

    shipped = REPO / "configs" / "data" / "default.yaml"
    if shipped.is_file():
        cfg = load_config(BuildConfig, shipped, ["progress=false"])
    else:  # until the data stage ships its config: the same build, spelled out
        cfg = BuildConfig.model_validate({
            "sources": [{"path": str(REPO / "data/vendor/prometheus-eval/mt_bench_eval.json"),
                         "format": "prometheus"}],
            "split": {"test_models": ["wizardlm_13b"]}, "progress": False})
    run_build(cfg, out)
    return out


def save_tiny_mixtral(out: Path, tokenizer_dir: Path, seed: int = 0) -> Path:
    """A randomly initialised 2-layer, 4-expert, top-2 Mixtral with SmolLM2's tokenizer."""
    import torch
    from transformers import AutoTokenizer, MixtralConfig, MixtralForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(seed)
    config = MixtralConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                           num_experts_per_tok=2, max_position_embeddings=4096, tie_word_embeddings=False,
                           bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                           pad_token_id=tok.pad_token_id)
    MixtralForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory) -> Path:
    return build_default_data(tmp_path_factory.mktemp("build") / "data")


@pytest.fixture(scope="session")
def tiny_mixtral(tmp_path_factory, default_model_dir) -> Path:
    return save_tiny_mixtral(tmp_path_factory.mktemp("models") / "tiny-mixtral", default_model_dir)
