"""The judgment store: round trip, the cache key, the put policy, schema versions, and durability
(a writer SIGKILLed at random moments, two writer processes on one file)."""

from __future__ import annotations

import json
import logging
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

import judgeforge.cascade.store as store_mod
from judgeforge.cascade.store import (SCHEMA_VERSION, JudgmentStore, LocalResult, Record, Request, StoreError,
                                      StoreVersionError, TeacherResult)
from judgeforge.data.templates import Rubric, Scale
from judgeforge.judge.items import CompareItem, GradeItem

WRITER = Path(__file__).with_name("store_writer.py")
RUBRIC = {"criteria": "Is it correct?", "score1_description": "wrong", "score5_description": "right"}
JSON_COLUMNS = ("request", "meta", "local_probs", "local_distribution")
log = logging.getLogger(__name__)


def request(**changes) -> Request:
    base = Request("absolute", "What is 2+2?", ("4",), RUBRIC, "4", (1, 5))
    return replace(base, **changes)


def local(score=4) -> LocalResult:
    grade = {"score": score, "score_probs": {"3": 0.1, "4": 0.9}, "distribution": {"4": 3}, "confidence": 0.9,
             "feedback": "Correct."}
    return LocalResult.from_grade(grade, "smollm2", adapter="round1")


TEACHER = TeacherResult("gpt-4", "The answer is right. [RESULT] 5", 5, 1.5)


@pytest.fixture
def store(tmp_path):
    with JudgmentStore(tmp_path / "store.db") as s:
        yield s


def test_round_trip(store):
    rec = Record(request(), local(), escalated=True, teacher=TEACHER, replica="r1", meta={"response_model": "m"})
    seq = store.put(rec)
    got = store.get(rec.request.key())
    assert got.seq == seq == store.max_seq() == 1 and got.record == rec
    assert got.created.endswith("+00:00") and got.teacher_at is not None
    assert got.to_dict()["request"] == {"instruction": "What is 2+2?", "response": "4", "rubric": RUBRIC,
                                        "reference_answer": "4", "scale": [1, 5]}
    rel = Record(Request("relative", "Which?", ("a", "b"), "helpfulness"), LocalResult("smollm2", "A", 0.7))
    assert store.get(rel.request.key()) is None
    store.put(rel)
    assert store.get(rel.request.key()).record == rel


def test_cache_hit_by_key_from_items(store):
    rec = Record(request(), local())
    store.put(rec)
    item = GradeItem("What is 2+2?", "4", Rubric.from_dict(RUBRIC), "4", Scale(1, 5))
    assert Request.from_item(item).key() == rec.request.key()
    assert store.get(Request.from_item(item).key()).record.local.score == 4
    pair = CompareItem("Which?", "a", "b", "helpfulness")
    assert Request.from_item(pair) == Request("relative", "Which?", ("a", "b"), "helpfulness")
    assert store.get(Request.from_item(pair).key()) is None


@pytest.mark.parametrize("changes", [
    {"instruction": "What is 2+3?"}, {"responses": ("5",)}, {"rubric": {**RUBRIC, "criteria": "Is it kind?"}},
    {"reference_answer": None}, {"reference_answer": "four"}, {"scale": (1, 10)},
    {"mode": "relative", "responses": ("4", "5"), "scale": None},
])
def test_key_changes_with_every_request_field(changes):
    assert request(**changes).key() != request().key()
    assert request(**changes).key() == request(**changes).key()


def test_key_changes_with_template_version(monkeypatch):
    before = request().key()
    monkeypatch.setattr(store_mod, "TEMPLATE_VERSION", "prometheus2-v2")
    assert request().key() != before


def test_put_keeps_the_first_local_grade_and_adds_the_teacher_once(store):
    first = store.put(Record(request(), local(4), replica="r1"))
    other = store.put(Record(request(instruction="other"), local(2)))
    assert store.put(Record(request(), local(1))) == first  # a cache hit changes nothing
    assert list(store.iter_teacher()) == []
    with_teacher = store.put(Record(request(), local(1), escalated=True, teacher=TEACHER, replica="r2"))
    assert with_teacher > other > first  # rewritten under a new seq: incremental builds see it
    got = store.get(request().key())
    assert (got.seq, got.record.local.score, got.record.replica) == (with_teacher, 4, "r1")
    assert got.record.escalated and got.record.teacher == TEACHER
    later = TeacherResult("gpt-4", "Wrong. [RESULT] 1", 1)
    assert store.put(Record(request(), local(1), teacher=later)) == with_teacher
    assert [r.seq for r in store.iter_teacher()] == [with_teacher] and store.count() == 2


def test_iter_teacher_reads_after_since_in_seq_order(store):
    seqs = [store.put(Record(request(instruction=f"q{i}"), local(), teacher=TEACHER if i % 2 else None))
            for i in range(10)]
    teacher_seqs = seqs[1::2]
    assert [r.seq for r in store.iter_teacher()] == teacher_seqs
    assert [r.seq for r in store.iter_teacher(since_seq=seqs[4])] == teacher_seqs[2:]
    assert [r.seq for r in store.iter_teacher(since_seq=seqs[4], upto=seqs[7])] == teacher_seqs[2:4]
    store_mod._BATCH, batch = 2, store_mod._BATCH
    try:
        assert [r.seq for r in store.iter_teacher()] == teacher_seqs  # across batches
    finally:
        store_mod._BATCH = batch


def test_store_identity_and_pragmas_survive_reopening(tmp_path):
    with JudgmentStore(tmp_path / "s.db") as s:
        ident = s.id
        s.put(Record(request(), local()))
        assert s._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    with JudgmentStore(tmp_path / "s.db", create=False) as s:
        assert s.id == ident and s.count() == 1
    with JudgmentStore(tmp_path / "t.db") as t:
        assert t.id != ident


def test_unknown_schema_versions_and_foreign_files_are_refused(tmp_path):
    path = tmp_path / "s.db"
    JudgmentStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreVersionError, match=rf"schema version {SCHEMA_VERSION + 1}.*reads schema version"):
        JudgmentStore(path)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(StoreError, match="not a judgment store"):
        JudgmentStore(other)
    (tmp_path / "text.db").write_text("not a database at all, not even close" * 100)
    with pytest.raises(StoreError, match="not a usable judgment store"):
        JudgmentStore(tmp_path / "text.db")
    with pytest.raises(StoreError, match="no judgment store"):
        JudgmentStore(tmp_path / "missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()


def test_bad_requests_are_refused():
    with pytest.raises(ValueError, match="mode"):
        Request("pairwise", "q", ("a",), "c")
    with pytest.raises(ValueError, match="2 response"):
        Request("relative", "q", ("a",), "c")
    assert Request("relative", "q", ("a", "b"), "c", scale=(1, 5)).scale is None


# --- durability -------------------------------------------------------------------------------------

def _writer(path: Path, prefix: str, count: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WRITER), str(path), prefix, str(count)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _acks(text: str) -> list[tuple[int, str, bool]]:
    """The acknowledged writes: complete lines only (a kill can cut the last one)."""
    lines = text.split("\n")[:-1]
    return [(int(seq), key, teacher == "1") for seq, key, teacher in (line.split() for line in lines)]


def _check_rows(path: Path) -> dict[str, sqlite3.Row]:
    """Open as a store, then check every row is whole; returns rows by key."""
    with JudgmentStore(path) as s:
        conn = s._conn
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        required = [r["name"] for r in conn.execute("PRAGMA table_info(judgments)") if r["notnull"]]
        rows = conn.execute("SELECT * FROM judgments").fetchall()
        for row in rows:
            assert all(row[c] is not None for c in required), dict(row)
            for c in JSON_COLUMNS:
                if row[c] is not None:
                    json.loads(row[c])
            store_mod._from_row(row)  # reads back as a record
        assert list(s.iter_teacher()) == sorted(s.iter_teacher(), key=lambda r: r.seq)
    return {row["key"]: row for row in rows}


def _check_acks(rows: dict, acks: list[tuple[int, str, bool]]) -> None:
    """Every acknowledged write is there: its seq, or, for a local-only put whose item later got the
    teacher's judgment (acknowledged or not), the larger seq of the rewritten row."""
    for seq, key, teacher in acks:
        assert key in rows, f"acknowledged seq {seq} lost"
        row = rows[key]
        rewritten = not teacher and row["teacher_model"] is not None and row["seq"] > seq
        assert row["seq"] == seq or rewritten, (seq, key, teacher, dict(row))
        assert not teacher or row["teacher_model"] == "gpt-4"


def test_sigkilled_writer_loses_no_acknowledged_write(tmp_path):
    """SIGKILL a writer at random moments (seeded), 6 times on one file: each time the store opens, its
    integrity check is ok, every acknowledged put is there and no row is partial."""
    rng, path, acks = random.Random(1234), tmp_path / "crash.db", []
    for run in range(6):
        proc = _writer(path, f"run{run}", 0)
        proc.stdout.readline()  # the writer is up and has acknowledged one put
        time.sleep(rng.uniform(0.05, 0.6))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        run_acks = _acks(out)
        acks += run_acks
        rows = _check_rows(path)
        _check_acks(rows, acks)
        assert len(run_acks) >= 1
        log.info("kill %d: %d puts acknowledged, %d rows in the store", run + 1, len(run_acks), len(rows))
    assert len({k for _, k, _ in acks}) >= 20, "the writers were killed before writing much"


def test_writer_processes_share_one_store(tmp_path):
    """Three processes on one file, which none created beforehand (they race to create it); two of
    them grade the same items (same keys), so their puts contend on the same rows."""
    path, n = tmp_path / "shared.db", 60
    procs = [_writer(path, prefix, n) for prefix in ("replica0", "replica1", "replica1")]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outs]
    acks = [a for out, _ in outs for a in _acks(out)]
    rows = _check_rows(path)
    _check_acks(rows, acks)
    assert len(rows) == 2 * n and len({r["seq"] for r in rows.values()}) == 2 * n
