"""The CPU compaction of TRL's fused head (train/trainer.py `compact_cpu_head`): a real SFTTrainer on a
tiny random Llama with a LoRA, one batch, loss and LoRA gradients with and without it."""

from __future__ import annotations

from pathlib import Path


REPO = Path(__file__).resolve().parents[2]


def _trainer(tmp_path):
    import torch
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig

    from judgeforge.train.trainer import JudgeSFTTrainer

    tok = AutoTokenizer.from_pretrained(REPO / "judgeforge" / "default_judge")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=tok.pad_token_id)
    model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                                lora_dropout=0.0, init_lora_weights=False))
    rows = [{"prompt": f"Grade response {i}: " + "words " * (10 + 7 * i), "completion": f"[RESULT] {i % 5 + 1}"}
            for i in range(4)]
    args = SFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, report_to=[], use_cpu=True,
                     completion_only_loss=True, max_length=128, dataloader_pin_memory=False)
    trainer = JudgeSFTTrainer(model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok)
    return trainer, model, next(iter(trainer.get_train_dataloader()))


def _loss_and_grads(trainer, model, batch, compute):
    model.zero_grad()
    loss = compute(model, dict(batch))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def test_compact_cpu_head_scores_only_labelled_positions_with_the_same_loss_and_gradients(tmp_path, monkeypatch):
    import torch
    from trl import SFTTrainer
    from trl.trainer import utils as trl_utils

    trainer, model, batch = _trainer(tmp_path)
    rows = []
    apply = trl_utils._ChunkedLogProbFunction.apply
    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply",
                        lambda hidden, *a: rows.append(hidden.shape[0]) or apply(hidden, *a))
    full_loss, full = _loss_and_grads(trainer, model, batch, lambda m, b: SFTTrainer.compute_loss(trainer, m, b))
    compact_loss, compact = _loss_and_grads(trainer, model, batch, trainer.compute_loss)
    labelled = int((batch["labels"][:, 1:] != -100).sum())
    positions = batch["labels"][:, 1:].numel()
    assert rows == [positions, labelled] and 0 < labelled < positions / 4  # the head ran on the target tokens only
    torch.testing.assert_close(compact_loss, full_loss, rtol=1e-5, atol=1e-6)
    assert full.keys() == compact.keys() and full
    for name in full:
        torch.testing.assert_close(compact[name], full[name], rtol=1e-4, atol=1e-7, msg=name)
    assert trl_utils._use_triton(torch.device("cpu")) is False  # restored after the step


def test_compact_cpu_head_is_a_no_op_where_trl_moved_the_hook(monkeypatch):
    from trl.trainer import utils as trl_utils

    from judgeforge.train.trainer import compact_cpu_head

    monkeypatch.delattr(trl_utils, "_use_triton")
    with compact_cpu_head():
        assert not hasattr(trl_utils, "_use_triton")
