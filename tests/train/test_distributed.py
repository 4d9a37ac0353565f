"""Launching training across processes (train/distributed.py): the pure decisions, the shipped
accelerate configs, accelerate's own padding of the last batches, the sample log's merge of the
ranks' batches, and a launch that ends with its `judgeforge train` (a stand-in launcher here). The
real 2-process runs are tests/train/test_ddp.py."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from testing.processes import alive

from judgeforge.config import ConfigError, load_config
from judgeforge.train import distributed as D
from judgeforge.train.config import TrainConfig

REPO = Path(__file__).resolve().parents[2]


def cfg(*overrides: str) -> TrainConfig:
    return load_config(TrainConfig, None, ["optim.batch_size=8", *overrides])


def test_the_launched_world_size_wins_and_keeps_the_global_batch():
    one = cfg()
    assert D.resolve_world(one, {}) is one and one.grad_accumulation() == 8
    four = D.resolve_world(one, {"WORLD_SIZE": "4", "LOCAL_RANK": "0"})  # `accelerate launch -m judgeforge.cli`
    assert four.num_gpus == 4 and four.grad_accumulation() == 2
    assert four.optim.batch_size == 4 * four.optim.micro_batch_size * four.grad_accumulation()
    two = D.resolve_world(cfg("num_gpus=8"), {"WORLD_SIZE": "2"})  # launched on fewer than configured
    assert two.num_gpus == 2 and two.grad_accumulation() == 4
    with pytest.raises(ConfigError, match=r"3 processes: optim.batch_size \(8\) must be a multiple of "
                                          r"micro_batch_size x processes \(1 x 3\)"):
        D.resolve_world(one, {"WORLD_SIZE": "3"})
    with pytest.raises(ConfigError, match="WORLD_SIZE"):
        D.launched_world({"WORLD_SIZE": "two"})


def test_an_indivisible_process_count_is_refused_before_launching(monkeypatch, capsys):
    from judgeforge import cli, watchdog

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(watchdog, "run_owned", lambda *a, **k: pytest.fail("launched"))
    assert cli.main(["train", "--num-processes", "3", "optim.batch_size=4"]) == 2
    err = capsys.readouterr().err
    assert "config error" in err and "micro_batch_size x processes (1 x 3)" in err


@pytest.mark.parametrize("n,micro,world", [(12, 1, 2), (13, 1, 2), (13, 2, 2), (5, 2, 3), (7, 1, 4), (3, 1, 4)])
def test_padded_examples_is_what_accelerate_repeats(n, micro, world):
    """accelerate's own shard of the batch sampler (even_batches, as the Trainer uses it)."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, SequentialSampler

    base = BatchSampler(SequentialSampler(range(n)), micro, drop_last=False)
    seen = [i for r in range(world) for b in BatchSamplerShard(base, world, r, even_batches=True) for i in b]
    assert sorted(set(seen)) == list(range(n))
    assert len(seen) - n == D.padded_examples(n, micro, world)
    assert D.padded_examples(n, micro, 1) == 0


def test_cpu_launch_command_and_environment():
    c = cfg("num_gpus=2")
    argv = ["--config", "x.yaml", "--num-processes", "2"]
    cmd = D.launch_command(c, argv, gpu=False)
    assert cmd[1:4] == ["-m", "accelerate.commands.launch", "--config_file"]
    assert Path(cmd[4]) == REPO / "configs/train/accelerate/ddp_cpu.yaml"
    assert cmd[cmd.index("--num_processes") + 1] == "2" and cmd[cmd.index("--main_process_port") + 1] == "0"
    assert "--deepspeed_config_file" not in cmd and cmd[-7:] == ["-m", "judgeforge.cli", "train", *argv]
    assert Path(D.launch_command(c, argv, gpu=True)[4]).name == "zero3.yaml"  # the default on GPUs
    gpu_ddp = D.launch_command(cfg("num_gpus=2", "accelerate_config=configs/train/accelerate/ddp_gpu.yaml"),
                               argv, gpu=True)
    assert Path(gpu_ddp[4]).name == "ddp_gpu.yaml"
    assert D.launch_env({}, 2, 16, gpu=False)["OMP_NUM_THREADS"] == "8"
    assert D.launch_env({}, 4, 2, gpu=False)["OMP_NUM_THREADS"] == "1"
    assert D.launch_env({"OMP_NUM_THREADS": "3"}, 2, 16, gpu=False)["OMP_NUM_THREADS"] == "3"
    assert "OMP_NUM_THREADS" not in D.launch_env({}, 2, 16, gpu=True)
    with pytest.raises(ConfigError, match="not found"):
        D.launch_command(cfg("num_gpus=2", "accelerate_config=nowhere.yaml"), argv, gpu=False)
    # ZeRO-3 on the CPU (DeepSpeed's CPU accelerator, gloo) is launched too: tests/train/test_deepspeed.py.


@pytest.mark.parametrize("name,kind", [("ddp_cpu", "MULTI_GPU"), ("ddp_gpu", "MULTI_GPU"), ("zero3", "DEEPSPEED")])
def test_shipped_accelerate_configs_load_in_accelerate(name, kind):
    from accelerate.commands.config.config_args import load_config_from_file

    loaded = load_config_from_file(str(REPO / f"configs/train/accelerate/{name}.yaml"))
    assert loaded.distributed_type == kind and loaded.num_machines == 1
    # use_cpu would make `accelerate launch` start a single process; the trainer picks the CPU itself.
    assert loaded.use_cpu is False


def test_sample_log_merges_the_ranks_batches_in_sampler_order(tmp_path, monkeypatch):
    """Rank r's m-th micro-batch is the step's batch m x world + r (accelerate's round-robin)."""
    import types

    from judgeforge.io import read_jsonl
    from judgeforge.train import checkpoints

    other = [["b1"], ["b3"]]  # what rank 1 queued this step
    monkeypatch.setattr(D, "gather", lambda mine: [mine, other])
    log = checkpoints.SampleLog(tmp_path / "samples.jsonl", lambda feats: feats)
    for batch in (["b0"], ["b2"]):
        log.collate([{"id": i, "input_ids": [1]} for i in batch])
    state = types.SimpleNamespace(is_world_process_zero=True, global_step=1)
    log.on_substep_end(None, state, None)
    log.on_step_end(None, state, None)
    assert read_jsonl(tmp_path / "samples.jsonl") == [
        {"step": 1, "ids": ["b0", "b1", "b2", "b3"], "ranks": [["b0", "b2"], ["b1", "b3"]]}]


def test_repeated_examples_are_stated(caplog):
    import logging

    from judgeforge.train.run import _log_padding

    caplog.set_level(logging.WARNING, logger="judgeforge.train.run")
    _log_padding(cfg("num_gpus=2"), 12)
    assert not caplog.records
    _log_padding(cfg("num_gpus=2"), 13)
    assert "accelerate repeats the first 1 of each epoch's order" in caplog.text and "a multiple of 2" in caplog.text


# A stand-in for `accelerate launch` (torchrun): two ranks in sessions of their own that say when they
# are up; on SIGTERM it SIGTERMs them and waits. A stubborn rank 1 ignores SIGTERM (SIGKILL's path).
LAUNCHER = textwrap.dedent("""
    import signal, subprocess, sys, time
    work, stubborn = sys.argv[1], sys.argv[2] == "stubborn"
    RANK = (
        "import pathlib, signal, sys, time\\n"
        "def done(*_):\\n    pathlib.Path(sys.argv[1] + '.stopped').touch(); sys.exit(0)\\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN if sys.argv[2] == 'stubborn' else done)\\n"
        "pathlib.Path(sys.argv[1] + '.up').touch(); time.sleep(600)")
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, f"{work}/rank{r}",
                               "stubborn" if stubborn and r == 1 else "clean"], start_new_session=True)
             for r in (0, 1)]

    def stop(*_):
        for r in ranks:
            r.terminate()
        for r in ranks:
            r.wait()
        sys.exit(1)

    signal.signal(signal.SIGTERM, stop)
    time.sleep(600)
""")
# `judgeforge train --num-processes 2` as the CLI runs it, the stand-in in place of accelerate launch.
TRAIN = textwrap.dedent("""
    import signal, sys
    from judgeforge.cli import Terminated, _terminate
    from judgeforge.config import load_config
    from judgeforge.train import distributed
    from judgeforge.train.config import TrainConfig

    signal.signal(signal.SIGTERM, _terminate)
    distributed.launch_command = lambda cfg, argv, gpu: [sys.executable, "-c", *sys.argv[1:]]
    try:
        sys.exit(distributed.launch(load_config(TrainConfig, None, ["num_gpus=2"]), [], gpu=False))
    except Terminated as e:
        sys.exit(e.code)
""")


def running(procs) -> list[psutil.Process]:
    return alive(procs)


def wait_until(check, timeout: float):
    deadline = time.monotonic() + timeout
    while not (done := check()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return done


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["kill-9", "term", "int"])
def test_the_launcher_and_its_ranks_end_with_judgeforge_train(sig, tmp_path):
    """kill -9 of `judgeforge train`: the watchdog ends the launcher and the ranks (one ignoring SIGTERM)
    within seconds. SIGTERM or Ctrl-C: the launcher is stopped, and stops its ranks, in order."""
    mode = "stubborn" if sig == signal.SIGKILL else "clean"
    with open(tmp_path / "stderr", "w") as err:
        train = subprocess.Popen([sys.executable, "-c", TRAIN, LAUNCHER, str(tmp_path), mode], stderr=err)
    tree = []
    try:
        assert wait_until(lambda: all((tmp_path / f"rank{r}.up").exists() for r in (0, 1)), 60), \
            (tmp_path / "stderr").read_text()
        time.sleep(1.5)  # the watchdog records every 0.5 s
        tree = psutil.Process(train.pid).children(recursive=True)
        assert sum(str(tmp_path) in " ".join(p.cmdline()) for p in tree) == 3, tree  # launcher, 2 ranks
        train.send_signal(sig)
        train.wait(30)
        left = [] if wait_until(lambda: not running(tree), 10) else running(tree)
        assert not left, f"alive 10 s after {sig.name} of judgeforge train: {left}"
        if sig != signal.SIGKILL:  # each rank's own SIGTERM handler ran: stopped in order
            assert (tmp_path / "rank0.stopped").exists() and (tmp_path / "rank1.stopped").exists()
            assert train.returncode == (128 + signal.SIGTERM if sig == signal.SIGTERM else -signal.SIGINT)
    finally:
        for p in running(tree):
            p.kill()
        train.kill()
