"""Issue 11: pairwise-to-pointwise distillation against plain SFT on the same records.

    python bench/distill_vs_sft.py run --records 150      # start eval, both arms' training and evals
    python bench/distill_vs_sft.py table                  # markdown, from runs/distill/summary.json

Both arms continue the shipped default judge (judgeforge/default_judge; round 2 when the committed results
were made, round 3 since) for one continual round, `judgeforge train --continue judgeforge/default_judge`: the
same window of configs/data/embedded-judge.yaml's shuffled train split (the one after the shipped judge's last
window, train/rounds.py), with the same recipe (configs/train/embedded-judge.yaml):
- sft: the recipe as it is;
- distill: the recipe plus the RankNet loss on the judge's expected scores of the AlpacaEval GPT-4
  preference pairs of configs/data/alpaca-eval.yaml's train split (`--set` adds overrides).
The start judge and both arms are evaluated with configs/eval/distill.yaml (GPT-4 correlation on the 160
held-out MT-Bench items, human agreement on HHH, GPT-4 agreement on the held-out AlpacaEval pairs), and
compared pairwise on the same items (`judgeforge eval compare`: paired bootstrap intervals). Steps are
judgeforge subprocesses, timed into cost.json and skipped when done (bench/learning_curve.py's runner);
a killed training resumes from its checkpoint. Everything lands in runs/distill/; the summary and
its table also in bench/results/distill_vs_sft/.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning_curve as lc  # noqa: E402  (the timed, resumable step runner)
from judgeforge.config import read_yaml  # noqa: E402
from judgeforge.eval.metrics_file import SCORE_ONLY, Metrics  # noqa: E402

ROOT = lc.REPO / "runs" / "distill"
RESULTS = lc.REPO / "bench" / "results" / "distill_vs_sft"
EVAL_CFG = lc.REPO / "configs" / "eval" / "distill.yaml"
START = "judgeforge/default_judge"
"""The adapter both arms continue: `--continue` trains on the window after its last one, so a rerun
never trains on records the start already saw."""

DISTILL = {"enabled": True, "weight": 1.0, "sources": ["runs/data/alpaca-eval"], "scale": [1, 5],
           "sigma": 1.0, "ties": "skip", "batch_pairs": 1}
BUILDS = {"runs/data/embedded-judge": "configs/data/embedded-judge.yaml",
          "runs/data/alpaca-eval": "configs/data/alpaca-eval.yaml"}
ARMS = ("sft", "distill")
log = logging.getLogger("distill_vs_sft")


def train_arm(arm: str, records: int, sets: list[str]) -> Path:
    adir = ROOT / arm
    cfg = read_yaml(lc.TRAIN_CFG)
    cfg["out"] = str(adir / "train")
    cfg["data"]["sources"][0]["limit"] = records
    cfg["tracking"]["run_name"] = f"distill-vs-sft-{arm}-train"
    if arm == "distill":
        cfg["distill"] = dict(DISTILL)
        for s in sets:
            key, value = s.split("=", 1)
            lc.set_dotted(cfg, key, yaml.safe_load(value))
    lc.train_once(adir, cfg, continue_from=START)
    return adir / "train"


def compare(a: str, b: str) -> None:
    out = ROOT / f"compare-{b}-vs-{a}"
    if not out.with_suffix(".json").is_file():
        lc.timed([*lc.JF, "eval", "compare", "--overwrite", str(ROOT / a / "eval"), str(ROOT / b / "eval"), "--out",
                  str(out.with_suffix(".md")), "--json", str(out.with_suffix(".json"))], ROOT / "cost.json",
                 out.name)


def run(args) -> None:
    ROOT.mkdir(parents=True, exist_ok=True)
    lc.ensure_builds(BUILDS, ROOT / "cost.json")
    adapters = {arm: train_arm(arm, args.records, args.set) for arm in ARMS}  # the long part first
    lc.eval_round("start", None, ROOT / "start" / "eval", ROOT / "start" / "cost.json", [], config=EVAL_CFG)
    for arm, adapter in adapters.items():
        lc.eval_round(arm, adapter, ROOT / arm / "eval", ROOT / arm / "cost.json", [], config=EVAL_CFG)
    for a, b in (("start", "sft"), ("start", "distill"), ("sft", "distill")):
        compare(a, b)
    summ = summary()
    RESULTS.mkdir(parents=True, exist_ok=True)  # committed: runs/ does not always survive
    for d in (ROOT, RESULTS):
        (d / "summary.json").write_text(json.dumps(summ, indent=1))
        (d / "table.md").write_text(table(summ))


VARIANT = SCORE_ONLY
"""The score the served score-only judge gives: E[score] over the scale, read after `[RESULT] `."""
SETS = (("heldout", "GPT-4 Pearson, 160 held-out MT-Bench items"), ("hhh", "HHH human agreement, 221 pairs"),
        ("alpaca_heldout", "AlpacaEval held-out GPT-4 agreement, 49 pairs"))


def _headline(eval_dir: Path) -> dict:
    """Per set: the score-only metric with its interval (Pearson, or pairwise agreement on decisive pairs)."""
    m = Metrics.load(eval_dir)
    judge = m.judges[0]
    out = {}
    for s in m.results(judge):
        if a := m.result(judge, s, VARIANT, mode="absolute"):  # a pairwise set, both sides graded absolutely
            out[s] = {"metric": "accuracy", "value": a["accuracy"], "lo": a["lo"], "hi": a["hi"],
                      "n": a["n_decisive"], "judge_ties": a["judge_ties"]}
        elif r := m.result(judge, s, VARIANT):
            c = r["correlation"]
            out[s] = {"metric": "pearson", **c["pearson"], "n": c["n"]}
    return out


def summary() -> dict:
    arms = {}
    for arm in ("start", *ARMS):
        cost = json.loads((ROOT / arm / "cost.json").read_text())
        data = ROOT / arm / "train" / "data.json"
        distill = ROOT / arm / "train" / "distill.json"
        arms[arm] = {"headline": _headline(ROOT / arm / "eval"),
                     "train_cpu_min": round(cost["train"]["cpu_s"] / 60, 1) if "train" in cost else 0.0,
                     "train_wall_min": round(cost["train"]["wall_s"] / 60, 1) if "train" in cost else 0.0,
                     "eval_cpu_min": round(cost["eval"]["cpu_s"] / 60, 1),
                     "records": json.loads(data.read_text())["train"] if data.is_file() else 0,
                     "distill": json.loads(distill.read_text()) if distill.is_file() else None}
    comps = {p.stem: [r for r in json.loads(p.read_text()) if r["variant"] == VARIANT]
             for p in sorted(ROOT.glob("compare-*.json"))}
    return {"variant": VARIANT, "arms": arms, "compare": comps}


def _ci(d: dict | None) -> str:
    return "n/a" if not d or d.get("value") is None else f"{d['value']:.3f} [{d['lo']:.3f}, {d['hi']:.3f}]"


def _diff(rows: list[dict], name: str) -> str:
    row = next((r for r in rows if r["set"] == name), None)
    p = (row or {}).get("paired") or {}
    return "-" if p.get("lo") is None else f"{row['diff']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}]"


def table(summ: dict) -> str:
    """Markdown: a row per judge, then the paired differences on the same items."""
    head = ["judge", "records", "train CPU min", *(label for _, label in SETS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm, a in summ["arms"].items():
        lines.append("| " + " | ".join([arm, str(a["records"]), f"{a['train_cpu_min']:.1f}",
                                        *(_ci(a["headline"].get(s)) for s, _ in SETS)]) + " |")
    for name, rows in summ["compare"].items():
        lines.append("| " + " | ".join([f"Δ {name.removeprefix('compare-').replace('-vs-', ' − ')} (paired)",
                                        "", "", *(_diff(rows, s) for s, _ in SETS)]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--records", type=int, default=150, help="records of the round (both arms)")
    r.add_argument("--set", action="append", default=[], help="distill arm override key=value")
    sub.add_parser("table")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run(args)
    else:
        sys.stdout.write(table(summary()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
