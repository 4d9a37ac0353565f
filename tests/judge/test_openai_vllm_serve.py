"""The openai engine against a real `vllm serve` of the embedded SmolLM2 (slow: the server takes a
minute or two to start on CPU): every sample's score is completed through the HTTP API
(token-id prompts, `return_tokens_as_token_ids`, `logprob_token_ids`)."""

from __future__ import annotations

import math

import pytest

from judgeforge.judge.prompts import rubric_preset
from judgeforge.judge.config import EngineConfig, SamplingConfig
from judgeforge.judge.judge import GradeItem, Judge


@pytest.mark.slow
def test_grade_through_vllm_serve_completes_every_sample(vllm_serve, default_model_dir):
    from judgeforge.judge.engines.openai import OpenAIEngine

    cfg = EngineConfig(kind="openai", api="completions", base_url=vllm_serve.url + "/v1",
                       model=str(default_model_dir), tokenizer=str(default_model_dir), max_model_len=2048)
    item = GradeItem("What is 2+2?", "4", rubric_preset("reasoning"), reference_answer="4")
    with OpenAIEngine(cfg) as eng:
        grade = Judge(eng, SamplingConfig(n=3, max_tokens=64, seed=0)).grade([item])[0]
        assert eng.can_complete  # the endpoint offered prompt continuation: no fallback
    values = {str(v) for v in item.scale.values}
    assert len(grade.judged) == 3
    for j in grade.judged:
        assert j.completion is None and j.probs is not None and set(j.probs) == values
        assert math.fsum(j.probs.values()) == pytest.approx(1.0)
        assert j.n_tokens > 0 and j.text
    assert isinstance(grade.score, int) and grade.score in item.scale.values
