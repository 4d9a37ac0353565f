"""The `store` reader: a serving replica's judgment store (data/store.py) -> training records of the
teacher's judgments, with reasons for rejects, counts, and incremental builds (`since`)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from judgeforge.data.store import JudgmentStore, LocalResult, Record, Request, TeacherResult
from testing.records import corrupt_pages, fill_store
from judgeforge.config import ConfigError
from judgeforge.data.build import main

from .conftest import build, read_lines

RUBRIC = {"criteria": "Is the answer correct?", "score1_description": "wrong", "score5_description": "right"}


def put(store: JudgmentStore, i: int, score=4, feedback: str | None = "Correct and well explained.", *,
        teacher: bool = True, scale=(1, 5), mode: str = "absolute") -> int:
    responses = (f"answer {i}",) if mode == "absolute" else (f"answer {i}", f"other {i}")
    req = Request(mode, f"{store.path.stem} question {i}?", responses, RUBRIC if mode == "absolute" else "correct",
                  f"reference {i}", scale if mode == "absolute" else None)
    t = TeacherResult("gpt-4-0613", feedback, score, 2.0) if teacher else None
    return store.put(Record(req, LocalResult("smollm2", 3, 0.4), escalated=teacher, teacher=t, replica="r1",
                            meta={"response_model": "model-x"}))


def store_build(out: Path, *paths: Path, **extra) -> dict:
    return build(None, out, **{"sources": [{"format": "store", "path": str(p)} for p in paths], **extra})


@pytest.fixture
def store_path(tmp_path) -> Path:
    """Six good teacher judgments, two local-only rows, five teacher rows to reject."""
    path = tmp_path / "replica1.db"
    with JudgmentStore(path) as s:
        for i in range(6):
            put(s, i, score=i % 5 + 1, scale=(1, 10) if i == 5 else (1, 5))
        put(s, 10, teacher=False)
        put(s, 11, teacher=False)
        put(s, 20, score=None)  # the teacher's answer had no score
        put(s, 21, score=7)
        put(s, 22, feedback="  ")
        put(s, 23, score=2, feedback="Mostly right, small slip. [RESULT] 4")
        put(s, 24, score="A", mode="relative")
    return path


def test_one_record_per_teacher_judgment_and_a_reason_per_reject(tmp_path, store_path):
    m = store_build(tmp_path / "b1", store_path)
    c = m["counts"]
    assert (c["read"], c["kept"], c["rejected"], c["train"]) == (11, 6, 5, 6) and m["counts"]["adds_up"]
    assert c["by_reason"] == {"missing_field": 1, "score_out_of_scale": 1, "empty_feedback": 1,
                              "score_feedback_mismatch": 1, "unsupported_mode": 1}
    records = read_lines(tmp_path / "b1" / "train.jsonl")
    assert sorted(r["score"] for r in records) == [1, 1, 2, 3, 4, 5]
    assert {r["judge_model"] for r in records} == {"gpt-4-0613"}
    assert {r["response_model"] for r in records} == {"model-x"}
    assert [r["scale"] for r in records if r["instruction"].endswith("question 5?")] == [[1, 10]]
    assert records[0]["messages"][-1]["content"].endswith("[RESULT] 1")
    rejects = read_lines(tmp_path / "b1" / "rejects.jsonl")
    for r in rejects:  # each quotes its whole row, and `line` is the row's seq
        assert json.loads(r["original"])["seq"] == r["line"] and r["reason"]
    [inp] = m["inputs"]
    with JudgmentStore(store_path) as s:
        assert inp["store"] == {"id": s.id, "since_seq": 0, "max_seq": s.max_seq()}


def test_a_build_since_a_previous_one_reads_only_the_new_judgments(tmp_path, store_path):
    first = store_build(tmp_path / "b1", store_path)
    with JudgmentStore(store_path) as s:
        put(s, 10, score=5)  # the teacher's judgment of an item stored locally before the first build
        put(s, 30, score=3)
        put(s, 31, score=0)
        put(s, 32, teacher=False)
    second = store_build(tmp_path / "b2", store_path, since=str(tmp_path / "b1" / "manifest.json"))
    c = second["counts"]
    assert (c["read"], c["kept"], c["rejected"], c["by_reason"]) == (3, 2, 1, {"score_out_of_scale": 1})
    assert sorted(r["instruction"] for r in read_lines(tmp_path / "b2" / "train.jsonl")) == [
        "replica1 question 10?", "replica1 question 30?"]
    assert second["inputs"][0]["store"]["since_seq"] == first["inputs"][0]["store"]["max_seq"]
    assert second["config"]["since"].endswith("manifest.json")
    # Nothing new since the second build: an empty build, refused unless asked for.
    with pytest.raises(ConfigError, match="kept 0 of 0"):
        store_build(tmp_path / "b3", store_path, since=str(tmp_path / "b2"))
    third = store_build(tmp_path / "b3", store_path, since=str(tmp_path / "b2"), allow_empty=True)
    assert third["counts"]["read"] == 0


def test_a_fleet_of_stores_on_the_command_line(tmp_path, store_path, capsys):
    other = tmp_path / "fleet" / "replica1.db"  # same file name, another replica
    with JudgmentStore(other) as s:
        for i in range(3):
            put(s, 100 + i)
    out = tmp_path / "fleet-build"
    assert main(["--input", f"store:{store_path}", "--input", f"store:{other}", "--out", str(out),
                 "progress=false"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    per = m["counts"]["per_source"]
    assert [v["kept"] for v in per.values()] == [6, 3] and m["counts"]["read"] == 14
    assert len({inp["store"]["id"] for inp in m["inputs"]}) == 2
    with JudgmentStore(other) as s:
        put(s, 103)
    again = tmp_path / "fleet-build-2"
    assert main(["--input", f"store:{store_path}", "--input", f"store:{other}", "--out", str(again),
                 "progress=false", "allow_empty=true", f"since={out}"]) == 0
    assert json.loads((again / "manifest.json").read_text())["counts"]["read"] == 1


def test_missing_store_and_missing_since_are_named(tmp_path, store_path):
    with pytest.raises(ConfigError, match="judgment store not found"):
        store_build(tmp_path / "x", tmp_path / "nope.db")
    with pytest.raises(ConfigError, match="since: no build manifest"):
        store_build(tmp_path / "x", store_path, since=str(tmp_path / "nowhere"))
    (tmp_path / "text.db").write_text("hello")
    with pytest.raises(ConfigError, match="not a usable judgment store"):
        store_build(tmp_path / "x", tmp_path / "text.db")


def test_since_must_be_a_build_manifest(tmp_path, store_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"inputs": [{"store": {"id": "x"}}]}')
    with pytest.raises(ConfigError, match="not a build manifest"):
        store_build(tmp_path / "x", store_path, since=str(bad))
    plain = tmp_path / "plain.json"
    plain.write_text('{"inputs": [{"name": "jsonl:a", "sha256": null}]}')
    assert store_build(tmp_path / "y", store_path, since=str(plain))["counts"]["read"] == 11  # read in full


# --- issue 18: corrupt stores, read-only reading, copies, re-grades ------------------------------------

WRITER = Path(__file__).with_name("store_writer.py")


def cli_build(tmp_path: Path, *paths: Path) -> int:
    from judgeforge import cli

    args = [a for p in paths for a in ("--input", f"store:{p}")]
    return cli.main(["data", "build", *args, "--out", str(tmp_path / "out"), "progress=false", "allow_empty=true"])


def one_error_line(err: str, needle: str) -> str:
    """The one stderr line naming `needle`, with no traceback anywhere."""
    lines = [line for line in err.splitlines() if needle in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()}


def test_a_corrupt_store_is_one_line_and_exit_2(tmp_path, capsys):
    """The issue's store (400 rows, 48 random pages overwritten mid-file) exited 1 with a traceback."""
    path = tmp_path / "corrupt.sqlite"
    fill_store(path, 400)
    corrupt_pages(path, 48)
    assert cli_build(tmp_path, path) == 2
    assert "is corrupt" in one_error_line(capsys.readouterr().err, str(path))


def test_a_row_that_does_not_read_back_is_one_line_and_exit_2(tmp_path, capsys):
    """Damage that leaves the pages whole (quick_check passes): found mid-read, reported the same way."""
    path = tmp_path / "damaged.sqlite"
    fill_store(path, 50)
    data = path.read_bytes()
    row = b'{"instruction": "[item 30]'
    assert data.count(row) == 1
    path.write_bytes(data.replace(row, b'{"instructioN": "[item 30]'))  # valid JSON, no instruction
    assert cli_build(tmp_path, path) == 2
    assert "seq" in one_error_line(capsys.readouterr().err, str(path))


def test_a_zero_byte_input_is_refused_and_left_as_it_was(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with pytest.raises(ConfigError, match="empty.*not a judgment store"):
        store_build(tmp_path / "x", empty)
    assert empty.stat().st_size == 0 and sorted(p.name for p in tmp_path.glob("empty*")) == ["empty.sqlite"]


def test_reading_a_killed_writers_store_changes_none_of_its_files(tmp_path):
    """A store whose writer was killed: its newest rows are in the -wal. Reading it used to checkpoint
    them into the main file and delete -wal and -shm."""
    path = tmp_path / "killed.sqlite"
    proc = subprocess.Popen([sys.executable, str(WRITER), str(path), "r", "0"], stdout=subprocess.PIPE, text=True)
    for _ in range(30):
        proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    before = files(path)
    assert set(before) == {"killed.sqlite", "killed.sqlite-wal", "killed.sqlite-shm"}
    m = store_build(tmp_path / "b", path, allow_empty=True)
    assert m["counts"]["read"] >= 10  # every third put holds a teacher judgment
    after = files(path)
    assert set(after) == set(before)
    assert {n: after[n] for n in ("killed.sqlite", "killed.sqlite-wal")} == {
        n: before[n] for n in ("killed.sqlite", "killed.sqlite-wal")}


def test_reading_a_live_store_reads_its_wal_and_changes_nothing(tmp_path):
    path = tmp_path / "live.sqlite"
    with JudgmentStore(path) as live:
        for i in range(5):
            put(live, i)
        before = files(path)
        assert len(before["live.sqlite-wal"]) > 0
        assert store_build(tmp_path / "b", path)["counts"]["read"] == 5
        after = files(path)
    assert {n: after[n] for n in ("live.sqlite", "live.sqlite-wal")} == {
        n: before[n] for n in ("live.sqlite", "live.sqlite-wal")}


def test_reading_a_closed_store_creates_no_files(tmp_path, store_path):
    before = files(store_path)
    assert list(before) == ["replica1.db"]  # cleanly closed: its WAL was checkpointed and removed
    store_build(tmp_path / "b1", store_path)
    assert files(store_path) == before  # not even an empty -wal/-shm beside it


def test_a_copy_without_its_wal_is_named_not_read_short(tmp_path, capsys):
    path, copy = tmp_path / "live.sqlite", tmp_path / "copy.sqlite"
    with JudgmentStore(path) as live:
        for i in range(20):
            put(live, i)
        shutil.copy(path, copy)  # the main file alone: the 20 rows are in live.sqlite-wal
    assert cli_build(tmp_path, copy) == 2
    assert "has no copy.sqlite-wal" in one_error_line(capsys.readouterr().err, str(copy))


def test_every_teacher_judgment_of_an_item_is_a_record(tmp_path):
    """An item graded again (cache off, or the teacher failed before) is a row of its own: each teacher
    judgment is read once; an identical one is a duplicate, as in any other source."""
    path = tmp_path / "regraded.sqlite"
    with JudgmentStore(path) as s:
        put(s, 1, score=4, feedback="Right and well explained.")
        put(s, 1, score=3, feedback="Right, but terse.")
        put(s, 1, score=3, feedback="Right, but terse.")
        put(s, 2, teacher=False)
        put(s, 2, score=5)
    c = store_build(tmp_path / "b", path)["counts"]
    assert (c["read"], c["kept"], c["rejected"], c["by_reason"]) == (4, 3, 1, {"duplicate": 1})
