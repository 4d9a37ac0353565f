"""Process helpers for the tests that kill judgeforge commands and check what they leave behind."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Iterator

_HOLD = ("import sys, time\nfrom judgeforge import io\nwith io.run_lock(sys.argv[1]):\n"
         "    print('held', flush=True)\n    time.sleep(600)")


def alive(procs: Iterable) -> list:
    """The psutil processes of `procs` still running and not zombies (a zombie uses no CPU or memory)."""
    import psutil

    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@contextlib.contextmanager
def lock_holder(out: Path) -> Iterator[subprocess.Popen]:
    """Another live process holding the run lock of `out` (judgeforge.io.run_lock) until the block ends
    (or the caller kills it)."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait(timeout=30)
