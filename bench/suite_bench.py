"""`make test` from a fresh clone, this checkout's HEAD against an earlier commit in one invocation.

    python bench/suite_bench.py --previous ed1b6d8 [--write-results]

Each commit is cloned into a temporary directory and `make test` runs there as CI runs it (`.ci/run`:
its own `.venv`, installed as that commit's Makefile installs it; the models in `~/.cache/judgeforge` are shared and
already prepared, the same for both). The previous commit runs first, then HEAD. Reported: the wall
time of the whole command and of pytest alone (its own `in N s`), the tests passed, and the real
engine starts the suite prints at its end. The ratio is previous over current: above 1 is faster now.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import _common as C

TITLE = "make test from a fresh clone against the previous commit"


def suite_run(commit: str, work: Path, timeout: float) -> dict:
    clone = C.clone_at(commit, work)
    log = work / f"{commit}.log"
    t0 = time.perf_counter()
    with open(log, "w") as out:
        rc = subprocess.run(["bash", ".ci/run"], cwd=clone, stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, "CI": "true"}, timeout=timeout).returncode
    wall = time.perf_counter() - t0
    text = log.read_text()
    tail = text[-5000:]
    pytest_s = re.findall(r" in ([0-9.]+)s", tail)
    passed = re.findall(r"(\d+) passed", tail)
    starts = re.findall(r"real engine starts: .*", tail)
    return {"commit": commit, "rc": rc, "wall_s": round(wall, 1), "pytest_s": float(pytest_s[-1]) if pytest_s else None,
            "passed": int(passed[-1]) if passed else None, "starts": starts[-1] if starts else None,
            "failed": re.findall(r"^FAILED .*", text, re.M)[:10],
            # the suite's own slowest-tests list: what a later change to the suite starts from
            "slowest": re.findall(r"^\s*([0-9.]+s (?:setup|call|teardown)\s+\S+)", text, re.M)[:40],
            "tail": tail[-3000:] if rc else ""}


def main(argv=None) -> int:
    a = C.previous_args(argv, timeout=5400)
    out = C.previous_then_head(lambda commit, work: suite_run(commit, work, a.timeout), a.previous, "suite-bench-")
    C.save_results("suite", out, a)

    def text(command: str) -> str:
        p, c = out["previous"], out["current"]

        def row(name, r):
            return (f"| {name} `{r['commit']}` | {r['rc']} | {r['passed']} | {r['pytest_s']:.0f} | {r['wall_s']:.0f} | "
                    f"{(r['starts'] or '').removeprefix('real engine starts: ')} |")
        return "\n".join([
            f"## {TITLE}", "",
            "`make test` (`.ci/run`) from a fresh clone of each commit, one after the other in one invocation "
            "(own venv each, the installers' caches and the prepared models shared).", "",
            "| commit | rc | passed | pytest s | whole command s | real engine starts |", "|---|---:|---:|---:|---:|---|",
            row("previous", p), row("current", c), "",
            f"Ratio previous/current: pytest **{p['pytest_s'] / c['pytest_s']:.2f}x**, whole command "
            f"{p['wall_s'] / c['wall_s']:.2f}x.", "",
            C.command_footer(command, out)])

    return C.publish("suite_bench.py", argv, TITLE, text, a.write_results)


if __name__ == "__main__":
    raise SystemExit(main())
