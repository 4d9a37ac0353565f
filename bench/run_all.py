"""Every benchmark, each with its documented default command, one after the other (`make bench`).

    python bench/run_all.py --list                         # what would run, and what would be skipped
    python bench/run_all.py [--only serve,data_build] [--skip learning_curve] [--write-results]

On 2 CPU cores the whole set takes many hours (the learning curve and the distillation comparison
retrain the embedded judge, and the generalization table grades ~12,000 prompts: hours each);
`--only` picks some. Each benchmark runs as its own process from the checkout's root; one that fails does not stop the rest, and the exit status says
whether any failed. A benchmark whose requirement is missing (a GPU, the `peer` extra, the earlier
commit it compares with) is skipped with the reason. `--write-results` passes each benchmark its
own flag for writing its section of bench/RESULTS.md (those that have one).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import subprocess
import sys
import time
from dataclasses import dataclass

from _common import REPO

log = logging.getLogger("run_all")


@dataclass(frozen=True)
class Bench:
    """One benchmark run: a script under bench/ with the arguments its docstring documents."""

    name: str
    script: str
    args: tuple[str, ...] = ()
    write: str | None = "--write-results"
    """Its flag for writing bench/RESULTS.md (None: it has none, or always writes its results)."""
    needs: tuple[str, ...] = ()
    """Requirements, checked before it runs: `gpu`, `peer` (the peer extra), `commit:<sha>`."""

    def command(self, write: bool) -> list[str]:
        return [sys.executable, f"bench/{self.script}", *self.args, *([self.write] if write and self.write else [])]


BENCHES = (  # cheap ones first, the retraining ones last
    Bench("data_build", "data_build.py"),
    Bench("cascade", "cascade_bench.py"),
    Bench("paired_length", "paired_length.py", ("bench/results/learning_curve/r5",
                                                "bench/results/learning_curve/choices/decorr-r5"), write=None),
    Bench("fuzz_server", "fuzz_server.py", write=None),
    Bench("fuzz_server_vllm", "fuzz_server.py", ("--engine", "vllm", "--cases", "300"), write=None),
    Bench("serve", "serve_bench.py", ("--prompts", "64", "--max-tokens", "48")),
    Bench("eval", "eval_bench.py"),
    Bench("eval_phases", "eval_phases_bench.py"),
    Bench("ray", "ray_bench.py"),
    Bench("completion", "completion_bench.py"),
    Bench("hf_prefill", "hf_prefill_bench.py", ("--repeats", "2")),
    Bench("cpu_placement", "cpu_placement_bench.py"),
    Bench("engine_dtype", "engine_cpu_bench.py", ("--part", "dtype")),
    Bench("engine_start", "engine_cpu_bench.py", ("--part", "start")),
    Bench("engine_limit", "engine_cpu_bench.py", ("--part", "limit")),
    Bench("engine_sampler", "engine_cpu_bench.py", ("--part", "sampler")),
    Bench("prefill", "prefill_bench.py", ("--previous", "794fd94"), needs=("commit:794fd94",)),
    Bench("eval_vs_previous", "eval_vs_previous.py", ("--previous", "2010ce7"), needs=("commit:2010ce7",)),
    Bench("start", "start_bench.py", ("--previous", "5405e57"), needs=("commit:5405e57",)),
    Bench("prepare", "prepare_bench.py"),
    Bench("setup", "setup_bench.py"),
    Bench("suite", "suite_bench.py", ("--previous", "ed1b6d8"), needs=("commit:ed1b6d8",)),
    Bench("demo", "demo_bench.py", ("--previous", "3ff2f34"), needs=("commit:3ff2f34",)),
    Bench("peer_prometheus_eval", "peer_prometheus_eval.py", needs=("peer",)),
    Bench("train", "train_bench.py", ("--markdown",), write=None),
    Bench("train_precision", "train_precision_bench.py"),
    Bench("compact_head", "compact_head_bench.py"),
    Bench("pair_loss", "pair_loss_bench.py", ("--pairs", "3", "--repeats", "2")),
    Bench("ddp", "ddp_bench.py"),
    Bench("gemma_vs_smollm", "gemma_vs_smollm.py"),
    Bench("qwen_coder_vs_smollm", "gemma_vs_smollm.py", ("--other", "qwen2.5-coder-0.5b")),
    Bench("train_gpu_mixtral", "train_gpu_mixtral.py", ("--markdown",), write=None, needs=("gpu",)),
    Bench("learning_curve", "learning_curve.py", ("run", "--arm", "score", "--rounds", "150,150"), write=None),
    Bench("distill_vs_sft", "distill_vs_sft.py", ("run", "--records", "150"), write=None),
    Bench("generalization", "generalization.py", ("run",), write=None),
)


def select(benches: tuple[Bench, ...], only: list[str], skip: list[str]) -> list[Bench]:
    """The benchmarks named by `only` (all when empty), in the set's order, less those in `skip`."""
    known = [b.name for b in benches]
    unknown = [n for n in (*only, *skip) if n not in known]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [b for b in benches if (not only or b.name in only) and b.name not in skip]


def missing(need: str) -> str | None:
    """Why a requirement is not met here (None: it is)."""
    if need == "gpu":
        from judgeforge.hardware import cuda_available

        return None if cuda_available() else "needs a CUDA GPU"
    if need == "peer":
        absent = [m for m in ("prometheus_eval", "fastchat") if importlib.util.find_spec(m) is None]
        return f"needs the peer extra ({', '.join(absent)} missing; see pyproject.toml)" if absent else None
    if need.startswith("commit:"):
        sha = need.split(":", 1)[1]
        ok = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{sha}^{{commit}}"],
                            capture_output=True).returncode == 0
        return None if ok else f"needs commit {sha} in this checkout's git history"
    raise ValueError(f"unknown requirement {need!r}")


def skip_reason(b: Bench, check=missing) -> str | None:
    return next((why for why in map(check, b.needs) if why), None)


def run(benches: list[Bench], write: bool) -> dict[str, str]:
    """Each benchmark in turn: name -> `ok`, `failed (exit N)` or `skipped: why`."""
    outcome = {}
    for b in benches:
        why = skip_reason(b)
        if why:
            outcome[b.name] = f"skipped: {why}"
            log.warning("%s skipped: %s", b.name, why)
            continue
        cmd = b.command(write)
        log.info("%s: %s", b.name, " ".join(cmd[1:]))
        t0 = time.monotonic()
        rc = subprocess.run(cmd, cwd=REPO).returncode
        outcome[b.name] = "ok" if rc == 0 else f"failed (exit {rc})"
        log.info("%s: %s in %.0f s", b.name, outcome[b.name], time.monotonic() - t0)
    return outcome


def listing(benches: list[Bench], write: bool, check=missing) -> str:
    lines = []
    for b in benches:
        why = skip_reason(b, check)
        lines.append(f"{b.name:22} {' '.join(b.command(write)[1:])}" + (f"   [skipped: {why}]" if why else ""))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the commands (and skips) without running them")
    ap.add_argument("--only", type=lambda s: s.split(","), default=[], help="comma list of benchmark names")
    ap.add_argument("--skip", type=lambda s: s.split(","), default=[], help="comma list of benchmark names")
    ap.add_argument("--write-results", action="store_true", help="let each benchmark write its RESULTS.md section")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    benches = select(BENCHES, args.only, args.skip)
    if args.list:
        sys.stdout.write(listing(benches, args.write_results))
        return 0
    outcome = run(benches, args.write_results)
    sys.stdout.write("".join(f"{name:22} {result}\n" for name, result in outcome.items()))
    return 1 if any(r.startswith("failed") for r in outcome.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
