"""A grading server with a cascade (threshold 0) and a judgment store over a ScriptedEngine, for the
kill -9 and store-fault tests (run as a subprocess, not collected).

    python cascade_server.py STORE PORT DELAY [key=value ...]

Trailing overrides replace the defaults (e.g. a real teacher's base_url and threshold 1.5).
"""

from __future__ import annotations

import sys
from pathlib import Path

import uvicorn

from judgeforge.config import load_config
from judgeforge.serve.app import create_app
from judgeforge.serve.config import ServeConfig

sys.path.append(str(Path(__file__).resolve().parents[2]))  # run as a script: the repo root, for testing/
from testing.engines import ScriptedEngine  # noqa: E402


def main(store: str, port: int, delay: float, *overrides: str) -> None:
    cfg = load_config(ServeConfig, None, [
        "server.auth=none", "engine.max_model_len=4096", "server.max_in_flight=256",
        "cascade.threshold=0", "cascade.teacher.base_url=http://127.0.0.1:9/v1",  # never asked at 0
        f"store.path={store}", "store.replica=crash-test", *overrides])
    uvicorn.run(create_app(cfg, ScriptedEngine(delay=delay)), host="127.0.0.1", port=port,
                log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), *sys.argv[4:])
