"""The transformers engine's lone request: its N samples sharing one prefill of the prompt, against N
copies of the prompt prefilled (the engine before this change), in one invocation on one engine.

    python bench/hf_prefill_bench.py [--items 4] [--n 5] [--max-tokens 64] [--repeats 2] [--write-results]

Each arm grades the same real MT-Bench items one request at a time (as `judgeforge serve` and
`load_judge(...).grade` do), n samples each, arms alternating; the baseline arm turns the shared
prefill off (each of the N rows is prefilled on its own, as `generate` does with repeated prompts).
Medians of the repeats; the ratio is baseline seconds over shared seconds.
"""

from __future__ import annotations

import argparse
import time

import _common as C

TITLE = "judge core: transformers engine, one prefill for a request's N samples"


def grade_all(engine, judge, items) -> float:
    t0 = time.perf_counter()
    for it in items:
        judge.grade([it])
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=4)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--write-results", action="store_true")
    a = ap.parse_args(argv)
    from judgeforge.judge.config import EngineConfig, SamplingConfig
    from judgeforge.judge.engines import build_engine
    from judgeforge.judge.engines.hf import TransformersEngine
    from judgeforge.judge.judge import Judge

    items = C.mt_bench_items(a.items)
    shared = TransformersEngine._shared_prefill
    out = {"date": C.now(), "load_start": C.loadavg(), "shared": [], "copies": []}
    with build_engine(EngineConfig(kind="transformers", model="default-judge", max_model_len=4096)) as eng:
        judge = Judge(eng, SamplingConfig(n=a.n, max_n=a.n, max_tokens=a.max_tokens, max_resample_rounds=0))
        grade_all(eng, judge, items[:1])  # warm-up, not counted
        for _ in range(a.repeats):
            TransformersEngine._shared_prefill = lambda self, prompt, n: None  # generate's own cache
            out["copies"].append(grade_all(eng, judge, items))
            TransformersEngine._shared_prefill = shared
            out["shared"].append(grade_all(eng, judge, items))
    out["load_end"] = C.loadavg()
    C.save_results("hf_prefill", out, a)

    def text(command: str) -> str:
        copies, one = C.median(out["copies"]), C.median(out["shared"])
        return "\n".join([
            f"## {TITLE}", "",
            f"{a.items} real MT-Bench gradings one request at a time, n={a.n}, at most {a.max_tokens} feedback "
            "tokens, the shipped `default-judge` on the transformers engine (float32), arms alternating on one "
            f"engine, medians of {a.repeats}.", "",
            "| arm | seconds for the items | ratio |", "|---|---:|---:|",
            f"| N copies of the prompt prefilled (before) | {copies:.1f} ({C.spread(out['copies'], '{:.1f}')}) | 1.00 |",
            f"| one prefill shared by the N rows | {one:.1f} ({C.spread(out['shared'], '{:.1f}')}) | "
            f"**{copies / one:.2f}x** faster |", "",
            C.command_footer(command, out)])

    return C.publish("hf_prefill_bench.py", argv, TITLE, text, a.write_results)


if __name__ == "__main__":
    raise SystemExit(main())
