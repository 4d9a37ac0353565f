"""A judge whose chat template takes no system turn (Mistral's, as Prometheus-2 7B and 8x7B ship) trains
and grades: the system prompt opens the user turn, the same tokens in training and in serving."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.slow  # a real TRL run and a real transformers engine

SEVEN_B_TARGETS = "lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,lm_head]"


def test_training_and_grading_through_a_template_without_a_system_role(tiny_mistral, short_data, tmp_path,
                                                                       helpers):
    from judgeforge.api import load_judge
    from judgeforge.io import read_jsonl
    from judgeforge.judge.engines.base import prompt_token_ids
    from judgeforge.judge.prompts import ABS_SYSTEM_PROMPT
    from judgeforge.judge.weights import merge_adapter
    from judgeforge.train.data import to_prompt_completion
    from judgeforge.train.run import make_trainer, train

    cfg = helpers.tiny_config(tiny_mistral, short_data, tmp_path / "run", SEVEN_B_TARGETS, "optim.max_steps=2")
    trainer, *_ = make_trainer(cfg)
    tok = trainer.processing_class
    by_id = {r["id"]: r for r in read_jsonl(short_data / "train.jsonl")}
    ex = trainer.train_dataset[0]
    served = prompt_token_ids(tok, to_prompt_completion(by_id[ex["id"]])["prompt"])  # what serving sends
    assert ex["input_ids"][:len(served)] == served
    assert tok.decode(served).startswith(f"{tok.bos_token}[INST] {ABS_SYSTEM_PROMPT}\n###Task Description")

    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert losses and all(math.isfinite(x) for x in losses)
    adapter = train(cfg)  # the command's own path: resumes the finished run and writes the adapter
    merged = merge_adapter(adapter, tmp_path / "merged")
    with load_judge(str(merged), engine="transformers", sampling={"feedback": False}) as judge:
        grades = judge.grade_many(["What is 2+2?", "Name a prime."], ["4", "7"], rubric="factual_validity")
    assert [g.reason for g in grades] == [None, None]
    assert all(g.score in range(1, 6) and abs(sum(g.score_probs.values()) - 1) < 1e-4 for g in grades)
