"""judgeforge/logs.py: the libraries under judgeforge are quiet by default, --verbose brings them back.

The first tests run the real set-up in this process (and restore what it changed); the last runs the
real `judgeforge grade --local` on the transformers engine and reads its terminal output.
"""

from __future__ import annotations

import io
import json
import logging
import logging.config
import os
import re
import subprocess
import sys
import warnings

import pytest

from judgeforge import logs

# The variables a set-up may set; a subprocess under test starts without any of them.
SET = (*logs.QUIET_ENV, "VLLM_LOGGING_CONFIG_PATH", "PYTHONWARNINGS", "TRANSFORMERS_VERBOSITY",
       "DATASETS_VERBOSITY", logs.ENV_LEVEL)


@pytest.fixture
def restored(monkeypatch):
    """Whatever configure_logging changes in this process, taken back after the test."""
    for name in SET:
        monkeypatch.delenv(name, raising=False)
    levels = {name: logging.getLogger(name).level for name in logs.THIRD_PARTY}
    monkeypatch.setattr(logs, "_set_by_us", set())
    with warnings.catch_warnings():
        yield
    for name in SET:
        os.environ.pop(name, None)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_quiet_sets_the_childrens_environment_where_the_user_set_nothing(restored, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "false")
    monkeypatch.setenv("PYTHONWARNINGS", "error::ResourceWarning")
    logs.configure_logging()
    assert os.environ["VLLM_LOGGING_LEVEL"] == "WARNING" and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    assert os.environ["WANDB_SILENT"] == "false"  # the user's
    entries = os.environ["PYTHONWARNINGS"].split(",")
    assert entries[0] == "error::ResourceWarning" and set(logs.HARMLESS_PYTHONWARNINGS) <= set(entries)
    assert logging.getLogger("vllm").level == logging.getLogger("transformers").level == logging.WARNING


def test_harmless_warnings_are_dropped_in_process_and_in_children(restored):
    logs.configure_logging()
    with warnings.catch_warnings(record=True) as got:
        warnings.warn_explicit("`torch.distributed.reduce_op` is deprecated, use ReduceOp", FutureWarning,
                               "x.py", 1, module="vllm.distributed")
        warnings.warn_explicit("something else is deprecated", FutureWarning, "x.py", 1, module="vllm.x")
    assert [str(w.message) for w in got] == ["something else is deprecated"]
    child = subprocess.run([sys.executable, "-c", "import warnings; warnings.warn_explicit("
                            "'`torch.jit.script_method` is deprecated. Please switch', DeprecationWarning, "
                            "'x.py', 1, module='torch.jit._script'); print('ran')"],
                           capture_output=True, text=True, timeout=60)
    assert child.stdout == "ran\n" and child.stderr == "", child.stderr


def test_vllm_config_drops_the_harmless_lines_and_keeps_real_warnings(restored, capsys):
    logs.configure_logging()
    with open(os.environ["VLLM_LOGGING_CONFIG_PATH"]) as f:  # what vLLM's processes load
        config = json.load(f)
    vllm = logging.getLogger("vllm")
    saved = vllm.handlers[:], vllm.propagate
    try:
        logging.config.dictConfig(config)
        log = logging.getLogger("vllm.distributed.shm_broadcast")
        log.warning("No available shared memory broadcast block found in %d seconds. This typically", 60)
        log.warning("Casting %s to %s.", "torch.bfloat16", "torch.float32")
        log.info("Automatically detected platform cpu.")
        log.warning("KV cache is too small")
    finally:
        vllm.handlers[:], vllm.propagate = saved
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert lines[0].endswith("WARNING vllm.distributed.shm_broadcast: KV cache is too small")


def test_vllm_lines_before_its_own_set_up_are_filtered_at_the_root(restored):
    """vLLM logs through the root logger until its first engine sets up its own: the root's handlers
    drop its harmless lines. Read through the handler's own filtering (what `Handler.handle` applies),
    so no earlier test's logging set-up (vLLM imported, a logger disabled) can hide a record."""
    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("vllm.triton_utils.importing", logging.WARNING, __file__, 1, message, None, None)

    triton = "Triton is installed, but doesn't include CPU backend. Disabling Triton."
    handler = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(handler)
    try:
        logs.configure_logging()
        quiet = [bool(handler.filter(record(m))) for m in (triton, "libtcmalloc is not found in LD_PRELOAD.")]
        logs.configure_logging(verbose=True)
        verbose = bool(handler.filter(record(triton)))
    finally:
        logging.getLogger().removeHandler(handler)
    assert quiet == [False, True] and verbose


def test_verbose_takes_back_what_quiet_set(restored, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")  # the user's: kept
    logs.configure_logging()
    logs.configure_logging(verbose=True)
    assert os.environ[logs.ENV_LEVEL] == "INFO" and os.environ["TRANSFORMERS_VERBOSITY"] == "info"
    assert not {"VLLM_LOGGING_LEVEL", "VLLM_LOGGING_CONFIG_PATH", "PYTHONWARNINGS",
                "HF_HUB_DISABLE_PROGRESS_BARS"} & set(os.environ)
    assert os.environ["WANDB_SILENT"] == "true" and logging.getLogger("vllm").level == logging.INFO
    assert not [f for f in warnings.filters if f[1] is not None and "reduce_op" in f[1].pattern]


def test_a_bad_level_is_a_warning_not_an_error(restored, monkeypatch, caplog):
    monkeypatch.setenv(logs.ENV_LEVEL, "LOUD")
    assert logs.library_level() == logging.WARNING and "not a logging level" in caplog.text


# -- the real command ---------------------------------------------------------------------------

# vLLM's "INFO 12-07 ..." lines, transformers' and datasets' "[transformers] ..." ones
THIRD_PARTY_INFO = re.compile(r"\bINFO\b(?! judgeforge[.:])|^\[(transformers|datasets)\]")
OTHER_BARS = re.compile(r"Loading weights|\d+%\|")  # tqdm bars; judgeforge's progress is a log line here


def grade(tmp_path, *flags: str) -> str:
    """`judgeforge [flags] grade --local` on one request; its stderr and stdout, as a terminal shows them."""
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "a", "instruction": "What is 2+2?", "response": "4",
                               "rubric": "factual_validity", "n": 1}) + "\n")
    out = tmp_path / f"out{len(flags)}.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in SET}
    r = subprocess.run([sys.executable, "-m", "judgeforge.cli", *flags, "grade", "-i", str(inp),
                        "-o", str(out), "--local", "engine.kind=transformers", "engine.warm_start=null",
                        "sampling.n=1", "sampling.max_tokens=8"], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stderr + r.stdout


@pytest.mark.slow
def test_grade_is_quiet_by_default_and_verbose_on_request(tmp_path):
    quiet = grade(tmp_path)
    assert not [x for x in quiet.splitlines() if THIRD_PARTY_INFO.search(x) or OTHER_BARS.search(x)], quiet
    assert "INFO judgeforge.progress: grading: 1/1 (100%)" in quiet and "done: graded=1 failed=0" in quiet
    verbose = grade(tmp_path, "--verbose")
    assert "Loading weights" in verbose and "[transformers] loading weights file" in verbose
    assert "done: graded=1 failed=0" in verbose
