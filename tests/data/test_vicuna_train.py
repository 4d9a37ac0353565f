"""configs/data/vicuna-train.yaml (issue 31: GPT-4 judgments of the held-out log's own 1-5 kind): every
judgment of the vendored Vicuna Bench file is kept or rejected, wizard and llama-2-chat never reach
training, and every other evaluation set, the MT-Bench held-out items included, is decontaminated out."""

from __future__ import annotations

import json

from judgeforge.config import load_config
from judgeforge.data.build import run_build
from judgeforge.data.config import BuildConfig


def test_the_vicuna_build_counts_every_judgment_and_holds_two_response_models_out(repo, tmp_path):
    run_build(load_config(BuildConfig, repo / "configs/data/vicuna-train.yaml"), tmp_path / "b")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    total = manifest["counts"]
    vendored = json.loads((repo / "data/vendor/prometheus-eval/vicuna_eval.json").read_text())
    assert total["read"] == sum(len(r["gpt4_score"]) for r in vendored) == 960
    assert total["read"] == total["kept"] + total["rejected"]
    assert total["kept"] == total["decontaminated"] + total["train"] + total["test"]
    assert {s["path"].split("/")[-1] for s in manifest["decontamination"]["eval_sets"]} == {
        "mt_bench_eval.json", "hhh_alignment_eval.json", "autoj_testdata_pairwise.jsonl", "testset-v1.json",
        "annotations.json"}
    train = [json.loads(line) for line in (tmp_path / "b" / "train.jsonl").open()]
    test = [json.loads(line) for line in (tmp_path / "b" / "test.jsonl").open()]
    assert {r["response_model"] for r in train} == {"vicuna", "chat_gpt"} and len(train) == total["train"]
    assert {r["response_model"] for r in test} == {"wizard", "llama-2-chat"}
    assert len(test) == 3 * 160  # held out whole: 80 questions x 2 models x 3 GPT-4 samples
    assert manifest["splits"]["disjoint"] is True
