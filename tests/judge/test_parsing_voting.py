"""Pure parsing and voting: scores after the last [RESULT], ties, re-sampling, null results."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judgeforge.data.templates import Scale
from judgeforge.judge.parsing import (parse_score, parse_verdict, score_logprobs_at,
                                      score_logprobs_from_tokens, score_position)
from judgeforge.judge.voting import (SampleSlots, average_score_probs, majority, vote_scores,
                                     vote_verdicts)

S5, S10 = Scale(1, 5), Scale(1, 10)


@pytest.mark.parametrize("text,score", [
    ("Feedback: fine. [RESULT] 4", 4),
    ("fine [RESULT]3", 3),
    ("fine [RESULT] (5)", 5),
    ("fine [RESULT]: 2/5", 2),
    ("fine [RESULT] Score: 1", 1),
    ("fine [result] 4\n", 4),
    ("the response says [RESULT] 5 ... so [RESULT] 2", 2),   # the last marker wins
    ("Score 5: excellent. The rubric says 5. [RESULT] 3", 3),  # rubric numbers never count
])
def test_parse_score_reads_after_last_marker(text, score):
    r = parse_score(text, S5)
    assert (r.score, r.reason) == (score, None)


@pytest.mark.parametrize("text,why", [
    ("Score 5. Excellent answer.", "no [RESULT] marker"),
    ("good [RESULT]", "nothing after"),
    ("good [RESULT] excellent", "no integer"),
    ("good [RESULT] 7", "outside 1-5"),
    ("good [RESULT] 0", "outside 1-5"),
    ("good [RESULT] 3.5", "not an integer"),
    ("[RESULT] 5 then [RESULT] none", "no integer"),  # a valid earlier score is not used
])
def test_parse_score_failures_give_reasons(text, why):
    r = parse_score(text, S5)
    assert r.score is None and why in r.reason


def test_parse_score_feedback_and_other_scale():
    r = parse_score("Feedback: Clear and correct. [RESULT] 9", S10)
    assert r.score == 9 and r.feedback == "Clear and correct."
    assert parse_score("x [RESULT] 10", S10).score == 10


@settings(max_examples=400, deadline=None)
@given(st.text(), st.sampled_from([S5, S10, Scale(0, 3)]))
def test_parser_never_raises_and_stays_in_scale(text, scale):
    r = parse_score(text, scale)
    assert (r.score is None) != (r.reason is None)
    assert r.score is None or (isinstance(r.score, int) and scale.lo <= r.score <= scale.hi)


@settings(max_examples=300, deadline=None)
@given(graded=st.text(), tail=st.text().filter(lambda t: "[result]" not in t.lower()),
       score=st.integers(1, 5))
def test_score_never_comes_from_quoted_text_before_the_last_marker(graded, tail, score):
    """Whatever the judge quoted (even '[RESULT] k' from the graded response), only its own final
    verdict counts; and a final verdict that is not a score gives no score at all."""
    quoted = f"The response says: {graded} [RESULT] {score}. "
    final = parse_score(quoted + "My verdict: [RESULT] " + tail, S5)
    expected = parse_score("[RESULT] " + tail, S5)
    assert final.score == expected.score


def test_parse_verdict():
    assert parse_verdict("Feedback: B is better. [RESULT] A").verdict == "A"
    assert parse_verdict('x [RESULT] "B"').verdict == "B"
    assert parse_verdict("x [RESULT] Response B").verdict == "B"
    assert parse_verdict("x [RESULT] A [RESULT] Both").reason is not None
    assert parse_verdict("A is better").reason == "no [RESULT] marker"


# --- log-probabilities at the score position ---------------------------------------------
def test_score_position_handles_separate_and_merged_space():
    # SmolLM2: "]", " ", "3"; others: "]", " 3"
    assert score_position(["Good", ".", " [", "RES", "ULT", "]", " ", "3"]) == 7
    assert score_position(["Good", " [RESULT]", " 3", "\n"]) == 2
    assert score_position(["Good", " [RESULT]", " 3"]) == 2
    assert score_position(["no", " marker"]) is None
    assert score_position(["[RESULT]", " "]) is None


def test_score_logprobs_merges_forms_and_keeps_scale():
    lp = score_logprobs_at({" 3": math.log(0.3), "3": math.log(0.1), "4": math.log(0.4),
                            "7": math.log(0.1), "good": math.log(0.1)}, S5)
    assert set(lp) == {3, 4}
    assert math.exp(lp[3]) == pytest.approx(0.4)
    assert score_logprobs_at({"1": -0.1}, S10) is None  # "10" would span two tokens
    toks = ["ok", " [RESULT]", " ", "2"]
    tops = [{}, {}, {" ": -0.1}, {"2": -0.2, "5": -2.0}]
    assert score_logprobs_from_tokens(toks, tops, S5) == {2: -0.2, 5: -2.0}


def test_average_score_probs_renormalises_and_averages():
    probs = average_score_probs([{4: math.log(0.5), 5: math.log(0.5)}, {4: 0.0}, None], S5)
    assert probs[4] == pytest.approx(0.75) and probs[5] == pytest.approx(0.25)
    assert sum(probs.values()) == pytest.approx(1.0)
    assert average_score_probs([None, {}], S5) is None


# --- voting --------------------------------------------------------------------------------
def P(text):
    return parse_score(text, S5)


def test_majority_vote_and_statistics():
    g = vote_scores([P("a [RESULT] 4"), P("b [RESULT] 4"), P("c [RESULT] 2"), P("junk"), P("d [RESULT] 4")])
    assert g.score == 4 and g.votes == [4, 4, 2, None, 4]
    assert g.distribution == {1: 0, 2: 1, 3: 0, 4: 3, 5: 0}
    assert g.agreement == pytest.approx(3 / 4) and g.mean == pytest.approx(3.5)
    assert (g.n_valid, g.n_unparseable) == (4, 1)
    assert g.feedback == "a"  # first sample that voted with the majority
    assert g.reason is None


@pytest.mark.parametrize("votes,winner", [
    ([2, 2, 4, 4, 5], 4),  # tie 2/4, mean 3.4 -> 4 is closer
    ([2, 2, 4, 4], 2),     # tie, mean 3 equidistant -> lower
    ([1, 5], 1),
    ([3], 3),
    ([5, 1, 1, 5, 3], 1),  # tie 1/5 around mean 3 -> lower
])
def test_tie_break_is_deterministic_and_documented(votes, winner):
    assert majority(votes) == winner
    assert majority(list(reversed(votes))) == winner  # order does not matter


def test_null_result_when_nothing_parses():
    g = vote_scores([P("no marker"), P("x [RESULT] 9")])
    assert g.score is None and g.agreement is None and g.mean is None and g.feedback is None
    assert "no parseable sample" in g.reason and "outside 1-5" in g.reason
    assert g.n_unparseable == 2


def test_resampling_fills_only_failed_slots_and_is_bounded():
    slots = SampleSlots(4)
    assert slots.to_resample(2) == 4
    slots.fill([P("a [RESULT] 3"), P("bad"), P("b [RESULT] 3"), P("bad")])
    assert slots.missing() == [1, 3] and slots.to_resample(2) == 2
    slots.fill([P("c [RESULT] 5"), P("still bad")])  # slot 1 filled, slot 3 still failed
    assert slots.missing() == [3] and slots.to_resample(2) == 1
    slots.fill([P("bad again")])
    assert slots.to_resample(2) == 0  # 2 re-sample rounds spent: stop
    g = vote_scores(slots)
    assert g.votes == [3, 5, 3, None] and g.score == 3
    assert g.n_sampled == 7 and sum(g.failures.values()) == 4
    with pytest.raises(ValueError):
        slots.fill([P("x"), P("y")])  # more samples than open slots


def test_resampling_stops_when_all_parse():
    slots = SampleSlots(2)
    slots.fill([P("a [RESULT] 1"), P("b [RESULT] 2")])
    assert slots.to_resample(5) == 0


def test_logprob_expected_score_in_grade():
    g = vote_scores([P("a [RESULT] 4")] * 2, S5, [{4: math.log(0.8), 5: math.log(0.2)}, None])
    assert g.expected_score == pytest.approx(4.2)
    assert g.to_dict()["score_probs"]["4"] == pytest.approx(0.8)


def test_relative_vote_and_both_orders():
    V = parse_verdict
    ab = [V("x [RESULT] A"), V("y [RESULT] A"), V("z [RESULT] B")]
    c = vote_verdicts(ab)
    assert c.winner == "A" and c.agreement == pytest.approx(2 / 3) and c.feedback == "x"
    # swapped order: "B" there means the original A -> consistent
    c2 = vote_verdicts(ab, [V("[RESULT] B"), V("[RESULT] B")])
    assert c2.winner == "A" and c2.consistent and c2.distribution == {"A": 4, "B": 1}
    # position bias: always picks the first slot -> no winner
    c3 = vote_verdicts(ab, [V("[RESULT] A"), V("[RESULT] A")])
    assert c3.winner is None and c3.consistent is False and "position inconsistent" in c3.reason
    c4 = vote_verdicts([V("[RESULT] A"), V("[RESULT] B")])
    assert c4.winner is None and "tie" in c4.reason
    c5 = vote_verdicts([V("nothing")])
    assert c5.winner is None and c5.n_unparseable == 1
