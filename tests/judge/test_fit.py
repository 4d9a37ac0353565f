"""Serving settings that follow the judge (judge/fit.py): the LoRA rank from the adapters, the length from
the training config, tensor parallelism from the GPUs, and fused-expert adapters refused on vLLM."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from judgeforge.config import ConfigError
from judgeforge.judge.config import EngineConfig
from judgeforge.judge.fit import (DEFAULT_MODEL_LEN, VLLM_LORA_RANKS, fit_to_judge, lora_rank, refuse_for_vllm,
                                  tensor_parallel, trained_length)


def _adapter(d, r=8, rank_pattern=None, target_parameters=None, max_length=None):
    d.mkdir(parents=True)
    (d / "adapter_config.json").write_text(json.dumps({"r": r, "rank_pattern": rank_pattern or {},
                                                       "target_parameters": target_parameters}))
    if max_length:
        (d / "config.yaml").write_text(yaml.safe_dump({"data": {"max_length": max_length}}))
    return str(d)


def test_the_recipe_adapter_gets_its_rank_and_its_trained_length(tmp_path):
    recipe = _adapter(tmp_path / "r256", r=256, max_length=4096)
    cfg = fit_to_judge(EngineConfig(model="m", adapters={"j": recipe}), None)
    assert (cfg.max_lora_rank, cfg.max_model_len) == (256, 4096)  # the old defaults were 16 and 2048
    assert fit_to_judge(EngineConfig(model="m"), None).max_model_len == DEFAULT_MODEL_LEN
    explicit = EngineConfig(model="m", adapters={"j": recipe}, max_lora_rank=320, max_model_len=1024)
    assert fit_to_judge(explicit, None) == explicit  # a value set wins


def test_rank_pattern_counts_and_ranks_round_up_to_what_vllm_accepts(tmp_path):
    doubled = _adapter(tmp_path / "a", r=256, rank_pattern={"gate_up_proj": 512})
    assert lora_rank({"a": doubled, "b": _adapter(tmp_path / "b", r=20)}) == 512
    assert lora_rank({"b": str(tmp_path / "b")}) == 32
    with pytest.raises(ConfigError, match="merge it"):
        lora_rank({"c": _adapter(tmp_path / "c", r=1024)})


def test_a_merged_judge_reads_the_length_its_adapter_was_trained_at(tmp_path):
    adapter = _adapter(tmp_path / "adapter", max_length=3072)
    merged = tmp_path / "merged"
    merged.mkdir()
    (merged / "judgeforge.json").write_text(json.dumps({"merged_from": adapter}))
    assert trained_length(str(merged), {}) == 3072
    assert trained_length(str(tmp_path / "nothing"), {}) is None


@given(weights=st.integers(1, 2**40), gpu=st.integers(2**30, 2**38), n=st.sampled_from([1, 2, 4, 8]),
       util=st.floats(0.5, 0.95))
def test_tensor_parallel_is_the_fewest_power_of_two_gpus_that_hold_the_weights(weights, gpu, n, util):
    usable = gpu * util * 0.75
    try:
        t = tensor_parallel(weights, gpu, n, util)
    except ConfigError:
        assert weights / n > usable or n & (n - 1)
        return
    assert t <= n and t & (t - 1) == 0 and weights / t <= usable
    assert t == 1 or weights / (t // 2) > usable


def test_mixtral_8x7b_takes_two_h100s_the_7b_one():
    gib = 2**30
    assert tensor_parallel(93 * gib, 80 * gib, 8, 0.9) == 2
    assert tensor_parallel(int(14.5 * gib), 80 * gib, 8, 0.9) == 1


def test_fused_expert_adapters_are_refused_with_the_fix(tmp_path):
    experts = _adapter(tmp_path / "moe", r=256, target_parameters=["experts.gate_up_proj", "experts.down_proj"])
    with pytest.raises(ConfigError, match="train merge"):
        refuse_for_vllm({"moe": experts})
    refuse_for_vllm({"dense": _adapter(tmp_path / "dense")})
    head = tmp_path / "head"
    _adapter(head, r=256)
    (head / "adapter_config.json").write_text(json.dumps({"r": 256, "target_modules": ["q_proj", "lm_head"]}))
    with pytest.raises(ConfigError, match="lm_head"):
        refuse_for_vllm({"head": str(head)})
    assert max(VLLM_LORA_RANKS) == 512


@pytest.mark.slow
def test_vllm_refuses_the_tiny_mixtral_recipe_adapter_before_starting(default_model_dir, tmp_path):
    """The real adapter PEFT saves for the 8x7B recipe's targets on a Mixtral, and the real vLLM engine."""
    from testing.adapters import make_lora_adapter
    from tests.train.conftest import save_tiny_mixtral

    from judgeforge.judge.engines.vllm import VLLMEngine

    base = save_tiny_mixtral(tmp_path / "mixtral", default_model_dir)
    adapter = make_lora_adapter(base, tmp_path / "adapter", r=8, targets=("q_proj", "lm_head"),
                                target_parameters=("mlp.experts.gate_up_proj", "mlp.experts.down_proj"))
    assert json.loads((adapter / "adapter_config.json").read_text())["target_parameters"]
    with pytest.raises(ConfigError, match="gate_up_proj"):
        VLLMEngine(EngineConfig(model=str(base), adapters={"moe": str(adapter)}))


def test_merge_keeps_the_base_dtype_by_default(tiny_llama, tmp_path):
    """A bf16 base (Prometheus-2's) merges in bf16: float32 would double the host memory (~190 GB, 8x7B)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from testing.adapters import make_lora_adapter

    from judgeforge.judge.weights import merge_adapter

    base = tmp_path / "bf16"
    AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.bfloat16).save_pretrained(base)
    AutoTokenizer.from_pretrained(tiny_llama).save_pretrained(base)
    adapter = make_lora_adapter(base, tmp_path / "adapter")
    merged = merge_adapter(adapter, tmp_path / "merged")
    assert json.loads((merged / "config.json").read_text())["dtype"] == "bfloat16"
    assert AutoModelForCausalLM.from_pretrained(merged, dtype="auto").dtype == torch.bfloat16
    f32 = merge_adapter(adapter, tmp_path / "f32", dtype="float32")
    assert json.loads((f32 / "config.json").read_text())["dtype"] == "float32"
