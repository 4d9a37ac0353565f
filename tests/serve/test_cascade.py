"""Cascade serving (Trust or Escalate) and the judgment store, on a ScriptedEngine as the local judge and a
real local HTTP teacher replaying GPT-4's cached Prometheus judgments (testing/teacher.py); one slow
test with a real `vllm serve` as the teacher."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from judgeforge.data.store import JudgmentStore, Request
from judgeforge.config import load_config
from judgeforge.judge.parsing import parse_score
from judgeforge.serve.app import create_app
from judgeforge.serve.config import ServeConfig
from judgeforge.serve.schemas import GradeRequest
from judgeforge.serve.process import free_port
from testing.engines import SCRIPTED_LOGPROBS, ScriptedEngine
from testing.teacher import FakeTeacher, prometheus_judgments

KEY = "s3cret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
P3, P4 = math.exp(SCRIPTED_LOGPROBS["3"]), math.exp(SCRIPTED_LOGPROBS["4"])
LOCAL_CONF = P4 / (P3 + P4)  # the ScriptedEngine's confidence in its score 4 on a 1-5 scale (~0.69)
PAIR = "[pair 1]"


@pytest.fixture(scope="module")
def judgments(vendor):
    return prometheus_judgments(vendor / "prometheus-eval" / "mt_bench_eval.json", 8)


@pytest.fixture(scope="module")
def teacher_server(judgments):
    fake = FakeTeacher({**judgments, PAIR: ("Response A answers; B does not. [RESULT] A", 0)}).start()
    yield fake
    fake.stop()



def body(tag: str, **kw) -> dict:
    return {"instruction": f"{tag} Write a limerick about the outline.", "response": "A limerick.",
            "rubric": "helpfulness", "n": 1, **kw}


def client(tmp_path, teacher, *over, engine=None):
    overrides = ["server.api_key=" + KEY, "engine.max_model_len=4096", f"cascade.teacher.base_url={teacher.url}",
                 "cascade.teacher.max_retries=0", "cascade.timeout_s=2", f"store.path={tmp_path / 'j.sqlite'}",
                 *over]
    if not any(o.startswith("cascade.calibration") for o in over) and not any(
            o.startswith("cascade.threshold") for o in over):
        overrides.append("cascade.threshold=0")
    cfg = load_config(ServeConfig, None, overrides)
    return TestClient(create_app(cfg, engine or ScriptedEngine()))


def rows(tmp_path) -> list:
    with JudgmentStore(tmp_path / "j.sqlite", create=False) as store:
        return list(store.iter_teacher()), store.count()


def test_threshold_zero_never_asks_the_teacher(tmp_path, teacher, judgments):
    with client(tmp_path, teacher) as c:
        answers = [c.post("/v1/grade", json=body(tag), headers=AUTH).json() for tag in judgments]
    assert teacher.calls == 0
    for a in answers:
        assert a["judge"] == "local" and a["score"] == 4 and a["threshold"] == 0
        assert a["confidence"] == pytest.approx(LOCAL_CONF) and "guarantee" not in a
    assert rows(tmp_path) == ([], len(judgments))  # every item stored, none with a teacher judgment


def test_threshold_above_one_sends_every_item_to_the_teacher(tmp_path, teacher, judgments):
    tags = list(judgments)
    with client(tmp_path, teacher, "cascade.threshold=1.5") as c:
        single = [c.post("/v1/grade", json=body(t), headers=AUTH).json() for t in tags[:4]]
        batch = c.post("/v1/grade/batch", json={"items": [body(t) for t in tags[4:]]}, headers=AUTH)
    answers = single + batch.json()["results"]
    assert teacher.calls == len(tags) == sum(a["judge"] == "teacher" for a in answers)
    for tag, a in zip(tags, answers):
        text, score = judgments[tag]
        assert a["score"] == score and a["feedback"] == parse_score(text).feedback  # GPT-4's own judgment
        assert a["model"] == "gpt-4" and a["local_score"] == 4 and a["threshold"] == 1.5
        assert a["confidence"] == pytest.approx(LOCAL_CONF)  # the confidence the threshold was applied to
    stored, count = rows(tmp_path)
    assert count == len(tags) and {s.record.teacher.score for s in stored} == {j[1] for j in judgments.values()}
    assert all(s.record.escalated and s.record.local.score == 4 for s in stored)


def test_teacher_calls_equal_teacher_answers_on_a_mix(tmp_path, teacher, judgments):
    # On a [4, 5] scale the scripted judge puts all its mass on 4 (confidence 1): answered locally.
    reqs = [body(t, scale=[4, 5] if i % 2 else None) for i, t in enumerate(judgments)]
    with client(tmp_path, teacher, "cascade.threshold=0.9") as c:
        answers = [c.post("/v1/grade", json=r, headers=AUTH).json() for r in reqs]
    judges = [a["judge"] for a in answers]
    assert judges == ["local" if i % 2 else "teacher" for i in range(len(reqs))]
    assert teacher.calls == judges.count("teacher")


def test_calibrated_threshold_reports_the_guarantee(tmp_path, teacher, judgments):
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"calibration": {"threshold": 0.8, "alpha": 0.1, "delta": 0.05, "n": 300}}))
    with client(tmp_path, teacher, f"cascade.calibration={cal}") as c:
        a = c.post("/v1/grade", json=body(next(iter(judgments))), headers=AUTH).json()
    assert a["judge"] == "teacher" and a["threshold"] == 0.8
    assert a["guarantee"] == {"alpha": 0.1, "delta": 0.05, "n": 300}


def test_repeated_request_is_answered_from_the_store(tmp_path, teacher, judgments):
    tag = next(iter(judgments))
    engine = ScriptedEngine()
    with client(tmp_path, teacher, "cascade.threshold=1.5", "store.cache=true", engine=engine) as c:
        first = c.post("/v1/grade", json=body(tag), headers=AUTH).json()
        again = c.post("/v1/grade", json=body(tag), headers=AUTH).json()
    assert teacher.calls == 1 and len(engine.calls) == 1
    assert "cached" not in first and again["cached"] is True
    assert again["judge"] == "teacher" and again["score"] == first["score"] == judgments[tag][1]
    assert again["feedback"] == first["feedback"]
    other = ScriptedEngine()
    other.model_name = "another-judge"  # a store graded by another local judge is no cache for this one
    with client(tmp_path, teacher, "cascade.threshold=1.5", "store.cache=true", engine=other) as c:
        assert "cached" not in c.post("/v1/grade", json=body(tag), headers=AUTH).json()
    assert len(other.calls) == 1 and rows(tmp_path)[1] == 2  # the other judge's grading is kept too


def test_cache_off_grades_again(tmp_path, teacher, judgments):
    tag = next(iter(judgments))
    with client(tmp_path, teacher, "cascade.threshold=1.5") as c:
        for _ in range(2):
            assert "cached" not in c.post("/v1/grade", json=body(tag), headers=AUTH).json()
    stored, count = rows(tmp_path)
    assert teacher.calls == 2 and count == 2 and len(stored) == 2  # every grading kept, each with its teacher


def test_a_regrade_is_kept_and_the_cache_answers_from_the_right_row(tmp_path, teacher, judgments):
    """The teacher keeps failing: a repeated request is graded locally again and may get another score
    (4, then 3); each answer is a row. Once the teacher answers, the cache answers from that row."""
    tag = next(iter(judgments))
    engine = ScriptedEngine(texts=("Good. [RESULT] 4", "Fair. [RESULT] 3"))
    teacher.mode = "error"
    with client(tmp_path, teacher, "cascade.threshold=1.5", "store.cache=true", engine=engine) as c:
        told = [c.post("/v1/grade", json=body(tag), headers=AUTH).json() for _ in range(2)]
        teacher.mode = "ok"
        told += [c.post("/v1/grade", json=body(tag), headers=AUTH).json() for _ in range(2)]
    assert [(a["judge"], a["score"], "teacher_error" in a, a.get("cached", False)) for a in told] == [
        ("local", 4, True, False), ("local", 3, True, False), ("teacher", judgments[tag][1], False, False),
        ("teacher", judgments[tag][1], False, True)]
    with JudgmentStore(tmp_path / "j.sqlite", create=False) as store:
        history = store.history(Request.from_item(GradeRequest(**body(tag)).item()).key())
    # newest first: the teacher's grading, then the two local ones, as the clients were told
    assert [(h.record.local.score, h.record.teacher and h.record.teacher.score) for h in history] == [
        (4, judgments[tag][1]), (3, None), (4, None)]
    assert all(h.record.escalated for h in history)


@pytest.mark.parametrize("mode, calls", [("timeout", 1), ("error", 1), ("garbage", 3)])
@pytest.mark.parametrize("policy", ["local", "503"])
def test_teacher_failure_follows_the_policy(tmp_path, teacher, judgments, mode, calls, policy):
    teacher.mode = mode
    over = ["cascade.threshold=1.5", f"cascade.on_teacher_failure={policy}", "cascade.timeout_s=0.5"]
    with client(tmp_path, teacher, *over) as c:
        r = c.post("/v1/grade", json=body(next(iter(judgments))), headers=AUTH)
    # garbage: the first answer and max_resample_rounds=2 bounded re-asks, then a failure
    assert teacher.calls == calls
    if policy == "503":
        assert r.status_code == 503 and "teacher" in r.json()["detail"]
    else:
        a = r.json()
        assert r.status_code == 200 and a["judge"] == "local" and a["score"] == 4  # never a made-up score
        assert a["teacher_error"] and a["model"] == "fake-judge" and "local_score" not in a
    stored, count = rows(tmp_path)
    assert count == 1 and stored == []  # the local grade is kept, escalated, without a teacher judgment


@pytest.mark.parametrize("policy", ["local", "503"])
def test_exhausted_budget_follows_the_policy(tmp_path, teacher, judgments, policy):
    tags = list(judgments)[:3]
    over = ["cascade.threshold=1.5", "cascade.budget_total=1", f"cascade.on_teacher_failure={policy}"]
    with client(tmp_path, teacher, *over) as c:
        rs = [c.post("/v1/grade", json=body(t), headers=AUTH) for t in tags]
    assert teacher.calls == 1 and rs[0].json()["judge"] == "teacher"
    for r in rs[1:]:
        if policy == "503":
            assert r.status_code == 503
        else:
            assert r.json()["budget_exhausted"] is True and r.json()["judge"] == "local"


def test_budget_per_minute_refills():
    from judgeforge.cascade.runtime import Budget

    now = [0.0]
    b = Budget(per_minute=2, total=None, clock=lambda: now[0])
    assert [b.take(), b.take(), b.take()] == [True, True, False]
    now[0] = 60.0
    assert b.take() and b.used == 3


def test_compare_escalates_too(tmp_path, teacher):
    req = {"instruction": f"{PAIR} Which is better?", "response_a": "a", "response_b": "b",
           "rubric": "helpfulness", "n": 1}
    with client(tmp_path, teacher, "cascade.threshold=1.5") as c:
        a = c.post("/v1/compare", json=req, headers=AUTH).json()
    assert a["judge"] == "teacher" and a["winner"] == "A" and a["local_score"] == "A"
    assert a["feedback"] == "Response A answers; B does not." and teacher.calls == 1


def test_plain_serving_is_unchanged(teacher, monkeypatch):
    cfg = load_config(ServeConfig, None, ["server.api_key=" + KEY, "engine.max_model_len=4096"])
    with TestClient(create_app(cfg, ScriptedEngine())) as c:
        a = c.post("/v1/grade", json=body("[x]"), headers=AUTH).json()
    assert a["score"] == 4 and not {"judge", "threshold", "cached", "guarantee"} & set(a)


def test_config_needs_one_threshold():
    from judgeforge.config import ConfigError

    partial = load_config(ServeConfig, None, ["cascade.threshold=0", "cascade.teacher.sampling.max_tokens=64"])
    assert partial.cascade.teacher.sampling.n == 1  # the teacher's defaults survive a partial override
    with pytest.raises(ConfigError, match="exactly one"):
        load_config(ServeConfig, None, ["cascade.teacher.model=x"])
    cfg = load_config(ServeConfig, Path(__file__).parents[2] / "configs" / "serve" / "cascade.yaml")
    assert cfg.cascade is not None and cfg.store is not None


# --- kill -9 mid-burst: one stored row per acknowledged answer ------------------------------------


async def _burst(url: str, n: int, kill_after: int, proc) -> list[dict]:
    acked: list[dict] = []

    async def one(c, i):
        req = body(f"[burst {i}]")
        try:
            r = await c.post(url + "/v1/grade", json=req)
        except httpx.HTTPError:
            return
        if r.status_code == 200:
            acked.append(req)
            if len(acked) == kill_after:
                os.kill(proc.pid, signal.SIGKILL)  # mid-burst: the others are in flight

    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=n)) as c:
        await asyncio.gather(*(one(c, i) for i in range(n)))
    return acked


def test_kill_9_mid_burst_leaves_one_row_per_acknowledged_answer(tmp_path):
    path, port = tmp_path / "j.sqlite", free_port()
    script = Path(__file__).with_name("cascade_server.py")
    proc = subprocess.Popen([sys.executable, str(script), str(path), str(port), "0.3"],
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        acked = asyncio.run(_burst(url, 60, 15, proc))
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    assert 15 <= len(acked) < 60
    with JudgmentStore(path, create=False) as store:  # opens: SQLite recovers from its WAL
        for req in acked:
            stored = store.get(Request.from_item(GradeRequest(**req).item()).key())
            assert stored is not None and stored.record.local.score == 4
        assert len(acked) <= store.count() < 60  # unacknowledged ones may be stored too, none twice


# --- the real thing: `vllm serve` of the embedded model as the teacher (chat API) ------------------


@pytest.mark.slow
def test_real_vllm_serve_teacher(tmp_path, vllm_serve, default_model_dir, monkeypatch):
    monkeypatch.delenv("JUDGEFORGE_API_KEY", raising=False)
    model = str(default_model_dir)
    cfg = load_config(ServeConfig, None, [
        "server.api_key=" + KEY, "engine.max_model_len=4096", "cascade.threshold=1.5",
        f"cascade.teacher.base_url={vllm_serve.url}/v1", f"cascade.teacher.model={model}",
        "cascade.teacher.max_model_len=2048", "cascade.teacher.sampling.max_tokens=160",
        "cascade.teacher.sampling.seed=0", "cascade.timeout_s=300", f"store.path={tmp_path / 'j.sqlite'}"])
    reqs = [{"instruction": "What is 2+2?", "response": r, "rubric": "reasoning", "reference_answer": "4",
             "n": 1} for r in ("4", "5")]
    with TestClient(create_app(cfg, ScriptedEngine())) as c, ThreadPoolExecutor(len(reqs)) as pool:
        # together, as a server's clients send them: the teacher decodes both in one batch (a lone
        # sequence decodes at ~13 tokens/s on 2 AVX2 cores, and each answer may be re-asked twice)
        answers = list(pool.map(lambda r: c.post("/v1/grade", json=r, headers=AUTH), reqs))
    assert [r.status_code for r in answers] == [200] * len(reqs), answers[0].text
    with JudgmentStore(tmp_path / "j.sqlite", create=False) as store:
        assert store.count() == len(reqs)
        teacher_scores = sorted(s.record.teacher.score for s in store.iter_teacher())
    for r in answers:
        a = r.json()
        assert r.status_code == 200 and a["threshold"] == 1.5
        if a["judge"] == "teacher":  # the model wrote a parseable score: it answers, as written
            assert a["model"] == model and a["score"] in range(1, 6) and a["local_score"] == 4
        else:  # no parseable score after the bounded re-asks: the local answer, flagged
            assert a["teacher_error"] and a["score"] == 4
    # exactly the teacher answers carry a stored teacher judgment, with the answered score
    assert teacher_scores == sorted(r.json()["score"] for r in answers if r.json()["judge"] == "teacher")


# --- issue 18: paid calls, an end-to-end deadline, one rule for a valid judgment ----------------------


def test_the_budget_counts_paid_calls_and_failures_apart(tmp_path, teacher, judgments, monkeypatch):
    from judgeforge.cascade import runtime as cascade

    monkeypatch.setattr(cascade, "RETRY_BACKOFF_S", 0.01)
    tags = list(judgments)
    over = ["cascade.threshold=1.5", "cascade.budget_total=4", "cascade.teacher.max_retries=2"]
    with client(tmp_path, teacher, *over) as c:
        teacher.mode = "error"  # 500s: a call and two retries, none of them paid
        failed = c.post("/v1/grade", json=body(tags[0]), headers=AUTH).json()
        teacher.mode = "garbage"  # answered without a score: the call and its two re-asks are paid
        garbage = c.post("/v1/grade", json=body(tags[1]), headers=AUTH).json()
        teacher.mode = "ok"
        ok = [c.post("/v1/grade", json=body(t), headers=AUTH).json() for t in tags[2:4]]
        metrics = c.get("/metrics", headers=AUTH).text
    assert "teacher_error" in failed and failed["teacher_calls"] == {"answered": 0, "timeout": 0, "error": 3}
    assert "teacher_error" in garbage and garbage["teacher_calls"] == {"answered": 3, "timeout": 0, "error": 0}
    assert ok[0]["judge"] == "teacher" and ok[0]["teacher_calls"] == {"answered": 1, "timeout": 0, "error": 0}
    assert ok[1]["budget_exhausted"] is True and ok[1]["teacher_calls"]["answered"] == 0  # 4 paid: spent
    assert teacher.calls == 3 + 3 + 1  # every call the teacher saw is in an answer
    assert 'judgeforge_teacher_calls_total{outcome="answered"} 4.0' in metrics
    assert 'judgeforge_teacher_calls_total{outcome="error"} 3.0' in metrics


def test_re_asks_stop_when_the_budget_does(tmp_path, teacher, judgments):
    teacher.mode = "garbage"
    with client(tmp_path, teacher, "cascade.threshold=1.5", "cascade.budget_total=2") as c:
        a = c.post("/v1/grade", json=body(next(iter(judgments))), headers=AUTH).json()
    assert teacher.calls == 2 and a["budget_exhausted"] is True and a["judge"] == "local"
    assert a["teacher_calls"] == {"answered": 2, "timeout": 0, "error": 0}


def _app(tmp_path, teacher, *over, engine=None):
    cfg = load_config(ServeConfig, None, [
        "server.api_key=" + KEY, "engine.max_model_len=4096", f"cascade.teacher.base_url={teacher.url}",
        "cascade.teacher.max_retries=0", f"store.path={tmp_path / 'j.sqlite'}", "cascade.threshold=1.5", *over])
    return create_app(cfg, engine or ScriptedEngine())


def test_the_deadline_bounds_hung_escalations_end_to_end(tmp_path, teacher, judgments):
    from concurrent.futures import ThreadPoolExecutor

    teacher.mode = "timeout"  # every call hangs 30 s; timeout_s alone would wait for it
    over = ["cascade.timeout_s=30", "cascade.deadline_s=2", "cascade.max_concurrency=4"]
    tags = [f"[hung {i}]" for i in range(10)]
    with TestClient(_app(tmp_path, teacher, *over, engine=ScriptedEngine(delay=0.3))) as c:
        def one(tag):
            t0 = time.monotonic()
            r = c.post("/v1/grade", json=body(tag), headers=AUTH)
            return r, time.monotonic() - t0

        t0 = time.monotonic()
        with ThreadPoolExecutor(len(tags)) as pool:
            done = list(pool.map(one, tags))
        took = time.monotonic() - t0
    assert took < 3.5, f"10 concurrent hung escalations took {took:.1f}s under a 2 s deadline"
    for r, latency in done:
        a = r.json()
        assert r.status_code == 200 and latency < 2.5, (latency, a)
        assert a["judge"] == "local" and a["score"] == 4 and "no answer within" in a["teacher_error"]
    assert rows(tmp_path)[1] == len(tags)  # each answered and stored before its deadline


def test_the_deadline_covers_local_grading(tmp_path, teacher):
    engine = ScriptedEngine(delay=5.0)
    with TestClient(_app(tmp_path, teacher, "cascade.deadline_s=1", engine=engine)) as c:
        t0 = time.monotonic()
        r = c.post("/v1/grade", json=body("[slow]"), headers=AUTH)
        took = time.monotonic() - t0
    assert r.status_code == 504 and "deadline_s=1" in r.json()["detail"] and took < 2
    assert engine.cancelled == 1 and teacher.calls == 0


QUOTING = {
    "[quote 1]": ("The rubric's example ends with [RESULT] 1, but this response is thorough. [RESULT] 5", 5),
    "[quote 2]": ("Clear and correct, though brief. So the overall score is 2. [RESULT] 4", 4),
    "[clean 1]": ("Clear, correct and complete. [RESULT] 5", 5),
    "[clean 2]": ("Partly correct: the second step is wrong. [RESULT] 2", 2),
}


def test_what_the_teacher_serves_is_what_a_build_keeps(tmp_path):
    """Issue 18, finding 9: the server served teacher answers whose feedback quoted another `[RESULT] n`,
    and a build from that store rejected them all as score_feedback_mismatch. One rule now decides both."""
    from judgeforge.data.parsers import make_context, parse_store
    from judgeforge.data.validate import Reject

    fake = FakeTeacher(QUOTING).start()
    try:
        with TestClient(_app(tmp_path, fake)) as c:
            answers = {tag: c.post("/v1/grade", json=body(tag), headers=AUTH).json() for tag in QUOTING}
    finally:
        fake.stop()
    for tag in ("[quote 1]", "[quote 2]"):  # re-asked, then flagged: the local answer, never the teacher's
        a = answers[tag]
        assert a["judge"] == "local" and "score_feedback_mismatch" in a["teacher_error"], a
        assert a["teacher_calls"]["answered"] == 3
    for tag in ("[clean 1]", "[clean 2]"):
        assert answers[tag]["judge"] == "teacher" and answers[tag]["score"] == QUOTING[tag][1]
    stored, _ = rows(tmp_path)
    built = [parse_store(s.to_dict(), make_context("store", "store"))[0][1] for s in stored]
    assert len(stored) == 2 and not [b for b in built if isinstance(b, Reject)], built
    assert sorted(b.score for b in built) == [2, 5]
