"""A failing judgment store seen from the grading API (issue 18): a corrupt store is refused at start
in one line; a store that fails while serving answers 503 with the reason (never a bare 500) and turns
/health to 503; a failing store is found before the teacher is paid, and a teacher judgment whose write
fails is kept in the spool and put back at the next start. The corruption is real: a 400-row store with
48 random pages overwritten mid-file, under a real server process."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from judgeforge.data.store import JudgmentStore, StoreError
from judgeforge.config import load_config
from judgeforge.serve.app import create_app
from judgeforge.serve.config import ServeConfig
from judgeforge.serve.process import free_port
from testing.engines import ScriptedEngine
from testing.records import corrupt_pages, fill_store
from testing.teacher import FakeTeacher

SERVER = Path(__file__).with_name("cascade_server.py")
CONFIGS = Path(__file__).parents[2] / "configs" / "serve"
FRESH = {f"[fresh {i}]": (f"Clear and correct on point {i}. [RESULT] 3", 3) for i in range(40)}


@pytest.fixture(scope="module")
def teacher_server():
    fake = FakeTeacher(FRESH).start()
    yield fake
    fake.stop()



def body(tag: str) -> dict:
    return {"instruction": f"{tag} Explain the result.", "response": "It is 3.", "rubric": "helpfulness", "n": 1}


def client(store: Path, teacher, *over: str) -> TestClient:
    cfg = load_config(ServeConfig, None, [
        "server.auth=none", "engine.max_model_len=4096", "cascade.threshold=1.5",
        f"cascade.teacher.base_url={teacher.url}", "cascade.teacher.max_retries=0", "cascade.timeout_s=5",
        f"store.path={store}", "store.cache=true", *over])
    return TestClient(create_app(cfg, ScriptedEngine()), raise_server_exceptions=False)


def spooled(store: Path) -> list[str]:
    spool = Path(f"{store}-spool.jsonl")
    return spool.read_text().splitlines() if spool.exists() else []


def test_serve_refuses_a_corrupt_store_at_start_in_one_line(tmp_path, monkeypatch, caplog):
    """It used to start, say "ok" on /health, then answer 500s from store.get/put."""
    import uvicorn

    from judgeforge.judge import engines
    from judgeforge.serve import app as app_module

    path = tmp_path / "corrupt.sqlite"
    fill_store(path, 400)
    corrupt_pages(path, 48)
    monkeypatch.setattr(engines, "build_engine", lambda cfg: ScriptedEngine())
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: pytest.fail("served a corrupt store"))
    with caplog.at_level(logging.ERROR, logger="judgeforge.serve"):
        assert app_module.main(["--config", str(CONFIGS / "default.yaml"), "server.auth=none",
                                f"store.path={path}"]) == 2
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert str(path) in line and "is corrupt (quick_check" in line and "\n" not in line


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path) -> dict:
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, f"server did not start: {log.read_text()}"
        try:
            r = httpx.get(url + "/health", timeout=1)
            if r.status_code == 200:
                return r.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.2)


def _poke(path: Path) -> None:
    """A commit by another writer of the store (a replica sharing it): the server's next read sees the
    WAL changed and reads its pages from disk again, the corrupt ones included."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('poke', '1')")
    conn.close()


def test_a_store_corrupted_while_serving_answers_503_with_the_reason(tmp_path, teacher):
    path, port, log = tmp_path / "j.sqlite", free_port(), tmp_path / "server.log"
    fill_store(path, 400)
    over = ["cascade.threshold=1.5", f"cascade.teacher.base_url={teacher.url}", "cascade.teacher.max_retries=0",
            "cascade.timeout_s=5", "store.cache=true"]
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(SERVER), str(path), str(port), "0", *over],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        assert _wait_healthy(url, proc, log)["store"] == {"status": "ok"}
        corrupt_pages(path, 48)
        _poke(path)
        answers = [httpx.post(url + "/v1/grade", json=body(tag), timeout=30) for tag in list(FRESH)[:24]]
        health = httpx.get(url + "/health", timeout=5)
    finally:
        proc.terminate()
        proc.wait(30)
    statuses = [r.status_code for r in answers]
    assert set(statuses) <= {200, 503} and 503 in statuses, (statuses, log.read_text()[-2000:])
    first = statuses.index(503)
    assert statuses[first:] == [503] * (len(statuses) - first)  # a corrupt store stays refused
    for r in answers[first:]:
        assert r.json()["detail"].startswith("judgment store unavailable: database disk image is malformed")
    assert health.status_code == 503 and health.json()["status"] == "store_failing"
    assert health.json()["store"] == {"status": "failing", "reason": "database disk image is malformed"}
    # Every teacher call paid for was kept: a 200 answered (and stored) by the teacher, or a spooled line.
    answered = sum(r.status_code == 200 and r.json()["judge"] == "teacher" for r in answers)
    assert teacher.calls == answered + len(spooled(path))


def _failing(reason: str):
    def fail(self, *args, **kw):
        raise StoreError(f"{self.path}: {reason}", reason=reason)
    return fail


def test_a_store_that_cannot_be_written_is_found_before_the_teacher_is_paid(tmp_path, teacher, monkeypatch):
    with client(tmp_path / "j.sqlite", teacher) as c:
        assert c.get("/health").json()["store"] == {"status": "ok"}
        monkeypatch.setattr(JudgmentStore, "put", _failing("database or disk is full"))
        r = c.post("/v1/grade", json=body("[fresh 1]"))
        health = c.get("/health")
        monkeypatch.undo()
        again = c.post("/v1/grade", json=body("[fresh 1]"))
        healed = c.get("/health")
    assert r.status_code == 503 and r.json()["detail"] == "judgment store unavailable: database or disk is full"
    assert health.status_code == 503 and health.json()["store"]["reason"] == "database or disk is full"
    # the local grading could not be kept, so the teacher was never asked; a store that works again heals
    assert again.status_code == 200 and again.json()["judge"] == "teacher" and teacher.calls == 1
    assert healed.status_code == 200 and healed.json()["store"] == {"status": "ok"}


def test_a_teacher_judgment_that_cannot_be_written_is_spooled_and_put_back(tmp_path, teacher, monkeypatch):
    store = tmp_path / "j.sqlite"
    monkeypatch.setattr(JudgmentStore, "add_teacher", _failing("disk I/O error"))
    with client(store, teacher) as c:
        r = c.post("/v1/grade", json=body("[fresh 2]"))
    monkeypatch.undo()
    assert r.status_code == 503 and teacher.calls == 1
    assert r.json()["detail"].startswith("judgment store unavailable: disk I/O error; the teacher's judgment is "
                                         "kept in the spool")
    assert len(spooled(store)) == 1 and Path(f"{store}-spool.jsonl").stat().st_mode & 0o777 == 0o600
    with client(store, teacher) as c:  # the next start puts it back into the store: a cache hit now
        a = c.post("/v1/grade", json=body("[fresh 2]")).json()
    assert a["cached"] is True and a["judge"] == "teacher" and a["score"] == 3 and teacher.calls == 1
    assert spooled(store) == []
    with JudgmentStore(store, readonly=True) as s:
        [row] = list(s.iter_teacher())
        assert s.count() == 1 and row.record.teacher.score == 3 and row.record.local.score == 4
