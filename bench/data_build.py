"""Data-build benchmark: >= 100k judgments replicated from the real vendored files.

Each replica varies the response text and the feedback (so dedup and the
decontamination memo cannot shortcut), keeping every prompt parseable:
MT-Bench + Vicuna Prometheus files (3 GPT-4 samples per line) and the FastChat log.

Reported as records/s and as a ratio to a baseline measured in the same run:
plain `json.loads` of the same lines (the floor any reader pays).

    .venv/bin/python bench/data_build.py [--replicas 37] [--repeat 3] [--write-results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from judgeforge.data.build import decontaminate, read_sources, run_build
from judgeforge.data.config import BuildConfig
from judgeforge.data.ingest import default_workers
from judgeforge.data.records import Spool

import _common as C
from _common import REPO
VENDOR = REPO / "data" / "vendor"
RESP = "\n\n###Response to evaluate:\n"


def replicate(out: Path, replicas: int) -> dict[str, tuple[Path, int]]:
    """Write the replicated inputs; returns {format: (path, judgments)}."""
    files = {}
    for name in ("mt_bench_eval", "vicuna_eval"):
        src = json.loads((VENDOR / "prometheus-eval" / f"{name}.json").read_text())
        path = out / f"{name}_x{replicas}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for r in range(replicas):
                for o in src:
                    v = dict(o, instruction=o["instruction"].replace(RESP, f"{RESP}(variant {r}) ", 1),
                             gpt4_feedback=[f"(v{r}) {fb}" for fb in o["gpt4_feedback"]])
                    f.write(json.dumps(v, ensure_ascii=False) + "\n")
        files[name] = (path, replicas * sum(len(o["gpt4_score"]) for o in src))
    lines = (VENDOR / "fastchat-mt-bench" / "gpt-4_single.jsonl").read_text(encoding="utf-8").splitlines()
    path = out / f"fastchat_x{replicas}.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for r in range(replicas):
            for line in lines:
                o = json.loads(line)
                p = o["user_prompt"]
                if "multi-turn" in o["judge"][1]:
                    head, sep, tail = p.rpartition("### Assistant A:\n")
                    p = f"{head}{sep}(variant {r}) {tail}"
                else:
                    p = p.replace("[The Start of Assistant's Answer]\n", f"[The Start of Assistant's Answer]\n(variant {r}) ", 1)
                f.write(json.dumps(dict(o, user_prompt=p, judgment=f"(v{r}) {o['judgment']}"), ensure_ascii=False) + "\n")
    files["fastchat"] = (path, replicas * len(lines))
    return files


def config(files, decontam: bool, workers: int = 0) -> BuildConfig:
    sources = [{"path": str(files["mt_bench_eval"][0]), "format": "prometheus", "name": "mt_bench"},
               {"path": str(files["vicuna_eval"][0]), "format": "prometheus", "name": "vicuna"},
               {"path": str(files["fastchat"][0]), "format": "fastchat", "name": "fastchat"}]
    evals = [{"path": str(VENDOR / "prometheus-eval" / f), "format": "prometheus"}
             for f in ("vicuna_eval.json", "hhh_alignment_eval.json")] if decontam else []
    return BuildConfig.model_validate({"sources": sources, "progress": False, "workers": workers,
                                       "split": {"test_models": ["wizardlm_13b", "wizard", "mistral-orpo-trl"]},
                                       "decontamination": {"eval_sets": evals}})


def timed(fn):
    """(result, wall s, CPU s of this process, CPU s of its worker processes).

    CPU figures matter on a shared machine, where wall time also measures the neighbours."""
    t0, w0 = os.times(), time.perf_counter()
    result = fn()
    t1, wall = os.times(), time.perf_counter() - w0
    parent = t1.user + t1.system - t0.user - t0.system
    workers = t1.children_user + t1.children_system - t0.children_user - t0.children_system
    return result, wall, parent, workers


def rates(n: int, wall: float, parent: float, workers: float, cores: int) -> dict:
    """records/s of wall time, per CPU-second (all processes), and the CPU bound on `cores` idle cores:
    the parent's work is serial, the workers' spreads over the cores."""
    total = parent + workers
    return {"wall": n / wall, "cpu": n / total, "bound": n / max(parent, total / cores),
            "parent_s": parent, "workers_s": workers}


def baseline_json(files) -> float:
    for path, _ in files.values():
        with open(path, encoding="utf-8") as f:
            for line in f:
                json.loads(line)


SOURCES = ("mt_bench_eval", "vicuna_eval", "fastchat")


def stage(name: str, inputs: Path, replicas: int, workers: int) -> dict:
    """One timed run of a stage in this process, which is fresh: no earlier stage's objects are alive
    (or forked into the workers). {"t": [wall s, parent CPU s, worker CPU s], ...counts}."""
    files = {src: (inputs / f"{src}_x{replicas}.jsonl", 0) for src in SOURCES}
    cfg = config(files, decontam=False, workers=workers)
    work = Path(tempfile.mkdtemp(dir=inputs))  # spool / output
    try:
        if name == "baseline":
            _, *t = timed(lambda: baseline_json(files))
            return {"t": t}
        if name == "read":
            (kept, rejects, counts, _), *t = timed(lambda: read_sources(cfg, Spool(work)))
            return {"t": t, "read": sum(c.read for c in counts.values()), "kept": len(kept),
                    "rejected": len(rejects)}
        if name == "full":
            _, *t = timed(lambda: run_build(cfg, work / "out"))
            return {"t": t}
        kept = read_sources(cfg, Spool(work))[0]
        dcfg = config(files, decontam=True)
        train = [k for k in kept if k.j.response_model not in dcfg.split.test_models]
        (_, removed, _), *t = timed(lambda: decontaminate(dcfg, train))
        return {"t": t, "records": len(train), "removed": len(removed)}
    finally:
        shutil.rmtree(work)


def measure(name: str, inputs: Path, replicas: int, workers: int, repeat: int, n: int, cores: int,
            loads: list[float]) -> tuple[dict, dict]:
    """(the median run's stage output, its rates + the bound's range), over `repeat` runs, each in a new
    process. The median damps the neighbours' noise on this shared machine."""
    runs = []
    for _ in range(repeat):
        cmd = [sys.executable, __file__, "--stage", name, "--inputs", str(inputs), "--replicas", str(replicas),
               "--workers", str(workers)]
        out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        runs.append((rates(out.get("records", n), *out["t"], cores), out))
        loads.append(os.getloadavg()[0])
    runs.sort(key=lambda run: run[0]["bound"])
    r, out = runs[len(runs) // 2]
    return out, {**r, "bound_range": [runs[0][0]["bound"], runs[-1][0]["bound"]]}


def run(replicas: int, repeat: int) -> dict:
    workers = default_workers()
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = replicate(tmp, replicas)
        judgments = sum(n for _, n in files.values())
        lines = sum(1 for p, _ in files.values() for _ in open(p, encoding="utf-8"))
        cores = len(os.sched_getaffinity(0))
        args = (tmp, replicas)
        _, base = measure("baseline", *args, 1, repeat, judgments, cores, loads)
        stages = {}
        for w in sorted({1, workers}):
            read, stages[f"parse_validate_template_w{w}"] = measure("read", *args, w, repeat, judgments, cores, loads)
            assert read["read"] == judgments
            stages[f"full_build_w{w}"] = measure("full", *args, w, repeat, judgments, cores, loads)[1]
        decon, stages["decontam"] = measure("decontam", *args, workers, 1, judgments, cores, loads)
    return {
        "judgments": judgments, "lines": lines, "kept": read["kept"], "rejected": read["rejected"],
        "workers": workers, "baseline": base, "stages": stages, "decontam_records": decon["records"],
        "decontam_removed": decon["removed"], "cores": cores, "python": platform.python_version(),
        "repeat": repeat, "load_avg_1min": [min(loads), max(loads)],
    }


LABELS = {
    "parse_validate_template": "read + parse + validate + dedup + hashes + prompt template and line encoding into "
                               "the spool (`read_sources`)",
    "full_build": "full `run_build` without decontamination: + policy, split, rubric/extra splice, atomic write",
}


def section(res: dict, cmd: str) -> str:
    date = datetime.date.today().isoformat()
    base = res["baseline"]
    rows = [("baseline: `json.loads` of the same lines", res["judgments"], base)]
    for key, r in res["stages"].items():
        if key == "decontam":
            rows.append(("13-gram decontamination of the train split vs Vicuna + HHH", res["decontam_records"], r))
        else:
            stage, w = key.rsplit("_w", 1)
            rows.append((f"{LABELS[stage]}, {w} worker{'s' if w != '1' else ''}", res["judgments"], r))
    lines = [
        "## data", "",
        f"`{cmd}` — {date}, {res['cores']} cores shared with other jobs (1-min load average "
        f"{res['load_avg_1min'][0]:.1f}–{res['load_avg_1min'][1]:.1f} during the run), Python {res['python']}. "
        f"{res['judgments']:,} judgments ({res['lines']:,} JSONL lines: the "
        "MT-Bench and Vicuna Prometheus files, 3 GPT-4 samples per line, and the FastChat log) replicated from the "
        f"vendored files with varied responses and feedback; {res['kept']:,} kept, {res['rejected']:,} rejected "
        "(FastChat's -1 and fractional scores). Target: >= 20k judgments/s on 2 cores without decontamination.",
        "",
        "*wall*: records per elapsed second (on this shared machine it also measures the neighbours). "
        "*per CPU-s*: records per CPU-second summed over the process and its workers. "
        f"*{res['cores']}-core bound*: records / max(parent CPU, total CPU / {res['cores']}) — the throughput on "
        f"{res['cores']} idle cores, derived from measured CPU times (the parent's share is serial). "
        "Ratios are against the baseline's figure of the same kind. Each row is the median (by the core bound) of "
        f"{res['repeat']} runs (decontamination: 1), each in a fresh process writing to a fresh directory; the "
        "last column gives the bound's range over those runs.",
        "", f"| stage | records | wall rec/s (ratio) | rec per CPU-s (ratio) | {res['cores']}-core bound rec/s (ratio) "
        "| parent / worker CPU s | bound range |", "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, n, r in rows:
        lines.append(f"| {name} | {n:,} | {r['wall']:,.0f} ({r['wall'] / base['wall']:.3f}) "
                     f"| {r['cpu']:,.0f} ({r['cpu'] / base['cpu']:.3f}) | {r['bound']:,.0f} "
                     f"({r['bound'] / base['bound']:.3f}) | {r['parent_s']:.1f} / {r['workers_s']:.1f} "
                     f"| {r['bound_range'][0]:,.0f}–{r['bound_range'][1]:,.0f} |")
    lines += ["", f"Decontamination removed {res['decontam_removed']:,} of {res['decontam_records']:,} training "
              "records (the replicated Vicuna items overlap the Vicuna eval set by construction); its n-gram "
              "check is memoised per distinct text, and every text here is distinct.", ""]
    w = res["workers"]
    parse, full = res["stages"][f"parse_validate_template_w{w}"], res["stages"][f"full_build_w{w}"]
    lines += [f"Against the 20k/s target on {res['cores']} cores (CPU bounds with {w} workers): parse + validate "
              f"{parse['bound']:,.0f}/s ({'meets' if parse['bound'] >= 20_000 else 'misses'} it); the full build "
              f"{full['bound']:,.0f}/s ({'meets' if full['bound'] >= 20_000 else 'misses'} it). The workers render "
              "the prompt and encode each output line (~11 KB) as they parse it, into spool files beside the "
              "output; the parent only splices in the build-wide rubric/extra keys and writes the bytes. Wall "
              "figures on this shared machine are far lower than either bound.", ""]
    if res["judgments"] == 100_640:  # the default command's earlier figures, for comparison
        lines += ["Before that change (commit e3eda90: rendering and encoding in the parent) this command's single "
                  "in-process run gave the full build 18,382/s (0.095 of its baseline), parent / worker CPU 5.2 / "
                  "5.8 s. Interleaved A/B on 2026-11-30 (3 fresh-process full builds each, 2 workers, these inputs, "
                  "load ~4): this version's 2-core bound is 1.21x e3eda90's (24.0k–24.2k vs 19.7k–20.0k/s; parent "
                  "CPU 2.1 vs 4.7 s, worker CPU 6.2 vs 5.5 s), and the outputs are byte-identical.", ""]
    return "\n".join(lines)


def rewrite(json_path: str) -> None:
    """Re-render the section from a saved result (the JSON this script prints on stderr)."""
    res = json.loads(Path(json_path).read_text())
    C.write_section("data", section(res, "python bench/data_build.py"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=37, help="37 x 2,720 = 100,640 judgments")
    ap.add_argument("--repeat", type=int, default=3, help="runs per stage; the median is reported")
    ap.add_argument("--write-results", action="store_true", help="replace the `## data` section of bench/RESULTS.md")
    ap.add_argument("--stage", choices=["baseline", "read", "full", "decontam"], help=argparse.SUPPRESS)
    ap.add_argument("--inputs", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stage:  # one measurement, for the parent invocation
        print(json.dumps(stage(args.stage, args.inputs, args.replicas, args.workers)))
        return
    res = run(args.replicas, args.repeat)
    cmd = "python bench/data_build.py" + (f" --replicas {args.replicas}" if args.replicas != 37 else "") + (
        f" --repeat {args.repeat}" if args.repeat != 3 else "")
    text = section(res, cmd)
    print(text)
    print(json.dumps(res, indent=1), file=sys.stderr)
    if args.write_results:
        C.write_section("data", text)


if __name__ == "__main__":
    main()
