"""DDP on the CPU: `judgeforge train` on 2 processes (gloo) against 1 process, same global batch, one invocation.

    .venv/bin/python bench/ddp_bench.py [--models tiny[,default]] [--examples 16] [--batch 4] [--steps 8]
    .venv/bin/python bench/ddp_bench.py --steps 2 --examples 4          # a smoke run
    .venv/bin/python bench/ddp_bench.py --write-results                 # replaces its section of RESULTS.md

Models: `tiny`, a random 2-layer, 8-expert Mixtral (hidden 64) with SmolLM2's tokenizer, LoRA r=8 on
q/k/v/o, the experts and lm_head (the test suite's recipe, tests/train/test_ddp.py); `default`, the
embedded SmolLM2-135M, LoRA r=16 on every linear layer (configs/train/embedded-judge.yaml's targets).
Data: the `--examples` shortest judgments of the default data build. Both arms train the same
config (fp32, micro-batch 1, global batch `--batch`, `--steps` steps, no checkpoints), each in
fresh processes: 1 process (accumulation = batch) and judgeforge's own 2-process launch
(train/distributed.py: configs/train/accelerate/ddp_cpu.yaml, cores split between the ranks,
accumulation = batch / 2). Per arm: median wall seconds per optimizer step after the first, CPU
seconds per step summed over the processes, and 1-process / 2-process ratios (> 1: DDP faster).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as C

TITLE = "train: DDP on the CPU (2 processes against 1)"
SCRIPT = Path(__file__).resolve()


# --- the worker: one process of an arm --------------------------------------------------------------

def worker(cfg_file: str, result: str) -> int:
    """Train `cfg_file`; rank 0 writes each step's wall and (all ranks') CPU seconds to `result`."""
    from transformers import TrainerCallback

    from judgeforge.config import load_config
    from judgeforge.logs import configure_logging
    from judgeforge.train.config import TrainConfig
    from judgeforge.train.distributed import gather
    from judgeforge.train.run import train

    class Clock(TrainerCallback):
        def __init__(self):
            self.wall, self.cpu = [], []

        def on_step_begin(self, args, state, control, **kw):
            self.t = (time.perf_counter(), time.process_time())

        def on_step_end(self, args, state, control, **kw):
            self.wall.append(time.perf_counter() - self.t[0])
            self.cpu.append(time.process_time() - self.t[1])

    configure_logging()
    clock = Clock()
    train(load_config(TrainConfig, cfg_file), callbacks=[clock])
    ranks = gather(clock.cpu)
    if os.environ.get("RANK", "0") == "0":
        Path(result).write_text(json.dumps({"wall": clock.wall, "cpu": [sum(c) for c in zip(*ranks)],
                                            "processes": len(ranks)}))
    return 0


# --- the arms ---------------------------------------------------------------------------------------

def shortest_build(src: Path, out: Path, n: int) -> Path:
    from judgeforge.io import read_jsonl, write_jsonl

    recs = sorted(read_jsonl(src / "train.jsonl"), key=lambda r: sum(len(m["content"]) for m in r["messages"]))
    out.mkdir(parents=True)
    (out / "manifest.json").write_text((src / "manifest.json").read_text())
    write_jsonl(out / "train.jsonl", recs[:n])
    write_jsonl(out / "test.jsonl", [])
    return out


def tiny_mixtral(out: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, MixtralForCausalLM

    from judgeforge.judge.weights import resolve_model
    from train_gpu_mixtral import mixtral_config

    tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    torch.manual_seed(0)
    MixtralForCausalLM(mixtral_config(True, 2, len(tok))).save_pretrained(out)
    tok.save_pretrained(out)
    return out


MODELS = {
    "tiny": ("a random 2-layer Mixtral (hidden 64, 8 experts)", ["lora.r=8", "lora.alpha=16",
             "lora.target_modules=[q_proj,k_proj,v_proj,o_proj,w1,w2,w3,lm_head]"]),
    "default": ("SmolLM2-135M-Instruct", ["lora.r=16", "lora.alpha=32",
                "lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"]),
}


def arm(model: str, model_dir: str, data: Path, tmp: Path, a, processes: int) -> dict:
    from judgeforge.config import load_config, save_resolved
    from judgeforge.hardware import cpu_info
    from judgeforge.train import distributed
    from judgeforge.train.config import TrainConfig

    name = f"{model}-{processes}"
    cfg = load_config(TrainConfig, None, [
        f"model.name={model_dir}", f"out={tmp / name}", f"data.sources=[{{path: {data}}}]", "data.max_length=2048",
        "data.eval_limit=0", "precision=fp32", f"optim.batch_size={a.batch}", "optim.micro_batch_size=1",
        f"optim.max_steps={a.steps}", "optim.lr=2e-4", "optim.gradient_checkpointing=false",
        "tracking.wandb=false", "checkpoint.every=100000", f"num_gpus={processes}",
        "accelerate_config=configs/train/accelerate/ddp_cpu.yaml", *MODELS[model][1]])
    cfg_file, result = save_resolved(cfg, tmp, f"{name}.yaml"), tmp / f"{name}.json"
    tail = [str(SCRIPT), "--worker", str(cfg_file), str(result)]
    if processes == 1:
        cmd, env = [sys.executable, *tail], dict(os.environ)
    else:  # judgeforge's launch command, this worker in place of `-m judgeforge.cli train`
        launch = distributed.launch_command(cfg, [], gpu=False)
        cmd = launch[:launch.index("judgeforge.cli") - 1] + tail
        env = distributed.launch_env(os.environ, processes, len(cpu_info().cpus), gpu=False)
    log = tmp / f"{name}.log"
    with open(log, "w") as f:
        done = subprocess.run(cmd, env={**env, "WANDB_MODE": "disabled"}, cwd=C.REPO, stdout=f, stderr=f,
                              timeout=a.timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{name} exited {done.returncode}:\n{log.read_text()[-3000:]}")
    r = json.loads(result.read_text())
    timed = slice(1, None) if len(r["wall"]) > 1 else slice(None)  # the first step warms up
    return {"model": model, "processes": r["processes"], "steps": len(r["wall"]),
            "s_per_step": C.median(r["wall"][timed]), "cpu_s_per_step": C.median(r["cpu"][timed]),
            "wall": r["wall"], "cpu": r["cpu"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="tiny", help="comma-separated: tiny, default")
    p.add_argument("--examples", type=int, default=16)
    p.add_argument("--batch", type=int, default=4, help="global batch (a multiple of 2)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--write-results", action="store_true")
    p.add_argument("--worker", nargs=2, metavar=("CONFIG", "RESULT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return worker(*a.worker)
    models = a.models.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    if a.batch % 2:
        raise SystemExit(f"--batch {a.batch} must be a multiple of 2 (micro-batch 1 x 2 processes)")
    out = {"date": C.now(), "load_start": C.loadavg(), "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        from judgeforge.config import load_config
        from judgeforge.data.build import run_build
        from judgeforge.data.config import BuildConfig
        from judgeforge.judge.weights import resolve_model

        run_build(load_config(BuildConfig, C.REPO / "configs/data/default.yaml", ["progress=false"]), tmp / "build")
        data = shortest_build(tmp / "build", tmp / "data", a.examples)
        for model in models:
            model_dir = str(tiny_mixtral(tmp / "tiny")) if model == "tiny" else resolve_model("default")
            for processes in (1, 2):
                row = arm(model, model_dir, data, tmp, a, processes)
                print(f"{model} x{processes}: {row['s_per_step']:.2f} s/step, {row['cpu_s_per_step']:.2f} CPU-s/step",
                      file=sys.stderr)
                out["rows"].append(row)
    out["load_end"] = C.loadavg()
    C.save_results("ddp", out, a)
    return C.publish("ddp_bench.py", argv, TITLE, lambda cmd: render(a, out, cmd), a.write_results)


def render(a, out: dict, command: str) -> str:
    cpu = C.cpu()
    lines = [f"## {TITLE}", "",
             f"`judgeforge train` on {a.batch}-example global batches (micro-batch 1; 1 process: accumulation "
             f"{a.batch}; 2 processes, gloo, judgeforge's own launch: accumulation {a.batch // 2} each, "
             f"OMP_NUM_THREADS = cores / 2), {a.steps} steps on the {a.examples} shortest judgments of the "
             "default build, fp32; median over the steps after the first. *CPU-s/step*: CPU seconds of the "
             "step summed over the processes. Ratio: 1 process / 2 processes (> 1: DDP faster).", "",
             "| model | processes | CPU | s/step | CPU-s/step | ratio (s/step) |", "|---|---:|---|---:|---:|---:|"]
    by = {(r["model"], r["processes"]): r for r in out["rows"]}
    for (model, n), r in by.items():
        ratio = by[(model, 1)]["s_per_step"] / r["s_per_step"]
        lines.append(f"| {MODELS[model][0]} | {n} | {cpu} | {r['s_per_step']:.2f} | {r['cpu_s_per_step']:.2f} | "
                     f"{'**' if n == 2 else ''}{ratio:.2f}{'**' if n == 2 else ''} |")
    return "\n".join(lines) + "\n\n" + C.command_footer(command, out) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
