"""Weights & Biases logging of an eval report (`tracking.wandb`), as lm-eval's `--wandb_args` does.

`report_tables` and `flat_metrics` turn metrics.json into the report's main tables as rows and into
flat scalars keyed `<table>/<set>/<judge>[/<mode>]/<variant>/<column>` (pure, no wandb). `log_report`
is the only code that imports wandb (heavy, so only when tracking is on): one run per report, offline
unless WANDB_API_KEY is set, nothing at all under WANDB_MODE=disabled, like `judgeforge train`.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from judgeforge.eval.metrics_file import Metrics

log = logging.getLogger(__name__)

ID_COLUMNS = ("set", "judge", "mode", "variant")
"""Columns that name a row (they make up the flat keys); every other numeric column is a metric."""


def _ci(prefix: str, e: dict | None, value: str = "value") -> dict:
    e = e or {}
    return {prefix: e.get(value), f"{prefix}_lo": e.get("lo"), f"{prefix}_hi": e.get("hi")}


def correlation_rows(m: dict) -> list[dict]:
    """The correlation tables (absolute sets): one row per set, judge and variant."""
    rows, mf = [], Metrics(m)
    for s in mf.sets("absolute"):
        for judge in mf.judges:
            for v, rep in mf.results(judge).get(s["name"], {}).items():
                c, a = rep["correlation"], rep["agreement"]
                rows.append({"set": s["name"], "judge": judge, "variant": v, "role": s.get("role"),
                             **_ci("pearson", c["pearson"]), **_ci("spearman", c["spearman"]),
                             **_ci("kendall", c["kendall"]),
                             "exact": a["exact"], "within1": a["within1"], "mae": a.get("mae"), "n": rep["n"],
                             "no_score": rep["parse_failures"], "no_score_rate": rep["parse_failure_rate"]})
    return rows


def human_rows(m: dict) -> list[dict]:
    """Agreement with human preferences (pairwise sets): one row per set, judge, mode and variant."""
    rows, mf = [], Metrics(m)
    for s in mf.sets("pairwise"):
        for judge in mf.judges:
            for mode, by_v in mf.results(judge).get(s["name"], {}).items():
                for v, rep in by_v.items():
                    rows.append({"set": s["name"], "judge": judge, "mode": mode, "variant": v,
                                 "accuracy": rep["accuracy"], "accuracy_lo": rep["lo"], "accuracy_hi": rep["hi"],
                                 "accuracy_decided": rep["accuracy_decided"], "n_decided": rep["n_decided"],
                                 "judge_ties": rep["judge_ties"], "no_score": rep["parse_failures"],
                                 "human_ties": rep["human_ties"]["n"], "n_decisive": rep["n_decisive"]})
    return rows


def comparison_rows(m: dict) -> list[dict]:
    """Paired differences against the baseline judge."""
    return [{"set": set_name, "judge": judge, "variant": v, "metric": d["method"], "baseline": d["a"],
             "value": d["b"], "diff": d["diff"], "diff_lo": d["lo"], "diff_hi": d["hi"], "p": d["p"],
             "significant": int(d["significant"]), "n": d["n"]}
            for judge, by_set in (m.get("comparisons") or {}).items()
            for set_name, by_v in by_set.items() for v, d in by_v.items()]


def probe_rows(m: dict, probe: str) -> list[dict]:
    """A bias probe's rows ('swap': position, 'injection': prompt injection), as eval.probes returns them."""
    return [{"set": set_name, "judge": judge, "variant": v, **r}
            for judge, by_set in (m.get("probes") or {}).items()
            for set_name, res in by_set.items() for v, r in res.get(probe, {}).items()]


def report_tables(m: dict) -> dict[str, list[dict]]:
    """Table name -> rows of the report's main tables (empty tables left out)."""
    tables = {"correlation": correlation_rows(m), "human": human_rows(m), "comparison": comparison_rows(m),
              "position": probe_rows(m, "swap"), "injection": probe_rows(m, "injection")}
    return {k: v for k, v in tables.items() if v}


def _key_part(x) -> str:
    # '/' separates wandb sections and '.' nests summary keys: keep both out of names.
    return re.sub(r"[/.\s]+", "_", str(x))


def flat_metrics(tables: dict[str, list[dict]]) -> dict[str, float]:
    """Every numeric cell as `<table>/<set>/<judge>[/<mode>]/<variant>/<column>`; missing values are left
    out (wandb has no None), never set to 0."""
    out: dict[str, float] = {}
    for name, rows in tables.items():
        for row in rows:
            prefix = "/".join([name] + [_key_part(row[c]) for c in ID_COLUMNS if row.get(c) is not None])
            for col, x in row.items():
                if col not in ID_COLUMNS and isinstance(x, (int, float)) and not isinstance(x, bool):
                    out[f"{prefix}/{col}"] = x
    return out


def wandb_mode() -> str:
    """WANDB_MODE if set (disabled turns tracking off), else online with an API key, offline without."""
    return os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")


def log_report(out: str | Path, metrics: dict, tracking, config: dict | None = None) -> Path | None:
    """Log a written report (metrics, main tables, the PNGs under `out/plots`) as one wandb run.

    `tracking`: eval.config.TrackingConfig. The run lives under WANDB_DIR, else `out` (its `wandb/`).
    Returns the run's directory, or None when WANDB_MODE=disabled.
    """
    mode = wandb_mode()
    if mode == "disabled":
        log.info("tracking.wandb is on but WANDB_MODE=disabled: nothing logged")
        return None
    import wandb

    out = Path(out)
    tables = report_tables(metrics)
    run = wandb.init(project=tracking.project, name=tracking.run_name or out.name, group=tracking.group,
                     job_type="eval", dir=os.environ.get("WANDB_DIR") or str(out), config=config, mode=mode)
    try:  # one step: metrics, tables and plots side by side
        run.log({**flat_metrics(tables), **{f"tables/{name}": _table(wandb, rows) for name, rows in tables.items()},
                 **{f"plots/{p.stem}": wandb.Image(str(p)) for p in sorted((out / "plots").glob("*.png"))}})
    finally:
        run.finish()
        # finish() can return before wandb-core has flushed the run's .wandb file (seen offline, on the
        # first run of a process); teardown waits for the service, so the run is complete on return.
        wandb.teardown()
    run_dir = Path(run.dir).parent
    log.info("wandb run %s (%s) logged to %s", run.id, mode, run_dir)
    return run_dir


def _table(wandb, rows: list[dict]):
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in rows], allow_mixed_types=True)
