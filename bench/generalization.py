"""Issue 21: the generalization table, the base against the shipped `default-judge` on every set of
configs/eval/generalization.yaml, one `judgeforge eval` run per set.

    python bench/generalization.py run --sets vicuna_bench,hhh_alignment --max-items vicuna_bench=160
    python bench/generalization.py run --sets autoj --max-items autoj=500 --ray   # resumable mid-set
    python bench/generalization.py table     # merge the committed sets: report + table markdown
    python bench/generalization.py candidate --name scorepairs-r6 --adapter runs/curve/choices/scorepairs-r6/train
    python bench/generalization.py candidates --name scorepairs-r6   # its table against the shipped judge
    python bench/generalization.py checks --name scorepairs-r6 --heldout runs/curve/choices/scorepairs-r6/eval

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
from judgeforge.config import read_yaml
from judgeforge.eval.metrics_file import Metrics

CONFIG = REPO / "configs" / "eval" / "generalization.yaml"
ROOT = REPO / "runs" / "eval" / "generalization"
RESULTS = REPO / "bench" / "results" / "generalization"
KEEP = ("predictions.jsonl", "metrics.json", "config.yaml", "report.md")
log = logging.getLogger("generalization")


def set_config(name: str, max_items: int | None) -> dict:
    """configs/eval/generalization.yaml with only set `name` (and its seeded subset size)."""
    cfg = read_yaml(CONFIG)
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
    timed([*JF, "eval", "--overwrite", "--config", str(path), *extra], cost, name)  # another judge's report there
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
    names = args.sets.split(",") if args.sets else [s["name"] for s in read_yaml(CONFIG)["sets"]]
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
    order = [s["name"] for s in read_yaml(CONFIG)["sets"]]
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


def _variant(m: Metrics) -> str:
    """The variant a report's tables read: score-only E[score] (how the shipped judge is used) where graded."""
    return "score_only" if "score_only" in m.variants else m.primary_variant


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
    v = _variant(m)
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
    v = _variant(m)
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


CANDIDATES = RESULTS / "candidates"
"""A candidate judge graded alone on the kept sets' items, compared paired with the kept judges there."""


def candidate_config(name: str, set_names: list[str], adapter: str) -> dict:
    """The sets' config with each kept set's subset size (so its items exactly), graded in one run (one
    engine start) by the candidate alone: the shipped judge's engine on the base model, with the
    candidate's adapter merged."""
    sets = []
    for set_name in set_names:
        kept = yaml.safe_load((RESULTS / set_name / "config.yaml").read_text()).get("sets") or []
        size = next((s.get("max_items") for s in kept if s["name"] == set_name), None)
        sets += set_config(set_name, size)["sets"]
    cfg = read_yaml(CONFIG)
    engine = next(j for j in cfg["judges"] if j["name"] == "default-judge")["engine"]
    return {**cfg, "sets": sets, "out": str(ROOT / "candidates" / name),
            "judges": [{"name": name, "adapter": str(adapter), "engine": {**engine, "model": "default"}}]}


def candidate(args) -> None:
    """Grade a candidate judge (an adapter) on the kept sets in one run, keep its report in
    bench/results/generalization/candidates/<name>/, and compare it per set, paired, with the shipped judge
    and the base there (`judgeforge eval compare --judges`), so round 5 is never regraded."""
    now_sha = shipped()["adapter_sha256"]
    names = args.sets.split(",") if args.sets else [d.name for d in sorted(RESULTS.iterdir())
                                                      if (d / "metrics.json").is_file()]
    for set_name in names:
        was = json.loads((RESULTS / set_name / "cost.json").read_text()).get("default_judge", {}).get("adapter_sha256")
        if was != now_sha:
            raise SystemExit(f"{set_name} is kept for another default-judge than the shipped one: "
                             f"`python bench/generalization.py run --sets {set_name}` first")
    kept, out = CANDIDATES / args.name, ROOT / "candidates"
    if not (kept / "metrics.json").is_file():
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{args.name}.yaml"
        path.write_text(yaml.safe_dump(candidate_config(args.name, names, args.adapter), sort_keys=False))
        cost = out / f"{args.name}.cost.json"
        timed([*JF, "eval", "--overwrite", "--config", str(path), *(RESUMABLE if args.ray else [])], cost, args.name)
        kept.mkdir(parents=True, exist_ok=True)
        for f in KEEP:
            shutil.copy2(out / args.name / f, kept / f)
        c = json.loads(cost.read_text())
        c.update(cpu=cpu(), date=now(), adapter=str(args.adapter), sets=names, default_judge=shipped())
        (kept / "cost.json").write_text(json.dumps(c, indent=2))
    (kept / "vs").mkdir(exist_ok=True)
    for set_name in names:
        for judge in ("default-judge", "base"):
            stem = kept / "vs" / f"{set_name}-vs-{judge}"
            timed([*JF, "eval", "compare", "--overwrite", str(RESULTS / set_name), str(kept), "--judges",
                   f"{judge}:{args.name}", "--out", f"{stem}.md", "--json", f"{stem}.json"],
                  out / f"{args.name}.compare.cost.json",
                  f"{set_name}-vs-{judge}")


def _row_of(kept: Path, set_name: str, judge: str, variant: str) -> dict:
    rows = json.loads((kept / "vs" / f"{set_name}-vs-{judge}.json").read_text())
    return next(r for r in rows if r["variant"] == variant and r["set"] == set_name)


def _paired_ci(d: dict | None) -> str:
    d = d or {}
    return _ci(d.get("diff"), d.get("lo"), d.get("hi"))


def candidates(args) -> str:
    """candidates/<name>/table.md: per kept set, the shipped judge, the candidate, their paired
    difference, and the candidate's length-bias and 3-way figures beside the shipped judge's."""
    kept = CANDIDATES / args.name
    if not (kept / "metrics.json").is_file():
        raise SystemExit(f"no candidate {args.name!r} in {CANDIDATES}: `python bench/generalization.py candidate` first")
    mc = Metrics.load(kept)
    v = _variant(mc)
    head = ["set", "metric", "n", "default-judge (round 5)", args.name, "Δ vs round 5 [paired 95% CI]",
            "Δ vs base [paired 95% CI]", "shorter preferred: Δ vs round 5 / vs base [paired]",
            "r(score, length) or 3-way: round 5 → candidate"]
    rows = []
    for s in mc.sets():
        name = s["name"]
        r5, rb = _row_of(kept, name, "default-judge", v), _row_of(kept, name, "base", v)
        ms = Metrics.load(RESULTS / name)
        mode = {} if s["kind"] == "absolute" else {"mode": "absolute"}
        rc, rs = (m.result(j, name, v, **mode) or {} for m, j in ((mc, args.name), (ms, "default-judge")))
        if s["kind"] == "absolute":
            extra = f"{_ci_of(rs.get('length', {}).get('judge'))} → {_ci_of(rc.get('length', {}).get('judge'))}"
        else:
            extra = f"3-way {_ci_of(_three(rs))} → {_ci_of(_three(rc))}"
        short = " / ".join(_paired_ci((r["paired"] or {}).get("shorter_preferred")) for r in (r5, rb))
        rows.append([name, r5["metric"], str((r5["paired"] or {}).get("n", "-")), _f(r5["a"]), _f(r5["b"]),
                     _paired_ci(r5["paired"]), _paired_ci(rb["paired"]),
                     short if s["kind"] != "absolute" else "", extra])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(lines + ["", f"Variant `{v}`; paired bootstrap over the same items (`judgeforge eval compare "
                              f"--judges`); `python bench/generalization.py candidates --name {args.name}`."]) + "\n"
    (CANDIDATES / args.name / "table.md").write_text(text)
    sys.stdout.write(text)
    return text


SHIP_RULES = {"pandalm": 0.60, "autoj": 0.52}
"""Issue 31's 3-way floors: PandaLM-7B's and Auto-J-13B's reach (ties included), rounded down."""


def ship_checks(cand: Metrics, name: str, vs: dict[tuple[str, str], dict], heldout: dict | None) -> list[dict]:
    """Issue 31's "done when", one dict per check (what, figure, rule, passed; None: not measured). `vs`:
    (set, kept judge) -> the paired comparison row (`_row_of`); `heldout`: the candidate's metrics on the 160
    held-out MT-Bench items (variant result) when not graded among the sets. "Worse" and "below" mean a
    paired interval wholly below 0, as in the generalization table."""
    v = _variant(cand)
    mt = cand.result(name, "heldout_mt_bench", v) or heldout or {}
    pearson, length = mt.get("correlation", {}).get("pearson"), (mt.get("length") or {}).get("judge")
    def paired(set_name: str, judge: str, key: str | None = None) -> dict | None:
        d = (vs.get((set_name, judge)) or {}).get("paired")
        return (d or {}).get(key) if key else d

    fig = lambda f: None if not f else f.get("value", f.get("diff"))
    out = [("Pearson with GPT-4, 160 held-out MT-Bench items", pearson, ">= 0.60",
            None if fig(pearson) is None else fig(pearson) >= 0.60),
           ("r(score, length), the same items", length, "<= 0.30", None if fig(length) is None else fig(length) <= 0.30)]
    d = paired("heldout_fastchat", "default-judge")
    out.append(("FastChat held-out (mistral-orpo-trl), Δ vs round 5", d, "paired lo > 0", None if not d else d["lo"] > 0))
    for s in ("autoj", "pandalm"):
        d = paired(s, "base", "shorter_preferred")
        out.append((f"{s}, pairs humans decide for the shorter response: Δ vs base", d, "paired lo > 0",
                    None if not d else d["lo"] > 0))
        t = _three(cand.result(name, s, v, mode="absolute") or {})
        out.append((f"{s} 3-way accuracy", t, f">= {SHIP_RULES[s]:.2f}", None if not t else t["value"] >= SHIP_RULES[s]))
    d = paired("hhh_alignment", "base")
    out.append(("HHH alignment, Δ vs base", d, "not below 0 (paired hi >= 0)", None if not d else d["hi"] >= 0))
    worse = [s for (s, j), row in vs.items() if j == "default-judge" and (row.get("paired") or {}).get("hi", 0) < 0]
    graded = sorted({s for s, j in vs if j == "default-judge"})
    out.append(("no set worse than round 5", {"worse": worse, "sets": graded}, "no paired hi < 0",
                None if not graded else not worse))
    return [{"check": c, "figure": f, "rule": r, "passed": ok} for c, f, r, ok in out]


def checks(args) -> str:
    """candidates/<name>/checks.md and checks.json: issue 31's ship checks on the candidate's kept figures."""
    kept = CANDIDATES / args.name
    cand = Metrics.load(kept)
    vs = {}
    for path in sorted((kept / "vs").glob("*-vs-*.json")):
        set_name, judge = path.stem.rsplit("-vs-", 1)
        vs[(set_name, judge)] = _row_of(kept, set_name, judge, _variant(cand))
    heldout = None
    if args.heldout:  # the 160 items as a learning-curve choice grades them (set `heldout`)
        m = Metrics.load(Path(args.heldout))
        heldout = m.result(m.judges[0], "heldout", _variant(m))
    rows = ship_checks(cand, args.name, vs, heldout)
    show = lambda f: (_ci(f.get("value", f.get("diff")), f.get("lo"), f.get("hi")) if f and "lo" in f
                      else ", ".join(f"{k}: {x}" for k, x in f.items()) if f else "not measured")
    verdict = {True: "pass", False: "**fail**", None: "not measured"}
    lines = ["| check | figure [95% CI] | rule | verdict |", "|---|---|---|---|"] + [
        f"| {r['check']} | {show(r['figure'])} | {r['rule']} | {verdict[r['passed']]} |" for r in rows]
    ship = all(r["passed"] for r in rows)
    text = "\n".join(lines + ["", f"Ship: **{'yes' if ship else 'no'}** (every check must pass). "
                              f"`python bench/generalization.py checks --name {args.name}`."]) + "\n"
    (kept / "checks.md").write_text(text)
    (kept / "checks.json").write_text(json.dumps({"ship": ship, "checks": rows}, indent=1))
    sys.stdout.write(text)
    return text


def _three(r: dict) -> dict | None:
    t = r.get("three_way")
    return {"value": t["accuracy"], "lo": t["lo"], "hi": t["hi"]} if t else None


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
    c = sub.add_parser("candidate", help="grade a candidate adapter on the kept sets, paired with round 5 there")
    c.add_argument("--name", required=True, help="its judge name and dir: candidates/<name>/")
    c.add_argument("--adapter", required=True, help="a `judgeforge train` run dir or adapter dir")
    c.add_argument("--sets", help="comma-separated kept sets (default: every kept set)")
    c.add_argument("--ray", action="store_true", help="grade on one Ray replica (resumable mid-set)")
    ct = sub.add_parser("candidates", help="a candidate's table against the shipped judge")
    ct.add_argument("--name", required=True)
    k = sub.add_parser("checks", help="issue 31's ship checks on a candidate's kept figures")
    k.add_argument("--name", required=True)
    k.add_argument("--heldout", help="an eval dir with the candidate on the 160 held-out items (set `heldout`, "
                   "a learning-curve choice's), used where heldout_mt_bench was not among its sets")
    args = p.parse_args(argv)
    {"run": run, "table": table, "candidate": candidate, "candidates": candidates, "checks": checks}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
