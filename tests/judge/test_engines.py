"""Engine contract: prompts identical to training, template-version refusal, the openai engine's
wire format, and the transformers engine on the real SmolLM2 (slow)."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from judgeforge.judge.prompts import TEMPLATE_VERSION, absolute_messages, rubric_preset
from judgeforge.judge.config import EngineConfig, SamplingConfig
from judgeforge.judge.engines import (EngineDead, EngineError, EngineTimeout, InvalidRequest,
                                      PromptTooLong, SampleRequest, TemplateVersionMismatch,
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


# --- openai engine: wire format against a mock vLLM / OpenAI endpoint --------------------------
DIGITS = {str(d): 32 + d for d in range(10)}  # SmolLM2: "0".."9" are ids 32..41
FIRST = {"1": 0.05, "2": 0.1, "3": 0.15, "4": 0.6, "5": 0.1}  # next digit after `[RESULT] `
AFTER_ONE = {"0": 0.7}  # after "1": "10" or stop


def _lp(table: dict[str, float], ids) -> dict[str, float]:
    return {f"token_id:{t}": math.log(table[d]) if (d := str(t - 32)) in table else -9999.0 for t in ids}


def _vllm(seen, tok, text="Fine. [RESULT] 4", ignore_ids=False, reject=None, error=None):
    """A `vllm serve` double: completions on token-id prompts, `return_tokens_as_token_ids`,
    `logprob_token_ids` (or an endpoint that ignores / rejects them, or answers `error`)."""
    gen = [*tok(text, add_special_tokens=False)["input_ids"], tok.eos_token_id]

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((request.url.path, body, request.headers.get("authorization")))
        if error is not None:
            return httpx.Response(error[0], json={"error": error[1]})
        if reject and reject in body:
            return httpx.Response(400, json={"error": {
                "message": f"Unrecognized request argument supplied: {reject}",
                "type": "invalid_request_error", "param": None, "code": None}})
        as_ids = body.get("return_tokens_as_token_ids") and not ignore_ids
        if "logprob_token_ids" in body:
            prompt = body["prompt"]
            table = AFTER_ONE if prompt[-1] == DIGITS["1"] else FIRST
            asked = [] if ignore_ids else body["logprob_token_ids"]
            top = _lp(table, [DIGITS["4"], *asked]) if as_ids else {"4": math.log(0.6)}
            choices = [{"index": 0, "text": "4", "finish_reason": "length",
                        "logprobs": {"tokens": ["token_id:36" if as_ids else "4"],
                                     "token_logprobs": [-0.5], "text_offset": [0],
                                     "top_logprobs": [top]}}]
        else:
            lp = None
            if body.get("logprobs") is not None:
                lp = {"tokens": [f"token_id:{t}" if as_ids else tok.decode([t]) for t in gen],
                      "token_logprobs": [-0.1] * len(gen), "text_offset": list(range(len(gen))),
                      "top_logprobs": [{} for _ in gen]}
            choices = [{"index": i, "text": text, "finish_reason": "stop", "logprobs": lp}
                       for i in range(body["n"])]
        return httpx.Response(200, json={"id": "cmpl-1", "object": "text_completion", "created": 0,
                                         "model": body["model"], "choices": choices})
    return httpx.MockTransport(handler)


def _openai_engine(transport, **kw):
    from judgeforge.judge.engines.openai import OpenAIEngine

    cfg = EngineConfig(kind="openai", **{"model": "judge", "base_url": "http://replica/v1", **kw})
    return OpenAIEngine(cfg, http_client=httpx.AsyncClient(transport=transport), max_retries=0)


@pytest.fixture(scope="module")
def smollm_tok(default_model_dir):
    return load_tokenizer(str(default_model_dir))


def test_openai_completions_completes_every_sample_with_logprob_token_ids(default_model_dir, smollm_tok):
    seen = []
    with _openai_engine(_vllm(seen, smollm_tok), api="completions", tokenizer=str(default_model_dir),
                        adapters={"lora1": "/unused"}) as eng:
        assert eng.can_complete and eng.info()["completion"] is True
        samples = eng.generate([SampleRequest(messages=MSGS, n=3, seed=5, adapter="lora1")])[0]
        greedy = eng.generate([SampleRequest(messages=MSGS, n=2, temperature=0.0)])[0]
        ten = tuple(str(i) for i in range(1, 11))
        scale10 = eng.generate([SampleRequest(messages=MSGS, n=1, choices=ten)])[0]
        grade = Judge(eng, SamplingConfig(n=2)).grade([GradeItem("q", "a", rubric_preset("honesty"))])[0]
    prompt_ids = prompt_token_ids(smollm_tok, MSGS)
    path, body, _ = seen[0]
    assert path == "/v1/completions" and body["prompt"] == prompt_ids and body["n"] == 3
    assert body["model"] == "lora1" and body["seed"] == 5
    assert body["logprobs"] == 0 and body["return_tokens_as_token_ids"] is True
    path, read, _ = seen[1]  # one read per sample (1-5: one token each after `[RESULT] `)
    kept = smollm_tok("Fine.", add_special_tokens=False)["input_ids"]
    assert read["prompt"][:len(prompt_ids) + len(kept)] == prompt_ids + kept and read["model"] == "lora1"
    assert read["logprob_token_ids"] == [DIGITS[c] for c in "12345"]
    assert read["max_tokens"] == 1 and read["temperature"] == 0 and read["logprobs"] == 1
    for s in samples:
        assert s.completion is None and s.text == "Fine. [RESULT] 4"
        assert s.n_tokens == len(kept) + 7  # + " [RESULT] 4" + <|im_end|>
        assert s.choice_logprobs == pytest.approx({c: math.log(p) for c, p in FIRST.items()})
    # greedy: one decode (n=1), copied, one completion
    assert seen[4][1]["n"] == 1 and len(greedy) == 2
    assert greedy[0].choice_logprobs == greedy[1].choice_logprobs
    assert "logprob_token_ids" in seen[5][1] and "logprob_token_ids" not in seen[6][1]
    # 1-10: "10" = "1" then "0"; "1" = "1" then neither a digit nor "0"
    lp = scale10[0].choice_logprobs
    assert math.exp(lp["10"]) == pytest.approx(0.05 * 0.7)
    assert math.exp(lp["1"]) == pytest.approx(0.05 * 0.3)
    assert math.exp(lp["4"]) == pytest.approx(0.6) and math.exp(lp["9"]) == pytest.approx(0.0)
    assert grade.score == 4 and grade.score_probs[4] == pytest.approx(0.6)


def test_openai_completions_score_only_reads_after_the_prompt(default_model_dir, smollm_tok):
    seen = []
    with _openai_engine(_vllm(seen, smollm_tok), api="completions",
                        tokenizer=str(default_model_dir)) as eng:
        out = eng.generate([SampleRequest(messages=MSGS, n=3, feedback=False)])[0]
    assert len(seen) == 1 and "logprob_token_ids" in seen[0][1]  # nothing generated: one read
    assert len(out) == 3 and all(s.finish_reason == "score_only" for s in out)
    assert out[0].choice_logprobs == pytest.approx({c: math.log(p) for c, p in FIRST.items()})


def _chat(seen, text="Clear and correct. [RESULT] 4"):
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((request.url.path, body, request.headers.get("authorization")))
        choices = [{"index": i, "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop"} for i in range(body["n"])]
        return httpx.Response(200, json={"id": "c", "object": "chat.completion", "created": 0,
                                         "model": body["model"], "choices": choices})
    return httpx.MockTransport(handler)


def test_openai_chat_falls_back_to_the_written_score(monkeypatch):
    from judgeforge.judge.engines.openai import OpenAIEngine

    monkeypatch.setenv("OPENAI_API_KEY", "endpoint-key")
    seen = []
    with _openai_engine(_chat(seen), adapters={"lora1": "/unused"}) as eng:
        assert not eng.can_complete
        grade = Judge(eng, SamplingConfig(n=3)).grade([GradeItem("q", "a", rubric_preset("honesty"))])[0]
        out = eng.generate([SampleRequest(messages=MSGS, n=2, adapter="lora1", seed=5,
                                          feedback=False)])[0]
    path, body, auth = seen[0]
    assert path == "/v1/chat/completions" and body["n"] == 3 and body["messages"][0]["role"] == "system"
    assert "logprobs" not in body and auth == "Bearer endpoint-key"
    assert len(seen) == 2  # one call per grading, nothing re-sampled
    assert grade.score == 4 and grade.votes == [4, 4, 4] and grade.score_probs is None
    assert all(j.completion == "chat endpoint offers no prompt continuation: score parsed from the text"
               for j in grade.judged)
    assert seen[1][1]["model"] == "lora1" and seen[1][1]["seed"] == 5
    assert out[0].text.endswith("[RESULT] 4") and "score-only" in out[0].completion  # writes instead
    with pytest.raises(EngineError, match="api: completions"):
        OpenAIEngine(EngineConfig(kind="openai", completion="on"))


@pytest.mark.parametrize("how", ["reject", "ignore"])
def test_openai_auto_falls_back_once_where_the_endpoint_has_no_continuation(default_model_dir, smollm_tok,
                                                                            caplog, how):
    seen = []
    kw = {"reject": "logprob_token_ids"} if how == "reject" else {"ignore_ids": True}
    with _openai_engine(_vllm(seen, smollm_tok, **kw), api="completions",
                        tokenizer=str(default_model_dir)) as eng:
        first = eng.generate([SampleRequest(messages=MSGS, n=2)])[0]
        assert not eng.can_complete
        n_before = len(seen)
        second = eng.generate([SampleRequest(messages=MSGS, n=2, feedback=False)])[0]
    for s in first + second:
        assert s.choice_logprobs is None and s.text == "Fine. [RESULT] 4"
        assert s.completion.startswith("endpoint offers no prompt continuation")
        assert s.completion.endswith("score parsed from the text")
    later = [b for _, b, _ in seen[n_before:]]
    assert len(later) == 1
    assert not {"logprob_token_ids", "return_tokens_as_token_ids", "logprobs"} & set(later[0])
    assert sum("no prompt continuation" in r.message for r in caplog.records) == 1


def test_openai_completion_on_refuses_an_endpoint_without_it_and_off_never_reads(default_model_dir,
                                                                                 smollm_tok):
    seen = []
    with _openai_engine(_vllm(seen, smollm_tok, reject="logprob_token_ids"), api="completions",
                        tokenizer=str(default_model_dir), completion="on") as eng:
        with pytest.raises(EngineError, match="completion: on.*logprob_token_ids"):
            eng.generate([SampleRequest(messages=MSGS, n=1)])
    seen = []
    with _openai_engine(_vllm(seen, smollm_tok), api="completions", tokenizer=str(default_model_dir),
                        completion="off") as eng:
        out = eng.generate([SampleRequest(messages=MSGS, n=2)])[0]
    assert len(seen) == 1 and "logprobs" not in seen[0][1]
    assert out[0].completion == "prompt continuation off (completion: off): score parsed from the text"


def test_openai_errors_are_typed(default_model_dir, smollm_tok):
    ctx = {"message": "This model's maximum context length is 2048 tokens. However, your prompt contains "
                      "3000 input tokens, which exceeds this limit even without any output tokens.",
           "type": "BadRequestError", "param": "input_tokens", "code": 400}
    oai = {"message": "too long", "type": "invalid_request_error", "param": "messages",
           "code": "context_length_exceeded"}
    cases = [((400, ctx), PromptTooLong, "model context of 2048"), ((400, oai), PromptTooLong, "exceeds"),
             ((400, {"message": "temperature out of range", "type": "BadRequestError", "param": None,
                     "code": 400}), InvalidRequest, "answered 400"),
             ((500, {"message": "boom", "type": "InternalServerError", "code": 500}), EngineError,
              "answered 500"),
             ((404, {"message": "The model `x` does not exist.", "type": "NotFoundError", "code": 404}),
              EngineError, "answered 404")]
    for error, exc, msg in cases:
        with _openai_engine(_vllm([], smollm_tok, error=error), api="completions",
                            tokenizer=str(default_model_dir)) as eng:
            with pytest.raises(exc, match=msg) as got:
                eng.generate([SampleRequest(messages=MSGS, n=1)])
            assert exc is not EngineError or type(got.value) is EngineError
        assert eng.alive

    def down(request):
        raise httpx.ConnectError("refused")

    def slow(request):
        raise httpx.ReadTimeout("slow")

    for handler, exc in ((down, EngineDead), (slow, EngineTimeout)):
        with _openai_engine(httpx.MockTransport(handler), api="chat") as eng:
            with pytest.raises(exc, match="http://replica/v1"):
                eng.generate([SampleRequest(messages=MSGS, n=1)])
        assert eng.alive  # the endpoint may come back


# --- transformers engine on the real SmolLM2 ---------------------------------------------------
@pytest.fixture(scope="module")
def hf_engine(default_model_dir, lora_adapters):
    from judgeforge.judge.engines import build_engine

    with build_engine(EngineConfig(kind="transformers", model=str(default_model_dir), adapters=lora_adapters,
                                   seed=0, cpu_threads=1)) as eng:  # the adapters' base
        yield eng


def test_transformers_engine_gives_its_thread_count_back(tiny_llama):
    """cpu_threads holds while the engine is open; closing it restores the process's count (a caller
    that grades, then trains, must not train on the engine's count), unless another was set since."""
    import torch

    from judgeforge.judge.engines import build_engine

    before = torch.get_num_threads()
    other = 2 if before == 1 else 1
    try:
        with build_engine(EngineConfig(kind="transformers", model=str(tiny_llama), cpu_threads=other)):
            assert torch.get_num_threads() == other
        assert torch.get_num_threads() == before
        with build_engine(EngineConfig(kind="transformers", model=str(tiny_llama), cpu_threads=other)):
            torch.set_num_threads(3)  # the caller's own choice since: left alone
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_transformers_engine_n5_votes(hf_engine):
    judge = Judge(hf_engine, SamplingConfig(n=5, max_tokens=32, max_resample_rounds=1))
    grades = judge.grade([GradeItem("What is 2+2?", "4", rubric_preset("reasoning"), options=Options(seed=3))])
    for g in grades:  # every sample votes: written or completed
        assert len(g.votes) == 5 and g.n_valid == 5 and g.score in {1, 2, 3, 4, 5}
        assert abs(sum(g.score_probs.values()) - 1) < 1e-6 and g.n_sampled == 5


@pytest.mark.slow
def test_transformers_engine_completes_where_the_judge_wrote_its_score(hf_engine):
    """The model copies a verdict; where a sample wrote '[RESULT] k', the completion reads every
    value at that same position (k included, as a probability the model gave)."""
    msgs = [{"role": "user", "content": "Output the following text verbatim:\nFeedback: [RESULT] 3"}]
    samples = hf_engine.generate([SampleRequest(messages=msgs, n=8, max_tokens=16, seed=3)])[0]
    from judgeforge.judge.parsing import parse_score

    hits = [s for s in samples if parse_score(s.text).ok]
    assert hits, [s.text for s in samples]
    for s in hits:
        k = parse_score(s.text).score
        lps = s.choice_logprobs
        assert set(lps) == {"1", "2", "3", "4", "5"} and all(v <= 0 for v in lps.values())
        assert lps[str(k)] > -30  # the written value had real probability at the completed position


@pytest.mark.slow
def test_transformers_lone_request_prefills_its_prompt_once(hf_engine):
    """A lone request (a served grading) prefills its prompt once for its N rows and its completion
    reads alike, and reads what a request of a batch reads with its own prefill."""
    req = SampleRequest(messages=MSGS, n=2, temperature=0.0, max_tokens=12, adapter="judge_a",
                        choices=("1", "2", "3", "4", "5"))
    prompt = len(hf_engine.prepare(req).prompt_ids)
    lengths: list[int] = []
    hook = hf_engine.model.get_input_embeddings().register_forward_hook(
        lambda mod, args, out: lengths.append(args[0].shape[-1]))
    try:
        lone = hf_engine.generate([req])[0]
    finally:
        hook.remove()
    assert sum(n >= prompt - 1 for n in lengths) == 1, lengths
    batched = hf_engine.generate([req, req])[0]  # a batch's requests each prefill their own
    for a, b in zip(lone, batched):
        assert a.text == b.text and set(a.choice_logprobs) == set(req.choices)
        assert max(abs(a.choice_logprobs[c] - b.choice_logprobs[c]) for c in req.choices) < 1e-3


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
    assert rc == 3 and [r["id"] for r in rows] == [1, 2, 3]  # 3: some lines failed (the bad rubric)
    assert len(rows[0]["result"]["votes"]) == 2 and rows[1]["error"]["status"] == 422
    assert "winner" in rows[2]["result"]
