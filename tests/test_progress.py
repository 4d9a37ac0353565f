"""judgeforge/progress.py: a bar on a terminal, timed INFO lines in logs, nothing when off.

The log reporter runs on an injected clock, so every line's numbers are exact. The last test runs the
real `judgeforge data build` with stderr going to a file, as under nohup or CI.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys

import pytest

from judgeforge.progress import ENV_INTERVAL, LogProgress, Off, duration, interval_from_env, keep_logs_above, progress

from .conftest import REPO

LOGGER = "judgeforge.progress"


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self):
        self.t = 100.0  # not 0: the reporter must measure from its own start

    def __call__(self) -> float:
        return self.t

    def at(self, elapsed: float) -> None:
        self.t = 100.0 + elapsed


class NotATty(io.StringIO):
    def isatty(self) -> bool:
        return False


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def lines(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    return lambda: [r.getMessage() for r in caplog.records if r.name == LOGGER]


@pytest.fixture
def clock():
    return Clock()


def logged(clock, **kw):
    return progress(stream=NotATty(), clock=clock, **kw)


def test_lines_at_most_every_interval_with_rate_and_eta(clock, lines):
    bar = logged(clock, total=760, desc="grading", unit="prompt", interval_s=30)
    assert isinstance(bar, LogProgress)
    for elapsed, n in ((10, 20), (30, 40), (45, 60), (59, 1), (60, 1)):
        clock.at(elapsed)
        bar.update(n)
    assert lines() == ["grading: 60/760 (7%), 2.0 prompt/s, elapsed 30s, ETA 5m50s",
                       "grading: 122/760 (16%), 2.0 prompt/s, elapsed 1m00s, ETA 5m14s"]


def test_close_logs_the_last_line_once_without_eta(clock, lines):
    with logged(clock, total=10, desc="grading", unit="req", interval_s=30) as bar:
        clock.at(4)
        bar.update(8)
    bar.close()  # a second close (the `with` already closed it) adds nothing
    assert lines() == ["grading: 8/10 (80%), 2.0 req/s, elapsed 4s"]


def test_close_right_after_a_line_does_not_repeat_it(clock, lines):
    bar = logged(clock, total=2, desc="x", interval_s=0)
    clock.at(1)
    bar.update(2)
    bar.close()
    assert lines() == ["x: 2/2 (100%), 2.0 it/s, elapsed 1s"]


def test_resumed_run_rates_only_this_runs_items(clock, lines):
    with logged(clock, total=10, initial=4, desc="grading", unit="req", interval_s=0) as bar:
        clock.at(4)
        bar.update(2)
    assert lines() == ["grading: 6/10 (60%), 0.50 req/s, elapsed 4s, ETA 8s"]


def test_iterating_without_a_total_counts_and_closes_at_the_end(clock, lines):
    def stream():
        for i in range(3):
            clock.at(i + 1)
            yield i

    reporter = logged(clock, iterable=stream(), desc="read mt_bench", unit=" rec", interval_s=5,
                      mininterval=0.5, leave=False)  # bar-only options are accepted and ignored
    assert list(reporter) == [0, 1, 2]
    assert lines() == ["read mt_bench: 3 rec, 1.0 rec/s, elapsed 3s"]  # only the closing line


def test_nothing_done_yet_has_no_rate_or_eta(clock, lines):
    with logged(clock, total=5, desc="grading", interval_s=30):
        clock.at(90)
    assert lines() == ["grading: 0/5 (0%), elapsed 1m30s"]


def test_disabled_shows_nothing_anywhere(clock, lines, capsys):
    for stream in (NotATty(), Tty()):
        reporter = progress(range(4), desc="grading", enabled=False, stream=stream, clock=clock, interval_s=0)
        assert isinstance(reporter, Off) and not isinstance(reporter, LogProgress)
        with reporter:
            assert list(reporter) == [0, 1, 2, 3]
            reporter.update(5)
        assert reporter.n == 9 and reporter.total == 4 and stream.getvalue() == ""
    assert lines() == [] and capsys.readouterr() == ("", "")


def test_terminal_gets_a_real_tqdm_bar(lines):
    from tqdm.std import tqdm

    tty = Tty()
    with progress(total=3, desc="grading", unit="req", stream=tty, interval_s=0) as bar:
        assert isinstance(bar, tqdm)
        with keep_logs_above(bar):
            logging.getLogger("judgeforge.test").info("above the bar")
        bar.update(3)
    assert "grading" in tty.getvalue() and "3/3" in tty.getvalue()
    assert lines() == []  # the bar, not log lines


def test_log_mode_needs_no_log_redirection(clock):
    import contextlib

    assert isinstance(keep_logs_above(logged(clock, total=1)), contextlib.nullcontext)


def test_interval_comes_from_the_environment(monkeypatch, clock, lines):
    monkeypatch.setenv(ENV_INTERVAL, "0")
    bar = logged(clock, total=3, desc="g")
    clock.at(1)
    bar.update()
    assert bar.interval_s == 0 and lines() == ["g: 1/3 (33%), 1.0 it/s, elapsed 1s, ETA 2s"]


@pytest.mark.parametrize("value", ["soon", "-5", "nan"])
def test_a_bad_interval_warns_and_keeps_the_default(monkeypatch, caplog, value):
    monkeypatch.setenv(ENV_INTERVAL, value)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert interval_from_env() == 30.0
    assert ENV_INTERVAL in caplog.text and repr(value) in caplog.text


def test_unset_interval_is_30_seconds(monkeypatch):
    monkeypatch.delenv(ENV_INTERVAL, raising=False)
    assert interval_from_env() == 30.0


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (59.4, "59s"), (63, "1m03s"), (337, "5m37s"),
                                          (3599, "59m59s"), (7500, "2h05m")])
def test_durations(seconds, text):
    assert duration(seconds) == text


def test_judge_batches_log_their_progress(monkeypatch, lines):
    """`Judge.grade/compare(progress=True)` (what `judgeforge eval` asks for) report per engine batch."""
    from judgeforge.judge.prompts import rubric_preset
    from judgeforge.judge.config import SamplingConfig
    from judgeforge.judge.items import CompareItem, GradeItem
    from judgeforge.judge.judge import BATCH, Judge
    from testing.engines import ScriptedEngine

    monkeypatch.setenv(ENV_INTERVAL, "0")
    rubric = rubric_preset("helpfulness")
    judge = Judge(ScriptedEngine(), SamplingConfig(n=1, max_resample_rounds=0))
    items = [GradeItem(f"q{i}", f"a{i}", rubric) for i in range(BATCH + 8)]
    assert len(judge.grade(items, progress=True)) == len(items)
    judge.compare([CompareItem("q", "a", "b", rubric, both_orders=True)], progress=True)
    judge.grade(items[:3])  # progress off: no line
    total = len(items)
    assert [m.split(",")[0] for m in lines()] == [
        f"grading: {BATCH}/{total} ({BATCH * 100 // total}%)", f"grading: {total}/{total} (100%)",
        "comparing: 2/2 (100%)"]


def test_data_build_logs_progress_when_stderr_is_a_file(tmp_path):
    """The real command under nohup/CI: stderr is a file, so lines, not a bar drawn with \\r."""
    exe = os.path.join(os.path.dirname(sys.executable), "judgeforge")
    err = tmp_path / "stderr.log"
    env = {**os.environ, ENV_INTERVAL: "0"}
    with open(err, "w") as f:
        res = subprocess.run([exe, "data", "build", "--config", "configs/data/default.yaml",
                              "--out", str(tmp_path / "d")], cwd=REPO, stdout=subprocess.PIPE, stderr=f,
                             text=True, env=env, timeout=300)
    log = err.read_text()
    assert res.returncode == 0, log
    shown = [ln.split(f"INFO {LOGGER}: ", 1)[1] for ln in log.splitlines() if f"INFO {LOGGER}: " in ln]
    raws = json.loads((REPO / "data/vendor/prometheus-eval/mt_bench_eval.json").read_text())
    assert len(shown) == len(raws)  # interval 0: a line per record read, and no repeat at the end
    assert shown[0].startswith("read mt_bench: 1 rec, ")
    assert shown[-1].startswith(f"read mt_bench: {len(raws)} rec, ") and " rec/s, elapsed " in shown[-1]
    assert "\r" not in log and "it/s]" not in log  # no tqdm bar in the file
