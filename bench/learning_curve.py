"""Issue 9: the embedded judge's learning curve, continual LoRA rounds measured on the same items.

    python bench/learning_curve.py run --arm score --rounds 150,150,300
    python bench/learning_curve.py run --arm feedback --rounds 150 --set data.target=feedback
    python bench/learning_curve.py table --arms score,feedback       # markdown, from curve.json files
    python bench/learning_curve.py plot --arms score --out docs/img/learning_curve.png
    python bench/learning_curve.py next --round 6 --continue runs/curve/continued/r5/train   # one more round
    python bench/learning_curve.py choice --name lr1e-3 --vs r6 --continue judgeforge/default_judge \
        --set optim.lr=1e-3                                           # a recipe choice on round 6's window
    python bench/learning_curve.py choice --name gemma-r1 --vs smollm2-r1 --set model.name=gemma3-270m
    python bench/learning_curve.py choice --name soft-r1 --vs smollm2-r1 --build-set sample_policy=distribution \
        --set data.target=distribution                                # a choice with a build of its own

`run`: round 0 is the base judge (shared by every arm); round 1 trains
`configs/train/embedded-judge.yaml` (plus the arm's `--set` overrides) on the first window of the
build's fixed seeded shuffle, and round k `judgeforge train --continue`s round k-1's adapter (the
next window of the build, as the adapter's judgeforge.json records it: train/rounds.py). Each
round is evaluated with `configs/eval/embedded-judge.yaml` and compared with
the base (`judgeforge eval compare`: paired bootstrap intervals on the same items). Each step is
a judgeforge subprocess; its CPU seconds (user + sys of it and its children: the larger of what
the reaped processes report and what polling the live process tree saw) and wall time are
recorded in the round's cost.json. A rerun resumes: finished steps are skipped, and a killed
training continues from its last checkpoint. A bench stopped with SIGTERM (or Ctrl-C) stops its
step and still records that attempt's CPU time (cost.json counts the attempts); one killed with
SIGKILL loses it. Everything lands in runs/curve/<arm>/; `table` and `plot` read its curve.json,
or the committed bench/results/learning_curve/<arm>-curve.json where runs/ has none.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from _common import REPO, tree_cpu_s
from judgeforge.config import read_yaml
from judgeforge.eval.metrics_file import EXPECTED, SCORE_ONLY, Metrics

ROOT = REPO / "runs" / "curve"
RESULTS = REPO / "bench" / "results" / "learning_curve"
TRAIN_CFG = REPO / "configs" / "train" / "embedded-judge.yaml"
EVAL_CFG = REPO / "configs" / "eval" / "embedded-judge.yaml"
BIAS_CFG = REPO / "configs" / "eval" / "embedded-judge-bias.yaml"
ROUNDS_CFG = REPO / "configs" / "eval" / "embedded-judge-rounds.yaml"
JF = [sys.executable, "-m", "judgeforge.cli"]
VARIANTS = ("n1", "n3", EXPECTED, SCORE_ONLY)
DATA_CFG = "configs/data/embedded-judge.yaml"
BUILDS = {"runs/data/embedded-judge": DATA_CFG, "runs/data/fastchat-forks": "configs/data/fastchat-forks.yaml",
          "runs/data/vicuna-train": "configs/data/vicuna-train.yaml"}
"""The data builds the rounds train on (out dir -> `judgeforge data build` config)."""
POLL_S = 2.0
"""How often `timed` reads the step's process tree's CPU time."""
log = logging.getLogger("learning_curve")


def set_dotted(cfg: dict, key: str, value) -> None:
    """`a.b.0.c=value` into nested dicts/lists."""
    *path, last = key.split(".")
    node = cfg
    for p in path:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def timed(cmd: list[str], cost_file: Path, step: str) -> None:
    """Run `cmd`, adding its CPU and wall seconds to cost_file[step] (an attempt per call)."""
    cost = json.loads(cost_file.read_text()) if cost_file.is_file() else {}
    entry = cost.setdefault(step, {"cpu_s": 0.0, "wall_s": 0.0, "attempts": 0, "complete": False})
    entry["attempts"] += 1
    cost_file.write_text(json.dumps(cost, indent=2))  # a killed attempt still shows up as one
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
    log.info("%s: %s", step, " ".join(cmd))
    proc = subprocess.Popen(cmd, cwd=REPO)
    # A stopped bench stops its step too, and still records the CPU it spent: the child's time
    # reaches RUSAGE_CHILDREN only once it is waited for.
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    rc, seen = None, {}
    try:
        while rc is None:
            try:
                rc = proc.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                # vLLM's workers are not always reaped by the step, so RUSAGE_CHILDREN misses them
                seen.update(tree_cpu_s(proc.pid, root=True))
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:  # interrupted (Ctrl-C): stop the step before counting it
            proc.terminate()
            proc.wait()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        reaped = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        entry["cpu_s"] += max(reaped, sum(seen.values()))  # two lower bounds: the closer one
        entry["wall_s"] += time.time() - t0
        entry["complete"] = rc == 0
        cost_file.write_text(json.dumps(cost, indent=2))
    if rc:
        raise SystemExit(f"{step} failed (exit {rc}): {' '.join(cmd)}")


def ensure_builds(builds: dict[str, str], cost: Path) -> None:
    """Build each data build that is not there yet (builds are byte-identical, so a rebuild is the same)."""
    for out, config in builds.items():
        if not (REPO / out / "manifest.json").is_file():
            cost.parent.mkdir(parents=True, exist_ok=True)
            timed([*JF, "data", "build", "--config", config, "--out", out, "progress=false"], cost,
                  f"build:{Path(out).name}")


def eval_round(name: str, adapter: Path | None, out: Path, cost: Path, extra: list[str],
               config: Path = EVAL_CFG) -> None:
    if (out / "metrics.json").is_file():
        return
    cfg = read_yaml(config)
    cfg["out"] = str(out)
    cfg["judges"][0]["name"] = name
    if adapter is not None:
        cfg["judges"][0]["adapter"] = str(adapter)
    out.parent.mkdir(parents=True, exist_ok=True)
    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    timed([*JF, "eval", "--config", str(path), *extra], cost, out.name)


def with_sets(path: Path, sets: list[str]) -> dict:
    """The YAML config at `path` with `key=value` overrides (values parsed as YAML, `a.0.b` indexes lists)."""
    cfg = read_yaml(path)
    for item in sets:
        key, value = item.split("=", 1)
        set_dotted(cfg, key, yaml.safe_load(value))
    return cfg


def recipe(sets: list[str]) -> dict:
    """The training recipe with `key=value` overrides."""
    return with_sets(TRAIN_CFG, sets)


def train_round(arm_dir: Path, k: int, size: int, sets: list[str]) -> Path:
    """Round k on `size` records: round 1 on the build's first window, round k the next after k-1."""
    rdir = arm_dir / f"r{k}"
    cfg = recipe(sets)
    cfg["out"] = str(rdir / "train")
    cfg["data"]["sources"][0].update(offset=0, limit=size)
    cfg["tracking"]["run_name"] = f"{arm_dir.name}-r{k}-train"
    train_once(rdir, cfg, continue_from=arm_dir / f"r{k - 1}" / "train" if k > 1 else None)
    return rdir


def train_once(rdir: Path, cfg: dict, continue_from: str | Path | None = None) -> None:
    """Write rdir/train.yaml and train it (`--continue` the given adapter), unless its adapter is already
    there (a killed run resumes)."""
    rdir.mkdir(parents=True, exist_ok=True)
    path = rdir / "train.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    more = ["--continue", str(continue_from)] if continue_from else []
    if not (rdir / "train" / "adapter" / "judgeforge.json").is_file():
        timed([*JF, "train", "--config", str(path), *more], rdir / "cost.json", "train")


def run(args) -> None:
    base = ROOT / "base"
    ensure_builds(BUILDS, ROOT / "cost.json")
    eval_round("base", None, base / "eval", base / "cost.json", [])
    arm_dir = ROOT / args.arm
    for k, size in enumerate(args.rounds, start=1):
        rdir = train_round(arm_dir, k, size, args.set)
        eval_round(f"{args.arm}-r{k}", rdir / "train", rdir / "eval", rdir / "cost.json", args.eval_set)
        if not (rdir / "compare.json").is_file():
            timed([*JF, "eval", "compare", "--overwrite", str(base / "eval"), str(rdir / "eval"), "--out",
                   str(rdir / "compare.md"), "--json", str(rdir / "compare.json")], rdir / "cost.json", "compare")
        write_curve(arm_dir)


def bias(args) -> None:
    """The bias probes (configs/eval/embedded-judge-bias.yaml) for a round's judge (0: the base)."""
    rdir = ROOT / "base" if args.round == 0 else ROOT / args.arm / f"r{args.round}"
    name = "base" if args.round == 0 else f"{args.arm}-r{args.round}"
    adapter = None if args.round == 0 else rdir / "train"
    eval_round(name, adapter, rdir / "bias", rdir / "cost.json", [], config=BIAS_CFG)


def _metrics(eval_dir: Path) -> dict:
    m = Metrics.load(eval_dir)
    judge = m.judges[0]
    out = {}
    for s, res in m.results(judge).items():
        out[s] = {v: {c: res[v]["correlation"][c] for c in ("pearson", "spearman", "kendall")}
                  | {"no_score_rate": res[v].get("parse_failure_rate"), "n": res[v]["correlation"]["n"]}
                  for v in VARIANTS if v in res}
        out[s]["length_only"] = m.reference(s).get("length_only", {}).get("r")
        out[s]["ceiling"] = m.reference(s).get("ceiling", {}).get("pearson")
    return out


def write_curve(arm_dir: Path) -> dict:
    """curve.json: per round the records, CPU minutes (cumulative), metrics and paired differences."""
    rounds = [{"round": 0, "records": 0, "cpu_min": 0.0, "metrics": _metrics(ROOT / "base" / "eval")}]
    records = cpu = 0.0
    for rdir in sorted(arm_dir.glob("r[0-9]*"), key=lambda p: int(p.name[1:])):
        if not (rdir / "compare.json").is_file():
            break
        data = json.loads((rdir / "train" / "data.json").read_text())
        cost = json.loads((rdir / "cost.json").read_text())
        records += data["train"]
        cpu += cost["train"]["cpu_s"] / 60
        rounds.append({"round": int(rdir.name[1:]), "records": records, "cpu_min": round(cpu, 1),
                       "train_cpu_min": round(cost["train"]["cpu_s"] / 60, 1),
                       "eval_cpu_min": round(cost["eval"]["cpu_s"] / 60, 1),
                       "train_wall_min": round(cost["train"]["wall_s"] / 60, 1),
                       "dropped_overlong": len(data["dropped_overlong"]["train"]),
                       "train_config": _train_config(rdir),
                       "metrics": _metrics(rdir / "eval"),
                       "vs_base": json.loads((rdir / "compare.json").read_text())})
    curve = {"arm": arm_dir.name, "rounds": rounds}
    (arm_dir / "curve.json").write_text(json.dumps(curve, indent=1))
    return curve


def append(args) -> None:
    """Add a round run outside `run` (`judgeforge train --continue` by hand, evaluated score-only on the
    same items) to the committed curve: its records from the train run's data.json, its measured CPU
    minutes, its metrics and its paired comparison with the round before (`eval compare --json`)."""
    path = RESULTS / f"{args.arm}-curve.json"
    curve = json.loads(path.read_text())
    rounds = [r for r in curve["rounds"] if r["round"] != args.round]
    prev = max((r for r in rounds if r["round"] < args.round), key=lambda r: r["round"])
    tdir = Path(args.train_dir) if args.train_dir else None
    data = json.loads((tdir / "data.json").read_text()) if tdir else {"train": args.records}
    rounds.append({"round": args.round, "records": prev["records"] + data["train"],
                   "cpu_min": round(prev["cpu_min"] + args.cpu_min, 1), "train_cpu_min": args.cpu_min,
                   "dropped_overlong": len(data.get("dropped_overlong", {}).get("train", [])) if tdir else None,
                   "train_config": yaml.safe_load((tdir / "config.yaml").read_text()) if tdir else None,
                   "metrics": _metrics(Path(args.eval_dir)), "note": args.note,
                   f"vs_r{prev['round']}": json.loads(Path(args.vs).read_text())})
    curve["rounds"] = sorted(rounds, key=lambda r: r["round"])
    path.write_text(json.dumps(curve, indent=1))
    log.info("round %d appended to %s", args.round, path)


def next_round(args) -> None:
    """Round k end to end, resumable: `train --continue` the given adapter on the build's next window,
    evaluate it score-only on the held-out items (configs/eval/embedded-judge-rounds.yaml, one judge), compare
    it paired with round k-1's committed predictions, keep its results in bench/results/learning_curve/rk/
    and append it to the committed curve. Each step's CPU time goes to runs/curve/continued/rk/cost.json."""
    k = args.round
    rdir, keep = ROOT / "continued" / f"r{k}", RESULTS / f"r{k}"
    vs = _measured_round(rdir, keep, RESULTS / f"r{k - 1}", args.continue_from, args.set, f"continued-r{k}",
                         RESULTS / f"score-r{k}-vs-r{k - 1}.md")
    shutil.copy(rdir / "eval" / "report.md", RESULTS / f"score-r{k}-report.md")
    cost = json.loads((rdir / "cost.json").read_text())
    append(argparse.Namespace(arm="score", round=k, train_dir=str(rdir / "train"), records=None, eval_dir=str(keep),
                              cpu_min=round(cost["train"]["cpu_s"] / 60, 1), vs=str(vs),
                              note=f"bench/learning_curve.py next --round {k} --continue {args.continue_from}"))


def choice(args) -> None:
    """A choice of recipe measured as the rounds are, on the same records and items, kept in
    bench/results/learning_curve/choices/<name>/ (its cost.json beside it). With `--continue`, it trains
    from the adapter a round continued from, so on that round's window; without, from the base on the
    recipe's first window (round 1's). `--vs` (a round, `r6`, or a kept choice's name) compares it paired
    with that one's committed predictions."""
    rdir, keep = ROOT / "choices" / args.name, RESULTS / "choices" / args.name
    vs = None
    if args.vs:
        vs = RESULTS / args.vs if (RESULTS / args.vs).is_dir() else RESULTS / "choices" / args.vs
    sets = list(args.set)
    if args.build_set:  # the choice's own build of the same inputs; it trains on the same window positions
        build = own_build(rdir, args.name, args.build_set)
        sets.insert(0, f"data.sources=[{{path: {build}, offset: 0, limit: {recipe([])['data']['sources'][0]['limit']}}}]")
    _measured_round(rdir, keep, vs, args.continue_from, sets, f"choice-{args.name}",
                    keep / f"vs-{args.vs}.md" if vs else None)
    shutil.copy(rdir / "cost.json", keep / "cost.json")
    (keep / "choice.json").write_text(json.dumps({"name": args.name, "build_set": args.build_set, "set": sets,
                                                  "vs": args.vs, "continue": args.continue_from}, indent=1))


def own_build(rdir: Path, name: str, build_sets: list[str]) -> str:
    """runs/data/embedded-judge-<name>: the rounds' build config with `build_sets` (key=value, YAML values,
    `sources.1.rescale=[1,5]` indexes lists), built once; its config is kept as rdir/data.yaml."""
    cfg = with_sets(REPO / DATA_CFG, build_sets)
    own = f"{cfg['out']}-{name}"
    cfg["out"] = own
    rdir.mkdir(parents=True, exist_ok=True)
    (rdir / "data.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    ensure_builds({own: str(rdir / "data.yaml")}, rdir / "cost.json")
    return own


def _measured_round(rdir: Path, keep: Path, prev: Path | None, continue_from: str | None, sets: list[str],
                    run_name: str, compare_md: Path | None) -> Path | None:
    """Train (resumable), evaluate on the trained base and compare paired with `prev`'s committed
    predictions (none: no comparison); keep the predictions, metrics, adapter metadata and loss curve in
    `keep`. Returns the comparison's json."""
    if prev is not None and not (prev / "predictions.jsonl").is_file():
        raise SystemExit(f"{prev.name}'s predictions are not in {prev}: the paired comparison needs them")
    ensure_builds(BUILDS, rdir / "cost.json")  # runs/ does not always survive a session
    cfg = recipe(sets)
    cfg["out"] = str(rdir / "train")
    cfg["tracking"]["run_name"] = f"{run_name}-train"
    train_once(rdir, cfg, continue_from=continue_from)
    ev = read_yaml(ROUNDS_CFG)
    judge = ev["judges"][-1]
    ev["judges"] = [{**judge, "name": "current", "adapter": str(rdir / "train"),
                     "engine": {**judge["engine"], "model": cfg["model"]["name"]}}]
    ev["out"] = str(rdir / "eval")
    (rdir / "eval.yaml").write_text(yaml.safe_dump(ev, sort_keys=False))
    if not (rdir / "eval" / "metrics.json").is_file():
        timed([*JF, "eval", "--config", str(rdir / "eval.yaml")], rdir / "cost.json", "eval")
    keep.mkdir(parents=True, exist_ok=True)
    vs = None
    if prev is not None:
        vs = keep / f"vs-{prev.name}.json"
        timed([*JF, "eval", "compare", "--overwrite", str(prev), str(rdir / "eval"), "--out", str(compare_md),
               "--json", str(vs)], rdir / "cost.json", "compare")
    for src, name in ((rdir / "eval" / "predictions.jsonl", "predictions.jsonl"),
                      (rdir / "eval" / "metrics.json", "metrics.json"),
                      (rdir / "train" / "adapter" / "judgeforge.json", "judgeforge.json"),
                      (rdir / "train" / "loss.json", "train-loss.json")):
        shutil.copy(src, keep / name)
    return vs


def _train_config(rdir: Path) -> dict:
    """The round's resolved config (its window and adapter as `--continue` decided them), else its recipe."""
    resolved = rdir / "train" / "config.yaml"
    return yaml.safe_load((resolved if resolved.is_file() else rdir / "train.yaml").read_text())


def load_curve(arm: str) -> dict:
    """The arm's curve.json from runs/curve, else the committed one in bench/results/learning_curve."""
    for path in (ROOT / arm / "curve.json", RESULTS / f"{arm}-curve.json"):
        if path.is_file():
            log.info("curve of %s: %s", arm, path)
            return json.loads(path.read_text())
    raise SystemExit(f"no curve for arm {arm!r}: neither {ROOT / arm / 'curve.json'} nor "
                     f"{RESULTS / (arm + '-curve.json')} exists (run `learning_curve.py run --arm {arm}` first)")


def _f(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _ci(d: dict) -> str:
    return f"{_f(d['value'])} [{_f(d['lo'])}, {_f(d['hi'])}]" if d and d.get("value") is not None else "n/a"


def table(args) -> str:
    """Markdown: one row per arm and round, on `--set`, under `--variant`."""
    head = ["arm", "round", "records", "CPU min (cum.)", "Pearson [95% CI]", "Spearman", "Kendall",
            "Δ Pearson vs base [paired CI]", "Δ vs the round before [paired CI]", "no-score",
            f"forgetting: {args.forgetting} Δ Pearson [CI]"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm in args.arms:
        curve = load_curve(arm)
        for r in curve["rounds"]:
            if r["round"] == 0 and arm != args.arms[0]:
                continue
            m = r["metrics"][args.set].get(args.variant, {})
            delta = lambda s, key="vs_base": next((c for c in r.get(key, []) if c["set"] == s and
                                                   c["variant"] == args.variant), None)
            lines.append("| " + " | ".join([
                "base" if r["round"] == 0 else arm, str(r["round"]), str(int(r["records"])), f"{r['cpu_min']:.1f}",
                _ci(m.get("pearson")), _ci(m.get("spearman")), _ci(m.get("kendall")),
                _paired(delta(args.set)), _paired(delta(args.set, f"vs_r{r['round'] - 1}")),
                _f(m.get("no_score_rate")), _paired(delta(args.forgetting))]) + " |")
    return "\n".join(lines) + "\n"


def _paired(c: dict | None) -> str:
    if not c:
        return "-"
    p = c.get("paired") or {}
    if p.get("lo") is None:
        return _f(c.get("diff"))
    return f"{_f(c['diff'])} [{_f(p['lo'])}, {_f(p['hi'])}]"


def plot(args) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for arm in args.arms:
        rounds = load_curve(arm)["rounds"]
        for ax, x in zip(axes, ("records", "cpu_min")):
            for v in args.variants:
                pts = [(r[x], r["metrics"][args.set].get(v, {}).get("pearson") or {}) for r in rounds]
                pts = [(a, p) for a, p in pts if p.get("value") is not None]
                xs = [a for a, _ in pts]
                ys = [p["value"] for _, p in pts]
                err = [[p["value"] - p["lo"] for _, p in pts], [p["hi"] - p["value"] for _, p in pts]]
                ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=f"{arm} {v}")
    length = load_curve(args.arms[0])["rounds"][0]["metrics"][args.set]["length_only"]
    for ax, label in zip(axes, ("training records (cumulative)", "training CPU-minutes (cumulative, 2 cores)")):
        ax.axhline(length, ls="--", c="grey", label="response length alone")
        ax.axhline(0, c="black", lw=0.5)
        ax.set_xlabel(label)
    axes[0].set_ylabel(f"Pearson with GPT-4 on {args.set} (95% CI)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--arm", required=True)
    r.add_argument("--rounds", type=lambda s: [int(x) for x in s.split(",")], required=True)
    r.add_argument("--set", action="append", default=[], help="train config override key=value")
    r.add_argument("--eval-set", action="append", default=[],
                   help="eval config override key=value for this arm's rounds (e.g. n_values=[1])")
    b = sub.add_parser("bias")
    b.add_argument("--arm", default="score")
    b.add_argument("--round", type=int, required=True)
    n = sub.add_parser("next", help="round k end to end: train --continue, evaluate, compare, keep, append")
    n.add_argument("--round", type=int, required=True)
    n.add_argument("--continue", dest="continue_from", required=True,
                   help="round k-1's adapter (a train run dir, its adapter/, or judgeforge/default_judge)")
    n.add_argument("--set", action="append", default=[], help="train config override key=value")
    c = sub.add_parser("choice", help="a recipe choice against round k on the same window and items")
    c.add_argument("--name", required=True, help="e.g. lr1e-3: runs/curve/choices/<name>, kept beside the curve")
    c.add_argument("--vs", help="compared paired with a round (r6) or a kept choice (its name)")
    c.add_argument("--continue", dest="continue_from",
                   help="the adapter a round continued from (the choice trains on its window); none: from the "
                        "base on the recipe's first window")
    c.add_argument("--set", action="append", default=[], help="train config override key=value")
    c.add_argument("--build-set", action="append", default=[],
                   help="train on a build of its own: the rounds' data config with this override (key=value)")
    a = sub.add_parser("append", help="add a round trained and evaluated by hand to the committed curve")
    a.add_argument("--arm", default="score")
    a.add_argument("--round", type=int, required=True)
    a.add_argument("--train-dir", help="the round's train run dir (data.json, config.yaml)")
    a.add_argument("--records", type=int, help="records it trained on, where its train dir is gone")
    a.add_argument("--eval-dir", required=True, help="its eval output (metrics.json)")
    a.add_argument("--cpu-min", type=float, required=True, help="its measured training CPU-minutes")
    a.add_argument("--vs", required=True, help="`judgeforge eval compare --json` against the round before")
    a.add_argument("--note", default="", help="how it was trained and measured (CPU, precision)")
    for name in ("table", "plot"):
        q = sub.add_parser(name)
        q.add_argument("--arms", type=lambda s: s.split(","), default=["score"])
        q.add_argument("--set", default="heldout")
        q.add_argument("--variant", default="score_only")
        q.add_argument("--variants", type=lambda s: s.split(","), default=["score_only"])
        q.add_argument("--forgetting", default="vicuna_bench")
        q.add_argument("--out", default="docs/img/learning_curve.png")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.cmd == "run":
        run(args)
    elif args.cmd == "bias":
        bias(args)
    elif args.cmd == "append":
        append(args)
    elif args.cmd == "next":
        next_round(args)
    elif args.cmd == "choice":
        choice(args)
    elif args.cmd == "table":
        print(table(args), end="")
    else:
        plot(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
