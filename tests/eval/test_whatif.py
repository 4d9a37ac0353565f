"""The offline cascade what-if: curves, the blended judge, the split simulation, record reading."""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy import stats

from judgeforge.eval import whatif as W
from judgeforge.eval.calibration import CalibrationError, agrees, calibrate
from judgeforge.eval.cascade_inputs import CascadeInputs, from_records
from testing.records import synthetic_predictions
from judgeforge.judge.prompts import Scale

SCALE = Scale.parse([1, 5])


def test_coverage_curve_one_point_per_distinct_confidence():
    cc = W.coverage_curve(np.array([0.9, 0.1, 0.9, 0.5]), np.array([True, True, False, True]))
    assert cc["coverage"] == [0.5, 0.75, 1.0]
    assert cc["agreement"] == pytest.approx([0.5, 2 / 3, 0.75])
    assert cc["area"] == pytest.approx(0.5 * 0.5 + 0.25 * 2 / 3 + 0.25 * 0.75)
    assert cc["overall"] == 0.75
    flat = W.coverage_curve(np.full(4, 0.7), np.array([True, False, True, True]))
    assert flat["area"] == flat["overall"] == 0.75  # confidence that says nothing adds nothing


def test_blend_curve_endpoints_and_forced_escalation():
    inp = from_records(synthetic_predictions(50, seed=3), SCALE)
    b = W.blend_curve(inp, [0.0, 0.5, 1.0])
    assert b["pearson"][0] == pytest.approx(stats.pearsonr(inp.local, inp.ref).statistic)
    assert b["pearson"][2] == pytest.approx(stats.pearsonr(inp.teacher, inp.ref).statistic)
    assert b["escalated"] == [0.0, 0.5, 1.0] and b["teacher_calls_per_1000"] == [0.0, 500.0, 1000.0]
    # Half escalated = the 25 least confident items go to the teacher.
    low = set(np.argsort(inp.confidence, kind="stable")[:25])
    mixed = [t if i in low else s for i, (s, t) in enumerate(zip(inp.local, inp.teacher))]
    assert b["pearson"][1] == pytest.approx(stats.pearsonr(mixed, inp.ref).statistic)
    # Items without a local score always escalate: the share is at least theirs.
    gap = CascadeInputs(["a", "b", "c", "d"], [3, None, 4, 5], [0.9, None, 0.8, 0.7], [3, 2, 4, 4],
                        [3.0, 2.0, 4.0, 4.3])
    g = W.blend_curve(gap, [0.0, 0.5])
    assert g["escalated"] == [0.25, 0.5] and g["pearson"][0] is not None


def test_split_simulation_matches_calibrate_split_by_split():
    inp = from_records(synthetic_predictions(60, seed=5, sharpness=3.0), SCALE)
    conf, agree = np.asarray(inp.confidence), agrees(inp.local, inp.teacher)
    kw = dict(alpha=0.3, delta=0.2, min_n=10, calibration_share=0.5, n_splits=200, seed=11)
    got = W.guarantee_rate(conf, agree, **kw)
    found, held, cov = [], [], []
    for cal_idx, test_idx in zip(*W._splits(60, 30, 200, 11)):
        try:
            t = calibrate(conf[cal_idx], agree[cal_idx], 0.3, 0.2, 10).threshold
        except CalibrationError:
            t = np.inf
        covered = conf[test_idx] >= t
        found.append(np.isfinite(t))
        held.append(agree[test_idx][covered].sum() >= 0.7 * covered.sum() - 1e-9)
        cov.append(covered.mean())
    found = np.asarray(found)
    assert 0 < found.mean() < 1  # both outcomes occur
    assert got["threshold_found_rate"] == pytest.approx(found.mean())
    assert got["holds_rate"] == pytest.approx(np.mean(held))
    assert got["coverage_mean"] == pytest.approx(np.asarray(cov)[found].mean())
    assert got["status"] == "ok" and got["n_calibration"] == got["n_test"] == 30


def test_infeasible_sets_are_reported_not_raised():
    inp = from_records(synthetic_predictions(16, seed=1), SCALE)
    conf, agree = np.asarray(inp.confidence), agrees(inp.local, inp.teacher)
    g = W.guarantee_rate(conf, agree, alpha=0.1, delta=0.1, min_n=30, calibration_share=0.5, n_splits=1000,
                         seed=0)
    assert g["status"] == "infeasible" and g["min_n"] == 8 and g["best_bound"] > 0.1
    assert g["items_needed"] == 22 and g["holds_rate"] is None
    ok = W.guarantee_rate(conf, agree, alpha=0.3, delta=0.1, min_n=30, calibration_share=0.5, n_splits=1000,
                          seed=0)
    assert ok["status"] in ("ok", "no_threshold") and ok["best_bound"] <= 0.3


def test_thousand_splits_are_fast():
    inp = from_records(synthetic_predictions(200, seed=2), SCALE)
    t0 = time.perf_counter()
    r = W.simulate(inp, alpha=0.2, delta=0.1, tolerance=0, min_n=30, calibration_share=0.5, n_splits=1000,
                   seed=0, shares=[i / 10 for i in range(11)])
    assert time.perf_counter() - t0 < 1.0
    # Not asserted >= 1 - delta: the check is on a finite test split, whose own sampling noise can
    # miss 1 - alpha while the guarantee (about the population) holds.
    assert r["guarantee"]["n_splits"] == 1000 and 0.5 < r["guarantee"]["holds_rate"] <= 1
    assert len(r["blend"]["pearson"]) == 11 and r["n_no_score"] == 0


def test_from_records_reads_votes_confidences_and_the_teacher():
    recs = synthetic_predictions(5, seed=0)
    recs[1]["ref"] = None  # no reference: nothing to escalate to, left out
    recs[2]["samples"] = [{"text": "", "score": None, "reason": "no [RESULT] marker", "probs": None}]
    inp = from_records(recs, SCALE)
    assert inp.item_ids == ["item0000", "item0002", "item0003", "item0004"]
    assert inp.local[1] is None and inp.confidence[1] is None
    r0 = recs[0]
    assert inp.local[0] == r0["samples"][0]["score"]
    assert inp.confidence[0] == pytest.approx(r0["samples"][0]["probs"][str(inp.local[0])])
    assert inp.teacher[0] == r0["ref_samples"][0] and inp.ref[0] == r0["ref"]
    assert from_records(recs, SCALE, confidence="agreement").confidence[0] == 1.0
    with pytest.raises(ValueError, match="confidence"):
        from_records(recs, SCALE, confidence="entropy")
