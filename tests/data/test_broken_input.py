"""A file of broken lines never crashes the build, and every line is accounted for with its reason."""

from __future__ import annotations

import json

from judgeforge.judge.prompts import Rubric, absolute_prompt

from .conftest import build, read_lines

COLUMNS = {"instruction": "q", "response": "a", "score": "s", "feedback": "f", "criteria": "c",
           "response_model": "m"}


def rec(**kw) -> str:
    base = {"q": "Name a prime number.", "a": "7 is prime.", "s": 4, "f": "Correct and brief.",
            "c": "Is the answer correct?", "m": "model-a"}
    base.update(kw)
    return json.dumps({k: v for k, v in base.items() if v is not ...})


# (line text, expected reason or None for kept). Line numbers are 1-based positions in the file.
LINES = [
    (rec(), None),
    ('{"q": "unterminated', "unreadable_line"),
    ("[1, 2]", "unreadable_line"),
    (rec(f=...), "missing_field"),
    (rec(s=7), "score_out_of_scale"),
    (rec(s=0), "score_out_of_scale"),
    (rec(s=3.5), "non_integer_score"),
    (rec(s="four"), "non_integer_score"),
    (rec(f="Good answer. [RESULT] 4", s=2), "score_feedback_mismatch"),
    (rec(f="Mostly right. So the overall score is 5.", s=3), "score_feedback_mismatch"),
    (rec(f="Decent: I would rate it 2/5.", s=4), "score_feedback_mismatch"),
    (rec(), "duplicate"),
    (rec(a="   "), "empty_response"),
    (rec(f=""), "empty_feedback"),
    (rec(f="[RESULT] 4"), "empty_feedback"),
    (rec(f="Correct, concise. [RESULT] 4", q="Name an even prime."), None),
    ("", None),  # a blank line is not a record
    (rec()[:25], "unreadable_line"),
    (rec(c=..., q="Another question?"), "missing_field"),
    (rec(s=None, q="Q3?"), "missing_field"),
    (rec(s=True, q="Q4?"), "missing_field"),
    (rec(s="5", q="Q5?", f="It falls short of a score of 5 but is good. Score 3 describes it partly."), None),
    (rec(a=None, q="Q6?"), "missing_field"),
    ("null", "unreadable_line"),
]


def test_every_broken_line_is_accounted_for(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(text for text, _ in LINES) + "\n", encoding="utf-8")
    m = build(None, tmp_path / "out", sources=[{"path": str(path), "format": "jsonl", "columns": COLUMNS,
                                                "name": "broken"}])
    records = [(n, reason) for n, (text, reason) in enumerate(LINES, 1) if text]
    c = m["counts"]
    assert c["read"] == len(records) == c["kept"] + c["rejected"]
    assert c["kept"] == sum(reason is None for _, reason in records) == 3
    rejects = read_lines(tmp_path / "out" / "rejects.jsonl")
    assert {r["line"]: r["reason"] for r in rejects} == {n: reason for n, reason in records if reason}
    lines = path.read_text(encoding="utf-8").split("\n")
    for r in rejects:
        assert r["original"] == lines[r["line"] - 1] and r["source"] == "broken"
    kept = read_lines(tmp_path / "out" / "train.jsonl")
    assert [k["score"] for k in kept] == [4, 4, 5]
    assert kept[1]["feedback"] == "Correct, concise."  # its own verdict stripped, the target adds it back
    assert kept[1]["messages"][2]["content"] == "Correct, concise. [RESULT] 4"
    assert kept[0]["messages"][1]["content"] == absolute_prompt(
        "Name a prime number.", "7 is prime.", Rubric("Is the answer correct?"))


def test_prometheus_samples_are_rejected_one_by_one(tmp_path, vendor):
    good = json.loads((vendor / "prometheus-eval/mt_bench_eval.json").read_text())[0]
    lines = [
        dict(good, gpt4_score=[3, 9, "x"]),  # sample 0 kept, 1 out of scale, 2 not a number
        dict(good, instruction="no sections here"),  # 3 samples, unparseable prompt
        dict(good, idx=-1, gpt4_feedback=good["gpt4_feedback"][:2]),  # third feedback missing
        {"idx": 5, "gpt4_score": [1]},  # no prompt at all
    ]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    m = build(None, tmp_path / "out", sources=[{"path": str(path), "format": "prometheus"}])
    c = m["counts"]
    assert c["read"] == 3 + 3 + 3 + 1 == c["kept"] + c["rejected"]
    assert c["by_reason"] == {"missing_field": 2, "unparseable_prompt": 3, "non_integer_score": 1,
                              "score_out_of_scale": 1, "duplicate": 1}  # line 3's sample 0 repeats line 1's
    assert c["kept"] == 2  # line 1 sample 0, line 3 sample 1 (line 1's sample 1 was rejected)
    rejects = read_lines(tmp_path / "out" / "rejects.jsonl")
    assert {(r["line"], r["sample_idx"]): r["reason"] for r in rejects} == {
        (1, 1): "score_out_of_scale", (1, 2): "non_integer_score", (2, 0): "unparseable_prompt",
        (2, 1): "unparseable_prompt", (2, 2): "unparseable_prompt", (3, 0): "duplicate",
        (3, 2): "missing_field", (4, 0): "missing_field"}


def test_hhh_file_is_not_a_training_source(tmp_path):
    """HHH-Alignment holds human preferences, no judgments: every record is read and rejected, none lost
    (written only with allow_empty: an empty build is an error otherwise, see test_hardening.py)."""
    m = build(None, tmp_path / "o", "allow_empty=true",
              sources=[{"path": "data/vendor/prometheus-eval/hhh_alignment_eval.json", "format": "prometheus",
                        "name": "hhh"}])
    assert m["counts"]["read"] == 221 == m["counts"]["rejected"]
    assert m["counts"]["by_reason"] == {"missing_field": 221}
    assert len(read_lines(tmp_path / "o" / "rejects.jsonl")) == 221
