"""Score coercion, verdicts stated in feedback, feedback cleaning."""

from __future__ import annotations

import json

import pytest

from judgeforge.data.validate import Reject, check_feedback_score, clean_feedback, coerce_score, stated_scores


@pytest.mark.parametrize("value,expected", [(4, 4), ("4", 4), (4.0, 4), (" 5 ", 5), (1, 1)])
def test_coerce_accepts_integers(value, expected):
    assert coerce_score(value, 1, 5) == expected


@pytest.mark.parametrize("value,reason", [
    (8.5, "non_integer_score"), ("9.5", "non_integer_score"), ("four", "non_integer_score"),
    (float("nan"), "non_integer_score"), ([4], "non_integer_score"), (None, "missing_field"),
    (True, "missing_field"), (0, "score_out_of_scale"), (6, "score_out_of_scale"), (-1, "score_out_of_scale"),
])
def test_coerce_rejects_with_reason(value, reason):
    with pytest.raises(Reject) as e:
        coerce_score(value, 1, 5)
    assert e.value.reason == reason


@pytest.mark.parametrize("text,stated", [
    ("Nice. [RESULT] 4", [4.0]),
    ("Weak. [RESULT] Score: 1.", [1.0]),
    ("Rating: [[8]]", [8.0]),
    ("So the overall score is 3.", [3.0]),
    ("I would give it a 2.", [2.0]),
    ("The response deserves a score of 4/5 overall.", [4.0]),
    ("Decent work. Score: 4", [4.0]),
    ("rated 7 out of 10", [7.0]),
    # The scans' cheap prefilters must not hide these (accurate/generate hold "rate", "4." ends a closing score).
    ("Accurate and well argued, so I rate this 3", [3.0]),
    ("It is accurate. We would rate it a 5.", [5.0]),
    ("Clear and accurate. Score: 4.  \n", [4.0]),
])
def test_stated_scores_finds_verdicts(text, stated):
    assert stated_scores(text) == stated


@pytest.mark.parametrize("text", [
    # Real GPT-4 phrasings that cite rubric levels without stating a verdict (must not trigger).
    "Therefore, it does not fully align with the criteria for a score of 5.",
    "A score of 5 could have been achieved if the assistant had explained it.",
    "According to the rubric, this response would be a Score 2, as it does provide an example",
    'the equation "(2b/5) = (20a + 8)/5" simplifies to "4b = 4a + 8/5"',
    "It lists 3 reasons and 5 examples.",
    "An accurate 5 step plan; the generate 4 call is right.",
    "The score: 4 points are missing.",
])
def test_stated_scores_ignores_rubric_citations(text):
    assert stated_scores(text) == []


def test_mismatch_only_when_the_stated_score_differs():
    check_feedback_score("Fine. [RESULT] 3", 3)
    with pytest.raises(Reject) as e:
        check_feedback_score("Fine. [RESULT] 4", 3)
    assert e.value.reason == "score_feedback_mismatch" and "4" in e.value.detail


def test_real_feedback_is_not_over_flagged(vendor):
    """On the 1,920 real GPT-4 feedbacks of MT-Bench + Vicuna and the 800 FastChat judgments, the
    check flags nothing (their stated verdicts all agree with the recorded scores)."""
    flagged = stated = 0
    for name in ("mt_bench_eval.json", "vicuna_eval.json"):
        for r in json.loads((vendor / "prometheus-eval" / name).read_text()):
            for score, fb in zip(r["gpt4_score"], r["gpt4_feedback"]):
                stated += bool(stated_scores(fb))
                flagged += any(s != score for s in stated_scores(fb))
    assert flagged == 0 and stated == 3
    for line in (vendor / "fastchat-mt-bench/gpt-4_single.jsonl").read_text().splitlines():
        r = json.loads(line)
        found = stated_scores(r["judgment"])
        assert all(s == r["score"] for s in found) and (found or r["score"] == -1)


@pytest.mark.parametrize("text,clean", [
    ("Feedback: Good. [RESULT] 4", "Good."),
    ("Good. ###Score: 4", "Good."),
    ('Fine, as follows: "Rating: [[8]]".', "Fine, as follows:"),
    ("It is the overall score: 4", "It is the overall score: 4"),
    ("No verdict here.", "No verdict here."),
    ("Good. Rating: 5 .\n", "Good."),
    ("Good. Rating: 5 stars", "Good. Rating: 5 stars"),
])
def test_clean_feedback(text, clean):
    assert clean_feedback(text) == clean
