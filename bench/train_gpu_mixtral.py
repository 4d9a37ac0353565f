"""LoRA training throughput and MFU of judgeforge's trainer on a randomly initialised Mixtral
of realistic width (Mixtral-8x7B's layer shape, fewer layers), on one GPU. No download.

    .venv/bin/python bench/train_gpu_mixtral.py [--layers 4] [--steps 12] [--warmup 3]
    .venv/bin/python bench/train_gpu_mixtral.py --tiny          # CPU smoke run of the same code

The recipe is the paper's: LoRA r=256, alpha=512 on q/k/v/o, the experts (w1/w2/w3 = the fused
gate_up_proj/down_proj) and lm_head, bf16, max length 4096, micro-batch 1, gradient
checkpointing, trained on real MT-Bench GPT-4 judgments through `JudgeSFTTrainer`.

MFU = model FLOPs/s / peak dense bf16 FLOPs/s, with model FLOPs per token = 6 x active params
(top-2 of 8 experts) + 12 x layers x hidden x seq (attention), the PaLM convention: the frozen
base's missing weight gradients and checkpointing's recomputation are not credited.
Prints one JSON object (and `--markdown`: a row for bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 125.0, "L4": 121.0}


def mixtral_config(tiny: bool, layers: int, vocab: int):
    from transformers import MixtralConfig

    if tiny:
        return MixtralConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, num_local_experts=8,
                             num_experts_per_tok=2, max_position_embeddings=4096)
    return MixtralConfig(vocab_size=vocab, hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers,
                         num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
                         max_position_embeddings=32768, rope_theta=1e6)


def active_params(c) -> int:
    """Parameters one token passes through: attention, top-k experts, router, norms, lm_head."""
    head_dim = c.hidden_size // c.num_attention_heads
    attn = c.hidden_size * head_dim * (2 * c.num_attention_heads + 2 * c.num_key_value_heads)
    experts = c.num_experts_per_tok * 3 * c.hidden_size * c.intermediate_size
    router = c.num_local_experts * c.hidden_size
    return c.num_hidden_layers * (attn + experts + router) + c.vocab_size * c.hidden_size


def peak_tflops(name: str, override: float | None) -> float | None:
    if override:
        return override
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--max-length", type=int, default=4096)
    p.add_argument("--peak-tflops", type=float, help="peak dense bf16 TFLOP/s of the GPU (default: by name)")
    p.add_argument("--tiny", action="store_true", help="CPU smoke run with a tiny model")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()

    import torch
    from transformers import AutoTokenizer, MixtralForCausalLM, TrainerCallback

    from judgeforge.config import load_config
    from judgeforge.hardware import cuda_available
    from judgeforge.judge.weights import resolve_model
    from judgeforge.train.config import TrainConfig
    from judgeforge.train.run import build_trainer, load_datasets, sft_args

    gpu = cuda_available() and not args.tiny
    if not gpu and not args.tiny:
        print("no GPU: run with --tiny for a CPU smoke run", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        from judgeforge.data.build import run_build
        from judgeforge.data.config import BuildConfig

        run_build(load_config(BuildConfig, REPO / "configs/data/default.yaml", ["progress=false"]), tmp / "data")
        # Mixtral's own tokenizer is not available offline; SmolLM2's (49k vocab) stands in.
        tok_dir = resolve_model("default")
        vocab = len(AutoTokenizer.from_pretrained(tok_dir))
        config = mixtral_config(args.tiny, args.layers, vocab)
        model_dir = tmp / "model"
        with torch.device("cuda" if gpu else "cpu"):
            model = MixtralForCausalLM._from_config(config, dtype=torch.bfloat16 if gpu else torch.float32)
        AutoTokenizer.from_pretrained(tok_dir).save_pretrained(model_dir)
        micro = 1
        cfg = load_config(TrainConfig, REPO / "configs/train/prometheus-bgb-8x7b.yaml", [
            f"model.name={model_dir}", f"out={tmp / 'run'}", f"data.sources=[{{path: {tmp / 'data'}}}]",
            f"data.max_length={args.max_length}", "data.eval_limit=0", "num_gpus=1", "tracking.wandb=false",
            f"optim.max_steps={args.steps}", "checkpoint.every=100000", f"optim.micro_batch_size={micro}",
            "optim.batch_size=8"] + ([] if gpu else ["precision=fp32", "optim.gradient_checkpointing=false",
                                                      "lora.r=8", "lora.alpha=16"]))
        mix, train_ds, eval_ds = load_datasets(cfg)
        targs = sft_args(cfg, tmp / "run" / "checkpoints", has_eval=False)

        class Clock(TrainerCallback):
            def on_step_begin(self, a, state, c, **kw):
                if state.global_step == args.warmup:
                    if gpu:
                        torch.cuda.synchronize()
                    self.t0 = time.perf_counter()

            def on_step_end(self, a, state, c, **kw):
                if state.global_step == args.steps:
                    if gpu:
                        torch.cuda.synchronize()
                    self.t1 = time.perf_counter()

        clock = Clock()
        # The model is built in memory (no 90 GB checkpoint); the trainer is judgeforge's.
        trainer, log, dropped = build_trainer(cfg, targs, train_ds, eval_ds, tmp / "run", [clock],
                                              loaded=(model, AutoTokenizer.from_pretrained(model_dir)))
        trainer.train()
        lengths = {i: len(x) for i, x in zip(trainer.train_dataset["id"], trainer.train_dataset["input_ids"])}
        steps = [json.loads(line) for line in (tmp / "run" / "samples.jsonl").read_text().splitlines()]
        tokens = sum(lengths[i] for s in steps if s["step"] > args.warmup for i in s["ids"])
        seconds = clock.t1 - clock.t0
        mean_len = tokens / sum(len(s["ids"]) for s in steps if s["step"] > args.warmup)
        flops_per_token = 6 * active_params(config) + 12 * config.num_hidden_layers * config.hidden_size * mean_len
        name = torch.cuda.get_device_name() if gpu else "cpu"
        peak = peak_tflops(name, args.peak_tflops)
        tps = tokens / seconds
        result = {"device": name, "layers": config.num_hidden_layers, "hidden": config.hidden_size,
                  "experts": config.num_local_experts, "lora_r": cfg.lora.r, "max_length": args.max_length,
                  "timed_steps": args.steps - args.warmup, "tokens": tokens, "seconds": round(seconds, 2),
                  "tokens_per_s": round(tps, 1), "model_tflops_per_s": round(tps * flops_per_token / 1e12, 2),
                  "mfu": round(tps * flops_per_token / (peak * 1e12), 4) if peak else None,
                  "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 2**30, 1) if gpu else None,
                  "dropped_overlong": len(dropped["train"])}
    print(json.dumps(result, indent=2))
    if args.markdown:
        print(f"| LoRA r={cfg.lora.r} Mixtral-width {config.num_hidden_layers} layers, 1x {name} | "
              f"{result['tokens_per_s']} tok/s | MFU {result['mfu']} | {result['peak_mem_gb']} GB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
