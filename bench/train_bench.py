"""`judgeforge train` vs a plain TRL SFTTrainer script: same model, data and settings, one invocation.

    .venv/bin/python bench/train_bench.py [--model default] [--examples 8] [--steps 4] [--repeats 2]

Each run is its own process (so its peak RSS is its own); runs alternate
(plain, judgeforge, judgeforge, plain, ...) and each side keeps its best
tokens/s, which damps the noise of a shared machine. tokens/s counts every
trained token (prompt + judgment) over the Trainer's `train_runtime`.
Prints one JSON object; `--markdown` also prints a table row for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO
SETTINGS = dict(r=16, alpha=32, dropout=0.05, targets=["q_proj", "k_proj", "v_proj", "o_proj",
                                                      "gate_proj", "up_proj", "down_proj"],
                lr=2e-4, batch=2, max_length=1024, seed=42)


def make_data(out: Path, n: int, model: str) -> tuple[Path, int]:
    """A data build of the `n` first default-build judgments that fit max_length; their token count."""
    from transformers import AutoTokenizer

    from judgeforge.data.build import run_build
    from judgeforge.data.config import BuildConfig
    from judgeforge.config import load_config
    from judgeforge.io import read_jsonl, write_jsonl
    from judgeforge.judge.weights import resolve_model

    full = out / "full"
    run_build(load_config(BuildConfig, REPO / "configs/data/default.yaml", ["progress=false"]), full)
    tok = AutoTokenizer.from_pretrained(resolve_model(model))
    picked, tokens = [], 0
    for rec in read_jsonl(full / "train.jsonl"):
        n_tok = len(tok.apply_chat_template(rec["messages"], tokenize=True, return_dict=False))
        if n_tok <= SETTINGS["max_length"]:
            picked.append(rec)
            tokens += n_tok
        if len(picked) == n:
            break
    data = out / "data"
    data.mkdir()
    (data / "manifest.json").write_text((full / "manifest.json").read_text())
    write_jsonl(data / "train.jsonl", picked)
    return data, tokens


def child_judgeforge(model: str, data: str, out: str, steps: int) -> dict:
    from transformers import TrainerCallback

    from judgeforge.config import load_config
    from judgeforge.train.config import TrainConfig
    from judgeforge.train.run import train

    s = SETTINGS
    cfg = load_config(TrainConfig, None, [
        f"model.name={model}", f"out={out}", f"data.sources=[{{path: {data}}}]", "data.eval_limit=0",
        f"data.max_length={s['max_length']}", "precision=fp32", f"optim.batch_size={s['batch']}",
        f"optim.max_steps={steps}", f"optim.lr={s['lr']}", f"lora.r={s['r']}", f"lora.alpha={s['alpha']}",
        f"lora.dropout={s['dropout']}", f"lora.target_modules={s['targets']}", f"seed={s['seed']}",
        "optim.gradient_checkpointing=false", "tracking.wandb=false", f"checkpoint.every={steps}"])

    class Runtime(TrainerCallback):
        runtime = cpu0 = cpu = None

        def on_train_begin(self, args, state, control, **kw):
            self.cpu0 = time.process_time()

        def on_train_end(self, args, state, control, **kw):
            self.cpu = time.process_time() - self.cpu0

        def on_log(self, args, state, control, logs=None, **kw):
            self.runtime = (logs or {}).get("train_runtime", self.runtime)

    cb = Runtime()
    train(cfg, callbacks=[cb])
    return {"train_runtime": cb.runtime, "train_cpu_s": cb.cpu}


def child_plain(model: str, data: str, out: str, steps: int) -> dict:
    """The baseline: what one would write with TRL and PEFT directly."""
    from datasets import load_dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from judgeforge.judge.weights import resolve_model

    s = SETTINGS
    path = resolve_model(model)
    ds = load_dataset("json", data_files=str(Path(data) / "train.jsonl"), split="train")
    ds = ds.map(lambda r: {"prompt": r["messages"][:-1], "completion": r["messages"][-1:]},
                remove_columns=ds.column_names)
    args = SFTConfig(output_dir=out, max_steps=steps, per_device_train_batch_size=1,
                     gradient_accumulation_steps=s["batch"], learning_rate=s["lr"], seed=s["seed"],
                     max_length=s["max_length"], bf16=False, gradient_checkpointing=False, report_to="none",
                     save_steps=steps, logging_steps=1, lr_scheduler_type="linear")
    trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(path), args=args, train_dataset=ds,
                         processing_class=AutoTokenizer.from_pretrained(path),
                         peft_config=LoraConfig(r=s["r"], lora_alpha=s["alpha"], lora_dropout=s["dropout"],
                                                target_modules=s["targets"], task_type="CAUSAL_LM"))
    cpu0 = time.process_time()
    result = trainer.train()
    cpu = time.process_time() - cpu0
    trainer.save_model(str(Path(out) / "adapter"))
    return {"train_runtime": result.metrics["train_runtime"], "train_cpu_s": cpu}


def run_child(kind: str, model: str, data: Path, steps: int, tmp: Path, i: int) -> dict:
    out = tmp / f"{kind}-{i}"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", kind, "--model", model, "--data", str(data),
                           "--out", str(out), "--steps", str(steps)], capture_output=True, text=True,
                          env={**os.environ, "WANDB_MODE": "disabled"})
    if proc.returncode:
        raise RuntimeError(f"{kind} run failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**res, "wall_s": time.perf_counter() - t0}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="default")
    p.add_argument("--examples", type=int, default=8)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--child", choices=["plain", "judgeforge"])
    p.add_argument("--data")
    p.add_argument("--out")
    args = p.parse_args()
    if args.child:
        fn = child_plain if args.child == "plain" else child_judgeforge
        res = fn(args.model, args.data, args.out, args.steps)
        res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(res))
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data, tokens = make_data(tmp, args.examples, args.model)
        # Each step trains `batch` examples; with examples == steps * batch every run sees all of them once.
        trained_tokens = tokens * (args.steps * SETTINGS["batch"]) / args.examples
        runs: dict[str, list[dict]] = {"plain": [], "judgeforge": []}
        order = ["plain", "judgeforge"]
        for i in range(args.repeats):
            for kind in order if i % 2 == 0 else order[::-1]:
                runs[kind].append(run_child(kind, args.model, data, args.steps, tmp, i))
    best = {k: max(trained_tokens / r["train_runtime"] for r in v) for k, v in runs.items()}
    # Tokens per CPU-second of the training loop: what a shared machine's neighbours cannot distort.
    per_cpu = {k: max(trained_tokens / r["train_cpu_s"] for r in v) for k, v in runs.items()}
    rss = {k: max(r["peak_rss_mb"] for r in v) for k, v in runs.items()}
    result = {"model": args.model, "examples": args.examples, "steps": args.steps, "repeats": args.repeats,
              "trained_tokens": round(trained_tokens), "tokens_per_s": {k: round(v, 1) for k, v in best.items()},
              "tokens_per_s_ratio": round(best["judgeforge"] / best["plain"], 3),
              "tokens_per_cpu_s": {k: round(v, 1) for k, v in per_cpu.items()},
              "tokens_per_cpu_s_ratio": round(per_cpu["judgeforge"] / per_cpu["plain"], 3),
              "peak_rss_mb": {k: round(v) for k, v in rss.items()},
              "peak_rss_ratio": round(rss["judgeforge"] / rss["plain"], 3), "runs": runs}
    print(json.dumps(result, indent=2))
    if args.markdown:
        print(f"| judgeforge train vs plain TRL SFTTrainer ({args.model}, {args.examples} judgments, "
              f"{args.steps} steps, best of {args.repeats}) | {best['judgeforge']:.1f} vs {best['plain']:.1f} tok/s "
              f"| **{result['tokens_per_s_ratio']:.3f}** | {per_cpu['judgeforge']:.1f} vs {per_cpu['plain']:.1f} "
              f"(**{result['tokens_per_cpu_s_ratio']:.3f}**) | peak RSS {rss['judgeforge']:.0f} vs "
              f"{rss['plain']:.0f} MB (**{result['peak_rss_ratio']:.3f}**) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
