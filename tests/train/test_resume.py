"""Resume and continual training, with real TRL runs of a tiny Mixtral.

A run killed while writing a checkpoint and started again with the same command
must end where an uninterrupted run ends: same step, same LoRA weights, same
examples in the same order; the torn checkpoint is never resumed from. A later
round continues from the saved adapter (not from a fresh one)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file

from judgeforge.config import ConfigError, save_resolved
from judgeforge.io import read_jsonl

pytestmark = pytest.mark.slow  # every test here builds or runs a real TRL trainer

STEPS = ["optim.max_steps=6", "checkpoint.every=2", "checkpoint.keep=2"]

# Dies inside the save of checkpoint-6, after the weights, optimizer and scheduler are
# written but before the RNG state, the trainer state and judgeforge's completion marker.
KILLER = textwrap.dedent("""
    import os, sys
    import torch
    import transformers
    torch.set_num_threads(int(sys.argv[2]))
    from judgeforge.config import load_config
    from judgeforge.train.config import TrainConfig
    from judgeforge.train.run import train

    real = transformers.Trainer._save_rng_state
    def dying(self, output_dir):
        if self.state.global_step == 6:
            os._exit(3)
        return real(self, output_dir)
    transformers.Trainer._save_rng_state = dying
    train(load_config(TrainConfig, sys.argv[1]))
""")


# fp32 sums split over a different number of threads differ in the last bits, and Adam
# turns such a bit on a near-zero gradient into a visible step; the pytest process's
# count is whatever an earlier test's engine set (cpu_threads is process-wide), so the
# killed subprocess, the resumed run and the reference are all pinned to one count.
THREADS = 1


@pytest.fixture(scope="module", autouse=True)
def pinned_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def reference(tiny_mixtral, short_data, tmp_path_factory, helpers):
    """An uninterrupted 6-step run."""
    from judgeforge.train.run import train

    out = tmp_path_factory.mktemp("ref") / "run"
    train(helpers.tiny_config(tiny_mixtral, short_data, out, *STEPS))
    return out


def lora_weights(adapter_dir) -> dict[str, torch.Tensor]:
    return {k: v for k, v in load_file(adapter_dir / "adapter_model.safetensors").items() if "lora_" in k}


def test_killed_run_resumes_to_the_same_weights_and_examples(reference, tiny_mixtral, short_data, tmp_path,
                                                             helpers, caplog):
    from judgeforge.train.run import train

    out = tmp_path / "run"
    cfg = helpers.tiny_config(tiny_mixtral, short_data, out, *STEPS)
    cfg_file = save_resolved(cfg, tmp_path, "cmd.yaml")
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    killed = subprocess.run([sys.executable, str(script), str(cfg_file), str(THREADS)], capture_output=True, text=True)
    assert killed.returncode == 3, killed.stderr[-2000:]
    torn = out / "checkpoints" / "checkpoint-6"
    assert (torn / "adapter_model.safetensors").is_file() and not (torn / "trainer_state.json").exists()
    assert not (out / "adapter").exists()
    assert len(read_jsonl(out / "samples.jsonl")) == 6  # steps 5-6 ran but were never checkpointed

    caplog.set_level(logging.INFO, logger="judgeforge.train.run")
    adapter = train(cfg)  # the same command again
    err = caplog.text
    assert "removed incomplete checkpoint" in err and "checkpoint-6" in err
    assert f"resuming from {out / 'checkpoints' / 'checkpoint-4'}" in err

    meta = json.loads((adapter / "judgeforge.json").read_text())
    ref_meta = json.loads((reference / "adapter" / "judgeforge.json").read_text())
    assert meta["global_step"] == ref_meta["global_step"] == 6
    assert read_jsonl(out / "samples.jsonl") == read_jsonl(reference / "samples.jsonl")
    mine, ref = lora_weights(adapter), lora_weights(reference / "adapter")
    assert mine.keys() == ref.keys() and mine
    for k in ref:
        torch.testing.assert_close(mine[k], ref[k], rtol=1e-5, atol=1e-6)
    assert any(v.abs().sum() > 0 for k, v in mine.items() if "lora_B" in k)  # trained, not the zero init
    curve = json.loads((out / "loss.json").read_text())["train"]
    assert [p["step"] for p in curve] == [1, 2, 3, 4, 5, 6]


def test_rerun_with_a_changed_recipe_is_refused(reference, tiny_mixtral, short_data, helpers):
    from judgeforge.train.run import train

    with pytest.raises(ConfigError, match="optim"):
        train(helpers.tiny_config(tiny_mixtral, short_data, reference, *STEPS, "optim.lr=1e-4"))


def test_next_round_continues_from_the_saved_adapter(reference, tiny_mixtral, build_dir, tmp_path, helpers):
    from peft import get_peft_model_state_dict

    from judgeforge.train.merge import MergeConfig, merge
    from judgeforge.train.run import make_trainer, train

    round2 = helpers.short_build(build_dir, tmp_path / "round2-data", 16)  # new judgments + round 1's
    cfg = helpers.tiny_config(tiny_mixtral, round2, tmp_path / "round2", "optim.max_steps=2",
                              f"model.adapter={reference}")
    trainer, *_ = make_trainer(cfg)
    loaded = get_peft_model_state_dict(trainer.model)
    saved = lora_weights(reference / "adapter")
    assert saved and all(torch.equal(loaded[k], saved[k]) for k in saved)  # the adapter, not a fresh one
    assert all(p.requires_grad for n, p in trainer.model.named_parameters() if "lora_" in n)
    del trainer

    adapter = train(cfg)
    meta = json.loads((adapter / "judgeforge.json").read_text())
    assert meta["continued_from"] == str(reference / "adapter") and meta["global_step"] == 2
    after = lora_weights(adapter)
    assert any(not torch.equal(after[k], saved[k]) for k in saved)

    with pytest.raises(ConfigError, match="lora"):  # the adapter's shape is not negotiable
        make_trainer(helpers.tiny_config(tiny_mixtral, round2, tmp_path / "bad", f"model.adapter={reference}",
                                         "lora.r=4"))

    merged = merge(MergeConfig(adapter=str(adapter)))
    assert json.loads((merged / "judgeforge.json").read_text())["template_version"] == meta["template_version"]
    _assert_merged_matches_adapter(tiny_mixtral, adapter, merged)


def _assert_merged_matches_adapter(base_dir, adapter, merged):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ids = torch.randint(0, 5000, (1, 24))
    with torch.no_grad():
        with_adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), str(adapter))
        a = with_adapter.eval()(input_ids=ids).logits
        b = AutoModelForCausalLM.from_pretrained(merged).eval()(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(base_dir).eval()(input_ids=ids).logits
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(a, base, atol=1e-3)  # the merge carries the training
