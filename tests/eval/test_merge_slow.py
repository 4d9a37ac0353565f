"""A trained adapter is merged on CPU once (via judgeforge.train.merge) and served as a plain model."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_adapter_merged_once_and_cached(tmp_path, default_model_dir):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from judgeforge.judge.prompts import TEMPLATE_VERSION
    from judgeforge.eval.judges import merged_model_dir

    base = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32)
    ref = base.model.layers[0].self_attn.q_proj.weight.detach().clone()
    peft = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"],
                                           init_lora_weights=False))
    run = tmp_path / "run"
    adapter = run / "adapter"
    peft.save_pretrained(adapter)
    AutoTokenizer.from_pretrained(default_model_dir).save_pretrained(adapter)
    (adapter / "judgeforge.json").write_text(json.dumps({"template_version": TEMPLATE_VERSION,
                                                         "base_model": "default"}))
    out = merged_model_dir("default", str(run), cache=tmp_path / "cache")  # a run dir works too
    assert (out / "config.json").is_file() and (out / "tokenizer_config.json").is_file()
    assert json.loads((out / "judgeforge.json").read_text())["template_version"] == TEMPLATE_VERSION
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert not torch.allclose(merged.model.layers[0].self_attn.q_proj.weight, ref)  # the delta is in
    mtime = (out / "config.json").stat().st_mtime
    assert merged_model_dir("default", str(adapter), cache=tmp_path / "cache") == out  # cached
    assert (out / "config.json").stat().st_mtime == mtime
