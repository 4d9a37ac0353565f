"""The shipped default build: 960 MT-Bench GPT-4 judgments, wizardlm_13b held out, decontaminated."""

from __future__ import annotations

import json
import re

from judgeforge.data.parsers import P1_FORMAT_LINE, P2_FORMAT_LINE
from judgeforge.data.schema import Judgment
from judgeforge.data.validate import clean_feedback
from judgeforge.judge.prompts import ABS_SYSTEM_PROMPT, TEMPLATE_VERSION, Scale, absolute_prompt

from .conftest import REPO, read_lines

BUCKETS = ("train", "test", "dropped_by_policy", "dropped_by_split", "decontaminated")


def test_counts_add_up(default_build):
    out, m = default_build
    c = m["counts"]
    assert c["read"] == 960 and c["rejected"] == 0 and c["kept"] == 960
    assert c["read"] == c["kept"] + c["rejected"]
    assert c["rejected"] == sum(c["by_reason"].values())
    assert c["kept"] == sum(c[b] for b in BUCKETS)
    assert c["decontaminated"] > 0  # MT-Bench shares questions with Vicuna Bench (e.g. the Hawaii blog post)
    for src in c["per_source"].values():
        assert src["read"] == src["kept"] + src["rejected"] and src["kept"] == sum(src[b] for b in BUCKETS)
    # ... and the files say the same as the manifest.
    train, test = read_lines(out / "train.jsonl"), read_lines(out / "test.jsonl")
    dropped, rejects = read_lines(out / "dropped.jsonl"), read_lines(out / "rejects.jsonl")
    assert (len(train), len(test), len(rejects)) == (c["train"], c["test"], c["rejected"])
    assert len(dropped) == c["dropped_by_policy"] + c["dropped_by_split"] + c["decontaminated"]
    assert len({r["id"] for r in train + test} | {d["id"] for d in dropped}) == c["kept"]


def test_splits_share_no_response_model(default_build):
    out, m = default_build
    train, test = read_lines(out / "train.jsonl"), read_lines(out / "test.jsonl")
    train_models, test_models = {r["response_model"] for r in train}, {r["response_model"] for r in test}
    assert test_models == {"wizardlm_13b"} and len(test) == 240
    assert train_models == {"chatgpt", "llama2_chat_13b", "vicuna_13b"}
    assert m["splits"]["disjoint"] is True and not train_models & test_models
    assert m["splits"]["train"]["response_models"] == sorted(train_models)
    assert m["splits"]["test"]["response_models"] == ["wizardlm_13b"]


def test_targets_and_prompts_follow_the_template(default_build):
    out, _ = default_build
    for r in read_lines(out / "train.jsonl") + read_lines(out / "test.jsonl"):
        system, user, assistant = r["messages"]
        assert [system["role"], user["role"], assistant["role"]] == ["system", "user", "assistant"]
        assert system["content"] == ABS_SYSTEM_PROMPT
        m = re.search(r" \[RESULT\] (\d+)$", assistant["content"])
        assert m and int(m.group(1)) == r["score"] and int(m.group(1)) in Scale(*r["scale"])
        assert "[RESULT]" not in assistant["content"][:m.start()]
        j = Judgment.from_sft(r)
        assert user["content"] == absolute_prompt(j.instruction, j.response, j.rubric, j.reference_answer, j.scale)
        assert r["judge_model"] == "gpt-4" and r["template_version"] == TEMPLATE_VERSION
        assert r["id"] == r["content_hash"][:16] == j.content_hash()[:16]


def test_prompt_rerenders_to_the_original_prometheus_prompt(default_build):
    """Swapping Prometheus-1's instruction-3 wording, our prompt is the file's prompt, byte for byte."""
    out, _ = default_build
    original = {(o["idx"], o["response_source"]): o
                for o in json.loads((REPO / "data/vendor/prometheus-eval/mt_bench_eval.json").read_text())}
    records = read_lines(out / "train.jsonl") + read_lines(out / "test.jsonl")
    changed = 0
    for r in records:
        o = original[(r["extra"]["idx"], r["response_model"])]
        assert r["messages"][1]["content"] == o["instruction"].replace(P1_FORMAT_LINE, P2_FORMAT_LINE, 1)
        assert r["score"] == o["gpt4_score"][r["sample_idx"]]
        feedback = o["gpt4_feedback"][r["sample_idx"]]
        assert r["feedback"] == clean_feedback(feedback)
        changed += r["feedback"] != feedback.strip()
    # Only the 3 feedbacks that end in their own verdict ("[RESULT] Score: 1.", "###Score: 4") lose it.
    assert changed == 3


def test_manifest_describes_inputs_and_config(default_build):
    out, m = default_build
    assert m == json.loads((out / "manifest.json").read_text())
    (inp,) = m["inputs"]
    from judgeforge.io import sha256_file

    assert inp["sha256"] == sha256_file(REPO / "data/vendor/prometheus-eval/mt_bench_eval.json")
    assert m["template_version"] == TEMPLATE_VERSION
    assert m["config"]["split"]["test_models"] == ["wizardlm_13b"]
    assert [s["texts"] > 0 for s in m["decontamination"]["eval_sets"]] == [True, True]
    assert (out / "config.yaml").is_file()


def test_loads_with_datasets(default_build):
    import datasets

    out, m = default_build
    ds = datasets.load_dataset("json", data_files={"train": str(out / "train.jsonl"),
                                                   "test": str(out / "test.jsonl")})
    assert ds["train"].num_rows == m["counts"]["train"] and ds["test"].num_rows == m["counts"]["test"]
    assert ds["train"][0]["messages"][2]["role"] == "assistant"
