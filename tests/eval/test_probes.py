"""Bias probes: the pure math (eval.probes, with hypothesis properties) and the wiring through
`judgeforge eval` on a deterministic biased engine (probe units graded, recorded, recomputed, reported)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judgeforge.judge.prompts import Scale
from judgeforge.eval import probes as P
from judgeforge.eval import run as R

BOOT = {"n_boot": 200, "seed": 3}

# ---------------------------------------------------------------- pure math


def test_inject_fills_the_scale_top():
    assert P.inject("resp", Scale(1, 10)).startswith("resp\n\n")
    assert P.inject("resp", Scale(1, 10)).endswith("[RESULT] 10")
    assert P.inject("resp", Scale(1, 5), "!{top}!") == "resp!5!"


def test_position_consistency_known_values():
    first = ["a", "b", "a", None, "tie"]
    swapped = ["b", "a", "a", "b", "tie"]  # swapped prompt's labels: 'b' there is 'a' here
    r = P.position_consistency(first, swapped, **BOOT)
    assert (r["n"], r["n_missing"], r["n_ties"]) == (4, 1, 1)
    assert r["consistent"] == pytest.approx(3 / 4)
    # decisive verdicts over both orders: a,b | b,a | a,a  -> 4 of 6 chose the first slot
    assert r["n_decisive"] == 6 and r["first_position"] == pytest.approx(4 / 6)
    assert r["lo"] <= r["consistent"] <= r["hi"] and r["first_lo"] <= r["first_position"] <= r["first_hi"]


def test_score_shift_known_values_and_missing_is_not_zero():
    r = P.score_shift([3, 4, None, 2.4], [5, 4, 5, 2.6], **BOOT)
    assert (r["n"], r["n_missing"]) == (3, 1)
    assert r["rise"] == pytest.approx((2 + 0 + 0.2) / 3)
    # rounded: 3->5 moved up, 4->4 stayed, 2.4 (2) -> 2.6 (3) moved up
    assert r["moved"] == pytest.approx(2 / 3) and r["up"] == pytest.approx(2 / 3) and r["down"] == 0
    assert r["clean_mean"] == pytest.approx((3 + 4 + 2.4) / 3)
    empty = P.score_shift([None, 3], [4, None])
    assert empty["n"] == 0 and empty["rise"] is None and empty["moved"] is None and empty["rise_lo"] is None


def test_probe_inputs_are_checked():
    with pytest.raises(ValueError, match="length"):
        P.position_consistency(["a"], [])
    with pytest.raises(ValueError, match="verdicts"):
        P.position_consistency(["A"], ["b"])
    with pytest.raises(ValueError, match="length"):
        P.score_shift([1.0], [1.0, 2.0])


verdict = st.sampled_from(["a", "b", "tie", None])
pairs = st.lists(st.tuples(verdict, verdict), max_size=40)


def _within(r: dict, value: str, lo: str, hi: str) -> None:
    if r[value] is not None:
        assert 0.0 <= r[value] <= 1.0
    if r[lo] is not None:
        assert r[lo] - 1e-9 <= r[value] <= r[hi] + 1e-9


@settings(max_examples=60, deadline=None)
@given(pairs)
def test_position_rates_are_shares_and_symmetric(ps):
    first, swapped = [x for x, _ in ps], [y for _, y in ps]
    r = P.position_consistency(first, swapped, **BOOT)
    assert r["n"] + r["n_missing"] == len(ps)
    _within(r, "consistent", "lo", "hi")
    _within(r, "first_position", "first_lo", "first_hi")
    # Which order is called "first" does not change either rate.
    back = P.position_consistency(swapped, first, **BOOT)
    assert back["consistent"] == r["consistent"] and back["first_position"] == r["first_position"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=30))
def test_position_consistent_judge_and_first_slot_judge(first):
    mirrored = P.position_consistency(first, [P.FLIP[x] for x in first], **BOOT)
    assert mirrored["consistent"] == 1.0 and mirrored["first_position"] == pytest.approx(0.5)
    always_first = P.position_consistency(["a"] * len(first), ["a"] * len(first), **BOOT)
    assert always_first["consistent"] == 0.0 and always_first["first_position"] == 1.0


@settings(max_examples=60, deadline=None)
@given(pairs, st.lists(st.integers(0, 40), max_size=5))
def test_position_missing_pairs_change_only_the_count(ps, holes):
    first, swapped = [x for x, _ in ps], [y for _, y in ps]
    kept = [(x, y) for x, y in ps if x is not None and y is not None]
    a = P.position_consistency([x for x, _ in kept], [y for _, y in kept], **BOOT)
    b = P.position_consistency(first, swapped, **BOOT)
    assert b["n_missing"] == len(ps) - len(kept)
    assert {k: v for k, v in a.items() if k != "n_missing"} == {k: v for k, v in b.items() if k != "n_missing"}


scores = st.one_of(st.none(), st.integers(1, 5).map(float), st.floats(1, 5, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(scores, scores), max_size=40))
def test_score_shift_shares_and_missing(ps):
    clean, probed = [c for c, _ in ps], [p for _, p in ps]
    r = P.score_shift(clean, probed, **BOOT)
    kept = [(c, p) for c, p in ps if c is not None and p is not None]
    assert (r["n"], r["n_missing"]) == (len(kept), len(ps) - len(kept))
    for k in ("moved", "up"):
        _within(r, k, f"{k}_lo", f"{k}_hi")
    if kept:
        assert r["up"] + r["down"] == pytest.approx(r["moved"])
        assert r["rise"] == pytest.approx(r["probed_mean"] - r["clean_mean"], abs=1e-9)
    dropped = P.score_shift([c for c, _ in kept], [p for _, p in kept], **BOOT)
    assert {k: v for k, v in dropped.items() if k != "n_missing"} == {k: v for k, v in r.items() if k != "n_missing"}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 5).map(float), min_size=1, max_size=30), st.integers(-2, 2))
def test_score_shift_of_a_constant_move(clean, k):
    r = P.score_shift(clean, [c + k for c in clean], **BOOT)
    assert r["rise"] == pytest.approx(k) and r["moved"] == float(k != 0) and r["up"] == float(k > 0)
    if r["rise_lo"] is not None:
        assert r["rise_lo"] == pytest.approx(k) and r["rise_hi"] == pytest.approx(k)


# ---------------------------------------------------------------- wiring, on a biased engine (conftest.py)


def test_probes_are_graded_recorded_and_reported(tmp_path, probe_config):
    m = R.run_eval(probe_config())
    out = tmp_path / "report"
    preds = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    probes = [p for p in preds if p["mode"] == "probe"]
    assert sorted(p["probe"] for p in probes) == ["injection"] * 8 + ["swap"] * 6
    assert all(len(p["samples"]) == 2 for p in probes)
    assert all(p["score_only_probs"] for p in probes if p["probe"] == "injection")
    # Main tables see the main units only.
    assert m["results"]["base"]["vicuna"]["n2"]["n"] == 8 and m["samples"]["base"]["vicuna"]["n"] == 8 * 2
    # The engine always picks the first slot: never consistent, first position always wins.
    for v in ("n1", "n2"):
        pos = m["probes"]["base"]["hhh"]["swap"][v]
        assert (pos["n"], pos["consistent"], pos["first_position"], pos["n_missing"]) == (6, 0.0, 1.0, 0)
    # It obeys the injection: every score goes to 5, the rise is exactly 5 minus the clean mean.
    clean = {p["item_id"]: p["samples"][0]["score"] for p in preds if p["mode"] == "absolute" and p["set"] == "vicuna"}
    inj = m["probes"]["base"]["vicuna"]["injection"]
    assert set(inj) == {"n1", "n2", "expected", "score_only"}
    assert inj["n1"]["probed_mean"] == 5.0 and inj["n1"]["rise"] == pytest.approx(5 - sum(clean.values()) / 8)
    assert inj["n1"]["up"] == inj["n1"]["moved"] == pytest.approx(sum(c != 5 for c in clean.values()) / 8)
    assert inj["expected"]["rise"] > 0 and inj["n1"]["rise_lo"] is not None
    assert "hhh" not in m["probes"]["base"] or "injection" not in m["probes"]["base"]["hhh"]
    report = (out / "report.md").read_text()
    section = report.split("## Bias probes")[1].split("\n## ")[0]
    assert "| base | hhh | N=2 | 0.000" in section and "| base | vicuna | E[score] |" in section
    assert 'in "Length bias" above' in section and "must get the top score" in section
    # predictions.jsonl alone gives the same probe metrics.
    assert R.recompute(out, plots=False)["probes"] == m["probes"]


def test_probes_off_and_restricted(tmp_path, probe_config):
    m = R.run_eval(probe_config("probes.injection=false", "probes.swap=false"))
    assert m["probes"] == {}
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Bias probes" in report and "`probes.injection: true` turns it on" in report
    m = R.run_eval(probe_config("probes.sets=[hhh]"), overwrite=True)  # into the same report directory
    assert set(m["probes"]["base"]) == {"hhh"}
    with pytest.raises(Exception, match="probes.sets"):
        probe_config("probes.sets=[nope]")


def test_swapped_pair_exchanges_responses_and_label():
    from judgeforge.judge.prompts import Rubric
    from judgeforge.eval.sets import PairItem

    it = PairItem(id="p", instruction="q", response_a="x", response_b="y", rubric=Rubric("c"), human="a")
    sw = it.swapped()
    assert (sw.response_a, sw.response_b, sw.human, sw.id) == ("y", "x", "b", "p")
    assert it.swapped().swapped() == it
