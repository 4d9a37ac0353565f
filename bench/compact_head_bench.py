"""LoRA training step on CPU with TRL's fused head scoring every position vs only the labelled ones
(train/trainer.py `compact_cpu_head`), same invocation, arms interleaved.

    python bench/compact_head_bench.py [--models default,gemma3-270m] [--length 1400] [--target 6] [--steps 4]

One forward+backward+AdamW step of an embedded base with the recipe's LoRA (r=16 on every linear
layer, not lm_head: TRL's fused-head path), on a random `--length`-token sequence whose loss is on its
last `--target` tokens (a score-only judgment: the verdict after `[RESULT] `); the median of the steps
after each arm's first. fp32, the precision `auto` picks on a CPU without native bf16.

    python bench/compact_head_bench.py --write-results   # replaces its section of bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import contextlib
import time


def _model(name: str):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from judgeforge.judge.weights import resolve_model

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model(name), dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM", target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    add_fused_lm_head(model.get_base_model(), outputs=("log_probs", "entropy", "is_top1"))  # as SFTTrainer does
    return model


def step_seconds(name: str, length: int, target: int, steps: int) -> dict[str, float]:
    import torch

    from judgeforge.train.trainer import compact_cpu_head

    model = _model(name)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    x = torch.randint(0, model.config.vocab_size, (1, length))
    labels = torch.full_like(x, -100)
    labels[:, -target:] = x[:, -target:]
    arms = {"every position": contextlib.nullcontext, "labelled only": compact_cpu_head}
    times: dict[str, list[float]] = {k: [] for k in arms}
    for _ in range(steps):
        for arm, ctx in arms.items():
            t = time.perf_counter()
            with ctx():
                out = model(input_ids=x, labels=labels, fused_lm_head=True)
            loss = -out.log_probs.sum() / target
            loss.backward()
            opt.step()
            opt.zero_grad()
            times[arm].append(time.perf_counter() - t)
    import _common as C

    return {arm: C.median(ts[1:]) for arm, ts in times.items()}


def main(argv=None) -> int:
    import sys

    import _common as C

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=lambda s: s.split(","), default=["default"])
    p.add_argument("--length", type=int, default=1400)
    p.add_argument("--target", type=int, default=6)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--write-results", action="store_true")
    a = p.parse_args(argv)
    out = {"date": C.now(), "load_start": C.loadavg()}
    res = {m: step_seconds(m, a.length, a.target, a.steps) for m in a.models}
    out["load_end"] = C.loadavg()
    for m, r in res.items():
        print(f"{m}: {r}", file=sys.stderr)
    return C.publish("compact_head_bench.py", argv, TITLE, lambda cmd: render(a, res, out, cmd), a.write_results)


TITLE = "Fused head on CPU: every position vs the labelled ones"


def render(a, res: dict, out: dict, command: str) -> str:
    import _common as C

    rows = "".join(f"| {m} | {r['every position']:.2f} | {r['labelled only']:.2f} | "
                   f"**{r['every position'] / r['labelled only']:.2f}** |\n" for m, r in res.items())
    return (f"## {TITLE}\n\nOne LoRA r=16 step (forward, backward, AdamW; fp32) on a {a.length}-token sequence "
            f"with the loss on its last {a.target} tokens, median of {a.steps - 1} steps per arm after the "
            "first, arms interleaved in this invocation. TRL's fused head scores only the labelled positions "
            "where Triton runs; `compact_cpu_head` (train/trainer.py) makes it do so on CPU too, with the same "
            "loss and gradients (tests/train/test_compact_head.py).\n\n"
            "| model | s/step, every position | s/step, labelled only | speed-up |\n|---|---:|---:|---:|\n"
            + rows + "\n" + C.command_footer(command, out) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
