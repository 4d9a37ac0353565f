"""BiGGen-Bench records (JSON dict, JSONL, Parquet, a local HF dataset dir) and generic column-mapped sources.

The vendored biggen_bench_instances.json holds real BiGGen-Bench instances (input, rubric, reference)
but PLACEHOLDER response/feedback/score fields; these tests fill in SYNTHETIC judgments for them.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from judgeforge.config import ConfigError, load_config
from judgeforge.data.config import BuildConfig
from judgeforge.data.readers import looks_like_hub_id
from judgeforge.data.schema import Judgment
from judgeforge.judge.prompts import Rubric, absolute_prompt

from .conftest import REPO, build, read_lines


def synthetic_biggen(vendor, n: int = 60) -> dict[str, dict]:
    """The first `n` real instances with synthetic responses and judgments (two response models)."""
    instances = json.loads((vendor / "prometheus-eval/biggen_bench_instances.json").read_text())
    out = {}
    for i, (key, inst) in enumerate(list(instances.items())[:n]):
        score = 1 + i % 5
        out[key] = dict(inst, response=f"Synthetic answer number {i} to {inst['task']}.",
                        response_model_name=("model-x", "model-y")[i % 2],
                        feedback=f"Synthetic feedback {i}: the answer meets level {score}. [RESULT] {score}",
                        score=str(score) if i % 3 == 0 else score, eval_model_name="gpt-4-1106-preview")
    return out


def write_formats(records: dict[str, dict], tmp_path):
    # JSONL/Parquet rows carry the rubric as a dict's repr string, as some BiGGen exports do.
    rows = [dict(r, score_rubric=str(r["score_rubric"])) for r in records.values()]
    (tmp_path / "b.json").write_text(json.dumps(records))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = pa.Table.from_pylist([dict(r, score=str(r["score"])) for r in rows])
    pq.write_table(table, tmp_path / "b.parquet")
    (tmp_path / "hub").mkdir()
    pq.write_table(table, tmp_path / "hub" / "train.parquet")
    return ["b.json", "b.jsonl", "b.parquet", "hub"]


def test_biggen_every_container_gives_the_same_records(vendor, tmp_path):
    records = synthetic_biggen(vendor)
    outputs = []
    for i, name in enumerate(write_formats(records, tmp_path)):
        m = build(None, tmp_path / f"o{i}", "split.test_models=[model-y]", "progress=false",
                  sources=[{"path": str(tmp_path / name), "format": "biggen", "name": "biggen"}])
        assert m["counts"]["read"] == 60 == m["counts"]["kept"], name
        assert m["splits"]["test"]["response_models"] == ["model-y"] and m["splits"]["disjoint"]
        out = tmp_path / f"o{i}"
        outputs.append((out / "train.jsonl").read_bytes() + (out / "test.jsonl").read_bytes())
    assert len(set(outputs)) == 1
    rec = read_lines(tmp_path / "o0" / "train.jsonl")[0]
    inst = records[rec["extra"]["id"]]
    assert rec["instruction"] == inst["input"] and rec["system_prompt"] == inst["system_prompt"]
    assert rec["reference_answer"] == inst["reference_answer"] and rec["category"] == inst["capability"]
    assert rec["rubric"] == Rubric.from_dict(inst["score_rubric"]).to_dict()  # from a dict (JSON) or its repr
    assert rec["judge_model"] == "gpt-4-1106-preview" and "[RESULT]" not in rec["feedback"]
    j = Judgment.from_sft(rec)
    assert rec["messages"][1]["content"] == absolute_prompt(j.instruction, j.response, j.rubric,
                                                            j.reference_answer, j.scale)


def test_biggen_placeholders_and_mismatches_are_caught(vendor, tmp_path):
    records = synthetic_biggen(vendor, 10)
    first = next(iter(records))
    records[first]["feedback"] = "Good. [RESULT] 2"
    records[first]["score"] = 5
    placeholder = json.loads((vendor / "prometheus-eval/biggen_bench_instances.json").read_text())
    records.update(dict(list(placeholder.items())[100:105]))  # vendored placeholders: "Hello", score "5"
    (tmp_path / "b.json").write_text(json.dumps(records))
    m = build(None, tmp_path / "o", sources=[{"path": str(tmp_path / "b.json"), "format": "biggen"}])
    assert m["counts"]["read"] == 15 and m["counts"]["by_reason"] == {"score_feedback_mismatch": 1}
    # The placeholders ARE well-formed records; they are kept (this file is for tests, not training).
    assert m["counts"]["kept"] == 14


def test_generic_jsonl_with_custom_scale(tmp_path):
    rows = [{"prompt": f"Question {i}?", "answer": f"Answer {i}.", "grade": i % 4, "critique": f"Critique {i}.",
             "who": f"m{i % 3}", "judge": "my-judge"} for i in range(12)]
    (tmp_path / "g.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    src = {"path": str(tmp_path / "g.jsonl"), "format": "jsonl", "scale": [0, 3], "rubric_preset": "helpfulness",
           "columns": {"instruction": "prompt", "response": "answer", "score": "grade", "feedback": "critique",
                       "response_model": "who", "judge_model": "judge"}}
    m = build(None, tmp_path / "o", "split.test_models=[m2]", sources=[src])
    assert m["counts"]["kept"] == 12 and m["inputs"][0]["scale"] == [0, 3]
    recs = read_lines(tmp_path / "o" / "train.jsonl") + read_lines(tmp_path / "o" / "test.jsonl")
    assert {r["score"] for r in recs} == {0, 1, 2, 3} and all(r["scale"] == [0, 3] for r in recs)
    assert all("an integer between 0 and 3" in r["messages"][1]["content"] for r in recs)
    assert recs[0]["judge_model"] == "my-judge" and recs[0]["rubric"]["criteria"].startswith("Does the model")


def test_generic_needs_its_columns():
    with pytest.raises(ConfigError, match="needs columns"):
        load_config(BuildConfig, None, [], extra={"sources": [{"path": "x.jsonl", "format": "jsonl"}]})


def test_hub_ids_and_missing_files(tmp_path):
    assert looks_like_hub_id("prometheus-eval/BiGGen-Bench-Results")
    assert not looks_like_hub_id("data/x.jsonl") and not looks_like_hub_id("a/b/c")
    with pytest.raises(ConfigError, match="input not found"):
        build(None, tmp_path / "o", sources=[{"path": "no/such/file.jsonl", "format": "fastchat"}])
    # Offline (tests set HF_HUB_OFFLINE=1): a clear error, not a traceback from deep inside datasets.
    with pytest.raises(ConfigError, match="cannot load Hugging Face dataset"):
        build("configs/data/biggen.yaml", tmp_path / "o2")
    assert not (tmp_path / "o2").exists()


def test_biggen_config_loads():
    cfg = load_config(BuildConfig, REPO / "configs/data/biggen.yaml")
    assert cfg.sources[0].path == "prometheus-eval/BiGGen-Bench-Results" and cfg.split.test_model_fraction == 0.25
