"""The default evaluation, this checkout against an earlier commit, in one invocation.

    python bench/eval_vs_previous.py --previous 2010ce7 [--repeats 1] [--write-results]

The earlier commit is checked out in a git worktree and imported through a PYTHONPATH shim (its
`judgeforge` package with the stage folders linked in), so both run in this venv with the same
libraries. Each run is `judgeforge eval --config configs/eval/default.yaml` in its own checkout
(same data build, built once beforehand and not timed); runs alternate previous/current and report
wall time, CPU time of the child processes and the load average.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from _common import REPO
from judgeforge import paths

STAGES = ("data", "train", "eval", "serve", "judge", "cascade", "scale")  # every stage folder of pyproject


def shim(previous: str, root: Path) -> tuple[Path, Path]:
    """(checkout, PYTHONPATH dir) of an earlier commit."""
    tree = root / "tree"
    if not tree.exists():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-f", str(tree), previous], check=True)
    # `python -m` puts the working directory (the old checkout) first on sys.path, so its
    # `judgeforge/` must hold the stage packages too, or they would come from this venv's install.
    pkg = tree / "judgeforge"
    for stage in STAGES:
        if (tree / stage).is_dir() and not (pkg / stage).exists():
            (pkg / stage).symlink_to(tree / stage, target_is_directory=True)
    return tree, tree


def run(cwd: Path, pythonpath: str | None, out: str, timeout: float | None = None) -> dict:
    """One eval in its own session; past `timeout` the whole session is killed (the previous commit
    has no engine watchdog) and the run counts as at least `timeout` seconds."""
    import signal

    import shutil

    env = {**os.environ}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    # Each run grades from scratch; this checkout refuses to replace a report without --overwrite,
    # which an earlier commit does not take.
    shutil.rmtree(cwd / out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "judgeforge.cli", "eval", "--config", "configs/eval/default.yaml",
                          f"out={out}"], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        _, err = p.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        _, err = p.communicate()
        timed_out = True
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0 and not timed_out:
        raise SystemExit(f"eval failed in {cwd}:\n{err[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "load": os.getloadavg()[0], "timed_out": timed_out}


def prebuild(cwd: Path, pythonpath: str | None) -> None:
    # Older commits' default evaluation reads the build at runs/demo/data, newer ones at paths.DATA: build
    # both, so neither side's timed eval builds it on the fly.
    env = {**os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {})}
    for out in ("runs/demo/data", paths.DATA):
        if (cwd / out / "manifest.json").is_file():  # a build is byte-identical: a rebuild is the same data
            continue
        subprocess.run([sys.executable, "-m", "judgeforge.cli", "data", "build", "--config",
                        "configs/data/default.yaml", "--out", out], cwd=cwd, env=env, check=True, capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--previous", default="2010ce7")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--work", default="/tmp/judgeforge-eval-vs-previous")
    ap.add_argument("--write-results", action="store_true")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per run (a run cut there counts as that)")
    args = ap.parse_args()
    tree, pkg = shim(args.previous, Path(args.work))
    sides = {"previous": (tree, str(pkg)), "current": (REPO, None)}
    for cwd, pp in sides.values():
        prebuild(cwd, pp)
    res: dict[str, list] = {k: [] for k in sides}
    for i in range(args.repeats):
        for name, (cwd, pp) in sides.items():
            r = run(cwd, pp, f"runs/bench/eval-vs-previous-{name}-{i}", args.timeout)
            res[name].append(r)
            print(name, json.dumps(r), flush=True)
    summary = {k: {m: sorted(r[m] for r in v)[len(v) // 2] for m in ("wall_s", "cpu_s", "load")}
               for k, v in res.items()}
    summary["ratio_wall"] = summary["current"]["wall_s"] / summary["previous"]["wall_s"]
    summary["ratio_cpu"] = summary["current"]["cpu_s"] / summary["previous"]["cpu_s"]
    print(json.dumps(summary, indent=1))
    if args.write_results:
        out = REPO / "bench" / "results" / "eval_vs_previous.json"
        out.parent.mkdir(exist_ok=True)
        sys.path.insert(0, str(REPO / "bench"))
        import _common as C

        out.write_text(json.dumps({"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="minutes"),
                                   "cpu": C.cpu(), "previous": args.previous, "runs": res, "summary": summary},
                                  indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
