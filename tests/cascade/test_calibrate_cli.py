"""`judgeforge cascade calibrate` on synthetic predictions (the predictions path: no engine)."""

from __future__ import annotations

import json
import logging

import pytest

from judgeforge import cli
from judgeforge.eval.calibration import agrees, calibrate
from judgeforge.cascade.config import CalibrateConfig
from judgeforge.eval.cascade_inputs import from_records
from testing.records import synthetic_predictions
from judgeforge.config import ConfigError, load_config
from judgeforge.judge.prompts import Scale
from judgeforge.io import write_jsonl


@pytest.fixture
def report(tmp_path):
    """An eval report directory holding two judges' predictions (and a relative-mode record)."""
    d = tmp_path / "report"
    d.mkdir()
    preds = (synthetic_predictions(300, judge="trained", set_name="heldout", seed=4, sharpness=2.0)
             + synthetic_predictions(300, judge="base", set_name="heldout", seed=5)
             + [{"judge": "base", "set": "hhh", "mode": "relative", "item_id": "p", "unit": "pair",
                 "ref": None, "samples": []}])
    write_jsonl(d / "predictions.jsonl", preds)
    return d


def test_cli_writes_calibration_and_plot(report, tmp_path):
    out = tmp_path / "cal"
    rc = cli.main(["cascade", "calibrate", f"predictions={report}", "judge=trained", f"out={out}",
                   "alpha=0.2", "delta=0.1"])
    assert rc == 0
    res = json.loads((out / "calibration.json").read_text())
    assert (out / "risk_coverage.png").stat().st_size > 0 and (out / "config.yaml").is_file()
    assert res["source"] == {"predictions": str(report / "predictions.jsonl"), "judge": "trained",
                             "set": "heldout"}
    # The same numbers as calling the library on the same records.
    recs = synthetic_predictions(300, judge="trained", set_name="heldout", seed=4, sharpness=2.0)
    inp = from_records(recs, Scale.parse([1, 5]))
    want = calibrate(inp.confidence, agrees(inp.local, inp.teacher), 0.2, 0.1, 30)
    cal = res["calibration"]
    assert cal["threshold"] == want.threshold and cal["n_covered"] == want.n_covered
    assert cal["upper"] <= 0.2 and 0 < cal["coverage"] < 1 and res["n_items"] == 300
    assert res["coverage_of_all"] == want.n_covered / 300 and res["confidence"] == "vote_prob"


def test_cli_infeasible_says_why_and_writes_nothing(report, tmp_path, caplog):
    out = tmp_path / "cal"
    with caplog.at_level(logging.ERROR):
        rc = cli.main(["cascade", "calibrate", f"predictions={report / 'predictions.jsonl'}", "judge=base",
                       f"out={out}", "alpha=0.01", "delta=0.01"])
    assert rc == 1 and not out.exists()
    assert "best achievable bound" in caplog.text and "need at least 459 items" in caplog.text


def test_ambiguous_or_missing_choices_are_config_errors(report, tmp_path, capsys):
    assert cli.main(["cascade", "calibrate", f"predictions={report}", f"out={tmp_path / 'x'}"]) == 2
    assert "2 judges ['base', 'trained']: choose one with `judge=`" in capsys.readouterr().err
    assert cli.main(["cascade", "calibrate", f"predictions={report}", "judge=nobody"]) == 2
    assert "judge 'nobody' not in the predictions" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="set `predictions`"):
        load_config(CalibrateConfig, None, [])
    with pytest.raises(ConfigError, match="not both"):
        load_config(CalibrateConfig, None, ["predictions=x", "judge={name: j, engine: {kind: vllm}}"])
    cfg = load_config(CalibrateConfig, None, ["judge={name: j, engine: {kind: transformers}}"])
    assert cfg.judge.engine.kind == "transformers"  # the engine path is configured by a judge section


def test_shipped_config_loads(repo):
    cfg = load_config(CalibrateConfig, repo / "configs" / "cascade" / "default.yaml")
    assert cfg.judge == "base" and cfg.alpha == 0.1 and cfg.min_n == 30
