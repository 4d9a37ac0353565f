"""The distillation loss's pair step on CPU: both responses in one left-padded forward (with an attention
mask) against each alone (no mask), forward + backward through the LoRA judge, in one invocation.

    python bench/pair_loss_bench.py [--pairs 4] [--repeats 2] [--write-results]

The pairs are the longest-prompt end of `distill.score_pairs` on the embedded-judge build (FastChat 1-10
items as served, ~1,000-2,400 tokens a prompt), the training round's model (SmolLM2 + the shipped
adapter's LoRA shape, trainable), the CPU's training precision (bf16 autocast with native bf16). Each arm
runs in a fresh process so its peak resident memory is its own; arms alternate; medians of the repeats.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

import _common as C

TITLE = "training: the distillation pair step, padded batch vs one sequence at a time"
ARMS = ("padded", "unpadded")
BUILD = C.REPO / "runs" / "data" / "embedded-judge"


def child(arm: str, pairs: int) -> None:
    """One arm: fwd + bwd of `pairs` pairs, timed after one warm-up pair; prints its RESULT."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from judgeforge import hardware as hw
    from judgeforge.io import read_jsonl
    from judgeforge.judge.weights import resolve_model
    from judgeforge.train.config import TrainConfig
    from judgeforge.config import load_config
    from judgeforge.train.distill import pair_loss, prepare_pairs

    cfg = load_config(TrainConfig, C.REPO / "configs/train/content-not-length.yaml",
                      [f"distill.sources=[{BUILD}]", f"data.sources=[{{path: {BUILD}}}]"])
    path = resolve_model("default")
    tok = AutoTokenizer.from_pretrained(path)
    feed = prepare_pairs(cfg, tok, read_jsonl(BUILD / "train.jsonl"))
    order = sorted(range(feed.counts["pairs"]), key=lambda i: -max(len(feed.first_ids[i]), len(feed.second_ids[i])))
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
                           LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, target_modules=cfg.lora.target_modules))
    model.train()
    bf16 = hw.train_precision("auto", hw.cpu_info()).value == "bf16"
    if arm == "padded":  # what the trainer did before: both sides in one left-padded forward
        import judgeforge.train.distill as D

        real = D.expected_scores
        D.expected_scores = lambda m, seqs, r, pad, unpadded=False: real(m, seqs, r, pad)
    seconds = []
    for k, i in enumerate(order[:pairs + 1]):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss, _ = pair_loss(model, feed, [i])
        loss.backward()
        model.zero_grad(set_to_none=True)
        if k:  # the first pair warms up
            seconds.append(time.perf_counter() - t0)
    tokens = [len(feed.first_ids[i]) + len(feed.second_ids[i]) for i in order[1:pairs + 1]]
    C.emit({"seconds": sum(seconds), "tokens": sum(tokens), "bf16": bf16,
            "max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--write-results", action="store_true")
    ap.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.arm:
        child(a.arm, a.pairs)
        return 0
    if not (BUILD / "manifest.json").is_file():  # a build is byte-identical: a rebuild is the same data
        subprocess.run([sys.executable, "-m", "judgeforge.cli", "data", "build", "--config",
                        "configs/data/embedded-judge.yaml", "--out", str(BUILD), "progress=false"], cwd=C.REPO,
                       check=True)
    out = {"date": C.now(), "load_start": C.loadavg(), **{arm: [] for arm in ARMS}}
    for _ in range(a.repeats):
        for arm in ARMS:
            out[arm].append(C.run_child(C.REPO / "bench" / "pair_loss_bench.py",
                                        ["--arm", arm, "--pairs", str(a.pairs)], {}, timeout=3600))
    out["load_end"] = C.loadavg()
    C.save_results("pair_loss", out, a)

    def text(command: str) -> str:
        med = {arm: C.median([r["seconds"] for r in out[arm]]) for arm in ARMS}
        rss = {arm: max(r["max_rss_gb"] for r in out[arm]) for arm in ARMS}
        tokens = out["unpadded"][0]["tokens"]
        rows = [f"| {arm} | {med[arm]:.1f} ({C.spread([r['seconds'] for r in out[arm]], '{:.1f}')}) | "
                f"{med[arm] / med['unpadded']:.2f} | {rss[arm]:.1f} |" for arm in ARMS]
        return C.section(TITLE, (
            f"{a.pairs} of the longest FastChat score pairs ({tokens} prompt tokens in all), forward + backward of "
            f"the RankNet loss through SmolLM2 + LoRA r16 (bf16 autocast: {out['unpadded'][0]['bf16']}), "
            f"a fresh process per arm, arms alternating, medians of {a.repeats}; ratio = the arm's seconds over "
            "the unpadded arm's."), ["pair forward", "seconds for the pairs", "ratio", "peak RSS, GB"], rows,
            command, out)

    return C.publish("pair_loss_bench.py", argv, TITLE, text, a.write_results)


if __name__ == "__main__":
    sys.exit(main())
