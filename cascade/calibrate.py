"""`judgeforge cascade calibrate --config configs/cascade/default.yaml`: the escalation threshold.

    calibration.json   the certified threshold, its guarantee and the risk-coverage curve
    risk_coverage.png  empirical disagreement and its upper bound against coverage
    predictions.jsonl  engine path only: what the judge drew (reusable as `predictions`)
    config.yaml        the resolved config

Items come from an eval report's predictions (no engine) or from running a judge over the
held-out split of a data build through the judge core (judge.Judge via eval's `grade_units`).
`out` must not exist, be empty, or hold an earlier calibration, replaced only with `--overwrite`;
anything else there is refused, and one calibration writes it at a time (judgeforge.io.claim_dir).
"""

from __future__ import annotations

import logging
from pathlib import Path

from judgeforge.eval.calibration import CalibrationError, agrees, calibrate
from judgeforge.cascade.config import CalibrateConfig
from judgeforge.eval.cascade_inputs import from_records
from judgeforge.eval.metrics_file import Metrics
from judgeforge.config import ConfigError, command_parser, dump_config, load_config
from judgeforge.judge.prompts import DEFAULT_SCALE, Scale
from judgeforge.io import atomic_write_json, atomic_write_jsonl, atomic_write_text, claim_dir, read_jsonl

log = logging.getLogger(__name__)


def _pick(what: str, wanted: str | None, have: list[str]) -> str:
    if wanted is not None:
        if wanted not in have:
            raise ConfigError(f"{what} {wanted!r} not in the predictions; there: {have}")
        return wanted
    if len(have) != 1:
        raise ConfigError(f"the predictions hold {len(have)} {what}s {have}: choose one with `{what}=`")
    return have[0]


def _scale(report_dir: Path, set_name: str, recs: list[dict]) -> Scale:
    """The set's scale from the report's metrics.json, else from the completed distributions."""
    if (report_dir / "metrics.json").is_file():
        s = Metrics.load(report_dir).set(set_name)
        if s and s.get("scale"):
            return Scale.parse(s["scale"])
    keys = {int(k) for r in recs for smp in r["samples"] for k in (smp.get("probs") or {})}
    return Scale.parse([min(keys), max(keys)]) if keys else DEFAULT_SCALE


def from_predictions(cfg: CalibrateConfig) -> tuple[list[dict], Scale, dict]:
    """The chosen judge's absolute units with GPT-4 references, their scale, and where they came from."""
    path = Path(cfg.predictions)
    path = path / "predictions.jsonl" if path.is_dir() else path
    if not path.is_file():
        raise ConfigError(f"predictions not found: {path} (run `judgeforge eval` first)")
    preds = [r for r in read_jsonl(path) if r.get("mode") == "absolute" and r.get("ref") is not None]
    judge = _pick("judge", cfg.judge, sorted({r["judge"] for r in preds}))
    set_name = _pick("set", cfg.set, sorted({r["set"] for r in preds if r["judge"] == judge}))
    recs = sorted((r for r in preds if r["judge"] == judge and r["set"] == set_name),
                  key=lambda r: (r["item_id"], r["unit"]))
    source = {"predictions": str(path), "judge": judge, "set": set_name}
    return recs, _scale(path.parent, set_name, recs), source


def from_engine(cfg: CalibrateConfig) -> tuple[list[dict], Scale, dict]:
    """Run the configured judge over the held-out split of `cfg.data` (heavy: loads an engine)."""
    from judgeforge.eval.config import SetConfig
    from judgeforge.eval.judges import JOURNAL, build_units, grade_judge
    from judgeforge.eval.run import engine_config, load_set

    es = load_set(SetConfig(name="heldout", kind="heldout", path=cfg.data, max_items=cfg.max_items), cfg.seed)
    units = build_units([es], {})
    log.info("judge %r: %d held-out items x %d samples", cfg.judge.name, len(units), cfg.n or 3)
    recs, _ = grade_judge(engine_config(cfg.judge, cfg.sampling.engine_seed), units, n=cfg.n or 3,
                          sampling=cfg.sampling, runtime=cfg.runtime, journal=Path(cfg.out) / JOURNAL)
    recs = [{"judge": cfg.judge.name, **r} for r in recs]
    return recs, es.items[0].scale, {"data": cfg.data, "judge": cfg.judge.name, "set": "heldout"}


def run_calibrate(cfg: CalibrateConfig, overwrite: bool = False) -> dict:
    """Calibrate and write the output directory; raises CalibrationError when nothing passes. An
    earlier calibration at `out` is replaced only with `overwrite` (an unfinished one's journal is
    resumed); it is locked while this runs."""
    out = Path(cfg.out)
    with claim_dir(out, "calibrate", overwrite=overwrite, resume=not (out / "calibration.json").is_file()):
        return _run_calibrate(cfg)


def _run_calibrate(cfg: CalibrateConfig) -> dict:
    recs, scale, source = from_predictions(cfg) if cfg.predictions else from_engine(cfg)
    inp = from_records(recs, scale, k=cfg.n if cfg.predictions else None, confidence=cfg.confidence)
    scored = [i for i, s in enumerate(inp.local) if s is not None]  # the others always escalate
    agree = agrees(inp.local, inp.teacher, cfg.tolerance)
    log.info("%d items with a GPT-4 reference, %d with a local score; exact agreement %.3f",
             len(inp), len(scored), float(agree.mean()) if len(inp) else float("nan"))
    cal = calibrate([inp.confidence[i] for i in scored], agree[scored], cfg.alpha, cfg.delta, cfg.min_n,
                    tolerance=cfg.tolerance)
    result = {"calibration": cal.to_dict(), "source": source, "confidence": cfg.confidence,
              "teacher": "gpt-4 first sample (ref_samples[0])", "n_items": len(inp),
              "n_no_score": len(inp) - len(scored), "coverage_of_all": cal.n_covered / len(inp),
              "rule": "answer locally when confidence >= threshold; escalate otherwise"}
    _write(cfg, result, recs if not cfg.predictions else None)
    if not cfg.predictions:
        from judgeforge.eval.judges import JOURNAL

        (Path(cfg.out) / JOURNAL).unlink(missing_ok=True)  # a Ray run's batches: now in predictions.jsonl
    return result


def _write(cfg: CalibrateConfig, result: dict, recs: list[dict] | None) -> None:
    out = Path(cfg.out)
    atomic_write_json(out / "calibration.json", result)
    atomic_write_text(out / "config.yaml", dump_config(cfg))
    if recs is not None:
        atomic_write_jsonl(out / "predictions.jsonl", recs)
    if cfg.plot:
        plot_risk_coverage(result["calibration"], out / "risk_coverage.png")


def plot_risk_coverage(cal: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = cal["curve"]
    fig, ax = plt.subplots(figsize=(5, 3.8))
    ax.step(c["coverage"], c["disagreement"], where="post", label="empirical disagreement")
    ax.step(c["coverage"], c["upper"], where="post",
            label=f"upper bound (1 - delta = {1 - cal['delta']:.2f})")
    ax.axhline(cal["alpha"], color="k", ls="--", lw=0.8, label=f"alpha = {cal['alpha']}")
    ax.axvline(cal["min_n"] / cal["n"], color="grey", ls=":", lw=0.8,
               label=f"min_n = {cal['min_n']} (untested left of it)")
    ax.plot([cal["coverage"]], [cal["upper"]], "ro", label=f"threshold {cal['threshold']:.3f}")
    ax.set_xlabel("coverage (share answered locally)")
    ax.set_ylabel("disagreement with GPT-4")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("judgeforge cascade calibrate", "Calibrate a local judge's escalation "
                            "threshold against GPT-4 (Trust or Escalate).", stage="cascade")
    parser.add_argument("--out", help="output directory (overrides `out`); it must not exist, be empty, or hold an "
                        "earlier calibration")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the earlier calibration at `out` (never a directory that is not one)")
    args = parser.parse_args(argv)
    cfg = load_config(CalibrateConfig, args.config, args.overrides, extra={"out": args.out})
    try:
        res = run_calibrate(cfg, overwrite=args.overwrite)
    except CalibrationError as e:
        log.error("no threshold certified: %s", e)
        return 1
    cal = res["calibration"]
    log.info("threshold %.4f: %d/%d answered locally, disagreement %.3f <= bound %.3f <= alpha %s",
             cal["threshold"], cal["n_covered"], res["n_items"], cal["disagreement"], cal["upper"],
             cal["alpha"])
    log.info("wrote %s", Path(cfg.out) / "calibration.json")
    return 0
