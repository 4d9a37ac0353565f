"""Fixtures for the data builder tests: real builds of the shipped configs into temp dirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judgeforge.config import load_config
from judgeforge.data.build import run_build
from judgeforge.data.config import BuildConfig

REPO = Path(__file__).resolve().parents[2]


def build(config: str | Path | None, out: Path, *overrides: str, **extra) -> dict:
    cfg = load_config(BuildConfig, REPO / config if config else None, ["progress=false", *overrides], extra=extra)
    return run_build(cfg, out)


def read_lines(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="session")
def default_build(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("default") / "build"
    return out, build("configs/data/default.yaml", out)


@pytest.fixture(scope="session")
def fastchat_build(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("fastchat") / "build"
    src = [{"format": "fastchat", "path": "data/vendor/fastchat-mt-bench/gpt-4_single.jsonl"}]
    # default.yaml holds out wizardlm_13b, which FastChat's log lacks (an error): keep every model in train.
    return out, build("configs/data/default.yaml", out, "split.test_models=[]", sources=src)
