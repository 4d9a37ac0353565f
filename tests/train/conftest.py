"""Fixtures for the training tests: a real data build and tiny models built from configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from testing.builds import short_build

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


def tiny_config(model: Path, data: Path, out: Path, *overrides: str):
    """A TrainConfig for tiny-model runs: fp32 on CPU, paper targets, no wandb."""
    from judgeforge.config import load_config
    from judgeforge.train.config import TrainConfig

    return load_config(TrainConfig, None, [
        f"model.name={model}", f"out={out}", f"data.sources=[{{path: {data}}}]", "data.max_length=1024",
        "data.eval_limit=0", "precision=fp32", "optim.batch_size=2", "optim.lr=2e-3", "lora.r=8",
        "lora.alpha=16", "lora.dropout=0.1", "lora.target_modules=[q_proj,k_proj,v_proj,o_proj,w1,w2,w3,lm_head]",
        "optim.gradient_checkpointing=false", "tracking.wandb=false", "checkpoint.every=2", *overrides])


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory) -> Path:
    return build_default_data(tmp_path_factory.mktemp("build") / "data")


@pytest.fixture(scope="session")
def tiny_mixtral(tmp_path_factory, default_model_dir) -> Path:
    return save_tiny_mixtral(tmp_path_factory.mktemp("models") / "tiny-mixtral", default_model_dir)


@pytest.fixture(scope="session")
def short_data(build_dir, tmp_path_factory) -> Path:
    return short_build(build_dir, tmp_path_factory.mktemp("short") / "data", 12)


# GPT-4-style preferences a random model can learn in a few steps: a helpful answer beats a refusal.
REFUSAL = "I am sorry, but I cannot help with that request. Please ask someone else; I will not answer it."
GOOD = [("What is 2 + 2?", "2 + 2 = 4: adding two and two gives four."),
        ("Name the capital of France.", "The capital of France is Paris, on the Seine."),
        ("Spell 'cat' backwards.", "Backwards, 'cat' is spelled 'tac'."),
        ("Is water wet? Answer yes or no.", "Yes: water makes things wet."),
        ("Give a synonym of 'big'.", "A synonym of 'big' is 'large'."),
        ("How many legs does a spider have?", "A spider has eight legs.")]


@pytest.fixture(scope="session")
def pair_build(tmp_path_factory):
    """A real data build of GPT-4-style pairwise judgments (jsonl pair columns, both orders, one split tie)."""
    import json

    from judgeforge.config import load_config
    from judgeforge.data.build import run_build
    from judgeforge.data.config import BuildConfig

    root = tmp_path_factory.mktemp("pairs")
    rows = [{"q": q, "a": good, "b": REFUSAL, "v": "A", "ma": "m-good", "mb": "m-bad"} for q, good in GOOD]
    rows.append({"q": "Say hi.", "a": "Hi.", "b": "Hello.", "v": "tie", "ma": "m-good", "mb": "m-bad"})
    (root / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cols = {"instruction": "q", "response_a": "a", "response_b": "b", "verdict": "v",
            "response_model_a": "ma", "response_model_b": "mb"}
    src = [{"format": "jsonl", "path": str(root / "pairs.jsonl"), "columns": cols, "swap": True, "ties": "split"}]
    cfg = load_config(BuildConfig, None, ["progress=false"], extra={"sources": src})
    m = run_build(cfg, root / "build")
    assert m["counts"]["train"] == 6 * 2 + 4
    return root / "build"


@pytest.fixture(scope="session")
def helpers():
    """The helper functions above (test modules cannot import conftest under importlib mode)."""
    import types

    return types.SimpleNamespace(short_build=short_build, tiny_config=tiny_config,
                                 save_tiny_mixtral=save_tiny_mixtral)
