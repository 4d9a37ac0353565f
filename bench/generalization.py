"""Issue 21: the generalization table, the base against the shipped `default-judge` on every set of
configs/eval/generalization.yaml, one `judgeforge eval` run per set.

    python bench/generalization.py run --sets vicuna_bench,hhh_alignment --max-items vicuna_bench=160
    python bench/generalization.py run --sets autoj --max-items autoj=500 --ray   # resumable mid-set
    python bench/generalization.py table     # merge the committed sets: report + table markdown

The whole config is ~6,000 gradings per judge, hours on a CPU, so it is run a set at a time: each
set's report (predictions, metrics, config, report.md, cost.json with its CPU seconds) is copied to
bench/results/generalization/<set>/ as soon as it ends, and a rerun skips the sets already there.
So the table grows over sessions even when runs/ does not survive. `table` concatenates the
committed sets' predictions and set summaries and recomputes one report from them with
`judgeforge eval --recompute` (the same metrics code as a single run; every set keeps its own
reference, item count and intervals), then writes generalization.md: per set, both judges'
figures and the paired difference (default-judge - base) with its interval.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path

import yaml

from _common import REPO, cpu, now
from learning_curve import JF, timed
from judgeforge.eval.metrics_file import Metrics

CONFIG = REPO / "configs" / "eval" / "generalization.yaml"
ROOT = REPO / "runs" / "eval" / "generalization"
RESULTS = REPO / "bench" / "results" / "generalization"
KEEP = ("predictions.jsonl", "metrics.json", "config.yaml", "report.md")
log = logging.getLogger("generalization")


def set_config(name: str, max_items: int | None) -> dict:
    """configs/eval/generalization.yaml with only set `name` (and its seeded subset size)."""
    cfg = yaml.safe_load(CONFIG.read_text())
    sets = [s for s in cfg["sets"] if s["name"] == name]
    if not sets:
        raise SystemExit(f"no set {name!r} in {CONFIG}: {[s['name'] for s in cfg['sets']]}")
    if max_items is not None:
        sets[0]["max_items"] = max_items
    return {**cfg, "sets": sets, "out": str(ROOT / name)}


RESUMABLE = ["runtime.kind=ray", "runtime.replicas=1"]
"""`--ray`: one engine replica on Ray, whose journal lets a killed set regrade only what it lacks."""


def run_set(name: str, max_items: int | None, extra: list[str] = ()) -> None:
    """Evaluate both judges on one set and keep its report, unless it is already kept."""
    kept = RESULTS / name
    if (kept / "metrics.json").is_file():
        was = json.loads((kept / "cost.json").read_text()).get("default_judge", {}).get("adapter_sha256")
        if was == shipped()["adapter_sha256"]:
            log.info("%s: kept already in %s", name, kept)
            return
        log.info("%s: kept for another default-judge (%s): grading it again", name, was)
    ROOT.mkdir(parents=True, exist_ok=True)
    path = ROOT / f"{name}.yaml"
    path.write_text(yaml.safe_dump(set_config(name, max_items), sort_keys=False))
    cost = ROOT / f"{name}.cost.json"
    timed([*JF, "eval", "--config", str(path), *extra], cost, name)
    kept.mkdir(parents=True, exist_ok=True)
    for f in KEEP:
        shutil.copy2(ROOT / name / f, kept / f)
    c = json.loads(cost.read_text())
    c.update(cpu=cpu(), date=now(), default_judge=shipped())
    (kept / "cost.json").write_text(json.dumps(c, indent=2))


def shipped() -> dict:
    """Which adapter `model: default-judge` was when a set was graded (a set kept for another is stale)."""
    from judgeforge.models import SHIPPED_ADAPTER, shipped_adapter_sha

    info = json.loads((SHIPPED_ADAPTER / "judgeforge.json").read_text())
    return {"adapter_sha256": shipped_adapter_sha(), "shipped_from": info.get("shipped_from"),
            "continued_from": info.get("continued_from")}


def run(args) -> None:
    sizes = dict(kv.split("=", 1) for kv in args.max_items)
    names = args.sets.split(",") if args.sets else [s["name"] for s in yaml.safe_load(CONFIG.read_text())["sets"]]
    for name in names:
        run_set(name, int(sizes[name]) if name in sizes else None, RESUMABLE if args.ray else [])


def merge(kept: list[Path], out: Path) -> Path:
    """One report dir from several one-set reports of the same judges: predictions and set
    summaries concatenated, meta from the first, timing summed per judge."""
    ms = [Metrics.load(d) for d in kept]
    judges = {tuple(m.judges) for m in ms}
    if len(judges) != 1:
        raise SystemExit(f"the kept sets were graded by different judges: {sorted(judges)}")
    out.mkdir(parents=True, exist_ok=True)
    with (out / "predictions.jsonl").open("w") as f:
        for d in kept:
            f.write((d / "predictions.jsonl").read_text())
    data = dict(ms[0].data)
    data["sets"] = [s for m in ms for s in m.data["sets"]]
    data["skipped"] = [s for m in ms for s in m.data.get("skipped", [])]
    data["meta"] = {**data["meta"], "timing": _timing([m.meta.get("timing") or {} for m in ms])}
    (out / "metrics.json").write_text(json.dumps(data))
    shutil.copy2(CONFIG, out / "config.yaml")
    return out


def _timing(per_set: list[dict]) -> dict:
    """Each judge's prompts, samples and seconds summed over the sets (the report's timing table)."""
    out: dict = {}
    for timing in per_set:
        for judge, t in timing.items():
            o = out.setdefault(judge, {"prompts": 0, "samples": 0, "seconds": 0.0})
            for k in o:
                o[k] += t.get(k) or 0
    for o in out.values():
        o["samples_per_s"] = o["samples"] / o["seconds"] if o["seconds"] else None
    return out


def table(args) -> str:
    order = [s["name"] for s in yaml.safe_load(CONFIG.read_text())["sets"]]
    kept = sorted((d for d in RESULTS.iterdir() if (d / "metrics.json").is_file()) if RESULTS.is_dir() else [],
                  key=lambda d: (order.index(d.name) if d.name in order else len(order), d.name))  # config order
    if not kept:
        raise SystemExit(f"no set kept in {RESULTS} yet: run `python bench/generalization.py run` first")
    from judgeforge.eval.run import recompute

    now_sha = shipped()["adapter_sha256"]
    costs = {d.name: json.loads((d / "cost.json").read_text()) for d in kept}
    stale = [n for n, c in costs.items() if c.get("default_judge", {}).get("adapter_sha256") != now_sha]
    if stale and not args.allow_stale:
        raise SystemExit(f"{stale} were graded with another default-judge than the shipped one: delete "
                         f"their dirs in {RESULTS} and run them again (or pass --allow-stale)")
    report = merge(kept, ROOT / "merged")
    m = Metrics(recompute(report, plots=False))
    shutil.copy2(report / "report.md", RESULTS / "report.md")
    text = "\n".join(table_lines(m, costs) + length_lines(m)) + "\n"
    (RESULTS / "generalization.md").write_text(text)
    sys.stdout.write(text)
    return text


def _f(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def _ci(value, lo, hi) -> str:
    return "-" if value is None else f"{value:.3f} [{_f(lo)}, {_f(hi)}]"


def _ci_of(fig: dict | None) -> str:
    """`_ci` of a metrics figure `{value, lo, hi}` (missing: "-")."""
    fig = fig or {}
    return _ci(fig.get("value"), fig.get("lo"), fig.get("hi"))


def _figure(m: Metrics, judge: str, s: dict, variant: str) -> str:
    """Pearson with the set's reference (absolute sets) or accuracy on the decisive pairs (pairwise)."""
    if s["kind"] == "absolute":
        return _ci_of((m.result(judge, s["name"], variant) or {}).get("correlation", {}).get("pearson"))
    r = m.result(judge, s["name"], variant, mode="absolute") or {}
    three = r.get("three_way")
    out = _ci(r.get("accuracy"), r.get("lo"), r.get("hi"))
    return out + (f"; 3-way {_ci(three['accuracy'], three['lo'], three['hi'])}" if three else "")


def table_lines(m: Metrics, costs: dict[str, dict]) -> list[str]:
    """Per set: what it measures, its size, both judges and the paired difference (judge - baseline)."""
    base = m.meta["baseline"]
    judges = [j for j in m.judges if j != base]
    v = "score_only" if "score_only" in m.variants else m.primary_variant
    head = ["set", "role", "reference", "metric", "n", base] + judges + [
        f"Δ {j} − {base} [paired 95% CI]" for j in judges] + ["worse than base?", "CPU-min", "wall-min", "CPU"]
    # Sets are graded in different sessions, on whatever CPU each got: its minutes are that CPU's.
    cpus = sorted({c.get("cpu", "?") for c in costs.values()})
    label = {c: chr(ord("A") + i) for i, c in enumerate(cpus)}
    rows = []
    for s in m.sets():
        name = s["name"]
        metric = "Pearson" if s["kind"] == "absolute" else "accuracy, decisive pairs"
        deltas = [m.data["comparisons"].get(j, {}).get(name, {}).get(v) or {} for j in judges]
        worse = ["yes" if d.get("hi") is not None and d["hi"] < 0 else "no" for d in deltas]
        kept = costs.get(name, {})
        cost = kept.get(name, {})
        rows.append([name, s.get("role") or "-", s.get("reference") or "-", metric, str(s.get("n_items", "-")),
                     *[_figure(m, j, s, v) for j in [base, *judges]],
                     *[_ci(d.get("diff"), d.get("lo"), d.get("hi")) for d in deltas], "/".join(worse),
                     ("≥ " if kept.get("cpu_lower_bound") else "") + f"{cost.get('cpu_s', 0) / 60:.1f}",
                     f"{cost.get('wall_s', 0) / 60:.1f}", label[kept.get("cpu", "?")]])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    pub = m.data.get("published") or {}
    return lines + [""] + ([f"Published (their judges, ties included, not rerun): " + "; ".join(
        f"{n}: " + ", ".join(f"{j} {x}" for j, x in f.items()) for n, f in pub.items()), ""] if pub else []) + [
        f"Variant `{v}`; worse = the paired interval is below 0. Cost: both judges, engine starts included "
        f"(≥: vLLM's workers not counted). CPU {'; '.join(f'{label[c]}: {c}' for c in cpus)}. "
        "`python bench/generalization.py run --sets ...` then `python bench/generalization.py table`."]


def length_lines(m: Metrics) -> list[str]:
    """Per set, each judge's length bias beside the reference's (eval/length.py, docs/evaluation.md):
    absolute sets r(score, length) and the reference's own r; pairwise sets the accuracy on the pairs
    where the reference prefers the shorter response, where it prefers the longer, and the
    length-controlled accuracy (AlpacaEval's regression read at zero length difference)."""
    base = m.meta["baseline"]
    judges = [base] + [j for j in m.judges if j != base]
    v = "score_only" if "score_only" in m.variants else m.primary_variant
    head = ["set", "figure", "reference", *judges]
    rows = []
    for s in m.sets():
        lb = {j: (m.result(j, s["name"], v, **({} if s["kind"] == "absolute" else {"mode": "absolute"})) or {}
                  ).get("length") or {} for j in judges}
        if not any(lb.values()):  # graded without response lengths
            continue
        if s["kind"] == "absolute":
            ref = next((x["reference"] for x in lb.values() if x.get("reference")), None)
            rows.append([s["name"], "r(score, length)", _ci_of(ref), *[_ci_of(lb[j].get("judge")) for j in judges]])
            continue
        pref = next((x["reference_prefers_longer"] for x in lb.values() if x.get("reference_prefers_longer")), None)
        for key, what in (("shorter", "accuracy, shorter preferred"), ("longer", "accuracy, longer preferred"),
                          ("controlled", "accuracy, length-controlled")):
            n = next((lb[j][key].get("n") for j in judges if lb[j].get(key, {}).get("n")), None)
            rows.append([s["name"], what + (f" (n {n})" if n else ""),
                         f"prefers longer {_ci_of(pref)}" if key == "shorter" else "",
                         *[_ci_of(lb[j].get(key)) for j in judges]])
    if not rows:
        return []
    return ["", "Length bias (variant `" + v + "`; eval/length.py, docs/evaluation.md \"Length bias\"; per-judge "
            "95% bootstrap intervals, not paired across judges):", "",
            "| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    p = argparse.ArgumentParser(prog="generalization.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="evaluate both judges on each set not kept yet, keeping each as it ends")
    r.add_argument("--sets", help="comma-separated set names (default: every set of the config, in order)")
    r.add_argument("--max-items", nargs="*", default=[], metavar="SET=N", help="a seeded subset size per set")
    r.add_argument("--ray", action="store_true", help="grade on one Ray replica: a killed set resumes from "
                   "its journal (the large Auto-J and PandaLM sets)")
    t = sub.add_parser("table", help="merge the kept sets into one report and write generalization.md")
    t.add_argument("--allow-stale", action="store_true", help="merge sets graded with an earlier default-judge")
    args = p.parse_args(argv)
    {"run": run, "table": table}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
