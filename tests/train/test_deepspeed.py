"""DeepSpeed's parts of training, without a launch: the completion marker on a DeepSpeed checkpoint's
layout, ZeRO-3 launches on the CPU, the fused experts' rank, the trainable count of partitioned
parameters and the shipped ZeRO-3 config. The real 2-rank ZeRO-3 runs are tests/train/test_zero3_cpu.py."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from judgeforge.config import ConfigError, load_config
from judgeforge.train import checkpoints as C
from judgeforge.train import distributed as D
from judgeforge.train.config import TrainConfig

REPO = Path(__file__).resolve().parents[2]


def deepspeed_checkpoint(root: Path, step: int = 2, world: int = 2, stage: int = 3, bf16: bool = False) -> Path:
    """checkpoint-STEP as transformers and DeepSpeed leave it: no optimizer.pt; the engine's `latest` and
    global_stepSTEP/ with every rank's optimizer shard (and under ZeRO-3 its model-state shard)."""
    ckpt = root / f"checkpoint-{step}"
    tag = ckpt / f"global_step{step}"
    tag.mkdir(parents=True)
    for name in ("adapter_model.safetensors", "adapter_config.json", "trainer_state.json", "scheduler.pt",
                 "training_args.bin", "zero_to_fp32.py", *(f"rng_state_{r}.pth" for r in range(world))):
        (ckpt / name).write_bytes(b"x" * 7)
    (ckpt / "latest").write_text(f"global_step{step}")
    for r in range(world):
        (tag / f"{'bf16_' if bf16 else ''}zero_pp_rank_{r}_mp_rank_00_optim_states.pt").write_bytes(b"o" * 11)
        if stage == 3:
            (tag / f"zero_pp_rank_{r}_mp_rank_00_model_states.pt").write_bytes(b"m" * 5)
    if stage < 3:
        (tag / "mp_rank_00_model_states.pt").write_bytes(b"m" * 5)
    return ckpt


def save(root: Path, step: int = 2, world: int = 2, stage: int | None = 3, scheduler_in_config: bool = False):
    """CompletionMarker.on_save as the Trainer calls it on rank 0 of a DeepSpeed run."""
    plugin = None if stage is None else types.SimpleNamespace(
        zero_stage=stage, deepspeed_config={"scheduler": {"type": "WarmupLR"}} if scheduler_in_config else {})
    args = types.SimpleNamespace(output_dir=str(root), world_size=world, deepspeed_plugin=plugin)
    state = types.SimpleNamespace(is_world_process_zero=True, global_step=step)
    C.CompletionMarker().on_save(args, state, None)


def test_a_zero3_checkpoint_is_marked_complete_with_every_ranks_shards(tmp_path):
    ckpt = deepspeed_checkpoint(tmp_path)
    save(tmp_path)  # the old marker raised here: "missing ['optimizer.pt']"
    files = json.loads((ckpt / C.MARKER).read_text())["files"]
    for r in (0, 1):
        for kind in ("optim", "model"):
            assert f"global_step2/zero_pp_rank_{r}_mp_rank_00_{kind}_states.pt" in files
    assert "latest" in files and C.is_complete(ckpt) and C.last_complete(tmp_path) == ckpt
    # A shard gone later (a partial copy, a disk cleaner) and the checkpoint is no longer complete.
    (ckpt / "global_step2" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    assert not C.is_complete(ckpt) and C.last_complete(tmp_path) is None
    assert C.discard_incomplete(tmp_path) == [ckpt]


@pytest.mark.parametrize("gone", ["global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt",
                                  "global_step2/zero_pp_rank_1_mp_rank_00_model_states.pt",
                                  "latest", "rng_state_1.pth", "scheduler.pt", "trainer_state.json"])
def test_a_zero3_checkpoint_missing_a_ranks_file_gets_no_marker(tmp_path, gone):
    ckpt = deepspeed_checkpoint(tmp_path)
    (ckpt / gone).unlink()
    with pytest.raises(RuntimeError, match="is missing"):
        save(tmp_path)
    assert not (ckpt / C.MARKER).exists() and C.last_complete(tmp_path) is None


def test_rank_1s_shard_never_stands_in_for_rank_10s(tmp_path):
    ckpt = deepspeed_checkpoint(tmp_path, world=11)
    (ckpt / "global_step2" / "zero_pp_rank_10_mp_rank_00_optim_states.pt").unlink()
    assert C.deepspeed_missing(ckpt, 11, 3) == ["global_step2/*zero_pp_rank_10_mp_rank_*_optim_states.pt"]


def test_deepspeed_layouts_bf16_stage_2_a_stale_latest_and_an_engine_scheduler(tmp_path):
    bf16 = deepspeed_checkpoint(tmp_path / "bf16", bf16=True)  # bf16 optimizer shards carry a prefix
    assert C.missing_files(bf16, 2, 3) == []
    stage2 = deepspeed_checkpoint(tmp_path / "z2", stage=2)  # below ZeRO-3 one model-state file
    assert C.missing_files(stage2, 2, 2) == []
    (stage2 / "global_step2" / "mp_rank_00_model_states.pt").unlink()
    assert C.missing_files(stage2, 2, 2) == ["global_step2/mp_rank_*_model_states.pt"]
    stale = deepspeed_checkpoint(tmp_path / "stale")
    (stale / "latest").write_text("global_step1")  # names a folder that is not there
    assert C.missing_files(stale, 2, 3) == ["latest -> global_step1"]
    engine = deepspeed_checkpoint(tmp_path / "engine")
    (engine / "scheduler.pt").unlink()  # a scheduler in the DeepSpeed config is saved by the engine
    assert C.missing_files(engine, 2, 3, engine_scheduler=True) == []
    save(tmp_path / "engine", scheduler_in_config=True)
    # Without DeepSpeed the plain Trainer files are still required.
    plain = deepspeed_checkpoint(tmp_path / "plain")
    assert C.missing_files(plain, 2) == ["optimizer.pt"]
    with pytest.raises(RuntimeError, match="optimizer.pt"):
        save(tmp_path / "plain", stage=None)


def cfg(*overrides: str) -> TrainConfig:
    return load_config(TrainConfig, None, list(overrides))


def test_zero3_launches_on_the_cpu_with_deepspeeds_cpu_accelerator():
    pytest.importorskip("deepspeed", reason="the `deepspeed` extra")
    c = cfg("num_gpus=2", "accelerate_config=configs/train/accelerate/zero3.yaml")
    cmd = D.launch_command(c, ["--config", "x.yaml"], gpu=False)  # the old launcher refused: "needs GPUs"
    assert Path(cmd[4]).name == "zero3.yaml"
    assert Path(cmd[cmd.index("--deepspeed_config_file") + 1]) == REPO / "configs/train/accelerate/zero3.json"
    assert D.launch_env({}, 2, 2, gpu=False)["DS_ACCELERATOR"] == "cpu"
    assert D.launch_env({"DS_ACCELERATOR": "xpu"}, 2, 2, gpu=False)["DS_ACCELERATOR"] == "xpu"  # the caller's kept
    assert "DS_ACCELERATOR" not in D.launch_env({}, 2, 16, gpu=True)


def test_zero3_without_deepspeed_installed_names_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a))
    with pytest.raises(ConfigError, match="DeepSpeed, which is not installed: install the `deepspeed` extra"):
        D.launch_command(cfg("num_gpus=2", "accelerate_config=configs/train/accelerate/zero3.yaml"), [], gpu=False)


def test_a_cpu_rank_of_a_deepspeed_launch_skips_the_shared_memory_comm_op(monkeypatch):
    ops = pytest.importorskip("deepspeed.ops", reason="the `deepspeed` extra")
    from judgeforge import hardware

    monkeypatch.setattr(hardware, "accelerator", lambda: None)
    table = {"deepspeed_shm_comm": True, "cpu_adam": True}
    monkeypatch.setattr(ops, "__compatible_ops__", table, raising=False)
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    D.prepare_deepspeed_cpu()  # not a DeepSpeed launch: nothing changes
    assert table["deepspeed_shm_comm"] is True
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    D.prepare_deepspeed_cpu()
    assert table == {"deepspeed_shm_comm": False, "cpu_adam": True}
    from deepspeed.comm.torch import build_shm_op

    assert build_shm_op() is None  # what DeepSpeed's torch backend then does instead of building it
    monkeypatch.setattr(hardware, "accelerator", lambda: "cuda")
    assert not D.deepspeed_on_cpu()


def test_w1_and_w3_fused_get_twice_the_rank_and_alpha():
    from judgeforge.train.lora import fused_patterns, resolve_targets

    mixtral_params = ["model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj"]
    names = ["q_proj", "w1", "w2", "w3", "lm_head"]
    _, params = resolve_targets(names, ["model.layers.0.self_attn.q_proj", "lm_head"], mixtral_params)
    ranks, alphas = fused_patterns(names, params, 256, 512)
    assert ranks == {r"experts\.gate_up_proj": 512} and alphas == {r"experts\.gate_up_proj": 1024}
    # PEFT's own matching of a pattern key against the parameter's name: gate_up_proj only.
    from peft.utils.other import get_pattern_key

    assert get_pattern_key(ranks, mixtral_params[0]) == r"experts\.gate_up_proj"
    assert get_pattern_key(ranks, mixtral_params[1]) == mixtral_params[1]  # not a key: the default r
    assert fused_patterns(["w2"], ["experts.down_proj"], 8, 16) == ({}, {})  # nothing fused
    assert fused_patterns(["experts.gate_up_proj"], ["experts.gate_up_proj"], 8, 16) == ({}, {})  # asked as is


def test_the_fused_lora_has_rank_2r_on_a_real_mixtral():
    """PEFT applies the pattern to a `target_parameters` LoRA: lora_A has 2r x experts rows on gate_up_proj."""
    import torch
    from peft import get_peft_model
    from transformers import MixtralConfig, MixtralForCausalLM

    from judgeforge.train.lora import lora_config, lora_summary

    torch.manual_seed(0)
    model = MixtralForCausalLM(MixtralConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=1, num_local_experts=2,
                                             num_experts_per_tok=1))
    c = cfg("lora.r=4", "lora.alpha=8", "lora.target_modules=[q_proj,w1,w2,w3]")
    peft = get_peft_model(model, lora_config(c, model))
    shapes = {n: tuple(p.shape) for n, p in peft.named_parameters() if "lora_" in n}
    gate_up = [s for n, s in shapes.items() if "experts.base_layer.lora_A" in n]
    down = [s for n, s in shapes.items() if "experts.lora_A" in n and "base_layer" not in n]
    assert gate_up == [(2 * 4 * 2, 16)] and down == [(4 * 2, 24)]  # (rank x experts, in)
    scaling = {m.parameter_name: m.scaling["default"] for m in peft.modules() if hasattr(m, "parameter_name")}
    assert scaling == {"gate_up_proj": 2.0, "down_proj": 2.0}  # alpha / r kept
    assert lora_summary(peft)["trainable_params"] == sum(p.numel() for p in peft.parameters() if p.requires_grad)


def test_trainable_params_counts_zero3_partitions_by_their_full_size():
    """Under ZeRO-3 a parameter outside a gather holds no elements (numel 0): its `ds_numel` is its size."""
    import torch

    from judgeforge.train.lora import lora_summary

    model = torch.nn.Linear(4, 3)
    for p in model.parameters():
        p.ds_numel = p.numel()
        p.data = torch.empty(0)  # what a partitioned parameter looks like on a rank
    assert lora_summary(model)["trainable_params"] == 4 * 3 + 3  # the old count read 0


def test_the_zero3_config_and_its_moe_blocks():
    import yaml

    spec = yaml.safe_load((REPO / "configs/train/accelerate/zero3.yaml").read_text())
    ds = json.loads((REPO / "configs/train/accelerate/zero3.json").read_text())
    assert spec["distributed_type"] == "DEEPSPEED" and ds["zero_optimization"]["stage"] == 3
    # The final adapter is saved gathered (an adapter_model.safetensors, not only the engine's shards).
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
