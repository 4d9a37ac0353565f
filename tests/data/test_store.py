"""The judgment store: round trip, the cache key, the put policy, schema versions, durability (a writer
SIGKILLed at random moments, two writer processes on one file), and its faults: corruption, file
modes, copies made without the WAL, backups."""

from __future__ import annotations

import collections
import json
import logging
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

import judgeforge.data.store as store_mod
from judgeforge.data.store import (SCHEMA_VERSION, JudgmentStore, LocalResult, Record, Request, StoreError,
                                      StoreVersionError, TeacherResult)
from testing.records import corrupt_pages, fill_store
from judgeforge.judge.prompts import Rubric, Scale
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


def test_every_grading_is_a_row_and_the_teacher_joins_its_own(store):
    """A re-graded item is a second row (the audit trail holds every answer a client was given); the
    teacher's judgment is added to the grading that asked for it, under a new seq."""
    key = request().key()
    first = store.put(Record(request(), local(4), replica="r1"))
    other = store.put(Record(request(instruction="other"), local(2)))
    again = store.put(Record(request(), local(1)))
    assert first < other < again and store.count() == 3
    assert [h.record.local.score for h in store.history(key)] == [1, 4]  # newest first
    assert store.get(key).seq == again and list(store.iter_teacher()) == []
    with_teacher = store.add_teacher(first, TEACHER)
    assert with_teacher > again  # rewritten under a new seq: incremental builds see it
    got = store.history(key)[0]
    assert (got.seq, got.record.local.score, got.record.replica) == (with_teacher, 4, "r1")
    assert got.record.escalated and got.record.teacher == TEACHER and got.teacher_at is not None
    later = TeacherResult("gpt-4", "Wrong. [RESULT] 1", 1)
    assert store.add_teacher(with_teacher, later) == with_teacher  # one teacher judgment per grading
    assert [r.seq for r in store.iter_teacher()] == [with_teacher] and store.count() == 3
    with pytest.raises(StoreError, match="no grading with seq 999"):
        store.add_teacher(999, TEACHER)


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


def _check_rows(path: Path) -> dict[int, sqlite3.Row]:
    """Open as a store, then check every row is whole; returns rows by seq."""
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
    return {row["seq"]: row for row in rows}


def _check_acks(rows: dict, acks: list[tuple[int, str, bool]]) -> None:
    """Every acknowledged write is there: its seq, or, for a local-only grading whose teacher judgment
    was added later (acknowledged or not), a row of the same item holding it under a larger seq."""
    by_key = collections.defaultdict(list)
    for row in rows.values():
        by_key[row["key"]].append(row)
    for seq, key, teacher in acks:
        row = rows.get(seq)
        if row is None:
            rewritten = [r for r in by_key[key] if r["teacher_model"] is not None and r["seq"] > seq]
            assert not teacher and rewritten, f"acknowledged seq {seq} lost"
            continue
        assert row["key"] == key and (not teacher or row["teacher_model"] == "gpt-4"), (seq, key, dict(row))


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
    them grade the same items (same keys), so their puts contend on the same index pages."""
    path, n = tmp_path / "shared.db", 60
    procs = [_writer(path, prefix, n) for prefix in ("replica0", "replica1", "replica1")]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outs]
    acks = [a for out, _ in outs for a in _acks(out)]
    rows = _check_rows(path)
    _check_acks(rows, acks)
    # every put is a grading of its own (two writers grade the same items: two rows each)
    assert len(rows) == 3 * n and len({r["key"] for r in rows.values()}) == 2 * n


# --- corruption, privacy, copies and backups (issue 18) ----------------------------------------------

def _files(path: Path) -> dict[str, bytes]:
    """The store's files (main, -wal, -shm) that exist, with their bytes."""
    return {p.name: p.read_bytes() for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()}


def test_a_corrupt_store_is_refused_in_one_line(tmp_path):
    """The issue's store: 400 rows, 48 random pages overwritten mid-file. It opened, and gradings then
    failed in get/put; now quick_check refuses it at open, for serving and for reading alike."""
    path = tmp_path / "corrupt.sqlite"
    fill_store(path, 400)
    corrupt_pages(path, 48)
    for kw in ({}, {"readonly": True}):
        with pytest.raises(StoreError) as e:
            JudgmentStore(path, **kw)
        msg = str(e.value)
        assert isinstance(e.value, store_mod.StoreCorrupt) and "\n" not in msg
        assert str(path) in msg and "quick_check" in msg and "backup" in msg


def test_store_files_are_private(tmp_path):
    """Every request text and judgment is in these files: 0600 whatever the umask allows."""
    old = os.umask(0o022)
    try:
        with JudgmentStore(tmp_path / "s.db") as s:
            s.put(Record(request(), local()))
            modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    finally:
        os.umask(old)
    assert modes == {"s.db": 0o600, "s.db-wal": 0o600, "s.db-shm": 0o600}


def test_a_version_1_store_is_read_as_is_and_migrated_when_written(tmp_path):
    """Version 1 kept one row per item (`key` UNIQUE); opening it for writing rebuilds the table."""
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute(store_mod._JUDGMENTS.replace("key TEXT NOT NULL,", "key TEXT NOT NULL UNIQUE,"))
    conn.execute("INSERT INTO meta VALUES ('store_id', 'v1store')")
    conn.execute(store_mod._INSERT, store_mod._row_values(request().key(), Record(request(), local(), teacher=TEACHER),
                                                           "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:01+00:00"))
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    with JudgmentStore(path, readonly=True) as s:
        assert s.id == "v1store" and [r.record.teacher for r in s.iter_teacher()] == [TEACHER]
    with JudgmentStore(path) as s:
        assert s._user_version() == SCHEMA_VERSION and s.id == "v1store"
        assert s.put(Record(request(), local(2))) == 2 and s.count() == 2  # the same item again: a new row


def test_a_copy_without_its_wal_is_named(tmp_path):
    """`cp` of a live store's main file alone: the rows still in its -wal are missing from the copy. It
    used to open silently short of rows (or as "not a judgment store"); now it is named at open."""
    path, copy = tmp_path / "live.db", tmp_path / "copy.db"
    with JudgmentStore(path) as live:
        for i in range(50):
            live.put(Record(request(instruction=f"q{i}"), local()))
        assert Path(f"{path}-wal").stat().st_size > 0  # the rows are in the WAL, not yet in the main file
        shutil.copy(path, copy)
        for kw in ({}, {"readonly": True}):
            with pytest.raises(store_mod.MissingWal, match=r"copy\.db has no copy\.db-wal.*cascade store backup"):
                JudgmentStore(copy, **kw)
    assert not Path(f"{copy}-wal").exists() and not Path(f"{copy}-shm").exists()
    # A store made by plain sqlite3 (or an older judgeforge) whose schema is still in its WAL:
    fresh, fresh_copy = tmp_path / "fresh.db", tmp_path / "fresh-copy.db"
    raw = sqlite3.connect(fresh, isolation_level=None)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
    shutil.copy(fresh, fresh_copy)
    raw.close()
    with pytest.raises(store_mod.MissingWal, match="no tables"):
        JudgmentStore(fresh_copy, readonly=True)


def test_closed_and_killed_stores_are_not_taken_for_copies(tmp_path):
    """A writer killed with -9 leaves its session row in the main file; the next writer to close last
    (the WAL deleted: nobody else has the store open) clears it, so a later read is not refused."""
    path = tmp_path / "crash.db"
    other = JudgmentStore(path)
    proc = _writer(path, "killed", 0)
    proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert Path(f"{path}-wal").exists()
    other.put(Record(request(), local()))
    other.close()  # the last one out
    assert not Path(f"{path}-wal").exists()
    with JudgmentStore(path, readonly=True) as s:
        assert s.count() >= 2
    assert not Path(f"{path}-wal").exists()  # and reading it created nothing


def test_a_reader_notices_a_writer_that_opened_while_it_read(tmp_path):
    """A store without a -wal is read as immutable (mode=ro would leave an empty -wal and -shm beside
    it), which takes no locks: a writer opening meanwhile checkpoints into the main file, and that is
    told before the rows read are trusted."""
    path = tmp_path / "s.db"
    with JudgmentStore(path) as s:
        s.put(Record(request(), local()))
    reader = JudgmentStore(path, readonly=True)
    assert reader.count() == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]
    reader.check_unchanged()
    time.sleep(0.05)  # file times tick every few ms
    with JudgmentStore(path) as writer:
        writer.put(Record(request(instruction="new"), local()))
    with pytest.raises(StoreError, match="was written while it was read"):
        reader.check_unchanged()
    reader.close()


def test_backup_copies_a_live_store_with_its_wal(tmp_path, caplog):
    from judgeforge import cli

    src, dst = tmp_path / "live.db", tmp_path / "backups" / "copy.db"
    dst.parent.mkdir()
    with JudgmentStore(src) as live:
        seqs = [live.put(Record(request(instruction=f"q{i}"), local(), teacher=TEACHER)) for i in range(30)]
        before = {name: data for name, data in _files(src).items() if not name.endswith("-shm")}
        assert cli.main(["cascade", "store", "backup", str(src), str(dst)]) == 0
        assert cli.main(["cascade", "store", "backup", str(src), str(dst)]) == 2  # never overwrites
        assert "exists" in caplog.text
        assert {n: d for n, d in _files(src).items() if not n.endswith("-shm")} == before  # source untouched
        ident = live.id
    assert dst.stat().st_mode & 0o777 == 0o600 and sorted(p.name for p in dst.parent.iterdir()) == ["copy.db"]
    with JudgmentStore(dst, readonly=True) as b:  # no -wal beside it, and not taken for a WAL-less copy
        assert b.id == ident and [r.seq for r in b.iter_teacher()] == seqs
    assert not Path(f"{dst}-wal").exists()


def test_backup_makes_a_usable_store_of_a_copy_without_its_wal(tmp_path):
    path, copy, fixed = tmp_path / "live.db", tmp_path / "copy.db", tmp_path / "fixed.db"
    with JudgmentStore(path) as live:
        live.put(Record(request(), local()))
        shutil.copy(path, copy)
    with pytest.raises(store_mod.MissingWal):
        store_mod.backup(copy, fixed)
    assert not fixed.exists()
    store_mod.backup(copy, fixed, accept_missing_wal=True)  # what the copy holds, knowingly
    with JudgmentStore(fixed) as s:
        assert s.count() <= 1


def test_a_store_reached_through_a_symlink_is_read_with_its_wal(tmp_path):
    """SQLite keeps the -wal beside the real file: looking beside the link would read a live store as if
    it had none (its newest rows ignored, its writer's session taken for a WAL-less copy)."""
    link = tmp_path / "link.db"
    link.symlink_to(tmp_path / "s.db")
    with JudgmentStore(tmp_path / "s.db") as live:
        live.put(Record(request(), local(), teacher=TEACHER))
        with JudgmentStore(link, readonly=True) as reader:
            assert reader.count() == 1
        with JudgmentStore(link) as second_writer:
            assert second_writer.count() == 1
