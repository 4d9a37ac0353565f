"""HTTP behaviour of the grading API on a scripted test-double engine (no model)."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest
from fastapi.testclient import TestClient

from judgeforge.config import load_config
from judgeforge.serve.app import create_app
from judgeforge.serve.config import ServeConfig

from testing.engines import ScriptedEngine as FakeEngine

KEY = "s3cret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
BODY = {"instruction": "What is 2+2?", "response": "4", "rubric": "helpfulness", "n": 3}


def make(engine=None, **over):
    overrides = [f"{k}={v}" for k, v in over.items()]
    cfg = load_config(ServeConfig, None, ["server.api_key=" + KEY, "engine.max_model_len=4096", *overrides])
    engine = engine or FakeEngine()
    return create_app(cfg, engine), engine


@pytest.fixture
def client(monkeypatch):
    monkeypatch.delenv("JUDGEFORGE_API_KEY", raising=False)
    app, engine = make()
    with TestClient(app) as c:
        c.engine = engine
        yield c


def test_grade_votes_and_answer_fields(client):
    r = client.post("/v1/grade", json=BODY, headers=AUTH)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["score"] == 4 and d["votes"] == [4, 4, 4] and d["agreement"] == 1.0
    assert d["distribution"] == {"1": 0, "2": 0, "3": 0, "4": 3, "5": 0}
    assert d["feedback"] == "Good." and d["n_valid"] == 3 and d["n_unparseable"] == 0
    assert d["rubric"] == "helpfulness" and d["scale"] == [1, 5] and d["model"] == "fake-judge"
    assert d["samples"] is None
    d2 = client.post("/v1/grade", json={**BODY, "include_samples": True}, headers=AUTH).json()
    assert d2["samples"] == ["Good. [RESULT] 4"] * 3
    p3, p4 = math.exp(-1.2), math.exp(-0.4)  # the double's score log-probs, renormalised
    assert d["expected_score"] == pytest.approx((3 * p3 + 4 * p4) / (p3 + p4))
    req = client.engine.calls[0]
    assert req.n == 3 and "What is 2+2?" in req.messages[1]["content"]  # one engine request with n=3


def test_custom_rubric_scale_reference_and_adapter(client):
    body = {**BODY, "rubric": {"criteria": "Is it right?", "score1_description": "no",
                               "score10_description": "yes"},
            "scale": [1, 10], "reference_answer": "4", "adapter": "ad1", "temperature": 0.5}
    r = client.post("/v1/grade", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    req = client.engine.calls[-1]
    assert req.adapter == "ad1" and req.temperature == 0.5
    assert "Score 10: yes" in req.messages[1]["content"] and "between 1 and 10" in req.messages[1]["content"]


def test_completed_scores_vote_without_resampling(monkeypatch):
    monkeypatch.delenv("JUDGEFORGE_API_KEY", raising=False)
    app, engine = make(FakeEngine(texts=["ok [RESULT] 2", "rambling", "no marker either"]))
    with TestClient(app) as c:
        d = c.post("/v1/grade", json={**BODY, "n": 3, "include_samples": True}, headers=AUTH).json()
    assert [r.n for r in engine.calls] == [3] and d["n_sampled"] == 3
    assert d["votes"] == [2, 4, 4] and d["sources"] == ["written", "completed", "completed"]
    assert d["score"] == 4 and d["n_written"] == 1 and d["written_agreement"] == 0.0
    p3, p4 = math.exp(-1.2), math.exp(-0.4)
    assert d["confidence"] == pytest.approx(p4 / (p3 + p4)) and d["reason"] is None


def test_score_only_option(monkeypatch):
    monkeypatch.delenv("JUDGEFORGE_API_KEY", raising=False)
    app, engine = make()
    with TestClient(app) as c:
        d = c.post("/v1/grade", json={**BODY, "feedback": False}, headers=AUTH).json()
    assert engine.calls[-1].feedback is False and d["score"] == 4 and d["failures"] == {}


def test_resampling_only_unparseable_then_null(monkeypatch):
    """An engine that cannot complete (a chat endpoint): unparseable samples are re-drawn, bounded."""
    monkeypatch.delenv("JUDGEFORGE_API_KEY", raising=False)
    app, engine = make(FakeEngine(texts=["ok [RESULT] 2", "rambling", "ok [RESULT] 3"], complete=False),
                       **{"sampling.max_resample_rounds": 1})
    with TestClient(app) as c:
        d = c.post("/v1/grade", json={**BODY, "n": 3}, headers=AUTH).json()
        assert [r.n for r in engine.calls] == [3, 1]  # only the failed sample is re-drawn
        assert d["votes"] == [2, 2, 2] or d["n_sampled"] == 4
        assert d["n_sampled"] == 4
    app, engine = make(FakeEngine(texts=["no verdict"], complete=False), **{"sampling.max_resample_rounds": 2})
    with TestClient(app) as c:
        d = c.post("/v1/grade", json=BODY, headers=AUTH).json()
        assert d["score"] is None and "no vote" in d["reason"] and d["n_sampled"] == 9
        assert "judgeforge_null_results_total 1.0" in c.get("/metrics", headers=AUTH).text


def test_auth(client, monkeypatch):
    assert client.post("/v1/grade", json=BODY).status_code == 401
    r = client.post("/v1/grade", json=BODY, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert client.get("/v1/models").status_code == 401
    assert client.get("/metrics").status_code == 401
    assert client.get("/health").status_code == 200  # the only open route
    monkeypatch.setenv("JUDGEFORGE_API_KEY", "from-env")  # env overrides the config
    app, _ = make()
    with TestClient(app) as c:
        assert c.get("/v1/models", headers=AUTH).status_code == 401
        assert c.get("/v1/models", headers={"Authorization": "Bearer from-env"}).status_code == 200


@pytest.mark.parametrize("patch,field", [
    ({"n": 17}, "n"),                       # above sampling.max_n (16)
    ({"n": 0}, "n"),
    ({"max_tokens": 10**5}, "max_tokens"),  # above sampling.max_tokens_limit
    ({"temperature": -1}, "temperature"),
    ({"rubric": "no-such-preset"}, "rubric"),
    ({"rubric": {"criteria": "x", "bogus": "y"}}, "rubric"),
    ({"adapter": "missing"}, "adapter"),
    ({"scale": [5, 1]}, "scale"),
    ({"instruction": ""}, "instruction"),
    ({"unknown_field": 1}, "unknown_field"),
])
def test_422_names_the_field(client, patch, field):
    r = client.post("/v1/grade", json={**BODY, **patch}, headers=AUTH)
    assert r.status_code == 422, r.text
    assert any(field in map(str, e["loc"]) for e in r.json()["detail"]), r.text


def test_missing_field_is_named(client):
    r = client.post("/v1/grade", json={"instruction": "x", "rubric": "helpfulness"}, headers=AUTH)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "response"]


def test_over_long_input_is_413_before_any_work(client):
    r = client.post("/v1/grade", json={**BODY, "response": "word " * 4000}, headers=AUTH)
    assert r.status_code == 413 and "exceeds the model context" in r.json()["detail"]
    r = client.post("/v1/grade", json={**BODY, "response": "x" * 300_000}, headers=AUTH)
    assert r.status_code == 422 and "response" in str(r.json()["detail"])  # max_input_chars
    assert client.engine.calls == []


def test_batch_and_compare(client):
    r = client.post("/v1/grade/batch", json={"items": [BODY, {**BODY, "n": 1}]}, headers=AUTH)
    assert r.status_code == 200 and [x["votes"] for x in r.json()["results"]] == [[4] * 3, [4]]
    r = client.post("/v1/grade/batch", json={"items": [BODY, {**BODY, "n": 99}]}, headers=AUTH)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "items", 1, "n"]
    client.engine.texts = iter(["A wins [RESULT] A", "[RESULT] B"] * 10)
    cmp = {"instruction": "x", "response_a": "a", "response_b": "b", "rubric": "helpfulness",
           "n": 1, "both_orders": True}
    d = client.post("/v1/compare", json=cmp, headers=AUTH).json()
    assert d["winner"] == "A" and d["consistent"] is True and d["swapped_votes"] == ["B"]
    r = client.post("/v1/compare/batch", json={"items": [cmp]}, headers=AUTH)
    assert r.status_code == 200 and len(r.json()["results"]) == 1


def test_models_health_metrics(client):
    d = client.get("/v1/models", headers=AUTH).json()
    assert [(m["id"], m["type"]) for m in d["data"]] == [("fake-judge", "base"), ("ad1", "adapter")]
    assert client.get("/health").json()["status"] == "ok"
    client.post("/v1/grade", json=BODY, headers=AUTH)
    text = client.get("/metrics", headers=AUTH).text
    assert "judgeforge_samples_total 3.0" in text
    assert 'judgeforge_requests_total{route="/v1/grade",status="200"}' in text
    assert "judgeforge_request_latency_seconds_count" in text


def _judge_metrics(c) -> dict[str, float]:
    text = c.get("/metrics", headers=AUTH).text
    names = ("judgeforge_samples_total", "judgeforge_parse_failures_total", "judgeforge_null_results_total")
    rows = [line.split() for line in text.splitlines()]
    return {r[0]: float(r[1]) for r in rows if r and r[0] in names}


def test_grade_and_compare_move_the_same_counters(monkeypatch):
    """One answer layout, one accounting: an unparseable grade and an unparseable compare each count
    their samples, their parse failures and one null result."""
    monkeypatch.delenv("JUDGEFORGE_API_KEY", raising=False)
    app, _ = make(FakeEngine(texts=["no verdict"], complete=False), **{"sampling.max_resample_rounds": 0})
    cmp = {"instruction": "x", "response_a": "a", "response_b": "b", "rubric": "helpfulness", "n": 2}
    with TestClient(app) as c:
        before = _judge_metrics(c)
        g = c.post("/v1/grade", json={**BODY, "n": 2}, headers=AUTH).json()
        after_grade = _judge_metrics(c)
        d = c.post("/v1/compare", json=cmp, headers=AUTH).json()
        after_compare = _judge_metrics(c)
    assert g["score"] is None and d["winner"] is None and d["n_sampled"] == g["n_sampled"] == 2
    assert sum(d["failures"].values()) == sum(g["failures"].values()) == 2
    grade_moved = {k: after_grade[k] - before[k] for k in before}
    compare_moved = {k: after_compare[k] - after_grade[k] for k in before}
    assert grade_moved == compare_moved == {"judgeforge_samples_total": 2.0,
                                            "judgeforge_parse_failures_total": 2.0,
                                            "judgeforge_null_results_total": 1.0}


def _async_client(app):
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", headers=AUTH)


def test_full_queue_is_429_at_once(monkeypatch):
    monkeypatch.delenv("JUDGEFORGE_API_KEY", raising=False)
    app, engine = make(FakeEngine(delay=1.0), **{"server.max_in_flight": 2})

    async def go():
        async with _async_client(app) as c:
            slow = [asyncio.create_task(c.post("/v1/grade", json=BODY)) for _ in range(2)]
            await asyncio.sleep(0.3)
            t0 = asyncio.get_running_loop().time()
            r = await c.post("/v1/grade", json=BODY)
            waited = asyncio.get_running_loop().time() - t0
            done = await asyncio.gather(*slow)
            return r, waited, done

    r, waited, done = asyncio.run(go())
    assert r.status_code == 429 and r.headers["retry-after"] == "2" and waited < 0.5
    assert [d.status_code for d in done] == [200, 200]


def test_timeout_is_504_and_cancels_engine_work(monkeypatch):
    monkeypatch.delenv("JUDGEFORGE_API_KEY", raising=False)
    app, engine = make(FakeEngine(delay=5.0), **{"server.request_timeout_s": 0.5})

    async def go():
        async with _async_client(app) as c:
            return await c.post("/v1/grade", json=BODY)

    r = asyncio.run(go())
    assert r.status_code == 504 and engine.cancelled == 1


def test_dead_engine_is_503_fast(monkeypatch):
    monkeypatch.delenv("JUDGEFORGE_API_KEY", raising=False)
    app, engine = make(FakeEngine(delay=30.0), **{"server.health_poll_s": 0.2})

    async def go():
        async with _async_client(app) as c:
            pending = asyncio.create_task(c.post("/v1/grade", json=BODY))
            await asyncio.sleep(0.3)
            engine.dead = True
            t0 = asyncio.get_running_loop().time()
            r = await pending
            return r, asyncio.get_running_loop().time() - t0, await c.get("/health"), \
                await c.post("/v1/grade", json=BODY)

    # ASGITransport runs no lifespan: the in-request watchdog alone must notice.
    r, took, health, after = asyncio.run(go())
    assert r.status_code == 503 and took < 2 and engine.cancelled == 1
    assert health.status_code == 503 and health.json()["status"] == "dead"
    assert after.status_code == 503


def test_client_disconnect_cancels_engine_work(monkeypatch):
    """Through a real uvicorn server: a client that gives up frees its slot and engine work."""
    import threading
    import time

    import uvicorn

    from judgeforge.serve.process import free_port

    monkeypatch.delenv("JUDGEFORGE_API_KEY", raising=False)
    app, engine = make(FakeEngine(delay=30.0))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            if server.started:
                break
            time.sleep(0.05)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/v1/grade", json=BODY, headers=AUTH, timeout=1.0)
        time.sleep(1.5)  # the handler polls for disconnects every 0.5 s
        assert engine.cancelled == 1
        assert httpx.get(url + "/health").json()["in_flight"] == 0
    finally:
        server.should_exit = True
        thread.join(10)


def test_engine_side_validation_error_is_422_not_500(monkeypatch):
    from judgeforge.judge.engines import InvalidRequest

    class Picky(FakeEngine):
        async def agenerate(self, req):
            raise InvalidRequest("vLLM rejected the sampling parameters: n must be 1")

    monkeypatch.delenv("JUDGEFORGE_API_KEY", raising=False)
    app, _ = make(Picky())
    with TestClient(app) as c:
        r = c.post("/v1/grade", json=BODY, headers=AUTH)
        assert r.status_code == 422 and "n must be 1" in r.text


def test_greedy_failures_are_not_resampled(monkeypatch):
    monkeypatch.delenv("JUDGEFORGE_API_KEY", raising=False)
    app, engine = make(FakeEngine(texts=["no verdict"], complete=False))
    with TestClient(app) as c:
        d = c.post("/v1/grade", json={**BODY, "temperature": 0}, headers=AUTH).json()
    assert d["score"] is None and d["n_sampled"] == 3 and [r.n for r in engine.calls] == [3]
