"""The transformers engine's lone request (a served grading, `load_judge(...).grade`): how often its
prompt is prefilled, three arms in one invocation on one engine.

    python bench/hf_prefill_bench.py [--items 4] [--n 5] [--max-tokens 64] [--repeats 2] [--write-results]

- *copies*: each of the N rows prefilled on its own, then the completion reads' own prefill (N + 1);
- *two*: the N rows share one prefill, the completion reads prefill again (2; commit ed1b6d8);
- *one*: one prefill for the rows and the reads alike (1; now).

Each arm grades the same real MT-Bench items one request at a time, n samples each, score completion on,
arms alternating; the baseline arms patch the engine back to what it did. Medians of the repeats; each
ratio is that arm's seconds over the *one* arm's.
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


ARMS = ("copies", "two", "one")


def patch(arm: str) -> None:
    """Turn the engine back into what the arm measures (`one` is the engine as shipped)."""
    from judgeforge.judge.engines.hf import TransformersEngine as E

    E._rows_cache = ORIG["rows"] if arm != "copies" else staticmethod(lambda cache, n, keep: None)
    E._complete = ORIG["complete"] if arm == "one" else (
        lambda self, req, drafts, cancel, cache=None: ORIG["complete"](self, req, drafts, cancel))


ORIG: dict = {}


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

    ORIG.update(rows=TransformersEngine.__dict__["_rows_cache"], complete=TransformersEngine._complete)
    items = C.mt_bench_items(a.items)
    out = {"date": C.now(), "load_start": C.loadavg(), **{arm: [] for arm in ARMS}}
    with build_engine(EngineConfig(kind="transformers", model="default-judge", max_model_len=4096)) as eng:
        judge = Judge(eng, SamplingConfig(n=a.n, max_n=a.n, max_tokens=a.max_tokens, max_resample_rounds=0))
        grade_all(eng, judge, items[:1])  # warm-up, not counted
        for _ in range(a.repeats):
            for arm in ARMS:
                patch(arm)
                out[arm].append(grade_all(eng, judge, items))
        patch("one")
    out["load_end"] = C.loadavg()
    C.save_results("hf_prefill", out, a)

    def text(command: str) -> str:
        one = C.median(out["one"])
        label = {"copies": "N copies of the prompt prefilled, then the reads' own prefill (N + 1)",
                 "two": "the N rows share one prefill, the reads prefill again (2; before)",
                 "one": "one prefill for the rows and the reads (1; now)"}
        rows = [f"| {label[arm]} | {C.median(out[arm]):.1f} ({C.spread(out[arm], '{:.1f}')}) | "
                f"{C.median(out[arm]) / one:.2f} |" for arm in ARMS]
        return C.section(TITLE, (
            f"{a.items} real MT-Bench gradings one request at a time, n={a.n}, at most {a.max_tokens} feedback "
            "tokens, score completion on, the shipped `default-judge` on the transformers engine (float32), "
            f"arms alternating on one engine, medians of {a.repeats}; ratio = the arm's seconds over the one-prefill "
            "arm's."), ["prompt prefills per request", "seconds for the items", "ratio"], rows, command, out)

    return C.publish("hf_prefill_bench.py", argv, TITLE, text, a.write_results)


if __name__ == "__main__":
    raise SystemExit(main())
