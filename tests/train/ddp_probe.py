"""`judgeforge <argv>` in one process of a launch, instrumented for tests/train/test_ddp.py.

The tests start it in place of `-m judgeforge.cli` in the command judgeforge's own launcher builds
(train/distributed.py), so everything but this instrumentation is the product's path:
- JF_PROBE_DIR/writes-RANK.jsonl: every path a rank other than 0 creates, writes, renames, removes
  or changes under JF_PROBE_RUN, appended as it happens (a SIGKILL loses none): Python's file
  operations through its audit events, and the native writers training uses (torch.save's C++
  writer, safetensors' and tokenizers' Rust ones) through their Python entry points, wrapped before
  transformers or PEFT import them;
- JF_PROBE_DIR/pairs-RANK.jsonl: the distillation pair positions of each micro-step;
- JF_PROBE_KILL=STEP: rank 1 SIGKILLs itself while saving checkpoint-STEP: once rank 0 has written
  its part (up to trainer_state.json), before rank 1's own RNG state.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

RANK = int(os.environ["RANK"])
PROBE = Path(os.environ["JF_PROBE_DIR"])
RUN = os.path.realpath(os.environ["JF_PROBE_RUN"])
CHANGES = {"os.rename": 1, "os.remove": 0, "os.rmdir": 0, "os.mkdir": 0, "shutil.rmtree": 0, "os.truncate": 0,
           "os.symlink": 1, "os.link": 1, "os.chmod": 0, "os.utime": 0}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def record(name: str, row: dict) -> None:
    with open(PROBE / f"{name}-{RANK}.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def _under_run(path) -> str | None:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        return None  # a file descriptor
    full = os.path.realpath(path)
    return os.path.relpath(full, RUN) if full == RUN or full.startswith(RUN + os.sep) else None


def audit(event: str, args: tuple) -> None:
    if event == "open":
        path, mode, flags = args
        writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & WRITE_FLAGS)
        rel = _under_run(path) if writing else None
    elif event in CHANGES:
        rel = _under_run(args[CHANGES[event]])
    else:
        return
    if rel is not None:
        record("writes", {"event": event, "path": rel})


def record_pair_draws() -> None:
    from judgeforge.train.distill import DistillSFTTrainer

    real = DistillSFTTrainer._positions

    def positions(self):
        pos = real(self)
        record("pairs", {"step": self._micro[0], "micro": self._micro[1], "positions": pos})
        return pos

    DistillSFTTrainer._positions = positions


def kill_rank_1_at(step: int) -> None:
    import transformers

    real = transformers.Trainer._save_rng_state

    def dying(self, output_dir):
        if self.state.global_step == step:
            state = Path(output_dir) / "trainer_state.json"
            deadline = time.monotonic() + 300
            while not state.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, output_dir)

    transformers.Trainer._save_rng_state = dying


def watch_native_writers() -> None:
    import safetensors.torch
    import torch

    def wrap(owner, name, path_of):
        real = getattr(owner, name)

        def writer(*args, **kwargs):
            rel = _under_run(path_of(*args, **kwargs))
            if rel is not None:
                record("writes", {"event": f"{owner.__name__}.{name}", "path": rel})
            return real(*args, **kwargs)

        setattr(owner, name, writer)

    wrap(torch, "save", lambda obj, f, *a, **k: f)
    wrap(safetensors.torch, "save_file", lambda tensors, filename, *a, **k: filename)
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    wrap(PreTrainedTokenizerBase, "save_pretrained", lambda self, directory, *a, **k: directory)


if __name__ == "__main__":
    if RANK != 0:
        sys.addaudithook(audit)
        watch_native_writers()
    record_pair_draws()
    if RANK == 1 and os.environ.get("JF_PROBE_KILL"):
        kill_rank_1_at(int(os.environ["JF_PROBE_KILL"]))
    from judgeforge.cli import main

    sys.exit(main(sys.argv[1:]))
