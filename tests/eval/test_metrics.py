"""Metrics agree with scipy, bootstrap is deterministic, pairwise and paired-difference logic."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from judgeforge.eval import metrics as M


@pytest.fixture
def known():
    rng = np.random.default_rng(7)
    ref = rng.integers(1, 6, 60).astype(float)
    pred = np.clip(ref + rng.integers(-1, 2, 60), 1, 5)
    return pred.tolist(), ref.tolist()


def test_correlations_match_scipy(known):
    pred, ref = known
    rep = M.correlation(pred, ref, n_boot=200)
    assert rep["pearson"]["value"] == pytest.approx(stats.pearsonr(pred, ref).statistic)
    assert rep["spearman"]["value"] == pytest.approx(stats.spearmanr(pred, ref).statistic)
    assert rep["kendall"]["value"] == pytest.approx(stats.kendalltau(pred, ref).statistic)
    assert rep["pearson"]["p"] == pytest.approx(stats.pearsonr(pred, ref).pvalue)
    for m in M.CORRELATIONS:
        assert rep[m]["lo"] <= rep[m]["value"] <= rep[m]["hi"]


def test_bootstrap_rows_match_scipy_per_resample(known):
    pred, ref = np.asarray(known[0]), np.asarray(known[1])
    idx = M.bootstrap_indices(len(pred), 5, seed=3)
    for name, fn in (("pearson", stats.pearsonr), ("spearman", stats.spearmanr),
                     ("kendall", stats.kendalltau)):
        rows = M.ROW_STATS[name](pred[idx], ref[idx])
        want = [fn(pred[i], ref[i]).statistic for i in idx]
        np.testing.assert_allclose(rows, want)


def test_bootstrap_deterministic_under_seed(known):
    pred, ref = known
    a = M.correlation(pred, ref, n_boot=300, seed=11)
    b = M.correlation(pred, ref, n_boot=300, seed=11)
    c = M.correlation(pred, ref, n_boot=300, seed=12)
    assert json.dumps(a) == json.dumps(b)
    assert a["pearson"]["lo"] != c["pearson"]["lo"]


def test_parse_failures_excluded_but_counted(known):
    pred, ref = known
    pred = [None, None] + pred[2:]
    rep = M.score_report(pred, ref, n_boot=100)
    assert rep["parse_failures"] == 2 and rep["parse_failure_rate"] == pytest.approx(2 / 60)
    assert rep["correlation"]["n"] == 58 and rep["correlation"]["n_missing"] == 2
    assert rep["correlation"]["pearson"]["value"] == pytest.approx(
        stats.pearsonr(pred[2:], ref[2:]).statistic)


def test_constant_predictions_give_none_not_a_number():
    rep = M.correlation([3, 3, 3, 3, 3], [1, 2, 3, 4, 5], n_boot=50)
    assert rep["pearson"]["value"] is None and rep["pearson"]["lo"] is None


def test_agreement_rounds_reference_means():
    # ref means 3.67 -> 4, 2.33 -> 2, 4.5 -> 5 (half up)
    rep = M.agreement([4, 3, 5, None], [11 / 3, 7 / 3, 4.5, 3])
    assert rep["n"] == 3 and rep["exact"] == pytest.approx(2 / 3) and rep["within1"] == 1.0


def test_confusion_counts_unparsed():
    c = M.confusion([1, None, 5, 5], [1, 1, 5, 4], [1, 2, 3, 4, 5])
    assert c["counts"][0][0] == 1 and c["counts"][0][5] == 1  # row ref=1: one 1, one unparsed
    assert c["counts"][4][4] == 1 and c["counts"][3][4] == 1


def test_per_category():
    rep = M.per_category([1, 2, 3, 4, 5, 5], [1, 2, 3, 5, 4, 3], ["x", "x", "x", "y", "y", "y"],
                         n_boot=50)
    assert rep["x"]["correlation"]["pearson"]["value"] == pytest.approx(1.0)
    assert rep["y"]["n"] == 3


def test_self_agreement_is_one_sample_vs_mean_of_others():
    s = np.array([[1, 2, 1], [3, 3, 4], [5, 4, 5], [2, 2, 3], [4, 5, 4]], dtype=float)
    want = np.mean([stats.pearsonr(s[:, j], np.delete(s, j, 1).mean(1)).statistic for j in range(3)])
    rep = M.self_agreement(s.tolist(), n_boot=100)
    assert rep["k"] == 3 and rep["pearson"]["value"] == pytest.approx(want)
    assert rep["first_sample_pearson"] == pytest.approx(
        stats.pearsonr(s[:, 0], s[:, 1:].mean(1)).statistic)


def test_self_agreement_on_vendored_mt_bench(vendor):
    # The measurement: sample 0 vs mean of the other two, wizardlm_13b, 80 items.
    d = json.loads((vendor / "prometheus-eval" / "mt_bench_eval.json").read_text())
    rows = [r["gpt4_score"] for r in d if r["response_source"] == "wizardlm_13b"]
    rep = M.self_agreement(rows, n_boot=200)
    assert rep["n"] == 80 and rep["first_sample_pearson"] == pytest.approx(0.90, abs=0.005)


def test_paired_difference_detects_forgetting():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=100)
    good = ref + rng.normal(scale=0.3, size=100)
    bad = ref + rng.normal(scale=3.0, size=100)
    drop = M.paired_difference(good.tolist(), bad.tolist(), ref.tolist(), n_boot=500)
    assert drop["diff"] < 0 and drop["hi"] < 0 and drop["significant"] and drop["forgetting"]
    gain = M.paired_difference(bad.tolist(), good.tolist(), ref.tolist(), n_boot=500)
    assert gain["lo"] > 0 and gain["significant"] and not gain["forgetting"]
    same = M.paired_difference(good.tolist(), good.tolist(), ref.tolist(), n_boot=200)
    assert same["diff"] == 0 and not same["significant"]


def test_paired_difference_uses_items_both_parsed():
    a = [1, 2, None, 4, 5, 3]
    b = [1, None, 3, 4, 5, 2]
    ref = [1, 2, 3, 4, 5, 3]
    rep = M.paired_difference(a, b, ref, n_boot=50)
    assert rep["n"] == 4


def test_pairwise_agreement_ties_apart_and_failures_counted():
    judge = ["a", "b", "tie", None, "a", "tie"]
    human = ["a", "a", "a", "b", "tie", "tie"]
    rep = M.pairwise_agreement(judge, human, n_boot=50)
    assert rep["n_decisive"] == 4
    assert rep["accuracy"] == pytest.approx(1 / 4)  # ties and failures are misses
    assert rep["n_decided"] == 2 and rep["accuracy_decided"] == pytest.approx(1 / 2)
    assert rep["judge_ties"] == 1 and rep["parse_failures"] == 1
    assert rep["human_ties"] == {"n": 2, "judge_tie_rate": 0.5}


def test_absolute_pairwise_grades_both_sides():
    rep = M.absolute_pairwise([5, 2, 3, None], [3, 4, 3, 1], ["a", "b", "a", "a"], n_boot=20)
    assert rep["accuracy"] == pytest.approx(2 / 4) and rep["judge_ties"] == 1
    assert rep["parse_failures"] == 1


def test_pairwise_rejects_unknown_human_label():
    with pytest.raises(ValueError, match="human choices"):
        M.pairwise_agreement(["a"], ["model_a"])


def test_length_bias_matches_linregress():
    lengths = [10, 50, 80, 120, 200, 300]
    scores = [1, 2, 2, 4, None, 5]
    rep = M.length_bias(scores, lengths)
    res = stats.linregress([10, 50, 80, 120, 300], [1, 2, 2, 4, 5])
    assert rep["n"] == 5 and rep["r"] == pytest.approx(res.rvalue)
    assert rep["r2"] == pytest.approx(res.rvalue ** 2) and rep["p"] == pytest.approx(res.pvalue)


def test_ranking_against_external():
    scores = [5, 4, 4, 3, 2, 2, 1, None]
    models = ["m1", "m1", "m2", "m2", "m3", "m3", "m4", "m4"]
    rep = M.ranking(scores, models, {"m1": 1, "m2": 2, "m3": 3, "m4": 4}, higher_is_better=False)
    assert rep["n_models"] == 4 and rep["spearman"] == pytest.approx(1.0)
    assert rep["kendall"] == pytest.approx(1.0) and rep["model_means"]["m4"] == 1.0
