"""Soft targets (`data.target: distribution`): the teacher's sample distribution, one example per item."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from judgeforge.config import ConfigError
from judgeforge.train.data import score_distribution, to_prompt_completion


def _rec(**kw):
    base = {"id": "r1", "scale": [1, 5], "score": 4, "extra": {}}
    return {**base, **kw}


# --- pure logic ---------------------------------------------------------------------------------

def test_distribution_of_the_samples():
    assert score_distribution(_rec(extra={"score_samples": [4, 5, 4]})) == ((1, 5), [0, 0, 0, 2 / 3, 1 / 3])
    assert score_distribution(_rec()) == ((1, 5), [0, 0, 0, 1.0, 0])  # one judgment: its score
    assert score_distribution(_rec(scale=[1, 10], score=10))[1][-1] == 1.0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 10), min_size=1, max_size=7))
def test_distribution_is_the_empirical_one(samples):
    (lo, hi), p = score_distribution(_rec(scale=[1, 10], extra={"score_samples": samples}))
    assert (lo, hi) == (1, 10) and math.isclose(sum(p), 1.0)
    assert all(math.isclose(p[v - 1], samples.count(v) / len(samples)) for v in range(1, 11))


@pytest.mark.parametrize("rec, why", [
    (_rec(extra={"score_samples": [4, 6]}), "not integers in 1-5"),
    (_rec(extra={"score_samples": [4, True]}), "not integers"),
    (_rec(score=None), "no score samples"),
    (_rec(scale=None), "no score samples or scale"),
    (_rec(mode="relative", verdict="A"), "pairwise"),
])
def test_a_record_without_a_usable_distribution_is_an_error(rec, why):
    with pytest.raises(ConfigError, match=why):
        score_distribution(rec)


def test_the_example_is_the_score_only_one():
    from judgeforge.judge.prompts import TEMPLATE_VERSION

    rec = _rec(template_version=TEMPLATE_VERSION, extra={"score_samples": [4, 5, 4]},
               messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                         {"role": "assistant", "content": "long feedback [RESULT] 4"}])
    assert to_prompt_completion(rec, "distribution") == to_prompt_completion(rec, "score")
    with pytest.raises(ConfigError, match="no score samples"):
        to_prompt_completion({**rec, "score": None, "extra": {}}, "distribution")


def test_config_refuses_two_replacement_losses(repo):
    from judgeforge.config import load_config
    from judgeforge.train.config import TrainConfig

    with pytest.raises(ConfigError, match="use one"):
        load_config(TrainConfig, None, ["data.target=distribution", "distill.enabled=true"])


# --- real components: a tiny random Llama, SmolLM2's tokenizer -----------------------------------

@pytest.fixture(scope="module")
def soft_build(tmp_path_factory, helpers):
    """A `sample_policy: distribution` build of the MT-Bench GPT-4 judgments (3 samples an item), cut to
    its shortest items with several distinct sample scores first."""
    from judgeforge.config import load_config
    from judgeforge.data.build import run_build
    from judgeforge.data.config import BuildConfig
    from judgeforge.io import read_jsonl, write_jsonl

    root = tmp_path_factory.mktemp("soft")
    cfg = load_config(BuildConfig, "configs/data/default.yaml", ["progress=false", "sample_policy=distribution"])
    m = run_build(cfg, root / "full")
    recs = read_jsonl(root / "full/train.jsonl") + read_jsonl(root / "full/test.jsonl")
    c = m["counts"]
    # Every kept sample is either an item's record or dropped into it: nothing vanishes.
    assert c["adds_up"] and c["dropped_by_policy"] == c["kept"] - len({r["item_id"] for r in recs}) \
        - c["decontaminated"] - c["dropped_by_split"]
    assert {len(r["extra"]["score_samples"]) for r in recs} <= {1, 2, 3}
    assert sum(len(r["extra"]["score_samples"]) == 3 for r in recs) > 0.9 * len(recs)
    assert all(r["score"] == r["extra"]["score_samples"][0] for r in recs)  # the first sample's own verdict
    mixed = [r for r in recs if len(set(r["extra"]["score_samples"])) > 1]
    short = sorted(mixed, key=lambda r: len(r["messages"][1]["content"]))[:4]
    out = root / "short"
    out.mkdir()
    (out / "manifest.json").write_text((root / "full/manifest.json").read_text())
    write_jsonl(out / "train.jsonl", short)
    return out


def test_soft_loss_reads_the_value_where_the_sft_sequence_has_it(tiny_llama, soft_build):
    """With a one-hot target the soft loss is the SFT cross-entropy of the score token in the
    prompt + `[RESULT] n` sequence; with the samples' distribution, the mean of theirs."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from judgeforge.io import read_jsonl
    from judgeforge.judge.engines.base import prompt_token_ids
    from judgeforge.train.soft import prepare_soft_targets, soft_loss

    tok = AutoTokenizer.from_pretrained(tiny_llama)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()
    rec = read_jsonl(soft_build / "train.jsonl")[0]
    soft = prepare_soft_targets(tok, [rec])
    prompt = prompt_token_ids(tok, rec["messages"][:2])
    samples = rec["extra"]["score_samples"]
    with torch.no_grad():
        got, metrics = soft_loss(model, soft, [rec["id"]], [prompt])
        hard = []
        for s in samples:
            ids = prompt + tok.encode(f"[RESULT] {s}", add_special_tokens=False)
            logits = model(input_ids=torch.tensor([ids])).logits[0, -2].float()
            hard.append(float(-torch.log_softmax(logits, -1)[ids[-1]]))
    assert float(got) == pytest.approx(float(np.mean(hard)), abs=1e-4)
    assert 0 <= metrics["expected_score_abs_error"] <= 4


@pytest.mark.slow
def test_soft_training_moves_the_judge_to_the_teacher_and_resumes(tiny_llama, soft_build, tmp_path, helpers):
    """A real `train()` on soft targets: the loss falls, the distribution approaches the teacher's, the
    sample log names every example once, and a run resumed from its middle checkpoint ends identical."""
    import shutil

    from safetensors.torch import load_file

    from judgeforge.train.run import train

    out = tmp_path / "run"
    cfg = helpers.tiny_config(tiny_llama, soft_build, out, "data.target=distribution", "optim.batch_size=2",
                              "optim.epochs=3", "optim.lr=1e-2", "lora.target_modules=[q_proj,v_proj,lm_head]",
                              "checkpoint.every=3", "checkpoint.keep=null")
    adapter = train(cfg)
    history = json.loads((out / "checkpoints/checkpoint-6/trainer_state.json").read_text())["log_history"]
    losses = [e["loss"] for e in history if "loss" in e]
    errors = [e["soft_expected_score_abs_error"] for e in history if "soft_expected_score_abs_error" in e]
    assert len(losses) == 6 and losses[-1] < losses[0] - 0.5, losses
    assert errors[-1] < errors[0], errors
    steps = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert sorted(i for s in steps[:2] for i in s["ids"]) == sorted(json.loads(line)["id"] for line in
                                                                    (soft_build / "train.jsonl").read_text().splitlines())
    weights = load_file(adapter / "adapter_model.safetensors")

    shutil.rmtree(out / "checkpoints/checkpoint-6")  # as if killed after checkpoint-3
    shutil.rmtree(adapter)
    again = load_file(train(cfg) / "adapter_model.safetensors")
    assert all(np.allclose(weights[k].numpy(), again[k].numpy(), atol=1e-6) for k in weights)
