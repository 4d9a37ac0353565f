"""Engine contract: prompts identical to training, template-version refusal, the openai engine's
wire format, and the transformers engine on the real SmolLM2 (slow)."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from judgeforge.data.templates import TEMPLATE_VERSION, Scale, absolute_messages, rubric_preset
from judgeforge.serve.config import EngineConfig, SamplingConfig
from judgeforge.judge.engines import (PromptTooLong, SampleRequest, TemplateVersionMismatch,
                                      UnknownAdapter, check_adapters, load_tokenizer,
                                      prompt_token_ids, render_prompt)
from judgeforge.judge.judge import GradeItem, Judge, Options

MSGS = absolute_messages("What is 2+2?", "4", rubric_preset("reasoning"), "4")


def test_served_prompt_is_byte_identical_to_trl_training_prompt(default_model_dir):
    from trl.data_utils import maybe_apply_chat_template

    tok = load_tokenizer(str(default_model_dir))
    trained = maybe_apply_chat_template({"prompt": MSGS, "completion": [
        {"role": "assistant", "content": "Fine. [RESULT] 5"}]}, tok)
    assert render_prompt(tok, MSGS) == trained["prompt"]
    assert prompt_token_ids(tok, MSGS) == tok(trained["prompt"], add_special_tokens=False)["input_ids"]
    assert render_prompt(tok, MSGS).endswith("<|im_start|>assistant\n")


def _adapter(tmp_path, meta):
    d = tmp_path / "ad"
    d.mkdir()
    (d / "adapter_config.json").write_text("{}")
    if meta is not None:
        (d / "judgeforge.json").write_text(json.dumps(meta))
    return d


def test_adapter_with_other_template_version_is_refused(tmp_path):
    d = _adapter(tmp_path, {"template_version": "prometheus2-v0"})
    with pytest.raises(TemplateVersionMismatch, match="prometheus2-v0"):
        check_adapters(EngineConfig(adapters={"a": str(d)}))


def test_unversioned_adapter_needs_explicit_opt_in(tmp_path):
    d = _adapter(tmp_path, None)
    with pytest.raises(TemplateVersionMismatch, match="records no template_version"):
        check_adapters(EngineConfig(adapters={"a": str(d)}))
    assert check_adapters(EngineConfig(adapters={"a": str(d)}, allow_unversioned_adapters=True))


def test_matching_adapter_and_merged_model_dir(tmp_path):
    d = _adapter(tmp_path, {"template_version": TEMPLATE_VERSION})
    assert check_adapters(EngineConfig(adapters={"a": str(d)})) == {"a": str(d.resolve())}
    merged = tmp_path / "merged"
    merged.mkdir()
    (merged / "judgeforge.json").write_text(json.dumps({"template_version": "old"}))
    with pytest.raises(TemplateVersionMismatch):
        check_adapters(EngineConfig(model=str(merged)))


# --- openai engine: wire format against a mock endpoint --------------------------------------
def _mock_endpoint(seen):
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((request.url.path, body, request.headers.get("authorization")))
        if request.url.path.endswith("chat/completions"):
            lp = {"content": [{"token": t, "logprob": -0.1, "top_logprobs": top} for t, top in [
                ("Good", [{"token": "Good", "logprob": -0.1}]), (" [RESULT]", []),
                (" 4", [{"token": " 4", "logprob": math.log(0.6)}, {"token": " 5", "logprob": math.log(0.2)}])]]}
            choices = [{"index": i, "message": {"role": "assistant", "content": "Good [RESULT] 4"},
                        "finish_reason": "stop", "logprobs": lp} for i in range(body["n"])]
        else:
            choices = [{"index": i, "text": "Good [RESULT] 3", "finish_reason": "stop",
                        "logprobs": {"tokens": ["Good", " [RESULT]", " 3"],
                                     "top_logprobs": [{}, {}, {" 3": -0.5, "3": -1.5, " 2": -2.0}]}}
                       for i in range(body["n"])]
        return httpx.Response(200, json={"choices": choices})
    return httpx.MockTransport(handler)


def test_openai_engine_chat_passes_n_and_logprobs_through(monkeypatch):
    from judgeforge.judge.engines.openai import OpenAIEngine

    monkeypatch.setenv("OPENAI_API_KEY", "endpoint-key")
    seen = []
    cfg = EngineConfig(kind="openai", model="judge", adapters={"lora1": "/unused"}, top_logprobs=5)
    with OpenAIEngine(cfg, transport=_mock_endpoint(seen)) as eng:
        grade = Judge(eng, SamplingConfig(n=3)).grade([GradeItem("q", "a", rubric_preset("honesty"))])[0]
        eng.generate([SampleRequest(messages=MSGS, n=2, adapter="lora1", seed=5)])
    path, body, auth = seen[0]
    assert path.endswith("/chat/completions") and body["n"] == 3 and body["messages"][0]["role"] == "system"
    assert body["logprobs"] is True and body["top_logprobs"] == 5 and auth == "Bearer endpoint-key"
    assert len(seen) == 2  # one call per grading (n in the call), nothing re-sampled
    assert grade.score == 4 and grade.votes == [4, 4, 4]
    assert grade.score_probs[4] == pytest.approx(0.75) and grade.expected_score == pytest.approx(4.25)
    assert seen[1][1]["model"] == "lora1" and seen[1][1]["seed"] == 5


def test_openai_engine_completions_sends_the_local_rendering(default_model_dir):
    from judgeforge.judge.engines.openai import OpenAIEngine

    seen = []
    cfg = EngineConfig(kind="openai", api="completions", model="judge",
                       tokenizer=str(default_model_dir), max_model_len=2048)
    with OpenAIEngine(cfg, transport=_mock_endpoint(seen)) as eng:
        out = eng.generate([SampleRequest(messages=MSGS, n=2)])[0]
        with pytest.raises(PromptTooLong):
            eng.generate([SampleRequest(messages=MSGS, n=1, max_tokens=5000)])
    assert seen[0][1]["prompt"] == render_prompt(eng.tokenizer, MSGS) and seen[0][1]["logprobs"] == 10
    assert out[0].score_logprobs[3] == pytest.approx(math.log(math.exp(-0.5) + math.exp(-1.5)))


# --- transformers engine on the real SmolLM2 ---------------------------------------------------
@pytest.fixture(scope="module")
def hf_engine(default_model_dir, lora_adapters):
    from judgeforge.judge.engines import build_engine

    with build_engine(EngineConfig(kind="transformers", adapters=lora_adapters, seed=0,
                                   cpu_threads=1)) as eng:
        yield eng


@pytest.mark.slow
def test_transformers_engine_n5_votes(hf_engine):
    judge = Judge(hf_engine, SamplingConfig(n=5, max_tokens=32, max_resample_rounds=1))
    grades = judge.grade([GradeItem("What is 2+2?", "4", rubric_preset("reasoning"), options=Options(seed=3))])
    for g in grades:
        assert len(g.votes) == 5 and g.n_valid + g.n_unparseable == 5
        assert g.score in {1, 2, 3, 4, 5} if g.score is not None else "no parseable sample" in g.reason


@pytest.mark.slow
def test_transformers_engine_score_logprobs_at_the_score_token(hf_engine):
    """The model copies a verdict; where a sample has '[RESULT] k', its score log-probs are read
    at that token and include k."""
    msgs = [{"role": "user", "content": "Output the following text verbatim:\nFeedback: [RESULT] 3"}]
    samples = hf_engine.generate([SampleRequest(messages=msgs, n=8, max_tokens=16, seed=3)])[0]
    from judgeforge.judge.parsing import parse_score

    hits = [s for s in samples if parse_score(s.text).ok]
    assert hits, [s.text for s in samples]
    for s in hits:
        k = parse_score(s.text).score
        assert s.score_logprobs and k in s.score_logprobs and all(v <= 0 for v in s.score_logprobs.values())


@pytest.mark.slow
def test_transformers_engine_adapters_per_request(hf_engine):
    req = SampleRequest(messages=MSGS, n=1, temperature=0.0, max_tokens=12)
    base, a, b = (hf_engine.generate([SampleRequest(**{**req.__dict__, "adapter": ad})])[0][0].text
                  for ad in (None, "judge_a", "judge_b"))
    assert a != base and b != a  # random-initialised adapters change the greedy output
    assert hf_engine.generate([req])[0][0].text == base  # base again after adapters
    with pytest.raises(UnknownAdapter):
        hf_engine.generate([SampleRequest(messages=MSGS, adapter="nope")])
    with pytest.raises(PromptTooLong):
        hf_engine.generate([SampleRequest(messages=MSGS, max_tokens=4000)])


@pytest.mark.slow
def test_grade_local_cli_with_transformers(repo, tmp_path, default_model_dir):
    from judgeforge.cli import main

    reqs = tmp_path / "r.jsonl"
    reqs.write_text("\n".join(json.dumps(x) for x in [
        {"id": 1, "instruction": "What is 2+2?", "response": "4", "rubric": "reasoning", "n": 2},
        {"id": 2, "instruction": "x", "response": "y", "rubric": "nope"},
        {"id": 3, "instruction": "Pick", "response_a": "4", "response_b": "5", "rubric": "reasoning", "n": 1},
    ]) + "\n")
    out = tmp_path / "o.jsonl"
    rc = main(["grade", "--local", "-c", str(repo / "configs/serve/transformers.yaml"), "-i", str(reqs),
               "-o", str(out), "sampling.max_tokens=16", "sampling.max_resample_rounds=0",
               "engine.cpu_threads=1"])
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rc == 0 and [r["id"] for r in rows] == [1, 2, 3]
    assert len(rows[0]["result"]["votes"]) == 2 and rows[1]["error"]["status"] == 422
    assert "winner" in rows[2]["result"]
