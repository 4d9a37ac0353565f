"""The cascade what-if in `judgeforge eval`: metrics.json["cascade"], its report section and plot."""

from __future__ import annotations

import json
import re

from testing.records import all_floats, synthetic_predictions
from judgeforge.eval import run as R
from judgeforge.eval.report import compute_metrics, render_markdown

SETS = [{"name": "heldout", "kind": "absolute", "role": "mimic", "reference": "gpt-4", "n_items": 16,
         "n_available": 16, "source": "synthetic", "scale": [1, 5]},
        {"name": "vicuna", "kind": "absolute", "role": "forgetting", "reference": "gpt-4", "n_items": 16,
         "n_available": 16, "source": "synthetic", "scale": [1, 5]}]


def _preds(n: int = 16) -> list[dict]:
    return [r for judge, seed in (("base", 1), ("trained", 2)) for s in ("heldout", "vicuna")
            for r in synthetic_predictions(n, judge=judge, set_name=s, seed=seed, sharpness=3.0)]


def _metrics(preds, **kw) -> dict:
    return compute_metrics(preds, sets=SETS, judges=["base", "trained"], baseline="base", n_values=[1, 3],
                           n_boot=100, level=0.95, seed=0, **kw)


def _unexplained_numbers(report: str, metrics: dict) -> set[str]:
    have = {f"{x:.{nd}f}" for x in all_floats(metrics) for nd in (1, 2, 3)}
    return set(re.findall(r"-?\d+\.\d+", report)) - have


def test_cascade_metrics_and_report_section():
    m = json.loads(json.dumps(_metrics(_preds())))  # as read back from metrics.json
    assert set(m["cascade"]) == {"base", "trained"}
    assert set(m["cascade"]["base"]) == {"heldout"}  # mimic sets only
    r = m["cascade"]["trained"]["heldout"]
    assert r["n"] == 16 and r["n_no_score"] == 0 and r["tolerance"] == 0
    assert r["blend"]["share"][0] == 0.0 and r["blend"]["share"][-1] == 1.0 and len(r["blend"]["share"]) == 11
    assert r["blend"]["teacher_calls_per_1000"][-1] == 1000.0
    g = r["guarantee"]
    assert g["n_splits"] == 1000 and g["n_calibration"] == 8 and g["min_n"] == 8
    assert g["status"] in ("ok", "no_threshold") and g["best_bound"] <= m["meta"]["cascade"]["alpha"]
    report = render_markdown(m)
    assert "## Trust or escalate: a cascade on `heldout`" in report and "cascade on `vicuna`" not in report
    assert "100% escalated" in report and "teacher calls per 1,000 items" in report
    assert not _unexplained_numbers(report, m)


def test_infeasible_guarantee_is_reported_as_such():
    m = json.loads(json.dumps(_metrics(_preds(), cascade={"alpha": 0.05, "delta": 0.05})))
    assert m["cascade"]["base"]["heldout"]["guarantee"]["status"] == "infeasible"
    report = render_markdown(m)
    assert "infeasible: best bound" in report
    assert not _unexplained_numbers(report, m)


def test_reports_without_cascade_still_render():
    m = json.loads(json.dumps(_metrics(_preds())))
    del m["cascade"], m["meta"]["cascade"]
    assert "Trust or escalate" not in render_markdown(m)


def test_recompute_keeps_the_cascade_parameters_and_plots(tmp_path):
    preds = _preds(40)
    m = _metrics(preds, cascade={"alpha": 0.25, "n_splits": 300})
    out = R.write_report(tmp_path / "report", m, preds, config_text=None)
    assert (out / "plots" / "cascade__heldout.png").stat().st_size > 0
    again = R.recompute(out, plots=False)
    assert again["meta"]["cascade"]["alpha"] == 0.25
    assert json.dumps(again["cascade"], sort_keys=True) == json.dumps(json.loads(json.dumps(m["cascade"])),
                                                                      sort_keys=True)
