"""Serve test fixtures (the test doubles live in judgeforge.serve.testing)."""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
