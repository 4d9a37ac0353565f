"""The `judgeforge` console script: a thin dispatcher to each stage's entry point.

Each sub-command lives in its stage's package and is imported only when run,
so `judgeforge data build` never imports torch or vLLM.
"""

from __future__ import annotations

import importlib
import logging
import sys

# (words...) -> "module:function"; the longest matching prefix wins.
COMMANDS: dict[tuple[str, ...], str] = {
    ("data", "build"): "judgeforge.data.build:main",
    ("model", "prepare"): "judgeforge.models:main",
    ("model", "ship"): "judgeforge.ship:main",
    ("train",): "judgeforge.train.run:main",
    ("train", "merge"): "judgeforge.train.merge:main",
    ("eval",): "judgeforge.eval.run:main",
    ("eval", "compare"): "judgeforge.eval.compare:main",
    ("serve",): "judgeforge.serve.app:main",
    ("grade",): "judgeforge.serve.client:main",
    ("cascade", "calibrate"): "judgeforge.cascade.calibrate:main",
}

USAGE = "usage: judgeforge <command> [--config FILE] [key=value ...]\n\ncommands:\n" + "\n".join(
    "  " + " ".join(words) for words in sorted(COMMANDS)
)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging() -> None:
    """Status and progress of every command: INFO and up to stderr (once; kept if already set up)."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per HTTP request otherwise


def _match(argv: list[str]) -> tuple[str, list[str]] | None:
    for n in (2, 1):
        words = tuple(argv[:n])
        if len(words) == n and words in COMMANDS:
            return COMMANDS[words], argv[n:]
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    hit = _match(argv)
    if hit is None:
        print(f"judgeforge: unknown command {' '.join(argv[:2])!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    target, rest = hit
    configure_logging()
    module, func = target.split(":")
    from judgeforge.config import ConfigError

    try:
        return int(getattr(importlib.import_module(module), func)(rest) or 0)
    except ConfigError as e:
        print(f"judgeforge: config error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
