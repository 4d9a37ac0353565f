"""Judge engines: a registry by name over one contract (see `base`).

    engine = build_engine(cfg)   # an EngineConfig, or any config with an `engine` section
    engine.generate([SampleRequest(...)])

Each engine module imports its framework lazily, on construction: importing this package never
imports torch or vLLM. `register_engine` adds a kind (tests register doubles this way).
"""

from __future__ import annotations

import importlib
from typing import Callable

from judgeforge.judge.engines.base import *  # noqa: F401,F403  (the contract is this package's API)
from judgeforge.judge.engines.base import JudgeEngine

ENGINES: dict[str, str | Callable[..., JudgeEngine]] = {
    "vllm": "judgeforge.judge.engines.vllm:VLLMEngine",
    "transformers": "judgeforge.judge.engines.hf:TransformersEngine",
    "openai": "judgeforge.judge.engines.openai:OpenAIEngine",
}
"""kind -> "module:Class" (imported on first use) or a factory taking the EngineConfig."""


def register_engine(kind: str, factory: "str | Callable[..., JudgeEngine]") -> None:
    ENGINES[kind] = factory


def build_engine(cfg) -> JudgeEngine:
    """The engine named by `cfg.kind` (a ServeConfig's `engine` section is used)."""
    cfg = getattr(cfg, "engine", cfg)
    factory = ENGINES.get(cfg.kind)
    if factory is None:
        raise ValueError(f"unknown engine kind {cfg.kind!r}; registered: {sorted(ENGINES)}")
    if isinstance(factory, str):
        module, name = factory.split(":")
        factory = getattr(importlib.import_module(module), name)
    return factory(cfg)
