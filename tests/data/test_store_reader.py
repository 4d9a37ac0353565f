"""The `store` reader: a serving replica's judgment store (cascade/store.py) -> training records of the
teacher's judgments, with reasons for rejects, counts, and incremental builds (`since`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judgeforge.cascade.store import JudgmentStore, LocalResult, Record, Request, TeacherResult
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
