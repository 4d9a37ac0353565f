"""Pure logic of the training stage: the replay mix, target resolution, checkpoint
completeness, loss curves, the shipped configs and the multi-GPU launch."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from judgeforge import hardware as hw
from judgeforge.config import ConfigError, load_config
from judgeforge.data.schema import Judgment
from judgeforge.judge.prompts import Rubric
from judgeforge.train.checkpoints import MARKER, discard_incomplete, is_complete, last_complete
from judgeforge.train.config import TrainConfig
from judgeforge.train.curves import loss_curves
from judgeforge.train.data import draw, load_build, mix_builds, to_prompt_completion, window
from judgeforge.train.lora import resolve_targets

REPO = Path(__file__).resolve().parents[2]
RUBRIC = Rubric("Is it correct?", {k: f"level {k}" for k in range(1, 6)})


def record(i: int, feedback: str = "fine") -> dict:
    return Judgment(instruction=f"question {i}", response=f"answer {i}", rubric=RUBRIC,
                    feedback=feedback, score=1 + i % 5, response_model="m").to_sft()


def write_build(path: Path, n: int, start: int = 0, test: int = 2) -> Path:
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"n": n, "start": start}))
    (path / "train.jsonl").write_text("".join(json.dumps(record(i)) + "\n" for i in range(start, start + n)))
    (path / "test.jsonl").write_text("".join(json.dumps(record(1000 + i)) + "\n" for i in range(test)))
    return path


def test_prompt_completion_split_keeps_the_judgment_as_completion():
    rec = record(3, "Clear and right.")
    ex = to_prompt_completion(rec)
    assert [m["role"] for m in ex["prompt"]] == ["system", "user"]
    assert ex["completion"] == [{"role": "assistant", "content": "Clear and right. [RESULT] 4"}]
    assert ex["id"] == rec["id"]


def test_prompt_completion_refuses_bad_records():
    rec = record(1)
    with pytest.raises(ConfigError, match="template"):
        to_prompt_completion({**rec, "template_version": "other-v0"})
    with pytest.raises(ConfigError, match="assistant"):
        to_prompt_completion({**rec, "messages": rec["messages"][:2]})


def test_score_target_trains_the_verdict_alone_exactly_as_score_only_reads_it():
    ex = to_prompt_completion(record(2, feedback="long rationale"), target="score")
    assert ex["completion"] == [{"role": "assistant", "content": "[RESULT] 3"}]
    assert ex["prompt"] == to_prompt_completion(record(2))["prompt"]
    assert "long rationale" not in json.dumps(ex)
    rec = {**record(2), "score": None}
    with pytest.raises(ConfigError, match="no score"):
        to_prompt_completion(rec, target="score")


def test_continual_windows_are_disjoint_prefixes_of_one_shuffle():
    recs = [record(i) for i in range(50)]
    rounds = [window(recs, 0, 10, 42), window(recs, 10, 15, 42), window(recs, 25, None, 42)]
    ids = [[r["id"] for r in w] for w in rounds]
    assert [len(w) for w in ids] == [10, 15, 25]
    assert len(set(sum(ids, []))) == 50  # disjoint, together all of them
    for w in rounds:  # file order within a window
        assert [r["id"] for r in recs if r["id"] in set(x["id"] for x in w)] == [x["id"] for x in w]
    assert window(recs, 0, 25, 42)[:0] == [] and {r["id"] for r in window(recs, 0, 25, 42)} == \
        set(ids[0]) | set(ids[1])  # rounds 1-2 = the first 25 of the same shuffle
    assert window(recs, 0, 10, 7) != rounds[0]  # the seed decides


def test_mix_with_offsets_records_the_window(tmp_path):
    b = load_build(write_build(tmp_path / "b", 30))
    mix = mix_builds([b], [1.0], [12], 42, 0, offsets=[12])
    assert len(mix.train) == 12 and mix.sources[0]["offset"] == 12
    first = mix_builds([b], [1.0], [12], 42, 0, offsets=[0])
    assert not {r["id"] for r in first.train} & {r["id"] for r in mix.train}


def test_draw_is_seeded_ordered_and_bounded():
    recs = [record(i) for i in range(100)]
    a = draw(recs, 0.3, None, random.Random("s"))
    assert len(a) == 30 and a == draw(recs, 0.3, None, random.Random("s"))
    assert [recs.index(r) for r in a] == sorted(recs.index(r) for r in a)
    assert len(draw(recs, 0.3, 7, random.Random("s"))) == 7
    assert draw(recs, 1.0, None, random.Random("s")) == recs


def test_replay_mix_new_round_plus_fraction_of_old(tmp_path):
    old = load_build(write_build(tmp_path / "r1", 40))
    new = load_build(write_build(tmp_path / "r2", 10, start=35))  # 5 judgments repeat round 1
    mix = mix_builds([new, old], [1.0, 0.5], [None, None], seed=42, eval_limit=3)
    new_ids = {r["id"] for r in new.train}
    assert new_ids <= {r["id"] for r in mix.train}  # all of this round
    assert len(mix.train) == 10 + 20 - mix.duplicates  # plus half of the old round, duplicates once
    assert len({r["id"] for r in mix.train}) == len(mix.train)
    assert len(mix.eval) == 2  # both builds' test.jsonl hold the same 2 records: unique
    assert mix.sources[1]["manifest_sha256"] == old.manifest_sha256 and mix.sources[1]["used"] == 20 - mix.duplicates
    again = mix_builds([new, old], [1.0, 0.5], [None, None], seed=42, eval_limit=3)
    assert [r["id"] for r in again.train] == [r["id"] for r in mix.train]


def test_load_build_names_what_is_missing(tmp_path):
    with pytest.raises(ConfigError, match="manifest.json"):
        load_build(tmp_path)


MIXTRAL_MODULES = [f"model.layers.{i}.self_attn.{p}" for i in range(2) for p in ("q_proj", "k_proj", "v_proj", "o_proj")] + ["lm_head", "model.embed_tokens"]
MIXTRAL_PARAMS = [f"model.layers.{i}.mlp.{p}" for i in range(2)
                  for p in ("experts.gate_up_proj", "experts.down_proj", "gate.weight")] + ["model.norm.weight"]


def test_paper_targets_map_to_fused_mixtral_experts():
    modules, params = resolve_targets(["q_proj", "k_proj", "v_proj", "o_proj", "w1", "w2", "w3", "lm_head"],
                                      MIXTRAL_MODULES, MIXTRAL_PARAMS)
    assert modules == ["q_proj", "k_proj", "v_proj", "o_proj", "lm_head"]
    assert params == ["experts.gate_up_proj", "experts.down_proj"]


def test_targets_that_hit_nothing_or_half_a_fused_weight_are_errors():
    with pytest.raises(ConfigError, match="gate_proj"):
        resolve_targets(["gate_proj"], MIXTRAL_MODULES, MIXTRAL_PARAMS)
    with pytest.raises(ConfigError, match="w1 and w3"):
        resolve_targets(["w1"], MIXTRAL_MODULES, MIXTRAL_PARAMS)


def fake_checkpoint(root: Path, step: int, complete: bool) -> Path:
    ckpt = root / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    files = {"adapter_model.safetensors": b"w" * 10, "optimizer.pt": b"o" * 5, "trainer_state.json": b"{}"}
    for name, data in files.items():
        (ckpt / name).write_bytes(data)
    if complete:
        (ckpt / MARKER).write_text(json.dumps({"step": step, "files": {n: len(d) for n, d in files.items()}}))
    return ckpt


def test_only_complete_checkpoints_are_resumed_from(tmp_path):
    fake_checkpoint(tmp_path, 2, True)
    c4 = fake_checkpoint(tmp_path, 4, True)
    fake_checkpoint(tmp_path, 6, False)  # killed while saving: no marker
    assert last_complete(tmp_path) == c4
    (c4 / "optimizer.pt").write_bytes(b"o")  # a file torn after marking
    assert not is_complete(c4)
    assert last_complete(tmp_path) == tmp_path / "checkpoint-2"
    gone = discard_incomplete(tmp_path)
    assert sorted(p.name for p in gone) == ["checkpoint-4", "checkpoint-6"]
    assert last_complete(tmp_path) == tmp_path / "checkpoint-2"
    assert last_complete(tmp_path / "none") is None


def test_loss_curves_from_log_history():
    hist = [{"loss": 2.0, "step": 1}, {"loss": 1.5, "step": 2}, {"eval_loss": 1.7, "step": 2},
            {"train_runtime": 3.0, "step": 2}]
    assert loss_curves(hist) == {"train": [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}],
                                 "eval": [{"step": 2, "loss": 1.7}]}


def test_8x7b_config_is_table_15():
    cfg = load_config(TrainConfig, REPO / "configs/train/prometheus-bgb-8x7b.yaml")
    assert cfg.model.name == "prometheus-eval/prometheus-8x7b-v2.0"
    assert (cfg.precision, cfg.optim.epochs, cfg.data.max_length, cfg.optim.lr, cfg.optim.batch_size) == \
        ("bf16", 1, 4096, 1e-5, 8)
    assert (cfg.lora.r, cfg.lora.alpha, cfg.lora.dropout, cfg.seed) == (256, 512, 0.1, 42)
    assert cfg.lora.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj", "w1", "w2", "w3", "lm_head"]
    assert cfg.num_gpus == 8 and cfg.grad_accumulation() == 1


def test_7b_and_default_configs():
    seven = load_config(TrainConfig, REPO / "configs/train/prometheus-bgb-7b.yaml")
    assert seven.model.name == "prometheus-eval/prometheus-7b-v2.0" and "lm_head" in seven.lora.target_modules
    default = load_config(TrainConfig, REPO / "configs/train/default.yaml")
    # The demo recipe is issue 9's: score-only targets, 2048 tokens, fp32 weights with the precision
    # the CPU calls for (bf16 autocast only with native bf16: judgeforge.hardware).
    assert (default.model.name, default.model.dtype, default.precision) == ("default", "float32", "auto")
    assert (default.data.target, default.data.max_length, default.data.sources[0].limit) == ("score", 2048, 150)
    curve = load_config(TrainConfig, REPO / "configs/train/embedded-judge.yaml")
    assert (curve.data.target, curve.optim.lr, curve.lora) == (default.data.target, default.optim.lr, default.lora)
    # Issue 31's recipe is that round plus the length-balanced ranking loss on GPT-4's score pairs.
    content = load_config(TrainConfig, REPO / "configs/train/content-not-length.yaml")
    assert content.model_dump(exclude={"distill", "out"}) == curve.model_dump(exclude={"distill", "out"})
    d = content.distill
    assert d.enabled and d.score_pairs and d.length_balance and d.scale == (1, 10) and not d.measure


def test_batch_must_split_over_devices():
    with pytest.raises(ConfigError, match="multiple"):
        load_config(TrainConfig, None, ["optim.batch_size=6", "optim.micro_batch_size=4"])


def test_shipped_accelerate_zero3_config():
    acc = yaml.safe_load((REPO / "configs/train/accelerate/zero3.yaml").read_text())
    assert acc["distributed_type"] == "DEEPSPEED" and acc["num_machines"] == 1
    ds_file = REPO / "configs/train/accelerate" / acc["deepspeed_config"]["deepspeed_config_file"]
    ds = json.loads(ds_file.read_text())
    zero = ds["zero_optimization"]
    assert zero["stage"] == 3 and zero["stage3_gather_16bit_weights_on_model_save"] is True
    # Left to the HF Trainer so the judgeforge config stays the single source of the recipe.
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping"):
        assert ds[key] == "auto"
    assert ds["bf16"]["enabled"] == "auto"
    # accelerate accepts the launch config as a DeepSpeed config (parsed the way `accelerate launch` does).
    from accelerate.commands.config.config_args import load_config_from_file

    loaded = load_config_from_file(str(REPO / "configs/train/accelerate/zero3.yaml"))
    assert loaded.distributed_type == "DEEPSPEED"


def test_num_gpus_wraps_accelerate_launch(tmp_path, monkeypatch):
    from judgeforge import watchdog
    from judgeforge.train import run

    calls = []
    monkeypatch.setattr(watchdog, "run_owned", lambda cmd, env: calls.append((cmd, env)) or 0)
    monkeypatch.chdir(tmp_path)  # the recipe's run directory is held (locked) while the launch runs
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(hw, "accelerator", lambda: "cuda")  # the recipe's ZeRO-3 launch is for GPUs
    argv = ["--config", str(REPO / "configs/train/prometheus-bgb-8x7b.yaml"), "--num-gpus", "4", "seed=1"]
    assert run.main(argv) == 0
    cmd, _ = calls[0]
    assert cmd[1:4] == ["-m", "accelerate.commands.launch", "--config_file"]
    assert cmd[cmd.index("--num_processes") + 1] == "4"
    assert Path(cmd[cmd.index("--deepspeed_config_file") + 1]).is_file()
    assert cmd[cmd.index("-m", 3):][:3] == ["-m", "judgeforge.cli", "train"] and cmd[-5:] == argv


def test_wandb_offline_without_a_key_and_off_when_disabled(tmp_path, monkeypatch):
    from judgeforge.train import run

    cfg = load_config(TrainConfig, REPO / "configs/train/default.yaml", [f"out={tmp_path / 'run'}"])
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DIR"):
        monkeypatch.delenv(var, raising=False)
    run._setup_tracking(cfg, tmp_path / "run")
    assert run.os.environ["WANDB_MODE"] == "offline" and run.os.environ["WANDB_DIR"] == str(tmp_path / "run")
    assert run.sft_args(cfg, tmp_path, has_eval=True).report_to == ["wandb"]
    monkeypatch.setenv("WANDB_MODE", "disabled")  # what the test suite sets
    args = run.sft_args(cfg, tmp_path, has_eval=False)
    assert args.report_to == []
    assert args.completion_only_loss is True and args.max_length is None  # judgeforge drops, never truncates
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (1, 8)
    bf16 = run.sft_args(cfg.model_copy(update={"precision": "bf16"}), tmp_path, has_eval=False)
    assert bf16.bf16 and bf16.use_cpu == (hw.accelerator() is None)  # bf16 on a CPU = autocast


def test_precision_auto_resolves_by_the_cpu(monkeypatch):
    from judgeforge.train import run

    default = load_config(TrainConfig, REPO / "configs/train/default.yaml")
    monkeypatch.setattr(hw, "accelerator", lambda: None)
    for flags, want in ((frozenset({"avx2"}), "fp32"), (frozenset({"avx2", "avx512_bf16"}), "bf16")):
        monkeypatch.setattr(hw, "cpu_info", lambda f=flags: hw.CPUInfo("x86_64", "test CPU", f, (0, 1)))
        assert run.resolve_precision(default).precision == want
    explicit = default.model_copy(update={"precision": "bf16"})
    assert run.resolve_precision(explicit).precision == "bf16"
