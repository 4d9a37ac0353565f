"""Mixed absolute + relative training on the real embedded SmolLM2: a build of GPT-4 absolute
judgments and one of real GPT-4 pairwise judgments (the vendored AlpacaEval sample) mixed with set
fractions by the shipped configs/train/mixed.yaml; the merged judge then answers /v1/compare (the
transformers engine in-process: no server process, no vLLM start)."""

from __future__ import annotations

import json
import math

import pytest

from judgeforge.io import read_jsonl

KEY = "mixed-key"


@pytest.fixture(scope="module")
def relative_build(repo, tmp_path_factory, helpers):
    """The shipped AlpacaEval build, cut to its 8 shortest relative records (tiny CPU steps)."""
    from judgeforge.config import load_config
    from judgeforge.data.build import run_build
    from judgeforge.data.config import BuildConfig

    root = tmp_path_factory.mktemp("alpaca-eval")
    run_build(load_config(BuildConfig, repo / "configs/data/alpaca-eval.yaml", ["progress=false"]), root / "full")
    return helpers.short_build(root / "full", root / "short", 8, n_test=0)


@pytest.mark.slow
def test_mixed_build_trains_smollm2_and_the_merged_judge_compares(repo, build_dir, relative_build, tmp_path,
                                                                  helpers, monkeypatch):
    from judgeforge.config import load_config
    from judgeforge.train.config import TrainConfig
    from judgeforge.train.merge import MergeConfig, merge
    from judgeforge.train.run import train

    absolute = helpers.short_build(build_dir, tmp_path / "abs", 4, n_test=0)
    out = tmp_path / "run"
    cfg = load_config(TrainConfig, repo / "configs/train/mixed.yaml", [
        f"out={out}", f"data.sources=[{{path: {absolute}, fraction: 0.25}}, {{path: {relative_build}, "
        "fraction: 0.125}]", "optim.max_steps=1", "optim.batch_size=2", "data.eval_limit=0",
        "lora.r=4", "lora.alpha=8", "lora.target_modules=[q_proj,v_proj]", "checkpoint.every=1",
        "tracking.wandb=false"])
    adapter = train(cfg)

    data = json.loads((out / "data.json").read_text())
    assert [s["used"] for s in data["sources"]] == [1, 1]  # the set fractions of 4 and 8 records
    assert data["train"] == 2 and not data["dropped_overlong"]["train"]
    trained = [i for step in read_jsonl(out / "samples.jsonl") for i in step["ids"]]
    modes = {r["id"]: r.get("mode", "absolute") for b in (absolute, relative_build)
             for r in read_jsonl(b / "train.jsonl")}
    assert sorted(modes[i] for i in trained) == ["absolute", "relative"]  # one step, both modes
    curves = json.loads((out / "loss.json").read_text())
    assert len(curves["train"]) == 1 and all(math.isfinite(p["loss"]) for p in curves["train"])

    merged = merge(MergeConfig(adapter=str(adapter), out=str(tmp_path / "merged")))
    monkeypatch.delenv("JUDGEFORGE_API_KEY", raising=False)
    answer = _compare(merged, read_jsonl(relative_build / "train.jsonl")[0])
    # Score-only, both orders: each order votes A or B from the judge's own P(A), P(B); a winner needs both.
    assert len(answer["votes"]) == len(answer["swapped_votes"]) == 1
    assert set(answer["votes"] + answer["swapped_votes"]) <= {"A", "B"}
    assert answer["winner"] in ("A", "B") or answer["reason"], answer
    assert sum(answer["probs"].values()) == pytest.approx(1.0, abs=1e-6), answer


def _compare(model_dir, rec: dict) -> dict:
    """One score-only /v1/compare of a relative record's pair, both orders, served by `model_dir`."""
    from fastapi.testclient import TestClient

    from judgeforge.config import load_config
    from judgeforge.judge.engines import build_engine
    from judgeforge.serve.app import create_app
    from judgeforge.serve.config import ServeConfig

    cfg = load_config(ServeConfig, None, [f"server.api_key={KEY}", "engine.kind=transformers",
                                          f"engine.model={model_dir}", "engine.dtype=float32",
                                          "engine.max_model_len=2048"])
    body = {"instruction": rec["instruction"], "response_a": rec["response_a"], "response_b": rec["response_b"],
            "rubric": "helpfulness", "n": 1, "feedback": False, "both_orders": True}
    with TestClient(create_app(cfg, build_engine(cfg.engine))) as client:
        r = client.post("/v1/compare", json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200, r.text
    return r.json()
