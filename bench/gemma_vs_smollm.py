"""A bigger embedded base against SmolLM2-135M as the embedded judge's base (`--other`: Gemma 3 270M, the
default, or Qwen2.5-Coder-0.5B-Instruct): LoRA training cost per record, and the other base's zero-shot
score-only Pearson on the 160 held-out items.

    .venv/bin/python bench/gemma_vs_smollm.py [--other qwen2.5-coder-0.5b] [--batch 4] [--steps 4] [--repeats 1] [--skip-eval]
    .venv/bin/python bench/gemma_vs_smollm.py --batch 1 --steps 1 --skip-eval      # a smoke run
    .venv/bin/python bench/gemma_vs_smollm.py --write-results                      # replaces its section of RESULTS.md

(a) Training: `judgeforge train` (train.run.train, timed per optimizer step by bench/ddp_bench.py's
worker) on configs/train/embedded-judge.yaml (LoRA r=16 on every linear layer, target `score`,
micro-batch 1, its `precision: auto`) with `model.name` replaced: `default` (SmolLM2) and `--other`.
Both train the same `batch x steps` records: the recipe's data window in order, keeping those that fit
its max_length under both tokenizers. Each arm runs in a fresh process; with `--repeats` > 1 the arms
alternate. Per arm: median wall seconds per optimizer step after the first (all steps when there is
one) over the batch = seconds per record, and the other / SmolLM2 ratio of this same invocation.
Beside it, the prompt+target tokens per record under each tokenizer and the LM head's GFLOP per record
as TRL's fused head runs it on a CPU: every position scored, forward + recomputed forward + the hidden
states' gradient = 3 x 2 x hidden x vocab x (tokens - 1).
(b) Zero-shot: `judgeforge eval --config` the other base's config in `OTHERS` (vLLM, score-only, no
adapter), its score-only Pearson with GPT-4 and the bootstrap interval from metrics.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import _common as C

RECIPE = C.REPO / "configs" / "train" / "embedded-judge.yaml"
DDP_BENCH = C.REPO / "bench" / "ddp_bench.py"
BASELINE = {"default": "SmolLM2-135M-Instruct"}


class Other(NamedTuple):
    """A base measured against SmolLM2 (`--other`)."""

    label: str
    short: str
    """The label in the section's title; Gemma's is the one its RESULTS.md section has carried since issue 21."""
    eval_config: str
    """Its zero-shot config under configs/eval/."""
    results: str
    """The name of its bench/results JSON."""


OTHERS = {"gemma3-270m": Other("Gemma 3 270M (pretrained)", "Gemma 3 270M", "gemma3-zero-shot.yaml", "gemma_vs_smollm"),
          "qwen2.5-coder-0.5b": Other("Qwen2.5-Coder-0.5B-Instruct", "Qwen2.5-Coder-0.5B-Instruct",
                                      "qwen2.5-coder-zero-shot.yaml", "qwen_coder_vs_smollm")}


def models(a) -> dict[str, str]:
    return {**BASELINE, a.other: OTHERS[a.other].label}


def title(a) -> str:
    return f"train/eval: {OTHERS[a.other].short} against SmolLM2-135M as the embedded base"


def prompt_target_tokens(tok, rec: dict) -> int:
    """Tokens of one record as TRL trains it: the chat template over prompt + score target."""
    from judgeforge.train.data import to_prompt_completion

    ex = to_prompt_completion(rec, "score")
    return len(tok.apply_chat_template(ex["prompt"] + ex["completion"], tokenize=True, return_dict=True)["input_ids"])


def common_records(n: int, out: Path, names) -> tuple[Path, dict[str, list[int]]]:
    """A data build of the recipe window's first `n` records that fit max_length for every model, and
    each model's token counts of them."""
    from transformers import AutoTokenizer

    from judgeforge.config import load_config
    from judgeforge.io import write_jsonl
    from judgeforge.judge.weights import resolve_model
    from judgeforge.train.config import TrainConfig
    from judgeforge.train.data import load_build, window

    cfg = load_config(TrainConfig, RECIPE)
    src = cfg.data.sources[0]
    build = load_build(C.REPO / src.path)
    toks = {m: AutoTokenizer.from_pretrained(resolve_model(m)) for m in names}
    picked, counts = [], {m: [] for m in names}
    for rec in window(build.train, src.offset or 0, None, cfg.data.seed):
        lengths = {m: prompt_target_tokens(t, rec) for m, t in toks.items()}
        if max(lengths.values()) <= cfg.data.max_length:
            picked.append(rec)
            for m, k in lengths.items():
                counts[m].append(k)
        if len(picked) == n:
            break
    if len(picked) < n:
        raise SystemExit(f"only {len(picked)} records of {build.path} fit max_length {cfg.data.max_length} "
                         f"under every tokenizer; ask for fewer (--batch x --steps)")
    out.mkdir(parents=True)
    (out / "manifest.json").write_text((build.path / "manifest.json").read_text())
    write_jsonl(out / "train.jsonl", picked)
    write_jsonl(out / "test.jsonl", [])
    return out, counts


def train_arm(model: str, data: Path, tmp: Path, a, k: int) -> dict:
    """One timed training run of `model` on `data` in a fresh process."""
    from judgeforge.config import load_config, save_resolved
    from judgeforge.train.config import TrainConfig

    name = f"{model}-{k}"
    cfg = load_config(TrainConfig, RECIPE, [
        f"model.name={model}", f"out={tmp / name}", f"data.sources=[{{path: {data}}}]", "data.eval_limit=0",
        f"optim.batch_size={a.batch}", f"optim.max_steps={a.steps}", "checkpoint.every=100000",
        "tracking.wandb=false", *([f"precision={a.precision}"] if a.precision else [])])
    cfg_file, result, log = save_resolved(cfg, tmp, f"{name}.yaml"), tmp / f"{name}.json", tmp / f"{name}.log"
    with open(log, "w") as f:
        done = subprocess.run([sys.executable, str(DDP_BENCH), "--worker", str(cfg_file), str(result)],
                              cwd=C.REPO, stdout=f, stderr=f, timeout=a.timeout,
                              env={**os.environ, "WANDB_MODE": "disabled"})
    if done.returncode != 0:
        raise RuntimeError(f"{name} exited {done.returncode}:\n{log.read_text()[-3000:]}")
    r = json.loads(result.read_text())
    return {"model": model, "wall": r["wall"], "cpu": r["cpu"]}


def head_gflop(model: str, tokens: float) -> float:
    from judgeforge.judge.weights import resolve_model

    c = json.loads((Path(resolve_model(model)) / "config.json").read_text())
    return 3 * 2 * c["hidden_size"] * c["vocab_size"] * (tokens - 1) / 1e9


def training(a) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        names = models(a)
        data, counts = common_records(a.batch * a.steps, tmp / "data", names)
        runs = [train_arm(m, data, tmp, a, k) for k in range(a.repeats) for m in names]
    arms = {}
    for m in names:
        walls = [w for r in runs if r["model"] == m for w in (r["wall"][1:] if len(r["wall"]) > 1 else r["wall"])]
        cpus = [c for r in runs if r["model"] == m for c in (r["cpu"][1:] if len(r["cpu"]) > 1 else r["cpu"])]
        tokens = sum(counts[m]) / len(counts[m])
        arms[m] = {"s_per_record": C.median(walls) / a.batch, "cpu_s_per_record": C.median(cpus) / a.batch,
                   "tokens_per_record": tokens, "head_gflop_per_record": head_gflop(m, tokens),
                   "steps_timed": len(walls), "wall": [r["wall"] for r in runs if r["model"] == m]}
    return arms


def zero_shot(a) -> dict:
    from judgeforge.config import read_yaml

    config = C.REPO / "configs" / "eval" / OTHERS[a.other].eval_config
    cfg = read_yaml(config)
    out, judge = Path(a.eval_out or cfg["out"]), cfg["judges"][0]["name"]
    if not (out / "metrics.json").is_file():
        subprocess.run([sys.executable, "-m", "judgeforge.cli", "eval", "--config", str(config), "--out", str(out)],
                       cwd=C.REPO, check=True, timeout=a.timeout)
    metrics = json.loads((out / "metrics.json").read_text())
    res = metrics["results"][judge]["heldout"]["score_only"]
    return {"n": res["correlation"]["n"], "pearson": res["correlation"]["pearson"],
            "timing": metrics["meta"]["timing"].get(judge), "out": str(out), "config": str(config.relative_to(C.REPO))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=4, help="records per optimizer step")
    p.add_argument("--steps", type=int, default=4, help="optimizer steps per arm (the first is not timed)")
    p.add_argument("--repeats", type=int, default=1, help="runs per arm, alternating the arms")
    p.add_argument("--precision", choices=["fp32", "bf16"], help="override the recipe's `precision: auto`")
    p.add_argument("--skip-eval", action="store_true", help="only (a), the training cost")
    p.add_argument("--other", choices=sorted(OTHERS), default="gemma3-270m", help="the base measured against SmolLM2")
    p.add_argument("--eval-out", help="(b)'s eval dir (reused if done; default: its config's `out`)")
    p.add_argument("--timeout", type=float, default=7200)
    p.add_argument("--write-results", action="store_true")
    a = p.parse_args(argv)
    if min(a.batch, a.steps, a.repeats) < 1:
        raise SystemExit("--batch, --steps and --repeats must be at least 1")
    out = {"date": C.now(), "load_start": C.loadavg(), "train": training(a)}
    tr = out["train"]
    print(f"{a.other}/smollm2 s/record: {tr[a.other]['s_per_record'] / tr['default']['s_per_record']:.2f}",
          file=sys.stderr)
    out["zero_shot"] = None if a.skip_eval else zero_shot(a)
    out["load_end"] = C.loadavg()
    C.save_results(OTHERS[a.other].results, out, a)
    return C.publish("gemma_vs_smollm.py", argv, title(a), lambda cmd: render(a, out, cmd), a.write_results)


def render(a, out: dict, command: str) -> str:
    tr, cpu = out["train"], C.cpu()
    base = tr["default"]["s_per_record"]
    labels = models(a)
    lines = [f"## {title(a)}", "",
             f"(a) `judgeforge train` with configs/train/embedded-judge.yaml (LoRA r=16, target `score`), "
             f"`model.name` replaced; the same {a.batch * a.steps} records ({a.steps} steps of {a.batch}), "
             f"median over the steps after the first, {a.repeats} run(s) per model alternating. *head GFLOP*: "
             "the LM head on every position as TRL's fused head runs it on a CPU (3 x 2 x hidden x vocab x "
             "(tokens - 1)).", "",
             "| base | CPU | tokens/record | s/record | CPU-s/record | ratio to SmolLM2 | head GFLOP/record |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for m, r in tr.items():
        lines.append(f"| {labels[m]} | {cpu} | {r['tokens_per_record']:.0f} | {r['s_per_record']:.2f} | "
                     f"{r['cpu_s_per_record']:.2f} | **{r['s_per_record'] / base:.2f}** | "
                     f"{r['head_gflop_per_record']:.0f} |")
    zs = out["zero_shot"]
    if zs:
        pr = zs["pearson"]
        lines += ["", f"(b) Zero-shot, score-only ({zs['config']}, vLLM, "
                  f"{zs['n']} held-out MT-Bench items, GPT-4 reference): {labels[a.other]} base Pearson "
                  f"**{pr['value']:.3f}** "
                  f"[{pr['lo']:.3f}, {pr['hi']:.3f}] ({zs['out']}/metrics.json)."]
    return "\n".join(lines) + "\n\n" + C.command_footer(command, out) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
