"""Resumable runs: complete-checkpoint markers and a per-step log of the examples trained.

HF Trainer writes `checkpoint-N/` in place, file by file, so a run killed while
saving leaves a directory that looks like a checkpoint but is not one. After
the Trainer has finished a save (`on_save`), `CompletionMarker` writes a marker
listing every file and its size; `last_complete` only ever returns a checkpoint
whose marker exists and whose files are all still there. Under several processes
each rank saves its own RNG state into the checkpoint, so the marker waits for every
rank's save and requires each rank's file: a rank killed while saving leaves no marker.

Under DeepSpeed the engine saves the optimizer itself (transformers' `_save_optimizer_and_scheduler`
calls `save_checkpoint`), not as `optimizer.pt`: `global_stepN/` holds every rank's shard of the
optimizer state (`[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt`) and, under ZeRO-3, of the model
state (`zero_pp_rank_R_mp_rank_00_model_states.pt`; below stage 3 one `mp_rank_00_model_states.pt`),
and `latest` names that folder (rank 0 writes it last). The marker requires each rank's shards as it
does each rank's RNG state, and lists them with the rest, so a shard that goes missing later makes the
checkpoint incomplete too.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from transformers import TrainerCallback

from judgeforge.io import atomic_write_json, atomic_write_text, dumps_record

MARKER = "judgeforge-complete.json"
_CKPT = re.compile(r"^checkpoint-(\d+)$")
# What resuming needs besides the adapter weights (DeepSpeed: see `deepspeed_missing`).
REQUIRED = ("trainer_state.json", "optimizer.pt", "scheduler.pt")
LATEST = "latest"  # DeepSpeed's pointer to the tag folder (global_stepN) of the engine's own checkpoint


def checkpoint_dirs(root: Path) -> list[tuple[int, Path]]:
    """checkpoint-N dirs under `root`, newest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CKPT.match(p.name))]
    return sorted(found, reverse=True)


def is_complete(ckpt: Path) -> bool:
    try:
        marker = json.loads((ckpt / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return all((ckpt / name).is_file() and (ckpt / name).stat().st_size == size
               for name, size in marker.get("files", {}).items())


def last_complete(root: Path) -> Path | None:
    return next((p for _, p in checkpoint_dirs(root) if is_complete(p)), None)


def discard_incomplete(root: Path) -> list[Path]:
    """Remove checkpoint dirs that never finished saving (they would be overwritten anyway)."""
    gone = [p for _, p in checkpoint_dirs(root) if not is_complete(p)]
    for p in gone:
        shutil.rmtree(p)
    return gone


def _has_weights(ckpt: Path) -> bool:
    return any(ckpt.glob("adapter_model.*")) or any(ckpt.glob("global_step*"))


def deepspeed_missing(ckpt: Path, world: int, zero_stage: int) -> list[str]:
    """What a DeepSpeed engine checkpoint in `ckpt` lacks for `world` ranks (empty: all there)."""
    try:
        tag = (ckpt / LATEST).read_text().strip()
    except OSError:
        return [LATEST]
    if not tag or not (ckpt / tag).is_dir():
        return [f"{LATEST} -> {tag or '(empty)'}"]
    wanted = [f"{tag}/*zero_pp_rank_{r}_mp_rank_*_optim_states.pt" for r in range(world)]
    if zero_stage >= 3:  # every rank holds a partition of the weights too
        wanted += [f"{tag}/zero_pp_rank_{r}_mp_rank_*_model_states.pt" for r in range(world)]
    else:
        wanted.append(f"{tag}/mp_rank_*_model_states.pt")
    # A pattern matches one rank's file only: `_mp_rank_` follows the rank, so rank 1 never matches 10's.
    return [w for w in wanted if not any(f.is_file() for f in ckpt.glob(w))]


def missing_files(ckpt: Path, world: int, zero_stage: int | None = None, engine_scheduler: bool = False) -> list[str]:
    """What checkpoint `ckpt` of a `world`-rank run lacks to be resumed (empty: nothing).

    `zero_stage`: the run's DeepSpeed ZeRO stage (None: no DeepSpeed); `engine_scheduler`: DeepSpeed
    also holds the LR scheduler (one named in its config), so there is no `scheduler.pt`."""
    per_rank = [f"rng_state_{r}.pth" for r in range(world)] if world > 1 else []
    if zero_stage is None:
        return [n for n in (*REQUIRED, *per_rank) if not (ckpt / n).is_file()]
    plain = ["trainer_state.json", *([] if engine_scheduler else ["scheduler.pt"]), *per_rank]
    return [n for n in plain if not (ckpt / n).is_file()] + deepspeed_missing(ckpt, world, zero_stage)


def _deepspeed(args) -> tuple[int | None, bool]:
    """(ZeRO stage, whether the engine holds the scheduler) of a run's TrainingArguments; (None, False)
    without DeepSpeed."""
    plugin = getattr(args, "deepspeed_plugin", None)
    if plugin is None:
        return None, False
    config = getattr(plugin, "deepspeed_config", None) or {}
    return int(plugin.zero_stage or 0), "scheduler" in config


class CompletionMarker(TrainerCallback):
    """Mark a checkpoint complete once the Trainer has written all of it."""

    def on_save(self, args, state, control, **kwargs):
        from judgeforge.train.distributed import barrier

        barrier()  # every rank's part of the checkpoint is on disk
        if not state.is_world_process_zero:
            return
        ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        missing = missing_files(ckpt, args.world_size, *_deepspeed(args))
        if missing or not _has_weights(ckpt):
            raise RuntimeError(f"checkpoint {ckpt} is missing {missing or 'adapter weights'} after save")
        files = {str(f.relative_to(ckpt)): f.stat().st_size for f in sorted(ckpt.rglob("*"))
                 if f.is_file() and f.name != MARKER}
        atomic_write_json(ckpt / MARKER, {"step": state.global_step, "files": files})


class SampleLog(TrainerCallback):
    """Record which examples each optimizer step trained on, to `samples.jsonl` (one line a step).

    The collator wrapper queues each batch's ids as the dataloader fetches it; every
    micro-step end (`on_substep_end`, `on_step_end`) consumes one queued batch in order, so
    dataloader prefetching never mis-attributes a batch. Under several processes rank 0 gathers
    every rank's batches: `ids` is the step's examples in the sampler's order (rank r's m-th
    micro-batch is the step's batch m x world + r, accelerate's round-robin), the same list one
    process records, and `ranks` each rank's share.
    """

    def __init__(self, path: Path, collator):
        self.path, self.inner = Path(path), collator
        self.queue: list[list[str]] = []
        self.pending: list[list[str]] = []

    def collate(self, features: list[dict]):
        if features and "id" in features[0]:
            self.queue.append([f["id"] for f in features])
            features = [{k: v for k, v in f.items() if k != "id"} for f in features]
        return self.inner(features)

    def truncate(self, step: int) -> None:
        """Keep the lines of steps <= `step` (those the resumed checkpoint holds)."""
        if not self.path.is_file():
            return
        lines = [ln for ln in self.path.read_text().splitlines() if ln.strip()]
        keep = [ln for ln in lines if json.loads(ln)["step"] <= step]
        atomic_write_text(self.path, "".join(ln + "\n" for ln in keep))

    def on_train_begin(self, args, state, control, **kwargs):
        self.queue.clear()
        self.pending.clear()

    def on_substep_end(self, args, state, control, **kwargs):
        if self.queue:
            self.pending.append(self.queue.pop(0))

    def on_step_end(self, args, state, control, **kwargs):
        from judgeforge.train.distributed import gather

        self.on_substep_end(args, state, control)
        ranks = gather(self.pending)  # a collective: every rank calls it at every step
        self.pending = []
        if not state.is_world_process_zero:
            return
        ids = [i for m in range(max(map(len, ranks))) for batches in ranks if m < len(batches)
               for i in batches[m]]
        row = {"step": state.global_step, "ids": ids}
        if len(ranks) > 1:
            row["ranks"] = [[i for b in batches for i in b] for batches in ranks]
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(dumps_record(row) + "\n")
