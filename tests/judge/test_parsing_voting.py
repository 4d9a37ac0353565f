"""Pure parsing and voting: scores after the last [RESULT], ties, re-sampling, null results."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judgeforge.judge.prompts import Scale
from judgeforge.judge.parsing import parse_score, parse_verdict
from judgeforge.judge.scores import Judged, average, distribution, expected, most_probable
from judgeforge.judge.voting import SampleSlots, majority, vote_scores, vote_verdicts

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
def test_distribution_is_over_exactly_the_choices():
    d = distribution({"1": math.log(0.1), "2": math.log(0.3), "7": 0.0}, ["1", "2", "3"])
    assert list(d) == ["1", "2", "3"] and sum(d.values()) == pytest.approx(1.0)
    assert d["1"] == pytest.approx(0.25) and d["3"] == 0.0
    assert distribution(None, ["1"]) is None and distribution({"9": 0.0}, ["1", "2"]) is None
    assert most_probable({"1": 0.4, "2": 0.4, "3": 0.2}) == "1"  # ties: the lower score


def test_average_and_expected():
    probs = average([{"4": 0.5, "5": 0.5}, {"4": 1.0, "5": 0.0}, None], ["4", "5"])
    assert probs["4"] == pytest.approx(0.75) and expected(probs) == pytest.approx(4.25)
    assert average([None], ["1"]) is None and expected(None) is None


# --- voting --------------------------------------------------------------------------------
def P(text, probs=None):
    """A read sample: what the text wrote, plus an optional completed distribution."""
    return Judged(written=parse_score(text, S5), probs=probs, text=text)


def D(**kw):
    return {str(k): kw.get(f"p{k}", 0.0) for k in range(1, 6)}


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


def test_null_result_only_without_any_vote():
    g = vote_scores([P("no marker"), P("x [RESULT] 9")])
    assert g.score is None and g.agreement is None and g.mean is None and g.feedback is None
    assert "no vote" in g.reason and "outside 1-5" in g.reason
    assert g.n_unparseable == 2 and g.confidence is None


def test_completed_distribution_votes_when_nothing_was_written():
    g = vote_scores([P("no marker", D(p2=0.7, p3=0.3)), P("x [RESULT] 9", D(p2=0.2, p3=0.8)),
                     P("y [RESULT] 3", D(p2=0.9, p3=0.1))])
    # written (valid) beats completed; otherwise the completed argmax votes
    assert g.votes == [2, 3, 3] and g.sources == ["completed", "completed", "written"]
    assert g.score == 3 and g.n_written == 1 and g.written_agreement == 0.0
    assert g.score_probs[2] == pytest.approx(0.6) and sum(g.score_probs.values()) == pytest.approx(1.0)
    assert g.confidence == pytest.approx(g.score_probs[3]) and 0 <= g.confidence <= 1
    assert g.expected_score == pytest.approx(2 * 0.6 + 3 * 0.4)


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


def test_expected_score_in_grade():
    g = vote_scores([P("a [RESULT] 4", D(p4=0.8, p5=0.2)), P("a [RESULT] 4")], S5)
    assert g.expected_score == pytest.approx(4.2) and g.written_agreement == 1.0
    assert g.to_dict()["score_probs"]["4"] == pytest.approx(0.8) and g.to_dict()["confidence"] == pytest.approx(0.8)


def test_judged_record_round_trip():
    j = P("ok [RESULT] 4", D(p4=1.0))
    back = Judged.from_record(j.to_record())
    assert (back.vote, back.source, back.probs) == ("4", "written", j.probs)


def test_relative_vote_and_both_orders():
    def V(text, probs=None):
        return Judged(written=parse_verdict(text), probs=probs, text=text)

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
    # completed A/B distributions vote and map back across the swap
    c6 = vote_verdicts([V("no verdict", {"A": 0.8, "B": 0.2})], [V("none", {"A": 0.3, "B": 0.7})])
    assert c6.winner == "A" and c6.consistent and c6.probs["A"] == pytest.approx(0.75)
    assert c6.confidence == pytest.approx(0.75)


def test_every_sample_record_is_judgeds_layout():
    """eval's unsampled records and the synthetic predictions are `Judged.to_record`, read back intact."""
    from testing.records import synthetic_predictions
    from judgeforge.eval.judges import _failed

    failed = _failed("prompt too long: 5000 tokens", 2)
    assert failed == [Judged.failed("prompt too long: 5000 tokens").to_record()] * 2
    back = Judged.from_record(failed[0])
    assert back.vote is None and back.written.reason == back.completion == "prompt too long: 5000 tokens"
    rec = synthetic_predictions(1, n_samples=1)[0]["samples"][0]
    assert set(rec) == set(failed[0])
    assert Judged.from_record(rec).vote == str(rec["score"])
    assert vote_scores([Judged.from_record(rec)]).score == rec["score"]


def test_comparison_counts_its_samples_and_failures():
    def V(text):
        return Judged(written=parse_verdict(text), text=text)

    c = vote_verdicts([V("no verdict"), V("A is better [RESULT] A")], [V("rambling")])
    assert c.n_sampled == 3 and sum(c.failures.values()) == 2
    assert c.to_dict()["n_sampled"] == 3 and type(c).from_dict(c.to_dict()).failures == c.failures
