"""`judgeforge serve` in a subprocess: the real CLI, as deployed, on a free local port.

`ServerProcess` starts it, waits for /health and stops it with SIGTERM (SIGKILL to its own session if
it will not stop). The demo (serve/demo.py) and the serving benchmarks run the real server this way;
tests also pass another `entry` taking the same arguments (tests/serve/scripted_serve.py: the same
CLI over a scripted engine).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`judgeforge serve` in a subprocess (the real CLI), stopped with SIGTERM."""

    def __init__(self, config: Path | None, overrides: list[str], env: dict | None = None,
                 log: Path | None = None, entry: Sequence[str] = ("-m", "judgeforge.cli", "serve")):
        """`entry`: what `python` runs, given `judgeforge serve`'s arguments."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        cmd = [sys.executable, *entry, *(["--config", str(config)] if config else []),
               "--port", str(self.port), *overrides]
        self.out = open(log, "w") if log else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=self.out,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 400) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise TimeoutError(f"server not ready in {timeout}s: {self.tail()}")

    def tail(self) -> str:
        return self.log.read_text()[-3000:] if self.log and self.log.exists() else ""

    def stop(self, timeout: float = 60) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # our own session only
                self.proc.wait(10)
        if self.out is not subprocess.DEVNULL:
            self.out.close()
        return self.proc.returncode
