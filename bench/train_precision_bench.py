"""LoRA training step throughput on CPU: bf16 autocast over fp32 weights vs plain fp32, same invocation.

    python bench/train_precision_bench.py [--length 1400] [--steps 3]

One forward+backward+AdamW step of the embedded SmolLM2-135M with LoRA r=16 on every linear layer, a
random 1,400-token sequence with the loss on its last 120 tokens (a typical MT-Bench judgment); the best
of the steps after the first. Why configs/train/embedded-judge.yaml sets `precision: bf16` on CPU.
"""

from __future__ import annotations

import argparse
import time


def step_seconds(dtype_name: str, autocast: bool, length: int, steps: int) -> float:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from judgeforge.models import resolve_model

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model("default"), dtype=getattr(torch, dtype_name))
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM", target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    x = torch.randint(0, 40000, (1, length))
    labels = x.clone()
    labels[:, :-120] = -100
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(input_ids=x, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t)
    return min(times[1:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--length", type=int, default=1400)
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args()
    fp32 = step_seconds("float32", False, a.length, a.steps)
    bf16 = step_seconds("float32", True, a.length, a.steps)
    print(f"fp32 {a.length / fp32:.0f} tokens/s, bf16 autocast {a.length / bf16:.0f} tokens/s, "
          f"ratio {fp32 / bf16:.2f}x")


if __name__ == "__main__":
    main()
