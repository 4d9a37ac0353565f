"""How fast a newcomer gets an answer: `judgeforge serve` healthy and its first grade, and the first grade
of `judgeforge.load_judge("default-judge")`, this checkout against an earlier commit in one invocation.

    python bench/start_bench.py --previous 5405e57 [--repeats 1] [--write-results]

The earlier commit runs from a git worktree through eval_vs_previous's PYTHONPATH shim (same venv, same
libraries, same model cache). Runs alternate previous/current. Each serve run is the shipped
`configs/serve/default.yaml` on a free port: seconds from the process start to /health 200, then to
the answer of one POST /v1/grade as the README sends it (default n, feedback on); the server is then
stopped with SIGTERM. Each load_judge run is a fresh Python process: seconds from its start to the
first `judge.grade(...)` returned. Compile caches are warm for both (a first run warms them and is
not counted).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from _common import REPO, cpu
from eval_vs_previous import shim

KEY = "start-bench"
BODY = {"instruction": "What is 2+2?", "response": "4", "rubric": "factual_validity"}
FIRST = """import time; t0 = time.perf_counter()
import judgeforge
with judgeforge.load_judge("default-judge") as judge:
    judge.grade("What is 2+2?", "4", rubric="factual_validity")
print(time.perf_counter() - t0)"""


def _env(pythonpath: str | None) -> dict:
    return {**os.environ, "JUDGEFORGE_API_KEY": KEY, **({"PYTHONPATH": pythonpath} if pythonpath else {})}


def serve_run(cwd: Path, pythonpath: str | None, port: int, timeout: float) -> dict:
    """Seconds to /health 200 and to the first answer of one `judgeforge serve`."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "judgeforge.cli", "serve", "--config", "configs/serve/default.yaml",
                          "--port", str(port)], cwd=cwd, env=_env(pythonpath), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        healthy = _wait_health(p, url, t0 + timeout)
        r = httpx.post(url + "/v1/grade", json=BODY, headers={"Authorization": f"Bearer {KEY}"}, timeout=timeout)
        answered = time.perf_counter() - t0
        r.raise_for_status()
        return {"healthy_s": healthy - t0, "first_answer_s": answered, "engine": r.json().get("engine", "vllm")}
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def _wait_health(p: subprocess.Popen, url: str, deadline: float) -> float:
    while time.perf_counter() < deadline:
        if p.poll() is not None:
            raise SystemExit(f"serve exited with {p.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return time.perf_counter()
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise SystemExit("serve not healthy in time")


def first_grade_run(cwd: Path, pythonpath: str | None) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", FIRST], cwd=cwd, env=_env(pythonpath), capture_output=True,
                         text=True, check=True)
    return {"first_grade_s": time.perf_counter() - t0, "in_process_s": float(out.stdout.strip().splitlines()[-1])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--previous", default="5405e57")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--work", default="/tmp/judgeforge-start-bench")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--write-results", action="store_true")
    a = ap.parse_args()
    prev_tree, prev_path = shim(a.previous, Path(a.work))
    sides = {"previous": (prev_tree, str(prev_path)), "current": (REPO, None)}
    for tree, path in sides.values():  # warm the compile caches and the merged judge; not counted
        serve_run(tree, path, 8791, a.timeout)
    runs: dict = {name: [] for name in sides}
    for _ in range(a.repeats):
        for name, (tree, path) in sides.items():
            load0 = os.getloadavg()[0]
            runs[name].append({**serve_run(tree, path, 8791, a.timeout), **first_grade_run(tree, path),
                               "load": load0})
    result = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpu": cpu(),
              "previous": a.previous, "runs": runs,
              "command": f"python bench/start_bench.py --previous {a.previous} --repeats {a.repeats}"}
    print(json.dumps(result, indent=1))
    if a.write_results:
        (REPO / "bench" / "results" / "start_vs_previous.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
