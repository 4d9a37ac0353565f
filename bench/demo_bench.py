"""`make demo` from a fresh clone, this checkout's HEAD against an earlier commit in one invocation.

    python bench/demo_bench.py --previous 3ff2f34 [--write-results]

Each commit is cloned into a temporary directory; `make model` there does the set-up (its own `.venv`,
pip from the machine's cache; the models in `~/.cache/judgeforge` are shared and already prepared, the
same for both) and is timed apart, then `make demo` runs and is timed alone. The previous commit runs
first, then HEAD. Reported: both times, the exit code, and each stage's seconds from the demo's own
`== demo [k/6] ... ==` lines. The ratio is previous over current: above 1 is faster now.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import _common as C

TITLE = "make demo from a fresh clone against the previous commit"
# Older demos printed whole minutes only ("(3 min so far)"): their stage seconds are to the minute.
STAGE = re.compile(r"^== demo \[([^\]]+)\] (.*?) \((\d+) min(?: (\d+) s)? so far")


def timed(cmd: list[str], cwd: Path, log: Path, timeout: float) -> tuple[int, float]:
    t0 = time.perf_counter()
    with open(log, "a") as out:
        rc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout).returncode
    return rc, time.perf_counter() - t0


def stages(text: str) -> list[dict]:
    """The demo's stage lines: (label, what, seconds since the demo started)."""
    marks = [(m[1], m[2], int(m[3]) * 60 + int(m[4] or 0)) for m in map(STAGE.match, text.splitlines()) if m]
    return [{"stage": k, "what": w.split()[0].rstrip(":"), "start_s": s, "s": (marks[i + 1][2] - s) if i + 1 < len(marks) else None}
            for i, (k, w, s) in enumerate(marks)]


def demo_run(commit: str, work: Path, timeout: float) -> dict:
    clone = C.clone_at(commit, work)
    log = work / f"{commit}.log"
    rc_setup, setup_s = timed(["make", "model"], clone, log, timeout)
    rc, wall = timed(["make", "demo"], clone, log, timeout) if rc_setup == 0 else (rc_setup, float("nan"))
    return {"commit": commit, "rc": rc, "setup_s": round(setup_s, 1), "demo_s": round(wall, 1),
            "stages": stages(log.read_text())}


def main(argv=None) -> int:
    a = C.previous_args(argv, timeout=3600)
    out = C.previous_then_head(lambda commit, work: demo_run(commit, work, a.timeout), a.previous, "demo-bench-")
    C.save_results("demo", out, a)

    def text(command: str) -> str:
        p, c = out["previous"], out["current"]

        def row(name, r):
            parts = ", ".join(f"{s['what']} {s['s']}" for s in r["stages"] if s["s"] is not None)
            return f"| {name} `{r['commit']}` | {r['rc']} | {r['setup_s']:.0f} | **{r['demo_s']:.0f}** | {parts} |"
        return "\n".join([
            f"## {TITLE}", "",
            "`make model` (set-up, timed apart) then `make demo` in a fresh clone of each commit, one after the "
            "other in one invocation (own venv each, pip cache and prepared models shared). Stage seconds come from "
            "the demo's own stage lines; a demo that printed whole minutes only has them to the minute.", "",
            "| commit | rc | set-up s | `make demo` s | stages (s) |", "|---|---:|---:|---:|---|",
            row("previous", p), row("current", c), "",
            f"Ratio previous/current: **{p['demo_s'] / c['demo_s']:.2f}x**.", "",
            C.command_footer(command, out)])

    return C.publish("demo_bench.py", argv, TITLE, text, a.write_results)


if __name__ == "__main__":
    raise SystemExit(main())
