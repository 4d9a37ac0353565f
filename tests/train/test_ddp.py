"""Training across processes: 2 CPU processes (DDP, gloo) against one, on the tiny Mixtral.

The launched runs take judgeforge's own launch command (train/distributed.py: `accelerate launch`
with configs/train/accelerate/ddp_cpu.yaml, the cores split between the ranks), with
tests/train/ddp_probe.py in place of `-m judgeforge.cli`, which records what each rank writes and
which distillation pairs it draws, and can kill rank 1. The recipe is SFT plus distillation
(`distill.sources`: a pairwise build), 8 examples, global batch 4, 2 epochs = 4 steps. A real
`judgeforge train --num-processes 2` killed with kill -9 mid-training leaves neither launcher nor rank.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import types
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import load_file

from judgeforge.config import load_config, save_resolved
from judgeforge.io import read_jsonl
from judgeforge.train.config import TrainConfig
from testing.processes import alive

pytestmark = pytest.mark.slow  # every test here runs real TRL trainers, two of them as 2 processes

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("ddp_probe.py")
STEPS = 4
EXAMPLES = 8
# Dropout off: each rank draws its own dropout masks, which no single process can reproduce.
RECIPE = ["optim.epochs=2", "optim.batch_size=4", "checkpoint.every=2", "checkpoint.keep=2", "lora.dropout=0.0",
          "distill.enabled=true", "distill.batch_pairs=1", "accelerate_config=configs/train/accelerate/ddp_cpu.yaml"]
# fp32 on both sides; the only difference is the order of the gradient sums (two ranks' halves
# all-reduced against one process's four micro-batches accumulated), a few ulps per step. Adam divides
# by sqrt(v), so an element whose gradient is near zero can carry those ulps further: on an
# avx512_bf16 CPU the weights differed by 4e-7 at most, on the AVX2-only EPYC one element of 2,048 by
# 1.05e-5 (CI, 2026-12-07). A rank whose gradients were not all-reduced moves most elements by about
# one Adam step (lr 2e-3), so WEIGHT_ATOL at 5% of a step still tells the two apart by 20x, and
# CLOSE_ATOL bounds how many elements may drift past 1e-5.
LOSS_RTOL, WEIGHT_ATOL, CLOSE_ATOL, MAX_DRIFTED = 1e-5, 1e-4, 1e-5, 0.01


@pytest.fixture(scope="module")
def data(build_dir, tmp_path_factory, helpers) -> Path:
    return helpers.short_build(build_dir, tmp_path_factory.mktemp("ddp-data") / "data", EXAMPLES)


def recipe(tiny_mixtral, data, pair_build, out, helpers, *extra):
    return helpers.tiny_config(tiny_mixtral, data, out, *RECIPE, f"distill.sources=[{pair_build}]", *extra)


def launch(cfg: TrainConfig, work: Path, kill_at: int | None = None) -> subprocess.CompletedProcess:
    """judgeforge's launch of `judgeforge train --config CFG` on 2 CPU processes, with the probe."""
    from judgeforge.hardware import cpu_info
    from judgeforge.train import distributed

    work.mkdir(parents=True, exist_ok=True)
    argv = ["--config", str(save_resolved(cfg, work, "cmd.yaml"))]
    cmd = distributed.launch_command(cfg, argv, gpu=False)
    at = cmd.index("judgeforge.cli")
    cmd[at - 1:at + 1] = [str(PROBE)]
    env = distributed.launch_env(os.environ, cfg.num_gpus, len(cpu_info().cpus), gpu=False)
    env.update(JF_PROBE_DIR=str(work), JF_PROBE_RUN=cfg.out, JF_PROBE_KILL=str(kill_at or ""))
    return subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=1200)


def probe_rows(work: Path, name: str, rank: int) -> list[dict]:
    path = work / f"{name}-{rank}.jsonl"
    return read_jsonl(path) if path.is_file() else []


@pytest.fixture(scope="module")
def single(tiny_mixtral, data, pair_build, tmp_path_factory, helpers):
    """The recipe in one process (in this one), its pair draws recorded."""
    from judgeforge.train.distill import DistillSFTTrainer
    from judgeforge.train.run import train

    out = tmp_path_factory.mktemp("single") / "run"
    draws, real = [], DistillSFTTrainer._positions

    def positions(self):
        pos = real(self)
        draws.append({"step": self._micro[0], "micro": self._micro[1], "positions": pos})
        return pos

    DistillSFTTrainer._positions = positions
    try:
        train(recipe(tiny_mixtral, data, pair_build, out, helpers))
    finally:
        DistillSFTTrainer._positions = real
    return types.SimpleNamespace(out=out, draws=draws)


@pytest.fixture(scope="module")
def ddp(tiny_mixtral, data, pair_build, tmp_path_factory, helpers):
    """The same recipe on 2 processes, uninterrupted."""
    work = tmp_path_factory.mktemp("ddp")
    cfg = recipe(tiny_mixtral, data, pair_build, work / "run", helpers, "num_gpus=2")
    done = launch(cfg, work)
    assert done.returncode == 0, done.stderr[-4000:]
    return types.SimpleNamespace(out=work / "run", work=work, cfg=cfg, log=done.stderr)


def lora_weights(adapter_dir: Path) -> dict[str, torch.Tensor]:
    return {k: v for k, v in load_file(adapter_dir / "adapter_model.safetensors").items() if "lora_" in k}


def training_args(run: Path):
    return torch.load(run / "checkpoints" / f"checkpoint-{STEPS}" / "training_args.bin", weights_only=False)


def test_global_batch_kept_and_every_example_once_per_epoch(single, ddp, data):
    one, two = training_args(single.out), training_args(ddp.out)
    assert (one.per_device_train_batch_size, one.gradient_accumulation_steps) == (1, 4)
    assert (two.per_device_train_batch_size, two.gradient_accumulation_steps) == (1, 2)  # x 2 processes
    a, b = read_jsonl(single.out / "samples.jsonl"), read_jsonl(ddp.out / "samples.jsonl")
    assert [r["step"] for r in b] == list(range(1, STEPS + 1))
    assert all(len(r["ids"]) == 4 for r in a + b)  # the global batch
    # The same examples in the same order: rank r's m-th micro-batch is the step's batch 2m + r.
    assert [r["ids"] for r in b] == [r["ids"] for r in a]
    for r in b:
        r0, r1 = r["ranks"]
        assert len(r0) == len(r1) == 2 and not set(r0) & set(r1) and sorted(r0 + r1) == sorted(r["ids"])
        assert r0 == r["ids"][0::2] and r1 == r["ids"][1::2]
    every = sorted(rec["id"] for rec in read_jsonl(data / "train.jsonl"))
    assert len(every) == EXAMPLES
    for epoch in (b[:2], b[2:]):  # 8 examples / 4 a step: 2 steps an epoch, none repeated or left out
        assert sorted(i for r in epoch for i in r["ids"]) == every
    assert "accelerate repeats" not in ddp.log  # 8 fills whole micro-batches on 2 ranks


def test_loss_and_adapter_match_one_process(single, ddp):
    one = json.loads((single.out / "loss.json").read_text())["train"]
    two = json.loads((ddp.out / "loss.json").read_text())["train"]
    assert [p["step"] for p in two] == [p["step"] for p in one] == list(range(1, STEPS + 1))
    for p, q in zip(one, two):
        assert q["loss"] == pytest.approx(p["loss"], rel=LOSS_RTOL)
    assert one[-1]["loss"] < one[0]["loss"]  # it trained
    mine, ref = lora_weights(ddp.out / "adapter"), lora_weights(single.out / "adapter")
    assert mine.keys() == ref.keys() and mine
    for k in ref:
        torch.testing.assert_close(mine[k], ref[k], rtol=0, atol=WEIGHT_ATOL)
        drifted = ((mine[k] - ref[k]).abs() > CLOSE_ATOL).float().mean().item()
        assert drifted <= MAX_DRIFTED, f"{k}: {drifted:.1%} of the elements differ by over {CLOSE_ATOL}"
    # The pairs' ordering is measured under DDP too (one forward pass per rank, rank 0 writes it).
    d1, d2 = (json.loads((r / "distill.json").read_text()) for r in (single.out, ddp.out))
    assert d2["counts"] == d1["counts"] and d2["after"]["loss"] == pytest.approx(d1["after"]["loss"], rel=1e-4)


def test_distillation_pair_draws_agree_across_ranks(single, ddp):
    """Draw k of a step is a function of (step, micro-step x world + rank): the two ranks together draw
    exactly the pairs one process draws, each micro-step's pairs on one rank only."""
    ranks = [probe_rows(ddp.work, "pairs", r) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == STEPS * 2
    one = {(d["step"], d["micro"]): d["positions"] for d in single.draws}
    assert len(one) == STEPS * 4
    for rank, draws in enumerate(ranks):
        for d in draws:
            assert d["positions"] == one[(d["step"], d["micro"] * 2 + rank)]
    for step in range(STEPS):
        drawn = [p for draws in ranks for d in draws if d["step"] == step for p in d["positions"]]
        assert sorted(drawn) == sorted(p for (s, _), pos in one.items() if s == step for p in pos)


def test_only_rank_0_writes_the_run(single, ddp):
    writes = probe_rows(ddp.work, "writes", 1)
    files = {w["path"] for w in writes if w["event"] != "os.mkdir"}
    # What HF Trainer needs of rank 1 to resume it: its RNG state in each checkpoint, nothing else.
    assert files == {f"checkpoints/checkpoint-{s}/rng_state_1.pth" for s in range(2, STEPS + 1, 2)}, writes
    made = {w["path"] for w in writes if w["event"] == "os.mkdir"}
    assert made <= {".", "checkpoints", *(f"checkpoints/checkpoint-{s}" for s in range(2, STEPS + 1, 2))}
    # Rank 0 wrote the run: the single process's files, a per-rank RNG state instead of one.
    for name in ("config.yaml", "data.json", "samples.jsonl", "loss.json", "loss.png", "distill.json",
                 "adapter/adapter_model.safetensors", "adapter/judgeforge.json", "adapter/config.yaml"):
        assert (ddp.out / name).is_file(), name
    data = json.loads((ddp.out / "data.json").read_text())
    assert data["sources"] == json.loads((single.out / "data.json").read_text())["sources"]
    meta = json.loads((ddp.out / "adapter/judgeforge.json").read_text())
    assert meta["global_step"] == STEPS and meta["data"][0]["manifest_sha256"]
    assert load_config(TrainConfig, ddp.out / "config.yaml").num_gpus == 2
    ckpt = ddp.out / "checkpoints" / f"checkpoint-{STEPS}"
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= {p.name for p in ckpt.iterdir()}


def test_a_killed_rank_resumes_from_the_last_complete_checkpoint(ddp, tmp_path):
    cfg = ddp.cfg.model_copy(update={"out": str(tmp_path / "run")})
    killed = launch(cfg, tmp_path / "killed", kill_at=STEPS)  # rank 1 dies saving the last checkpoint
    assert killed.returncode != 0 and re.search(r"exitcode\s*:\s*-9", killed.stderr), killed.stderr[-3000:]
    out = Path(cfg.out)
    torn = out / "checkpoints" / f"checkpoint-{STEPS}"
    # Rank 0 wrote all of its part; rank 1's RNG state is missing, and the marker, which waits for
    # every rank and requires each rank's file, was never written.
    for name in ("adapter_model.safetensors", "optimizer.pt", "rng_state_0.pth", "trainer_state.json"):
        assert (torn / name).is_file(), name
    assert not (torn / "rng_state_1.pth").exists() and not (torn / "judgeforge-complete.json").exists()
    assert not (out / "adapter").exists()

    again = launch(cfg, tmp_path / "again")  # the same command again
    assert again.returncode == 0, again.stderr[-4000:]
    assert f"removed incomplete checkpoint {torn}" in again.stderr
    assert f"resuming from {out / 'checkpoints' / f'checkpoint-{STEPS - 2}'}" in again.stderr
    meta = json.loads((out / "adapter" / "judgeforge.json").read_text())
    assert meta["global_step"] == STEPS
    assert read_jsonl(out / "samples.jsonl") == read_jsonl(ddp.out / "samples.jsonl")
    mine, ref = lora_weights(out / "adapter"), lora_weights(ddp.out / "adapter")
    for k in ref:  # the same two ranks, their RNG and data positions restored: the same arithmetic
        torch.testing.assert_close(mine[k], ref[k], rtol=0, atol=1e-7)
    assert [p["step"] for p in json.loads((out / "loss.json").read_text())["train"]] == list(range(1, STEPS + 1))


def launched(parent: subprocess.Popen, config: Path) -> set[psutil.Process]:
    """The parent's descendants and any process whose command line names the run's config (a rank
    re-parented to PID 1 included)."""
    found = set()
    for p in psutil.process_iter(["cmdline"]):
        if str(config) in " ".join(p.info["cmdline"] or []) and p.pid != parent.pid:
            found.add(p)
    try:
        return found | set(psutil.Process(parent.pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return found


def running(procs) -> set[psutil.Process]:
    return set(alive(procs))


def test_a_killed_train_command_leaves_no_launcher_or_rank(tiny_mixtral, data, helpers, tmp_path):
    """kill -9 of `judgeforge train --num-processes 2` once its ranks train: within 10 s no process it
    started (the launcher, the ranks, the watchdog) runs."""
    cfg = helpers.tiny_config(tiny_mixtral, data, tmp_path / "run", "optim.epochs=100", "checkpoint.every=1000",
                              "accelerate_config=configs/train/accelerate/ddp_cpu.yaml")
    config = save_resolved(cfg, tmp_path, "cmd.yaml")
    with open(tmp_path / "stderr", "w") as err:
        train = subprocess.Popen([sys.executable, "-m", "judgeforge.cli", "train", "--config", str(config),
                                  "--num-processes", "2"], cwd=REPO, stderr=err)
    samples, seen = Path(cfg.out) / "samples.jsonl", set()
    try:
        deadline = time.monotonic() + 600
        while not (samples.is_file() and samples.read_text().strip()):  # a step trained on both ranks
            assert train.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr").read_text()[-3000:]
            seen |= launched(train, config)
            time.sleep(0.2)
        seen |= launched(train, config)
        ranks = [p for p in running(seen) if "--num-processes" in p.cmdline() and "LOCAL_RANK" in p.environ()]
        assert len(ranks) == 2, seen
        train.kill()
        train.wait()
        deadline = time.monotonic() + 10
        while (left := running(seen | launched(train, config))) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"alive 10 s after the kill -9: {[' '.join(p.cmdline())[:100] for p in left]}"
    finally:
        for p in running(seen):
            p.kill()
        train.kill()
