"""Progress of long loops, on a terminal and in logs: the one place that decides how it is shown.

tqdm's `disable=None` hides the bar whenever stderr is not a terminal, so under nohup, CI or a job
scheduler a grading run or a data build said nothing for minutes. `progress()` gives a tqdm bar on a
terminal (or in a notebook) and, anywhere else, a `LogProgress` that writes an INFO line to the log at
most every `interval_s` seconds (`JUDGEFORGE_PROGRESS_INTERVAL`, default 30) and once when it closes:

    grading: 120/760 (15%), 1.9 prompt/s, elapsed 1m03s, ETA 5m37s

All three share tqdm's small API as the callers use it: `update(n)`, `close()`, `with`, iteration.
Pure: tqdm is imported only when a bar is shown.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from contextlib import nullcontext
from typing import Callable, Iterable

ENV_INTERVAL = "JUDGEFORGE_PROGRESS_INTERVAL"
DEFAULT_INTERVAL_S = 30.0

log = logging.getLogger("judgeforge.progress")


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", unit: str = "it",
             initial: int = 0, enabled: bool = True, interval_s: float | None = None,
             logger: logging.Logger | None = None, clock: Callable[[], float] = time.monotonic,
             stream=None, **bar_options):
    """A progress reporter for `total` items (`iterable`'s length when it has one).

    `interval_s` (None: the environment's, else 30 s) and `logger` apply to log lines, `bar_options`
    (e.g. `mininterval`, `leave`) to the terminal bar only; `stream` is where the bar would draw
    (stderr), whose being a terminal decides which one is returned.
    """
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    if not enabled:
        return Off(iterable, total, initial)
    stream = sys.stderr if stream is None else stream
    if _interactive(stream):
        from tqdm.auto import tqdm  # the notebook widget in Jupyter, the text bar in a terminal

        return tqdm(iterable, total=total, desc=desc, unit=unit, initial=initial, file=stream, **bar_options)
    interval = interval_from_env() if interval_s is None else interval_s
    return LogProgress(iterable, total=total, desc=desc, unit=unit, initial=initial, interval_s=interval,
                       logger=logger or log, clock=clock)


def keep_logs_above(reporter):
    """While a terminal bar draws, route log lines above it (not through it); nothing to do otherwise."""
    if isinstance(reporter, Off):  # LogProgress too
        return nullcontext()
    from tqdm.contrib.logging import logging_redirect_tqdm

    return logging_redirect_tqdm()


def interval_from_env() -> float:
    """Seconds between log lines: JUDGEFORGE_PROGRESS_INTERVAL, or the default when unset or bad (a
    typo in it should not stop a long run, so it is a warning, not an error)."""
    text = os.environ.get(ENV_INTERVAL, "").strip()
    if not text:
        return DEFAULT_INTERVAL_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        log.warning("%s=%r is not a number of seconds >= 0; using %g", ENV_INTERVAL, text, DEFAULT_INTERVAL_S)
        return DEFAULT_INTERVAL_S
    return value


def _interactive(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        if isatty is not None and isatty():
            return True
    except ValueError:  # a closed stream
        return False
    return _in_notebook()


def _in_notebook() -> bool:
    """A Jupyter kernel: stderr is no terminal there, yet the widget bar is what its user sees."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class Off:
    """Progress not wanted: the same API, nothing shown."""

    def __init__(self, iterable: Iterable | None = None, total: int | None = None, initial: int = 0):
        self.iterable, self.total, self.n = iterable, total, initial

    def __iter__(self):
        for item in self.iterable:
            self.n += 1
            yield item

    def update(self, n: int = 1) -> None:
        self.n += n

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LogProgress(Off):
    """Off's bookkeeping, shown as log lines: done/total, percent, rate, elapsed, ETA; at most one per `interval_s`
    and a last one at `close()` (unless the previous line already said the same)."""

    def __init__(self, iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", initial: int = 0, interval_s: float = DEFAULT_INTERVAL_S,
                 logger: logging.Logger = log, clock: Callable[[], float] = time.monotonic):
        super().__init__(iterable, total, initial)
        self.desc, self.unit = desc, unit.strip() or "it"  # tqdm units may carry a leading space
        self.interval_s, self.logger, self.clock = interval_s, logger, clock
        self.initial = initial  # items done before this run (a resume): not part of the rate
        self.start = self.last = clock()
        self.logged_n: int | None = None
        self.closed = False

    def __iter__(self):
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:  # like tqdm: a loop that ends (or is abandoned) closes its reporter
            self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= self.interval_s:
            self._emit(now, final=False)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.logged_n != self.n:
            self._emit(self.clock(), final=True)

    def _emit(self, now: float, final: bool) -> None:
        self.last, self.logged_n = now, self.n
        self.logger.info("%s", self.line(now, final))

    def line(self, now: float, final: bool = False) -> str:
        """`desc: done/total (pct%), rate unit/s, elapsed T, ETA T`; the parts that are unknown left out
        (no total: no percent or ETA; nothing done yet: no rate; closed: no ETA)."""
        elapsed = max(0.0, now - self.start)
        done = f"{self.n}/{self.total} ({_percent(self.n, self.total)}%)" if self.total is not None else str(self.n)
        parts = [f"{self.desc}: {done}" if self.desc else done]
        if self.total is None:
            parts[0] += f" {self.unit}"
        rate = (self.n - self.initial) / elapsed if elapsed > 0 else 0.0
        if rate > 0:
            parts.append(f"{_number(rate)} {self.unit}/s")
        parts.append(f"elapsed {duration(elapsed)}")
        if not final and rate > 0 and self.total is not None and self.n < self.total:
            parts.append(f"ETA {duration((self.total - self.n) / rate)}")
        return ", ".join(parts)


def _percent(n: int, total: int) -> int:
    # Floored, so 100% means finished, never "almost".
    return 100 if total <= 0 else min(100, n * 100 // total)


def _number(x: float) -> str:
    return f"{x:.2f}" if x < 1 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def duration(seconds: float) -> str:
    """`45s`, `1m03s`, `2h05m`: short enough for a log line, exact enough to plan around."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
