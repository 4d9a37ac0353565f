"""The Prometheus-2 8x7B recipe under DeepSpeed ZeRO-3 on one GPU, at toy scale: a check for a lent
accelerator machine (one H100/H200, no internet), in under 8 minutes.

    python3 bench/gpu/tiny_mixtral_zero3.py [--steps 12] [--every 6] [--out DIR]
    python3 bench/gpu/tiny_mixtral_zero3.py --dry     # on the CPU, fp32, small: what the tests run

It trains a random 2-layer, 4-expert Mixtral (SmolLM2's tokenizer, shipped in judgeforge/default_judge,
with Mistral's chat template, which refuses system turns as Prometheus-2's does) with
configs/train/prometheus-bgb-8x7b.yaml: LoRA r=256 / alpha 512 on q/k/v/o, the fused experts (w1+w3 at
2r) and lm_head, bf16, global batch 8, gradient checkpointing, through `judgeforge train`'s own launch
(accelerate + DeepSpeed ZeRO-3, configs/train/accelerate/zero3.yaml) on 1 process, on the shortest
MT-Bench GPT-4 judgments of the default data build. It checkpoints every `--every` steps; then it takes
the run back to before its last checkpoint (the adapter and that checkpoint removed) and runs the same
command again, which resumes from the checkpoint before; it merges the adapter (`judgeforge train
merge`) and grades two responses with the merged judge on the transformers engine.

Prints one JSON object: trained tokens/s and s/step (median after the first step), peak GPU memory of
the rank, the resumed adapter's largest difference from the uninterrupted one (bf16 on a GPU: the
experts' index_add is not deterministic, so a small difference is expected; on the CPU it is 0), the
trainable count and the two grades. Exit 0 only if every stage ran.

The machine's image has torch, transformers, peft and accelerate, not the rest: carry wheels for trl,
deepspeed (and hjson), datasets (and dill, multiprocess), pydantic (and pydantic-core, annotated-types,
typing-inspection) and install them with `pip install --no-index --no-deps --target /tmp/site`, with
PYTHONPATH=/tmp/site. The script names any module still missing before it starts, and installs judgeforge
itself from this checkout (`pip install --no-deps --no-build-isolation --target`, offline) when it is not
importable.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
RECIPE = REPO / "configs/train/prometheus-bgb-8x7b.yaml"
TOKENIZER = REPO / "judgeforge/default_judge"  # SmolLM2-135M-Instruct's tokenizer, shipped with the judge
NEEDED = ("torch", "transformers", "peft", "accelerate", "trl", "deepspeed", "datasets", "pydantic", "yaml",
          "safetensors", "hjson")
def missing_modules() -> list[str]:
    return [m for m in NEEDED if importlib.util.find_spec(m) is None]


def ensure_judgeforge(env: dict[str, str]) -> None:
    """judgeforge importable here and in the launched ranks: from this checkout, installed offline into a
    temporary target when it is not installed (the pipeline stages are top-level folders of the checkout,
    installed as judgeforge.* sub-packages, so the checkout alone is not importable)."""
    if importlib.util.find_spec("judgeforge") is not None and importlib.util.find_spec("judgeforge.train"):
        return
    target = Path(tempfile.mkdtemp(prefix="judgeforge-site-"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(target), str(REPO)], check=True)
    sys.path.insert(0, str(target))
    env["PYTHONPATH"] = os.pathsep.join([str(target), *filter(None, [env.get("PYTHONPATH")])])
    sys.modules.pop("judgeforge", None)  # a checkout folder found first is not the package
    importlib.invalidate_caches()


def save_tiny_mixtral(out: Path, seed: int = 0) -> Path:
    """A random 2-layer, 4-expert, top-2 Mixtral (tests/train/conftest.py's) with SmolLM2's tokenizer and
    Mistral's chat template (Prometheus-2's: no system turn)."""
    import torch
    from transformers import AutoTokenizer, MixtralConfig, MixtralForCausalLM

    sys.path.append(str(REPO))  # the checkout's test doubles: the released judges' chat templates
    from testing.chat_templates import MISTRAL

    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    tok.chat_template = MISTRAL
    torch.manual_seed(seed)
    config = MixtralConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                           max_position_embeddings=4096, tie_word_embeddings=False, bos_token_id=tok.bos_token_id,
                           eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    MixtralForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def short_data(out: Path, n: int, n_test: int = 2) -> Path:
    """The default data build's `n` shortest training judgments (and `n_test` test ones for the eval loss)."""
    from judgeforge.config import load_config
    from judgeforge.data.build import run_build
    from judgeforge.data.config import BuildConfig

    sys.path.append(str(REPO))  # the checkout's test doubles: the build cut down (testing/builds.py)
    from testing.builds import short_build

    full = out.parent / "full-build"
    run_build(load_config(BuildConfig, REPO / "configs/data/default.yaml", ["progress=false"]), full)
    return short_build(full, out, n, n_test)


def worker(cfg_file: str, result: str) -> int:
    """One rank of the launch: `judgeforge train` with a clock; rank 0 writes step times, trained tokens
    per step and peak memory to `result`."""
    import torch
    from transformers import TrainerCallback

    from judgeforge.config import load_config
    from judgeforge.logs import configure_logging
    from judgeforge.train.config import TrainConfig
    from judgeforge.train.run import read_samples, train

    cuda = torch.cuda.is_available()

    def sync():
        if cuda:
            torch.cuda.synchronize()

    class Clock(TrainerCallback):
        def __init__(self):
            self.wall, self.lengths = [], {}

        def on_train_begin(self, args, state, control, train_dataloader=None, **kw):
            ds = train_dataloader.dataset
            self.lengths = dict(zip(ds["id"], map(len, ds["input_ids"])))

        def on_step_begin(self, args, state, control, **kw):
            sync()
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            sync()
            self.wall.append(time.perf_counter() - self.t)

    configure_logging()
    cfg = load_config(TrainConfig, cfg_file)
    clock = Clock()
    train(cfg, callbacks=[clock])
    if os.environ.get("RANK", "0") == "0":
        steps = read_samples(cfg.out)[-len(clock.wall):] if clock.wall else []
        tokens = [sum(clock.lengths[i] for i in s["ids"]) for s in steps]
        Path(result).write_text(json.dumps({
            "wall": clock.wall, "tokens": tokens,
            "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}))
    return 0


def overrides(model: Path, data: Path, out: Path, steps: int, every: int, dry: bool) -> list[str]:
    """The recipe with the model, data, steps, out and the process count changed (and, --dry, the CPU's
    precision and a small LoRA, so the test of this script's plumbing stays short)."""
    o = [f"model.name={model}", f"data.sources=[{{path: {data}}}]", f"out={out}", "data.max_length=1024",
         f"optim.max_steps={steps}", f"checkpoint.every={every}", "tracking.wandb=false", "num_gpus=1"]
    if dry:
        o += ["precision=fp32", "lora.r=8", "lora.alpha=16", "optim.batch_size=2"]
    return o


def launch(cfg_file: Path, result: Path, env: dict[str, str], gpu: bool, timeout: float) -> dict:
    """`judgeforge train`'s own launch (accelerate + DeepSpeed ZeRO-3, 1 process) with this script's worker."""
    from judgeforge.config import load_config
    from judgeforge.train import distributed
    from judgeforge.train.config import TrainConfig

    cfg = load_config(TrainConfig, cfg_file)
    cmd = distributed.launch_command(cfg, [], gpu=gpu)
    cmd = cmd[:cmd.index("judgeforge.cli") - 1] + [str(HERE), "--worker", str(cfg_file), str(result)]
    env = distributed.launch_env(env, cfg.num_gpus, os.cpu_count() or 1, gpu=gpu)
    print(" ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, env=env, cwd=REPO, timeout=timeout, check=True)
    return json.loads(result.read_text())


def largest_difference(a: Path, b: Path) -> float:
    from safetensors.torch import load_file

    x, y = load_file(a / "adapter_model.safetensors"), load_file(b / "adapter_model.safetensors")
    if x.keys() != y.keys():
        raise SystemExit(f"the resumed adapter holds other tensors than the uninterrupted one: {x.keys() ^ y.keys()}")
    return max((x[k].float() - y[k].float()).abs().max().item() for k in x)


def run(a, env: dict[str, str]) -> dict:
    import torch

    from judgeforge.config import load_config, save_resolved
    from judgeforge.train.config import TrainConfig

    gpu = torch.cuda.is_available() and not a.dry
    tmp = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="tiny-mixtral-zero3-"))
    tmp.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model = save_tiny_mixtral(tmp / "model")
    data = short_data(tmp / "data", a.examples, n_test=0 if a.dry else 2)  # --dry: no eval passes
    report: dict = {"device": torch.cuda.get_device_name() if gpu else "cpu", "dry": a.dry, "steps": a.steps,
                    "checkpoint_every": a.every}

    run_dir = tmp / "run"
    cfg = load_config(TrainConfig, RECIPE, overrides(model, data, run_dir, a.steps, a.every, a.dry))
    cfg_file = save_resolved(cfg, tmp, "train.yaml")
    first = launch(cfg_file, tmp / "first.json", env, gpu, a.timeout)
    if not first["wall"] or len(first["wall"]) != a.steps:
        raise SystemExit(f"the run trained {len(first['wall'])} steps of {a.steps}")
    timed_wall, timed_tokens = first["wall"][1:] or first["wall"], first["tokens"][1:] or first["tokens"]
    report.update(tokens_per_s=round(sum(timed_tokens) / sum(timed_wall), 1),
                  s_per_step=round(statistics.median(timed_wall), 3),
                  peak_gpu_mem_gib=None if first["peak_mem_gib"] is None else round(first["peak_mem_gib"], 2))
    meta = json.loads((run_dir / "adapter" / "judgeforge.json").read_text())
    report["trainable_params"] = meta["trainable_params"]

    # Back to before the last checkpoint: the same command resumes from the one before it.
    from judgeforge.train.checkpoints import checkpoint_dirs, last_complete

    done = tmp / "uninterrupted-adapter"
    shutil.move(run_dir / "adapter", done)
    shutil.rmtree(checkpoint_dirs(run_dir / "checkpoints")[0][1])
    resume_from = last_complete(run_dir / "checkpoints")
    if resume_from is None:
        raise SystemExit("no complete checkpoint to resume from: --every must be at most half of --steps")
    second = launch(cfg_file, tmp / "second.json", env, gpu, a.timeout)
    report.update(resumed_from=resume_from.name, resumed_steps=len(second["wall"]),
                  resumed_max_abs_diff=largest_difference(run_dir / "adapter", done))

    from judgeforge.cli import main as jf

    merged = tmp / "merged"
    if jf(["train", "merge", "--adapter", str(run_dir), "--out", str(merged)]) != 0:
        raise SystemExit("judgeforge train merge failed")
    import judgeforge

    with judgeforge.load_judge(str(merged), engine="transformers", sampling={"max_tokens": 24}) as judge:
        grades = judge.grade_many(["What is 2+2?", "Name a prime number."], ["4", "9"], rubric="factual_validity")
    report["grades"] = [{"score": g.score, "expected_score": g.expected_score, "reason": g.reason} for g in grades]
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    if not a.out and not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=12, help="optimizer steps of the run (global batch 8)")
    p.add_argument("--every", type=int, default=6, help="checkpoint every this many steps (at most steps / 2)")
    p.add_argument("--examples", type=int, default=48, help="training judgments (the shortest of the build)")
    p.add_argument("--dry", action="store_true",
                   help="on the CPU (fp32, LoRA r=8, batch 2, no eval loss): the script's plumbing")
    p.add_argument("--out", help="work directory (kept); default a temporary one, removed")
    p.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    p.add_argument("--timeout", type=float, default=420, help="seconds for each training launch")
    p.add_argument("--worker", nargs=2, metavar=("CONFIG", "RESULT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return worker(*a.worker)
    missing = missing_modules()
    if missing:
        print(f"missing Python modules: {', '.join(missing)} (carry them as wheels; see --help)", file=sys.stderr)
        return 2
    import torch

    if not a.dry and not torch.cuda.is_available():
        print("no CUDA GPU: run with --dry on the CPU", file=sys.stderr)
        return 2
    env = {**os.environ, "WANDB_MODE": "disabled"}
    ensure_judgeforge(env)
    os.environ.update({k: v for k, v in env.items() if k == "PYTHONPATH"})
    print(json.dumps(run(a, env), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
