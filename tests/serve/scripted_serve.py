"""`judgeforge serve ARGV` as deployed (the CLI: config, logging, SIGTERM, uvicorn and its options) over
a ScriptedEngine instead of a model, for tests of the real server process (its uvicorn options, its
logs) that need no model. Run as a subprocess (`ServerProcess(..., entry=SCRIPTED)`), not collected:

    python scripted_serve.py [serve args]      # env JUDGEFORGE_SCRIPTED_DELAY: the engine's delay (s)

It lives with the tests that start it; the engine double comes from the repo's testing/ package.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from judgeforge import cli
from judgeforge.judge import engines

sys.path.append(str(Path(__file__).resolve().parents[2]))  # run as a script: the repo root, for testing/
from testing.engines import ScriptedEngine  # noqa: E402


def main(argv: list[str]) -> int:
    delay = float(os.environ.get("JUDGEFORGE_SCRIPTED_DELAY", "0"))
    engines.build_engine = lambda cfg: ScriptedEngine(delay=delay)  # serve's main looks it up at call time
    return cli.main(["serve", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
