"""`judgeforge eval --config configs/eval/<name>.yaml`: judges x sets -> a report directory.

    report.md          tables (Tables 3, 12, 13 layouts) rendered from metrics.json
    metrics.json       every number in report.md
    predictions.jsonl  raw per-unit judge samples, bias-probe units included (metrics can be
                       recomputed: --recompute DIR)
    plots/*.png        scatter, confusion matrix, per-category bars, N ablation
    report.html        report.md's tables and the plots in one self-contained page (eval.html)
    config.yaml        the resolved config
    wandb/             with `tracking.wandb`: the wandb run (offline unless WANDB_API_KEY is set)

The directory is written atomically: a failed run leaves no half report. An earlier report there is
replaced only with `--overwrite`, anything else there is refused (judgeforge.io.check_out), and one
eval writes it at a time (judgeforge.io.run_lock). With `runtime: {kind: ray}`
the judges grade on Ray replicas (judgeforge.scale) and each finished batch's records are appended
to journal.jsonl in the out dir: a killed run, rerun, grades only the units missing there.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shlex
import shutil
import sys
from pathlib import Path

from judgeforge.config import ConfigError, builtin_config, command_parser, dump_config, load_config
from judgeforge.eval import sets as S
from judgeforge.eval.config import EvalConfig, JudgeConfig, SetConfig
from judgeforge.eval.html import report_html
from judgeforge.eval.judges import (JOURNAL, PROBE, add_lengths, build_units, grade_judge, mark_unsampled,
                                     merged_model_dir)
from judgeforge.eval.metrics_file import SCORE_ONLY, Metrics
from judgeforge.eval.report import compute_metrics, render_markdown
from judgeforge.io import atomic_dir, atomic_write_json, atomic_write_text, claim_dir, read_jsonl, write_jsonl
from judgeforge.redact import redact_url

log = logging.getLogger(__name__)


def load_set(sc: SetConfig, seed: int) -> S.EvalSet:
    """One configured set through its registered kind (eval.sets.SET_KINDS), subset by its seeded
    `max_items`, with what its loader kept and rejected. Raises SetUnavailable when absent."""
    kind = S.SET_KINDS.get(sc.kind)
    records = S.Records()
    items, n = kind.load(sc, seed, records)
    if not items:
        raise S.SetUnavailable(f"{sc.path} holds no items for this set (response_models filter?)")
    return S.EvalSet(name=sc.name, kind="pairwise" if kind.pairwise else "absolute", reference=kind.reference,
                     items=S.subset(items, sc.max_items, seed), source=sc.path, n_available=n,
                     rubric_preset=sc.rubric_preset if kind.preset else None, records=records)


def load_sets(cfg: EvalConfig) -> tuple[list[S.EvalSet], list[dict]]:
    loaded, skipped = [], []
    for sc in cfg.sets:
        try:
            loaded.append(load_set(sc, cfg.seed))
        except S.SetUnavailable as e:
            if sc.required:
                raise ConfigError(f"set {sc.name!r} is required but unavailable: {e}") from None
            log.warning("skipping set %r: %s", sc.name, e)
            skipped.append({"name": sc.name, "kind": sc.kind, "role": sc.role, "reason": str(e)})
    return loaded, skipped


def engine_config(judge: JudgeConfig, seed: int):
    """The judge's engine config (seeded), pointed at the merged model when an adapter is given."""
    ecfg = judge.engine.model_copy(update={"seed": seed})
    if judge.adapter:
        if ecfg.kind == "openai":
            raise ConfigError(f"judge {judge.name!r}: an adapter cannot be merged into a remote model")
        ecfg = ecfg.model_copy(update={"model": str(merged_model_dir(ecfg.model, judge.adapter))})
    return ecfg


def describe(judge: JudgeConfig) -> dict:
    e = judge.engine
    what = f"{e.kind} engine, model `{e.model}`"
    if judge.adapter:
        what += f" + adapter `{judge.adapter}` (merged on CPU)"
    if e.kind == "openai":
        what += f" at {redact_url(e.base_url)}"  # the report may be shared: no credentials
    return {"name": judge.name, "description": what}


def _length_tokenizer(cfg: EvalConfig):
    from judgeforge.judge.engines import load_tokenizer

    name = cfg.length_tokenizer or next((j.engine.tokenizer or j.engine.model for j in cfg.judges), None)
    try:
        return load_tokenizer(name) if name else None
    except Exception as e:  # lengths are an extra; never fail a run for them
        log.warning("no tokenizer for response lengths (%s); length bias skipped", e)
        return None


def set_summaries(cfg: EvalConfig, sets: list[S.EvalSet]) -> list[dict]:
    by_name = {s.name: s for s in cfg.sets}
    out = []
    for s in sets:
        sc = by_name[s.name]
        scale = s.items[0].scale
        out.append({**s.summary(), "role": sc.role, "set_kind": sc.kind, "scale": [scale.lo, scale.hi],
                    "modes": sc.modes if s.kind == "pairwise" else ["absolute"],
                    "external_ranking": sc.external_ranking,
                    **({"ties": {"margin": sc.tie_margin, "fraction": sc.tie_calibration_fraction}}
                       if sc.tie_margin is not None else {})})
    return out


def run_eval(cfg: EvalConfig, command: str = "", overwrite: bool = False) -> dict:
    """Run every judge over every set and write the report directory; returns the metrics.

    `out` is checked first (io.check_out): an earlier report there is replaced only with `overwrite`,
    an unfinished run's journal is resumed, anything else is refused. It is locked for the whole run:
    a second eval on it stops at once."""
    out = Path(cfg.out)
    finished = (out / "metrics.json").is_file()
    with claim_dir(out, "eval", overwrite=overwrite, resume=not finished):
        return _run_eval(cfg, command)


def _run_eval(cfg: EvalConfig, command: str) -> dict:
    sets, skipped = load_sets(cfg)
    if not sets:
        raise ConfigError("no evaluation set could be loaded: " + "; ".join(s["reason"] for s in skipped))
    units = build_units(sets, {s.name: s.modes for s in cfg.sets}, cfg.probes)
    if cfg.sampling.sampled:  # without a sampled pass there is nothing to keep to a subset
        mark_unsampled(units, {s.name: s.sampled_items for s in cfg.sets}, cfg.seed)
    add_lengths(units, _length_tokenizer(cfg))
    n_max = max(cfg.n_values)
    preds, timing = [], {}
    for judge in cfg.judges:
        ecfg = engine_config(judge, cfg.sampling.engine_seed)
        log.info("judge %r: %d prompts x %d samples", judge.name, len(units), n_max)
        recs, timing[judge.name] = grade_judge(ecfg, units, n=n_max, sampling=cfg.sampling, runtime=cfg.runtime,
                                               journal=Path(cfg.out) / JOURNAL)
        preds += [{"judge": judge.name, **r} for r in recs]
    meta = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "command": command,
            "judge_info": [describe(j) for j in cfg.judges], "timing": timing,
            "sampling": cfg.sampling.model_dump(), "probes": cfg.probes.model_dump()}
    metrics = compute_metrics(preds, sets=set_summaries(cfg, sets), judges=[j.name for j in cfg.judges],
                              baseline=cfg.baseline_name, n_values=cfg.n_values, score_only=cfg.sampling.score_only,
                              n_boot=cfg.bootstrap.n_resamples, level=cfg.bootstrap.level,
                              seed=cfg.bootstrap.seed, meta=meta, skipped=skipped,
                              cascade=cfg.cascade.model_dump())
    # run_eval checked `out` and holds it: what is there now is this run's (or the report it may replace).
    write_report(cfg.out, metrics, preds, config_text=dump_config(cfg), plots=cfg.plots, overwrite=True)
    if cfg.tracking.wandb:
        from judgeforge.eval.tracking import log_report  # wandb is heavy: only when asked for

        log_report(cfg.out, metrics, cfg.tracking, config=cfg.model_dump(mode="json"))
    return metrics


def write_report(out: str | Path, metrics: dict, preds: list[dict], *, config_text: str | None,
                 plots: bool = True, overwrite: bool = False) -> Path:
    """report.md, metrics.json, predictions.jsonl, plots/, report.html, config.yaml, all or nothing. A
    `wandb/` directory already there (earlier tracked runs) is carried over. An earlier report at
    `out` is replaced only with `overwrite`."""
    out = Path(out)
    with atomic_dir(out, "eval", overwrite=overwrite) as tmp:
        atomic_write_json(tmp / "metrics.json", metrics)
        written = Metrics.load(tmp).data  # the reports show what metrics.json holds, JSON round trip included
        atomic_write_text(tmp / "report.md", render_markdown(written))
        write_jsonl(tmp / "predictions.jsonl", preds)
        if config_text is not None:
            atomic_write_text(tmp / "config.yaml", config_text)
        if plots:
            from judgeforge.eval.plots import write_plots

            # Plots show the main units; probe units are in the "Bias probes" section.
            write_plots(metrics, [r for r in preds if r["mode"] != PROBE], tmp / "plots")
        atomic_write_text(tmp / "report.html", report_html(written, tmp / "plots"))
        if (out / "wandb").is_dir():
            shutil.copytree(out / "wandb", tmp / "wandb", symlinks=True)
    return out


def recompute(report_dir: str | Path, plots: bool = True) -> dict:
    """Recompute metrics.json, report.md and plots of a report dir from its predictions.jsonl, in
    place (under its run lock)."""
    d = Path(report_dir)
    with claim_dir(d, "eval", resume=True):
        return _recompute(d, plots)


def _recompute(d: Path, plots: bool) -> dict:
    old = Metrics.load(d).data
    preds = read_jsonl(d / "predictions.jsonl")
    meta, boot = old["meta"], old["meta"]["bootstrap"]
    keep = {k: v for k, v in meta.items()
            if k not in ("judges", "baseline", "n_values", "variants", "bootstrap", "cascade")}
    metrics = compute_metrics(preds, sets=old["sets"], judges=meta["judges"], baseline=meta["baseline"],
                              n_values=meta["n_values"],
                              score_only=SCORE_ONLY in meta["variants"],
                              n_boot=boot["n_resamples"], level=boot["level"], seed=boot["seed"], meta=keep,
                              skipped=old.get("skipped"), cascade=meta.get("cascade"))
    cfg_file = d / "config.yaml"
    write_report(d, metrics, preds, config_text=cfg_file.read_text() if cfg_file.is_file() else None,
                 plots=plots, overwrite=True)
    return metrics


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("judgeforge eval", "Evaluate judges against GPT-4 and human labels.", stage="eval")
    parser.add_argument("--out", help="report directory (overrides `out`); it must not exist, be empty, or hold an "
                        "earlier report")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the earlier report at `out` (never a directory that is not one)")
    parser.add_argument("--recompute", metavar="DIR", help="recompute an existing report from its predictions")
    args = parser.parse_args(argv)
    if args.recompute:
        recompute(args.recompute)
        print(Path(args.recompute) / "report.md")
        return 0
    cfg = load_config(EvalConfig, args.config, args.overrides, extra={"out": args.out})
    if args.config is None and not cfg.sets:  # no sets named: the default evaluation, of `data build`'s output
        cfg = load_config(EvalConfig, builtin_config("default", "eval"), args.overrides, extra={"out": args.out})
    command = "judgeforge eval " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    run_eval(cfg, command=command, overwrite=args.overwrite)
    print(Path(cfg.out) / "report.md")
    return 0
