"""LoRA SFT of a tiny Mixtral (built from a config) on real MT-Bench GPT-4 judgments, with the
real TRL SFTTrainer: targets, assistant-only loss, training moves the adapter and only it."""

from __future__ import annotations

import math

import pytest
import torch

from judgeforge.io import read_jsonl

pytestmark = pytest.mark.slow  # every test here builds or runs a real TRL trainer


@pytest.fixture
def one_example(build_dir, tmp_path, helpers):
    return helpers.short_build(build_dir, tmp_path / "one", 1, n_test=0)


def test_prompt_tokens_carry_no_loss_and_match_the_serving_prompt(tiny_mixtral, short_data, tmp_path, helpers):
    from judgeforge.train.data import to_prompt_completion
    from judgeforge.train.run import make_trainer

    trainer, mix, _, dropped = make_trainer(helpers.tiny_config(tiny_mixtral, short_data, tmp_path / "run"))
    tok = trainer.processing_class
    by_id = {r["id"]: to_prompt_completion(r) for r in read_jsonl(short_data / "train.jsonl")}
    ds = trainer.train_dataset
    assert len(ds) == len(by_id) - len(dropped["train"]) > 5
    for ex in ds:
        pc = by_id[ex["id"]]
        # Serving renders the prompt with the chat template and the generation prompt: same tokens.
        prompt = tok.apply_chat_template(pc["prompt"], add_generation_prompt=True, tokenize=True,
                                         return_dict=False)
        n = len(prompt)
        assert ex["input_ids"][:n] == prompt
        assert ex["labels"][:n] == [-100] * n  # no loss on the prompt
        assert ex["labels"][n:] == ex["input_ids"][n:]  # loss on every judgment token
        target = tok.decode(ex["input_ids"][n:])
        assert target.startswith(pc["completion"][0]["content"]) and "[RESULT]" in target
        assert target.rstrip("\n").endswith(tok.eos_token)  # the judge learns to stop
    batch = trainer.data_collator([ds[0], ds[1]])  # the collator pads labels with -100, never with loss
    assert (batch["labels"][batch["attention_mask"] == 0] == -100).all()


def test_lora_on_tiny_mixtral_hits_experts_and_lm_head_and_trains_only_the_adapter(
        tiny_mixtral, one_example, tmp_path, helpers):
    from judgeforge.train.lora import lora_summary
    from judgeforge.train.run import make_trainer

    cfg = helpers.tiny_config(tiny_mixtral, one_example, tmp_path / "run", "optim.batch_size=1", "optim.epochs=8",
                      "optim.lr=2e-2", "checkpoint.every=100", "lora.dropout=0.0")
    trainer, *_ = make_trainer(cfg)
    model = trainer.model
    summary = lora_summary(model)
    assert any(m.endswith("lm_head") for m in summary["modules"])
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        assert sum(m.endswith(proj) for m in summary["modules"]) == 2  # both layers
    for layer in (0, 1):
        for fused in ("gate_up_proj", "down_proj"):  # w1+w3, w2 of all 4 experts
            assert any(f"layers.{layer}.mlp.experts" in p and p.endswith(fused) for p in summary["parameters"])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()

    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == 8 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.85 * losses[0]  # the same example every step: the loss must fall
    after = dict(model.named_parameters())
    lora = [n for n in before if "lora_" in n]
    base = [n for n in before if "lora_" not in n]
    assert lora and base
    assert all(torch.equal(before[n], after[n]) for n in base)  # base weights untouched
    changed = {n for n in lora if not torch.equal(before[n], after[n])}
    assert any("lm_head" in n for n in changed)
    from peft.tuners.lora.layer import ParamWrapper

    # Fused-expert LoRAs are named by their wrapper module; map them back to the parameter.
    fused = {m.parameter_name: f"{name}.lora_B.default.weight" for name, m in model.named_modules()
             if isinstance(m, ParamWrapper) and ".layers.1." in name}
    assert fused.keys() == {"gate_up_proj", "down_proj"}
    assert set(fused.values()) <= changed
    assert any("q_proj" in n for n in changed)
