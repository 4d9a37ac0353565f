"""Length bias beside the reference and length-controlled agreement (eval.length), and their report section."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats
from scipy.special import expit

from judgeforge.eval import length as L
from judgeforge.eval import run as R
from judgeforge.eval.report import _pair_lengths, render_markdown


@pytest.fixture
def lengths():
    return np.random.default_rng(3).integers(20, 900, 300).astype(float)


def test_a_judge_scoring_by_length_alone(lengths):
    ref = np.clip(np.round(1 + lengths / 250 + np.random.default_rng(4).normal(0, 1, lengths.size)), 1, 5)
    rep = L.absolute_length((2 * lengths + 3).tolist(), ref.tolist(), lengths.tolist(), n_boot=200)
    assert rep["judge"]["value"] == pytest.approx(1.0) and rep["judge"]["lo"] == pytest.approx(1.0)
    assert rep["controlled"] == {"value": 0.0, "lo": 0.0, "hi": 0.0}
    assert rep["reference"]["value"] == pytest.approx(stats.pearsonr(ref, lengths).statistic)
    assert rep["diff"]["value"] == pytest.approx(1.0 - rep["reference"]["value"])
    # nonlinear in length (rounded to a 1-5 scale): r < 1, but nothing left once length is controlled
    binned = np.clip(np.ceil(lengths / 180), 1, 5)
    rep = L.absolute_length(binned.tolist(), ref.tolist(), lengths.tolist(), n_boot=200)
    assert 0.9 < rep["judge"]["value"] < 1 and abs(rep["controlled"]["value"]) < 0.2
    assert rep["pearson"]["value"] > 0.5  # the raw agreement it got from length alone


def test_partial_correlation_is_the_formula_and_the_residuals():
    rng = np.random.default_rng(0)
    z = rng.normal(size=80)
    x, y = z + rng.normal(size=80), 0.5 * z + rng.normal(size=80)
    r = lambda a, b: stats.pearsonr(a, b).statistic
    want = (r(x, y) - r(x, z) * r(y, z)) / np.sqrt((1 - r(x, z) ** 2) * (1 - r(y, z) ** 2))
    res = lambda a: a - np.polyval(np.polyfit(z, a, 1), z)
    assert L.residual_corr_rows(x, y, z) == pytest.approx(want)
    assert L.residual_corr_rows(x, y, z) == pytest.approx(r(res(x), res(y)))
    assert L.residual_corr_rows(x, y, np.full(80, 7.0)) == pytest.approx(r(x, y))  # controls for nothing
    assert np.isnan(L.residual_corr_rows(np.ones(80), y, z))


def test_absolute_counts_missing_and_intervals(lengths):
    rng = np.random.default_rng(1)
    ref = rng.integers(1, 6, lengths.size).astype(float).tolist()
    scores = [None, None] + np.clip(np.array(ref[2:]) + rng.integers(-1, 2, lengths.size - 2), 1, 5).tolist()
    ls = lengths.tolist()
    ls[5] = None
    rep = L.absolute_length(scores, ref, ls, n_boot=200)
    assert rep["n"] == lengths.size - 3 and rep["n_missing"] == 3
    for k in ("judge", "reference", "diff", "pearson", "controlled"):
        assert rep[k]["lo"] <= rep[k]["value"] <= rep[k]["hi"]
    assert rep["diff"]["value"] == pytest.approx(rep["judge"]["value"] - rep["reference"]["value"])
    assert json.dumps(rep) == json.dumps(L.absolute_length(scores, ref, ls, n_boot=200))  # seeded
    short = L.absolute_length([1, 2], [1, 2], [3, 4])
    assert short["n"] == 2 and short["judge"] == {"value": None, "lo": None, "hi": None}


finite = st.floats(1, 5, allow_nan=False)
length = st.integers(1, 2000)


@given(st.lists(st.tuples(finite, finite, length), min_size=3, max_size=30),
       st.floats(0.01, 100), st.integers(-500, 500))
@settings(max_examples=60, deadline=None)
def test_absolute_invariant_to_length_units(items, scale, shift):
    s, y, ln = (list(c) for c in zip(*items))
    a = L.absolute_length(s, y, ln, n_boot=30)
    b = L.absolute_length(s, y, [scale * v + shift for v in ln], n_boot=30)
    for k in ("judge", "reference", "diff", "pearson", "controlled"):
        for f in ("value", "lo", "hi"):
            assert _same(a[k][f], b[k][f]), (k, f)


def _same(x, y) -> bool:
    return x is None and y is None or (x is not None and y is not None and x == pytest.approx(y, abs=1e-6))


choice = st.sampled_from(["a", "b", "tie", None])
human = st.sampled_from(["a", "b", "tie"])
opt_len = st.one_of(st.none(), length)
pairs = st.lists(st.tuples(choice, human, opt_len, opt_len), max_size=40)


def _cols(ps):
    return ([p[i] for p in ps] for i in range(4))


@given(pairs)
@settings(max_examples=100, deadline=None)
def test_pairwise_split_adds_up_to_the_decisive_pairs(ps):
    j, h, la, lb = _cols(ps)
    rep = L.pairwise_length(j, h, la, lb, n_boot=30)
    assert rep["n_decisive"] == sum(x != "tie" for x in h) == rep["n"] + rep["n_no_length"]
    parts = [rep[k] for k in ("shorter", "longer", "equal")]
    assert sum(p["n"] for p in parts) == rep["n"] == rep["accuracy"]["n"]
    if rep["n"]:
        hits = sum(p["value"] * p["n"] for p in parts if p["n"])
        assert hits == pytest.approx(rep["accuracy"]["value"] * rep["n"])
        known = [(x, y) for x, y, a, b in ps if y != "tie" and a is not None and b is not None]
        assert rep["accuracy"]["value"] == pytest.approx(np.mean([x == y for x, y in known]))
    assert rep["reference_prefers_longer"]["n"] == rep["shorter"]["n"] + rep["longer"]["n"]


@given(st.lists(st.tuples(choice, human, length), max_size=40))
@settings(max_examples=100, deadline=None)
def test_lc_is_the_raw_accuracy_without_length_differences(ps):
    j, h, la = ([p[i] for p in ps] for i in range(3))
    rep = L.pairwise_length(j, h, la, la, n_boot=30)
    assert _same(rep["controlled"]["value"], rep["accuracy"]["value"])
    assert rep["equal"]["n"] == rep["n"] and rep["gap"]["value"] is None


@given(pairs, st.floats(0.01, 100))
@settings(max_examples=60, deadline=None)
def test_pairwise_invariant_to_scaling_lengths(ps, scale):
    j, h, la, lb = _cols(ps)
    sc = lambda v: [None if x is None else x * scale for x in v]
    a = L.pairwise_length(j, h, la, lb, n_boot=30)
    b = L.pairwise_length(j, h, sc(la), sc(lb), n_boot=30)
    for k, v in a.items():
        if isinstance(v, dict):
            for f, x in v.items():
                assert _same(x, b[k][f]), (k, f)
        else:
            assert v == b[k], k


def _simulated(n=1400, seed=1):
    rng = np.random.default_rng(seed)
    la, lb = rng.integers(50, 800, n), rng.integers(50, 800, n)
    # the reference prefers the longer response about 80% of the time
    human = np.where(rng.random(n) < 0.5 + 0.3 * np.sign(la - lb), "a", "b")
    return rng, la, lb, human


def test_a_judge_picking_by_length_alone():
    rng, la, lb, human = _simulated()
    longer = np.where(la > lb, "a", "b")
    rep = L.pairwise_length(longer.tolist(), human.tolist(), la.tolist(), lb.tolist(), n_boot=200)
    assert rep["shorter"]["value"] == 0.0 and rep["longer"]["value"] == 1.0 and rep["gap"]["value"] == 1.0
    assert rep["judge_prefers_longer"]["value"] == 1.0 and 0.7 < rep["reference_prefers_longer"]["value"] < 0.9
    lc = rep["controlled"]
    assert abs(lc["value"] - 0.5) < 0.1 < rep["accuracy"]["value"] - lc["value"] and lc["slope"] > 1
    assert lc["lo"] <= lc["value"] <= lc["hi"]


def test_a_judge_blind_to_length_keeps_its_accuracy():
    rng, la, lb, human = _simulated()
    flip = {"a": "b", "b": "a"}
    judge = [x if rng.random() < 0.7 else flip[x] for x in human]
    rep = L.pairwise_length(judge, human.tolist(), la.tolist(), lb.tolist(), n_boot=200)
    assert rep["controlled"]["value"] == pytest.approx(rep["accuracy"]["value"], abs=0.04)
    assert rep["gap"]["lo"] < 0 < rep["gap"]["hi"]


def test_logistic_fit_maximises_the_penalised_likelihood():
    rng = np.random.default_rng(5)
    x = rng.normal(size=60)
    y = (rng.random(60) < expit(0.4 + 1.3 * x)).astype(float)
    w = rng.uniform(0.5, 2, 60)

    def loss(b):
        p = np.clip(expit(b[0] + b[1] * x), 1e-15, 1 - 1e-15)
        return -np.sum(w * (y * np.log(p) + (1 - y) * np.log(1 - p))) + 0.7 * b[1] ** 2 / 2

    want = optimize.minimize(loss, np.zeros(2), method="BFGS", options={"gtol": 1e-10}).x
    got = L.logistic_fit(np.stack([y, y]), np.stack([x, x]), np.stack([w, w]), ridge=0.7)
    np.testing.assert_allclose(got, [want, want], atol=1e-5)
    assert L.logistic_fit(np.ones(5), np.arange(5.0))[0].tolist() == [np.inf, 0.0]
    with pytest.raises(ValueError):
        L.logistic_fit(y, x, ridge=0)


@given(st.lists(st.integers(-50, 50), max_size=30))
@settings(max_examples=80, deadline=None)
def test_balance_weights_even_out_the_two_sides(d):
    d = np.asarray(d, dtype=float)
    w = L.balance_weights(d)[0]
    if (d > 0).any() and (d < 0).any():
        assert w[d > 0].sum() == pytest.approx(w[d < 0].sum()) == pytest.approx(((d != 0).sum()) / 2)
    else:
        assert (w == 1).all()
    assert (w[d == 0] == 1).all()


def test_pair_lengths_prefer_a_relative_units_own():
    side = lambda i, u, n: {"item_id": i, "unit": u, "length": n}
    modes = {"absolute": [side("p", "a", 3), side("p", "b", 9), side("q", "a", 1)],
             "relative": [{"item_id": "p"}, {"item_id": "r", "length_a": 4, "length_b": 2}]}
    assert _pair_lengths(modes) == {"p": (3, 9), "r": (4, 2)}


def test_report_carries_the_length_section(probe_config):
    cfg = probe_config("probes.injection=false")
    m = R.run_eval(cfg)
    out = Path(cfg.out)
    metrics = json.loads((out / "metrics.json").read_text())
    report = (out / "report.md").read_text()
    assert report == render_markdown(metrics) and m == metrics
    vic = metrics["results"]["base"]["vicuna"]["n2"]["length"]
    assert vic["n"] == 8 and vic["reference"]["value"] == pytest.approx(
        metrics["reference"]["vicuna"]["length_only"]["r"])
    hhh = metrics["results"]["base"]["hhh"]
    for mode in ("absolute", "relative"):
        lz = hhh[mode]["n2"]["length"]
        assert lz["n_decisive"] == hhh[mode]["n2"]["n_decisive"] and lz["n_no_length"] == 0
        assert lz["accuracy"]["value"] == pytest.approx(hhh[mode]["n2"]["accuracy"])
    assert "## Length bias beside the reference, and agreement with length controlled" in report
    assert "| vicuna | base | N=2 |" in report and "| hhh | base | relative | N=2 |" in report
