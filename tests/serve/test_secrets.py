"""Secrets never leave (issue 18, findings 2-3). A teacher key, the server's own key and a password are
planted; a real `judgeforge serve` process (the CLI, its logging, its uvicorn) escalates every item to a
real local HTTP teacher (testing/teacher.py) switched to a 401 that echoes the Authorization header
and to a 500 that echoes the request URL and headers. No answer and no log line may carry any of them,
and a password in the teacher's URL is refused at start, in one line that does not show it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from judgeforge.config import ConfigError, load_config
from judgeforge.judge.config import EngineConfig
from judgeforge.serve.app import create_app
from judgeforge.serve.config import ServeConfig
from judgeforge.serve.process import ServerProcess
from testing.engines import ScriptedEngine
from testing.teacher import FakeTeacher

TEACHER_KEY = "teacher-secret-7f3c9a1e55"
SERVER_KEY = "server-secret-52d1b8c0"
PASSWORD = "hunter2-pa55word-91"
KEY_ENV = "JUDGEFORGE_TEST_TEACHER_KEY"
PLANTED = (TEACHER_KEY, SERVER_KEY, PASSWORD)
SCRIPTED = (str(Path(__file__).with_name("scripted_serve.py")),)
TAG = "[secret item]"
ITEM = {"instruction": f"{TAG} Write a haiku.", "response": "An old silent pond.", "rubric": "helpfulness",
        "n": 1}
PAIR = {"instruction": f"{TAG} Which is better?", "response_a": "a", "response_b": "b",
        "rubric": "helpfulness", "n": 1}


@pytest.fixture(scope="module")
def teacher():
    fake = FakeTeacher({TAG: ("Fine. [RESULT] 3", 3)}).start()
    yield fake
    fake.stop()


def _overrides(teacher, tmp_path, *extra) -> list[str]:
    return ["engine.max_model_len=4096", "cascade.threshold=1.5", f"cascade.teacher.base_url={teacher.url}",
            f"cascade.teacher.api_key_env={KEY_ENV}", "cascade.teacher.max_retries=1", "cascade.timeout_s=10",
            f"store.path={tmp_path / 'j.sqlite'}", *extra]


def _leaks(text: str) -> list[str]:
    return [s for s in PLANTED if s in text]


def test_no_secret_in_any_answer_or_log_line(teacher, tmp_path):
    log = tmp_path / "serve.log"
    env = {KEY_ENV: TEACHER_KEY, "JUDGEFORGE_API_KEY": SERVER_KEY}
    srv = ServerProcess(None, _overrides(teacher, tmp_path), env=env, log=log, entry=SCRIPTED)
    answers = []
    try:
        srv.wait_ready(120)
        auth = {"Authorization": f"Bearer {SERVER_KEY}"}
        with httpx.Client(base_url=srv.url, headers=auth, timeout=30) as c:
            for mode in ("unauthorized", "leaky_error"):
                teacher.mode = mode
                answers += [c.post("/v1/grade", json=ITEM), c.post("/v1/compare", json=PAIR),
                            c.post("/v1/grade/batch", json={"items": [ITEM, ITEM]})]
            answers += [c.get("/metrics"), c.get("/health"), c.get("/openapi.json")]
    finally:
        srv.stop(30)
        teacher.mode = "ok"
    assert teacher.calls >= 6  # the teacher was really asked (and echoed what it got)
    for r in answers[:6]:
        assert r.status_code == 200, r.text
        for a in r.json().get("results", [r.json()]):
            assert a["judge"] == "local" and "teacher_error" in a, a  # the failure is said, then scrubbed
    first = answers[0].json()["teacher_error"]
    assert "401" in first and "Bearer ***" in first, first  # the status and a summary survive
    assert "500" in answers[3].json()["teacher_error"]
    for r in answers:
        assert not _leaks(r.text), (r.request.url, r.text[:500])
    lines = log.read_text().splitlines()
    assert any("escalation failed" in line for line in lines)  # the failures were logged ...
    assert [line for line in lines if _leaks(line)] == []  # ... without a secret


def test_no_secret_in_503_answers_or_debug_logs(teacher, tmp_path, monkeypatch, caplog):
    """The 503 policy's detail, and every log record down to DEBUG (httpx, the SDK), in-process."""
    monkeypatch.setenv(KEY_ENV, TEACHER_KEY)
    monkeypatch.setenv("JUDGEFORGE_API_KEY", SERVER_KEY)
    cfg = load_config(ServeConfig, None, _overrides(teacher, tmp_path, "cascade.on_teacher_failure=503"))
    caplog.set_level(logging.DEBUG)
    texts = []
    try:
        with TestClient(create_app(cfg, ScriptedEngine())) as c:
            for mode in ("unauthorized", "leaky_error"):
                teacher.mode = mode
                r = c.post("/v1/grade", json=ITEM, headers={"Authorization": f"Bearer {SERVER_KEY}"})
                assert r.status_code == 503 and "teacher" in r.json()["detail"], r.text
                texts.append(r.text)
    finally:
        teacher.mode = "ok"
    records = [f"{rec.name}: {rec.getMessage()}" for rec in caplog.records]
    assert any("answered 401" in t for t in records + texts)
    assert [t for t in texts + records if _leaks(t)] == []


@pytest.mark.parametrize("key", ["cascade.teacher.base_url", "engine.base_url"])
def test_credentials_in_a_base_url_are_refused_without_showing_them(key):
    over = [f"{key}=http://judge:{PASSWORD}@127.0.0.1:9/v1", "cascade.threshold=1.5"]
    with pytest.raises(ConfigError, match="credentials") as e:
        load_config(ServeConfig, None, over)
    assert key in str(e.value) and PASSWORD not in str(e.value)
    with pytest.raises(ConfigError, match="query"):
        load_config(ServeConfig, None, [f"{key}=https://h/v1?key={PASSWORD}", "cascade.threshold=1.5"])
    EngineConfig(base_url="https://api.openai.com/v1")  # a plain URL is fine


def test_serve_refuses_a_password_in_the_teacher_url_in_one_line(tmp_path):
    cmd = [sys.executable, *SCRIPTED, "cascade.threshold=1.5",
           f"cascade.teacher.base_url=http://judge:{PASSWORD}@127.0.0.1:9/v1",
           f"store.path={tmp_path / 'j.sqlite'}"]
    env = {**os.environ, "JUDGEFORGE_API_KEY": SERVER_KEY}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    errors = [line for line in out.splitlines() if "config error" in line]
    assert len(errors) == 1 and "credentials" in out and "cascade.teacher.base_url" in out, out
    assert not _leaks(out) and "Traceback" not in out, out
