"""Judge engines: a registry by name over one contract (see `base`).

    engine = build_engine(cfg)   # an EngineConfig, or any config with an `engine` section
    engine.generate([SampleRequest(...)])

    with pool:                   # pool = EnginePool(): equal configs share one open engine
        ...                      # (a notebook, the test suite); pool.close() ends them

Each engine module imports its framework lazily, on construction: importing this package never
imports torch or vLLM. `register_engine` adds a kind; a config may also name an engine class of its
own as `kind: package.module:Class`.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import re
import sys
import time
from typing import Callable

from judgeforge.config import ConfigError
from judgeforge.judge.engines.base import *  # noqa: F401,F403  (the contract is this package's API)
from judgeforge.judge.engines.base import JudgeEngine
from judgeforge.judge.engines.pool import EnginePool, active_pool  # noqa: F401  (API)
from judgeforge.judge.registry import Registry, UnknownName

log = logging.getLogger(__name__)
EngineFactory = Callable[..., JudgeEngine]

ENGINES: Registry[str | EngineFactory] = Registry("engine kind")
"""kind -> "module:Class" (imported on first use) or a factory taking the EngineConfig."""
ENGINES.register("vllm", "judgeforge.judge.engines.vllm:VLLMEngine")
ENGINES.register("transformers", "judgeforge.judge.engines.hf:TransformersEngine")
ENGINES.register("openai", "judgeforge.judge.engines.openai:OpenAIEngine")

_CLASS_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


def register_engine(kind: str, factory: "str | EngineFactory | None" = None, *, replace: bool = False):
    """Add an engine kind: a factory taking the EngineConfig, or a "module:Class"; without `factory`,
    a decorator (`@register_engine("mine")` over a JudgeEngine subclass)."""
    return ENGINES.register(kind, factory, replace=replace)


def check_kind(kind: str) -> str:
    """An engine kind a config may name: a registered one, or "module:Class" of an importable module
    (the class itself is imported when the engine is built, so a config loads without its framework)."""
    if kind in ENGINES:
        return kind
    if not isinstance(kind, str) or not _CLASS_PATH.match(kind):
        raise UnknownName(f"unknown engine kind {kind!r}; registered: {', '.join(ENGINES.names())} "
                          "(or 'package.module:Class' for an engine class of your own)")
    module = kind.split(":")[0]
    if not _importable(module):
        raise ConfigError(f"engine kind {kind!r}: no module {module!r} to import")
    return kind


def _importable(module: str) -> bool:
    if module in sys.modules:  # also modules loaded outside sys.path (pytest's importlib mode)
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def engine_factory(kind: str) -> EngineFactory:
    """What builds an engine of `kind`: the registered factory, or the class a "module:Class" names."""
    target = ENGINES.get(kind) if kind in ENGINES else check_kind(kind)
    return _import_class(target) if isinstance(target, str) else target


def _import_class(path: str) -> EngineFactory:
    module, name = path.split(":")
    try:
        obj = getattr(importlib.import_module(module), name)
    except ImportError as e:
        raise ConfigError(f"engine kind {path!r}: cannot import {module!r} ({e})") from None
    except AttributeError:
        raise ConfigError(f"engine kind {path!r}: module {module!r} has no {name!r}") from None
    if isinstance(obj, type) and not issubclass(obj, JudgeEngine):
        raise ConfigError(f"engine kind {path!r}: {name} is not a judgeforge.judge.engines.JudgeEngine")
    return obj


def build_engine(cfg) -> JudgeEngine:
    """The engine named by `cfg.kind` (a ServeConfig's `engine` section is used); with `warm_start`,
    a HandoffEngine that answers on `warm_start` until `kind` has started. Inside `with EnginePool()`,
    a lease on that pool's engine for an equal config (judge/engines/pool.py)."""
    cfg = getattr(cfg, "engine", cfg)
    pool = active_pool()
    return pool.lease(cfg, _build) if pool is not None else _build(cfg)


def _build(cfg) -> JudgeEngine:
    if cfg.warm_start and cfg.warm_start != cfg.kind and _warm_start_takes_the_gpu(cfg):
        log.warning("warm_start: %s would load the judge onto the GPU first, and vLLM would then find too "
                    "little free memory to start: %s starts alone", cfg.warm_start, cfg.kind)
        cfg = cfg.model_copy(update={"warm_start": None})
    if cfg.warm_start and cfg.warm_start != cfg.kind:
        from judgeforge.judge.engines.handoff import HandoffEngine

        return HandoffEngine(cfg)
    return start_engine(cfg)


def _warm_start_takes_the_gpu(cfg) -> bool:
    """A transformers warm start beside vLLM on a GPU: both would hold the weights on one device."""
    from judgeforge import hardware as hw

    return (cfg.kind == "vllm" and cfg.warm_start == "transformers" and cfg.device in ("auto", "cuda")
            and hw.cuda_available())


def start_engine(cfg, factory: Callable[[str], EngineFactory] = engine_factory) -> JudgeEngine:
    """`cfg.kind`'s engine (from `factory(kind)`), its start timed, logged and recorded."""
    t0 = time.perf_counter()
    engine = factory(cfg.kind)(cfg)
    record_start(engine, cfg.model, time.perf_counter() - t0)
    return engine


STARTS_LOG = "JUDGEFORGE_ENGINE_STARTS"
"""Environment variable naming a file that every engine start appends a JSON line to (kind, class,
model, seconds, pid): the test suite sets it and prints its starts at the end (tests/conftest.py)."""


def record_start(engine: JudgeEngine, model: str, seconds: float) -> None:
    log.info("engine %s (%s) started in %.1f s", engine.kind, model, seconds)
    path = os.environ.get(STARTS_LOG)
    if path:
        cls = type(engine)
        line = json.dumps({"kind": engine.kind, "class": f"{cls.__module__}.{cls.__qualname__}",
                           "model": model, "seconds": round(seconds, 2), "pid": os.getpid()})
        with open(path, "a", encoding="utf-8") as f:  # one short append per start: lines stay whole
            f.write(line + "\n")
