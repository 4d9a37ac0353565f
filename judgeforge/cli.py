"""The `judgeforge` console script: a thin dispatcher to each stage's entry point.

Each sub-command lives in its stage's package and is imported only when run,
so `judgeforge data build` never imports torch or vLLM.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading

from judgeforge.logs import configure_logging

# (words...) -> "module:function"; the longest matching prefix wins (up to LONGEST words).
COMMANDS: dict[tuple[str, ...], str] = {
    ("config", "ls"): "judgeforge.recipes:ls_main",
    ("config", "cp"): "judgeforge.recipes:cp_main",
    ("data", "build"): "judgeforge.data.build:main",
    ("model", "prepare"): "judgeforge.judge.weights:main",
    ("model", "ship"): "judgeforge.train.ship:main",
    ("train",): "judgeforge.train.run:main",
    ("train", "merge"): "judgeforge.train.merge:main",
    ("eval",): "judgeforge.eval.run:main",
    ("eval", "compare"): "judgeforge.eval.compare:main",
    ("serve",): "judgeforge.serve.app:main",
    ("grade",): "judgeforge.serve.client:main",
    ("cascade", "calibrate"): "judgeforge.cascade.calibrate:main",
    ("cascade", "store", "backup"): "judgeforge.cascade.backup:main",
}
LONGEST = max(map(len, COMMANDS))
# The typed configs each command resolves, as (key prefix, "module:Class"), for the generated CLI
# reference (judgeforge.reference); a command missing here takes flags only. `grade` reads the serve
# config for --local/--ray and `runtime.key=value` overrides as the RuntimeConfig of --ray.
CONFIGS: dict[tuple[str, ...], tuple[tuple[str, str], ...]] = {
    ("data", "build"): (("", "judgeforge.data.config:BuildConfig"),),
    ("train",): (("", "judgeforge.train.config:TrainConfig"),),
    ("train", "merge"): (("", "judgeforge.train.merge:MergeConfig"),),
    ("eval",): (("", "judgeforge.eval.config:EvalConfig"),),
    ("serve",): (("", "judgeforge.serve.config:ServeConfig"),),
    ("grade",): (("", "judgeforge.serve.config:ServeConfig"),
                 ("runtime", "judgeforge.scale.config:RuntimeConfig")),
    ("cascade", "calibrate"): (("", "judgeforge.cascade.config:CalibrateConfig"),),
}

USAGE = "usage: judgeforge [--verbose] <command> [--config FILE|NAME] [key=value ...]\n\ncommands:\n" + "\n".join(
    "  " + " ".join(words) for words in sorted(COMMANDS)
)

log = logging.getLogger(__name__)


class Terminated(SystemExit):
    """SIGTERM, raised in the main thread: `with build_engine(...)` blocks close their engine."""


def _terminate(signum, frame):
    signal.signal(signum, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated(128 + signum)


def _die_of_sigterm() -> None:
    """After the clean-up, end as SIGTERM's default would: callers and supervisors (systemd counts
    it a clean stop; `serve`'s tests expect it after uvicorn's drain) see a process killed by it."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _match(argv: list[str]) -> tuple[str, list[str]] | None:
    for n in range(LONGEST, 0, -1):
        words = tuple(argv[:n])
        if len(words) == n and words in COMMANDS:
            return COMMANDS[words], argv[n:]
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = bool(argv) and argv[0] in ("-v", "--verbose")  # other libraries' output too
    argv = argv[verbose:]
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    hit = _match(argv)
    if hit is None:
        print(f"judgeforge: unknown command {' '.join(argv[:2])!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    target, rest = hit
    configure_logging(verbose)
    module, func = target.split(":")
    from judgeforge.config import ConfigError
    from judgeforge.io import OutputError

    # Only over the default (an embedding program's own handler stays). uvicorn (serve) installs
    # its own while serving, drains, and re-raises the signal here.
    ours = (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
    if ours:
        signal.signal(signal.SIGTERM, _terminate)
    try:
        return int(getattr(importlib.import_module(module), func)(rest) or 0)
    except ConfigError as e:
        print(f"judgeforge: config error: {e}", file=sys.stderr)
        return 2
    except OutputError as e:  # an --out that is someone else's, or in use
        print(f"judgeforge: output refused: {e}", file=sys.stderr)
        return 2
    except Terminated as e:
        log.warning("terminated by SIGTERM")
        _die_of_sigterm()
        return e.code
    finally:
        if ours:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main())
