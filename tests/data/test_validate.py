"""Score coercion, verdicts stated in feedback, feedback cleaning."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

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


# --- one rule for a valid judgment (issue 18, finding 9) ------------------------------------------
# The server's teacher acceptance (a strict read in the judge core) and this builder check are one
# function, judge.parsing.feedback_mismatch: a teacher judgment is served iff a build keeps it.

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_PIECES = ("The response is accurate.", "[RESULT] {k}", "So the overall score is {k}.", "I would give it a {k}.",
           "It deserves a score of {k}/5 overall.", "It falls short of a score of {k}.", "Score {k} describes it.",
           "Rating: [[{k}]]", "Steps 1 and {k} are clear.")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_PIECES), st.integers(1, 5)), max_size=4), st.integers(1, 5))
def test_a_served_teacher_judgment_is_one_a_build_keeps(pieces, score):
    from judgeforge.data.parsers import make_context, make_judgment
    from judgeforge.judge.prompts import rubric_preset
    from judgeforge.judge.engines import Sample
    from judgeforge.judge.items import GradeItem
    from judgeforge.judge.judge import read

    text = " ".join(["Clear and well organised."] + [p.format(k=k) for p, k in pieces]) + f" [RESULT] {score}"
    served = read(Sample(text=text, finish_reason="stop"), GradeItem("i", "r", rubric_preset("helpfulness")),
                  strict=True).written
    try:
        make_judgment(make_context("store", "s"), instruction="i", response="r",
                      rubric=rubric_preset("helpfulness"), feedback=served.feedback, score=score)
        kept = True
    except Reject as e:
        assert e.reason == "score_feedback_mismatch", e
        kept = False
    assert served.ok == kept, (text, served.reason)


def test_the_builder_check_is_the_judge_cores_rule():
    from judgeforge.judge import parsing

    assert parsing.feedback_mismatch("Fine. [RESULT] 3", 3) is None
    assert parsing.feedback_mismatch("Quoting [RESULT] 1 here.", 5) == "feedback states 1, score is 5"
    with pytest.raises(Reject, match="feedback states 1, score is 5"):
        check_feedback_score("Quoting [RESULT] 1 here.", 5)
    assert stated_scores is parsing.stated_scores


def test_rescale_score_is_linear_rounded_half_up():
    from judgeforge.data.validate import rescale_score

    assert [rescale_score(s, (1, 10), (1, 5)) for s in range(1, 11)] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert [rescale_score(s, (1, 5), (1, 10)) for s in range(1, 6)] == [1, 3, 6, 8, 10]  # 3.25, 5.5, 7.75
    assert rescale_score(0, (0, 2), (1, 5)) == 1 and rescale_score(1, (0, 2), (1, 5)) == 3


@settings(max_examples=200, deadline=None)
@given(st.integers(-5, 5), st.integers(1, 12), st.integers(-5, 5), st.integers(1, 12), st.data())
def test_rescale_score_properties(lo, span, dlo, dspan, data):
    from judgeforge.data.validate import rescale_score

    src, dst = (lo, lo + span), (dlo, dlo + dspan)
    s = data.draw(st.integers(*src))
    got = rescale_score(s, src, dst)
    assert dst[0] <= got <= dst[1]
    assert rescale_score(src[0], src, dst) == dst[0] and rescale_score(src[1], src, dst) == dst[1]
    if s < src[1]:
        assert rescale_score(s + 1, src, dst) >= got  # order is kept
    exact = dst[0] + (s - src[0]) * dspan / span
    assert abs(got - exact) <= 0.5 + 1e-9
