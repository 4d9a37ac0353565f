"""`judgeforge train`: LoRA SFT of a judge with TRL's SFTTrainer, resumable, round after round.

    judgeforge train --config configs/train/default.yaml [key=value ...]
    judgeforge train --config configs/train/prometheus-bgb-8x7b.yaml --num-gpus 8
    judgeforge train --config configs/train/default.yaml --num-processes 2   # DDP on the CPU (gloo)
    judgeforge train --continue runs/train/round1 --out runs/train/round2 [--config ...]

Run directory (`out`): config.yaml (resolved), data.json (sources, manifest
hashes, counts, dropped ids), samples.jsonl (example ids per step),
checkpoints/checkpoint-N (resumable; marked complete), adapter/ (final:
adapter weights, tokenizer, config.yaml, judgeforge.json with the template
version), loss.json + loss.png, and with `distill.enabled` distill.json (the
preference pairs' counts and their ordering by E[score] before and after
training). Rerunning the same command continues from the last complete checkpoint; `--overwrite`
discards the run and starts over. A directory that is not a train run is refused untouched, and
one process trains in a run directory at a time: a second `judgeforge train` on it stops at once,
naming the first one's PID (the lock dies with its process, `kill -9` included).
Several processes (`--num-processes`, train/distributed.py) keep the global batch and the
per-step examples of one process; samples.jsonl then also lists each rank's share.
`--continue ADAPTER` (`continue_from`) trains the next round: the adapter, continued on the next
window of the data build it trained on (train/rounds.py), with the adapter's own recipe unless
`--config` names one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

from judgeforge import hardware as hw
from judgeforge.config import ConfigError, command_parser, load_config, save_resolved
from judgeforge.io import atomic_write_json, read_jsonl
from judgeforge.judge.adapters import meta_path
from judgeforge.train.config import TrainConfig

# Config sections that define the training result; a resumed run must not change them.
RESULT_FIELDS = ("model", "lora", "data", "optim", "precision", "seed", "distill", "stopping", "continue_from")
log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    from judgeforge.train import distributed

    parser = command_parser("judgeforge train", __doc__.split("\n\n")[0], stage="train")
    parser.add_argument("--num-gpus", "--num-processes", dest="num_gpus", type=int,
                        help="training processes (GPUs, or CPU processes without one); >1: accelerate launch "
                             "with accelerate_config (ZeRO-3 on GPUs, DDP with gloo on the CPU by default)")
    parser.add_argument("--out", help="run directory (overrides `out`): a rerun continues the run there; a directory "
                        "that is not a train run is refused")
    parser.add_argument("--overwrite", action="store_true",
                        help="discard the train run at `out` and start over (never a directory that is not one)")
    parser.add_argument("--continue", dest="continue_from", metavar="ADAPTER",
                        help="next continual round of this adapter (run dir or adapter/): its next data "
                             "window, its recipe unless --config is given")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    recipe = args.config or (adapter_path(args.continue_from) / "config.yaml" if args.continue_from else None)
    cfg = load_config(TrainConfig, recipe, args.overrides,
                      extra={"num_gpus": args.num_gpus, "out": args.out, "continue_from": args.continue_from})
    if cfg.num_gpus > 1 and not distributed.inside_launch():
        with hold_run_dir(cfg, args.overwrite):  # for every rank: they skip it (CLAIMED_ENV)
            return distributed.launch(cfg, argv, gpu=hw.accelerator() is not None)
    if not distributed.inside_launch():
        _one_gpu(cfg)
    adapter = train(cfg, overwrite=args.overwrite)
    if os.environ.get("RANK", "0") == "0":
        print(adapter)
    return 0


def _one_gpu(cfg: TrainConfig) -> None:
    """One process on a host with several GPUs trains on the first (TRL refuses nn.DataParallel)."""
    pin = hw.single_process_gpu(os.environ, hw.nvidia_devices())
    if pin:
        log.warning("one training process (num_gpus=%d) on a host with several GPUs: training on GPU %s "
                    "(CUDA_VISIBLE_DEVICES); `--num-gpus N` trains on N", cfg.num_gpus, pin["CUDA_VISIBLE_DEVICES"])
        os.environ.update(pin)


def train(cfg: TrainConfig, callbacks: Sequence = (), overwrite: bool = False) -> Path:
    """Train (or resume) the run `cfg.out`; returns the final adapter directory. `overwrite`: an
    earlier run there is discarded first. The run directory is locked while training (io.claim_dir).

    In every process of a launch (train/distributed.py): rank 0 alone writes the run's files; the
    others write only what HF Trainer saves per rank in a checkpoint (their RNG state)."""
    from judgeforge.train.distributed import resolve_world

    cfg = resolve_precision(resolve_continue(resolve_world(cfg)))
    with hold_run_dir(cfg, overwrite):
        return _train(cfg, callbacks)


# Set by the process that holds a run directory for the ranks it launches (the absolute `out`).
CLAIMED_ENV = "JUDGEFORGE_RUN_DIR_HELD"


def hold_run_dir(cfg: TrainConfig, overwrite: bool = False) -> contextlib.AbstractContextManager:
    """The run directory held for this process (io.claim_dir): refused when it is not a train run
    or another process trains in it; emptied first with `overwrite`. A rank other than 0, or one
    whose launching process holds it, holds nothing."""
    from judgeforge.train.distributed import inside_launch

    out = Path(cfg.out)
    if os.environ.get(CLAIMED_ENV) == str(out.resolve()) or os.environ.get("RANK", "0") != "0":
        return contextlib.nullcontext()
    if overwrite and inside_launch():  # the other ranks may be reading the run's checkpoints already
        raise ConfigError("--overwrite under an outside `accelerate launch`: empty the run directory first, or "
                          "launch with `judgeforge train --num-processes N --overwrite`")
    if cfg.continue_from:  # before anything is emptied: never the continued adapter's own run
        from judgeforge.train.rounds import check_out

        check_out(cfg.out, adapter_path(cfg.continue_from))
    return _held(out, overwrite)


@contextlib.contextmanager
def _held(out: Path, overwrite: bool):
    from judgeforge.io import claim_dir

    with claim_dir(out, "train", overwrite=overwrite, resume=not overwrite, fresh=overwrite):
        os.environ[CLAIMED_ENV] = str(out.resolve())  # inherited by the ranks of a launch
        try:
            yield
        finally:
            os.environ.pop(CLAIMED_ENV, None)


def _train(cfg: TrainConfig, callbacks: Sequence = ()) -> Path:
    out = Path(cfg.out)
    adapter_dir = out / "adapter"
    if _check_run_dir(cfg, out) and meta_path(adapter_dir) is not None:
        log.info("%s already finished", out)
        return adapter_dir
    _setup_tracking(cfg, out)
    trainer, mix, sample_log, dropped = make_trainer(cfg, callbacks)
    resume = _resume_point(cfg, out / "checkpoints", sample_log, trainer.is_world_process_zero())
    feed = getattr(trainer, "feed", None)
    if trainer.is_world_process_zero():
        _log_padding(cfg, len(trainer.train_dataset))
        save_resolved(cfg, out)
        extra = {"distill": _distill_provenance(cfg, feed)} if feed else {}
        atomic_write_json(out / "data.json", {
            "sources": mix.sources, "duplicates": mix.duplicates, "train": len(trainer.train_dataset),
            "eval": len(trainer.eval_dataset or []), "dropped_overlong": dropped,
            "max_length": cfg.data.max_length, **({"length": mix.length} if mix.length else {}),
            **extra, **_validation_record(trainer)})
    # Under ZeRO-3 the weights are partitioned until the engine runs: no forward pass of our own there.
    measure = feed is not None and cfg.distill.measure and not _zero3(trainer.args)
    if measure and resume is None:
        _write_distill(trainer, out, "before")
    if resume is not None:  # the start was read before the first step: its figure is in the resumed state
        trainer.args.eval_on_start = False
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    _keep_start(cfg, trainer)
    # With the stopping rule the model now is the best evaluation's, already measured.
    if trainer.eval_dataset is not None and not cfg.stopping.enabled and \
            not _evaluated_at(trainer, trainer.state.global_step):
        trainer.evaluate()
    if measure:
        _write_distill(trainer, out, "after")
    _save_final(cfg, trainer, adapter_dir, mix)
    if trainer.is_world_process_zero():
        from judgeforge.train.curves import write_curves

        write_curves(trainer.state.log_history, out)
    return adapter_dir


def make_trainer(cfg: TrainConfig, callbacks: Sequence = ()):
    """(trainer, data mix, sample log, dropped overlong ids) for `cfg`, ready to train."""
    from judgeforge.io import mark_out

    mix, train_ds, eval_ds = load_datasets(cfg)
    out = Path(cfg.out)
    if os.environ.get("RANK", "0") == "0":  # the run's own files are rank 0's to write
        mark_out(out, "train")  # its checkpoints go there: a rerun (train) knows the run for its own
    args = sft_args(cfg, out / "checkpoints", has_eval=len(eval_ds) > 0)  # before the model: ZeRO-3 init
    trainer, sample_log, dropped = build_trainer(cfg, args, train_ds, eval_ds, out, callbacks,
                                                 pair_records=distill_records(cfg, mix), records=mix.train,
                                                 validation=mix.validation)
    return trainer, mix, sample_log, dropped


def distill_records(cfg: TrainConfig, mix) -> list[dict] | None:
    """The records distillation pairs come from: `distill.sources`' train splits, else the training mix."""
    if not cfg.distill.enabled:
        return None
    if not cfg.distill.sources:
        return mix.train
    from judgeforge.train.data import load_build

    return [r for path in cfg.distill.sources for r in load_build(path).train]


def _distill_provenance(cfg: TrainConfig, feed) -> dict:
    """What data.json says of the distillation pairs: where they came from and their counts."""
    from judgeforge.io import sha256_file

    sources = [{"path": p, "manifest_sha256": sha256_file(Path(p) / "manifest.json")}
               for p in cfg.distill.sources]
    return {"sources": sources or "training mix", **feed.counts}


def _write_distill(trainer, out: Path, when: str) -> None:
    """The pairs' ordering by E[score] (`before` or `after` training) into distill.json."""
    import json

    from judgeforge.train.distill import score_pairs

    metrics = score_pairs(trainer.model, trainer.feed, context=trainer.compute_loss_context_manager())
    if not trainer.is_world_process_zero():
        return
    path = out / "distill.json"
    prev = json.loads(path.read_text()) if path.is_file() else {}
    atomic_write_json(path, {**prev, "counts": trainer.feed.counts, when: metrics})
    log.info("distill %s training: %s", when, metrics)


def _validation_record(trainer) -> dict:
    """What data.json says of the stopping rule's validation items (with `stopping.enabled`)."""
    v = getattr(trainer, "validation", None)
    return {"validation": v.counts} if v is not None else {}


def _start_contends(cfg: TrainConfig) -> bool:
    return cfg.stopping.enabled and cfg.stopping.start and bool(cfg.model.adapter)


def _keep_start(cfg: TrainConfig, trainer) -> None:
    """With the start as a contender (`stopping.start`) that no evaluation beat: its weights are the run's."""
    from judgeforge.train.stopping import restore_start, start_kept

    if _start_contends(cfg) and start_kept(trainer.state):
        restore_start(trainer.model, adapter_path(cfg.model.adapter))


def stopping_summary(state) -> dict:
    """The rule's evaluations from a TrainerState, and which one the saved adapter is."""
    from judgeforge.train.stopping import METRIC, start_kept

    evals = [{"step": e["step"], METRIC: e[f"eval_{METRIC}"], "eval_loss": e.get("eval_loss")}
             for e in state.log_history if f"eval_{METRIC}" in e]
    return {"metric": METRIC, "best": state.best_metric, "best_checkpoint": state.best_model_checkpoint,
            "best_step": state.best_global_step, "evaluations": evals,
            "kept": "start" if start_kept(state) else "best",
            "stopped_at": state.global_step, "planned_steps": state.max_steps}


def _check_run_dir(cfg: TrainConfig, out: Path) -> bool:
    """True if `out` holds a run of this same config; error if it holds a different one."""
    prev = out / "config.yaml"
    if not prev.is_file():
        return False
    if cfg.checkpoint.resume == "never":
        raise ConfigError(f"{out} already holds a run and checkpoint.resume=never: use a new out, or --overwrite "
                          "to discard that run")
    old = load_config(TrainConfig, prev)
    changed = [f for f in RESULT_FIELDS if getattr(old, f) != getattr(cfg, f)]
    if changed:
        raise ConfigError(f"{out} holds a run with different {', '.join(changed)}; resuming it would "
                          "mix two trainings: use a new out, or --overwrite to discard that run")
    return True


def _setup_tracking(cfg: TrainConfig, out: Path) -> None:
    if cfg.tracking.wandb and not os.environ.get("WANDB_API_KEY"):
        os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_PROJECT", cfg.tracking.project)
    os.environ.setdefault("WANDB_DIR", str(out))
    if cfg.tracking.group:  # the HF wandb callback takes the group from the environment only
        os.environ["WANDB_RUN_GROUP"] = cfg.tracking.group
    out.mkdir(parents=True, exist_ok=True)


def load_datasets(cfg: TrainConfig):
    """(mix, train, eval): the replay mix as prompt-completion datasets."""
    from datasets import Dataset

    from judgeforge.train.data import load_build, mix_builds, to_prompt_completion

    builds = [load_build(s.path) for s in cfg.data.sources]
    mix = mix_builds(builds, [s.fraction for s in cfg.data.sources], [s.limit for s in cfg.data.sources],
                     cfg.data.seed, cfg.data.eval_limit, [s.offset for s in cfg.data.sources])
    if cfg.stopping.enabled:  # the evaluations then read the validation items, never the test split
        from judgeforge.train.data import carve_validation

        mix.train, mix.validation = carve_validation(mix.train, cfg.stopping.validation, cfg.data.seed)
        mix.eval = mix.validation
    if cfg.data.length_decorrelate is not None:
        from judgeforge.train.data import decorrelate_length

        mix.train, dropped, by_scale = decorrelate_length(mix.train, cfg.data.length_decorrelate)
        mix.length = {"limit": cfg.data.length_decorrelate, "dropped": len(dropped), "by_scale": by_scale}
        log.info("data.length_decorrelate: %d records dropped, %s", len(dropped), by_scale)
        stuck = [k for k, v in by_scale.items() if v["r_after"] is not None and v["r_after"] > cfg.data.length_decorrelate]
        if stuck:
            log.warning("data.length_decorrelate: no single item's removal lowers r on scale %s any further", stuck)

    def as_ds(recs):
        rows = [to_prompt_completion(r, cfg.data.target) for r in recs]
        return Dataset.from_list(rows) if rows else Dataset.from_dict({"id": [], "prompt": [], "completion": []})

    return mix, as_ds(mix.train), as_ds(mix.eval)


def sft_args(cfg: TrainConfig, ckpt_dir: Path, has_eval: bool):
    """TRL SFTConfig from the recipe's settings."""
    from trl import SFTConfig

    from judgeforge.train.distributed import prepare_deepspeed_cpu

    prepare_deepspeed_cpu()  # before the TrainingArguments start DeepSpeed's communication
    o, t = cfg.optim, cfg.tracking
    wandb = t.wandb and os.environ.get("WANDB_MODE") != "disabled"
    kwargs = dict(
        # Without a GPU, bf16 means CPU autocast (chosen by `precision: auto` only on CPUs with native
        # bf16, bench/RESULTS.md), which transformers only enables when told it runs on the CPU; and
        # several processes form a CPU (gloo) group only when told so (train/distributed.py).
        use_cpu=hw.accelerator() is None and (cfg.precision == "bf16" or cfg.num_gpus > 1),
        output_dir=str(ckpt_dir), seed=cfg.seed, bf16=cfg.precision == "bf16", fp16=cfg.precision == "fp16",
        learning_rate=o.lr, lr_scheduler_type=o.scheduler, warmup_steps=o.warmup_ratio,
        weight_decay=o.weight_decay, num_train_epochs=o.epochs, max_steps=o.max_steps,
        per_device_train_batch_size=o.micro_batch_size, per_device_eval_batch_size=o.micro_batch_size,
        gradient_accumulation_steps=cfg.grad_accumulation(), max_grad_norm=o.max_grad_norm,
        optim=o.optimizer, gradient_checkpointing=o.gradient_checkpointing,
        save_strategy="steps", save_steps=cfg.checkpoint.every, save_total_limit=cfg.checkpoint.keep,
        eval_strategy="steps" if has_eval else "no",
        eval_steps=t.eval_steps or cfg.checkpoint.every, logging_steps=t.logging_steps,
        report_to=["wandb"] if wandb else "none", run_name=t.run_name or Path(cfg.out).name,
        # Loss on the completion (the judgment) only; length is enforced by dropping, not truncating.
        completion_only_loss=True, max_length=None, remove_unused_columns=False,
        dataloader_num_workers=0,
    )
    return SFTConfig(**{**kwargs, **_stopping_args(cfg)})


def _stopping_args(cfg: TrainConfig) -> dict:
    """SFTConfig settings of the stopping rule: evaluate and checkpoint together, keep the best."""
    if not cfg.stopping.enabled:
        return {}
    from judgeforge.train.stopping import METRIC

    every = cfg.stopping.every
    strategy = "steps" if every else "epoch"
    return {"eval_strategy": strategy, "save_strategy": strategy, "eval_steps": every,
            "save_steps": every or cfg.checkpoint.every, "load_best_model_at_end": True,
            "eval_on_start": _start_contends(cfg),
            "metric_for_best_model": METRIC, "greater_is_better": True}


def resolve_continue(cfg: TrainConfig) -> TrainConfig:
    """`continue_from` decided: the adapter and the next window of each build it took one of."""
    if not cfg.continue_from:
        return cfg
    import yaml

    from judgeforge.judge.adapters import read_meta
    from judgeforge.train import rounds

    adapter = adapter_path(cfg.continue_from)
    rounds.check_out(cfg.out, adapter)
    saved = adapter / "config.yaml"
    meta = read_meta(adapter)
    windows = rounds.windows_of(meta, yaml.safe_load(saved.read_text()) if saved.is_file() else None)
    cfg, used = rounds.continue_round(cfg, cfg.continue_from, windows, meta)
    for w in used:
        rounds.check_build(w, cfg.continue_from)
        log.info("continuing %s on %s from position %d", cfg.continue_from, w.path, w.end)
    return cfg


def resolve_precision(cfg: TrainConfig) -> TrainConfig:
    """`precision: auto` decided for this machine (judgeforge.hardware), logged once."""
    if cfg.precision != "auto":
        return cfg
    gpu = hw.accelerator() is not None
    choice = hw.train_precision("auto", hw.cpu_info(), gpu=gpu, capability=hw.gpu_capability() if gpu else None)
    return cfg.model_copy(update={"precision": hw.log_choice("training precision", choice)})


def _load_model(cfg: TrainConfig):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from judgeforge.judge.weights import resolve_model

    name = resolve_model(cfg.model.name)
    dtype = cfg.model.dtype if cfg.model.dtype != "auto" else \
        ("bfloat16" if cfg.precision == "bf16" else "float32")
    tok = AutoTokenizer.from_pretrained(name, trust_remote_code=cfg.model.trust_remote_code)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(
        name, dtype=getattr(torch, dtype), attn_implementation=cfg.model.attn_implementation,
        trust_remote_code=cfg.model.trust_remote_code)
    return model, tok


def adapter_path(path: str) -> Path:
    """A previous run dir or its adapter dir -> the adapter dir (template version checked)."""
    from judgeforge.judge.adapters import TemplateVersionMismatch, check_template_version

    p = Path(path)
    p = p / "adapter" if (p / "adapter" / "adapter_config.json").is_file() else p
    if not (p / "adapter_config.json").is_file():
        raise ConfigError(f"model.adapter {path} holds no LoRA adapter (adapter_config.json)")
    try:
        check_template_version(p, required=False)
    except TemplateVersionMismatch as e:
        raise ConfigError(str(e)) from None
    return p


def _peft_model(cfg: TrainConfig, model, args):
    """A new LoRA adapter on `model`, or the adapter it continues from, loaded trainable."""
    from peft import PeftModel, get_peft_model
    from transformers import set_seed

    from judgeforge.train.lora import lora_config

    set_seed(cfg.seed)  # the adapter's random init is part of the run

    wanted = lora_config(cfg, model)
    # Under ZeRO-3 the adapter must keep the base dtype (as TRL does; trl#6089).
    autocast = not _zero3(args)
    if not cfg.model.adapter:
        return get_peft_model(model, wanted, autocast_adapter_dtype=autocast)
    peft = PeftModel.from_pretrained(model, adapter_path(cfg.model.adapter), is_trainable=True,
                                     autocast_adapter_dtype=autocast)
    have = peft.peft_config["default"]
    if (have.r, have.lora_alpha) != (wanted.r, wanted.lora_alpha) or \
            (have.rank_pattern or {}, have.alpha_pattern or {}) != (wanted.rank_pattern, wanted.alpha_pattern) or \
            set(have.target_modules or []) != set(wanted.target_modules or []) or \
            set(have.target_parameters or []) != set(wanted.target_parameters or []):
        raise ConfigError(f"model.adapter has r={have.r} alpha={have.lora_alpha} targets="
                          f"{sorted(have.target_modules or [])}+{have.target_parameters or []}; "
                          "lora.* must match it to continue training")
    return peft


def build_trainer(cfg: TrainConfig, args, train_ds, eval_ds, out: Path, callbacks: Sequence = (),
                  loaded: tuple | None = None, pair_records: list[dict] | None = None,
                  records: list[dict] | None = None, validation: list[dict] | None = None):
    """The SFTTrainer, its datasets cut to `max_length`, the sample log and the dropped ids.

    `loaded`: an already built (model, tokenizer) instead of loading `cfg.model.name`;
    `pair_records`: where `distill` takes its preference pairs from (with `distill.enabled`);
    `records`: the training records (their teacher distributions, with `data.target: distribution`);
    `validation`: the records the stopping rule reads (with `stopping.enabled`)."""
    from judgeforge.train.checkpoints import CompletionMarker, SampleLog
    from judgeforge.train.lora import apply_dropout
    from judgeforge.train.trainer import JudgeSFTTrainer

    model, tok = loaded or _load_model(cfg)
    train_ds, eval_ds = _fit_roles(train_ds, tok), _fit_roles(eval_ds, tok)
    cls, extra = JudgeSFTTrainer, {}
    if cfg.distill.enabled:
        from judgeforge.train.distill import DistillSFTTrainer, prepare_pairs

        cls, extra = DistillSFTTrainer, {"feed": prepare_pairs(cfg, tok, pair_records or [])}
    elif cfg.data.target == "distribution":
        from judgeforge.train.soft import SoftScoreTrainer, prepare_soft_targets

        cls, extra = SoftScoreTrainer, {"soft": prepare_soft_targets(tok, records or [])}
    trainer = cls(_peft_model(cfg, model, args), args=args, train_dataset=train_ds,
                  eval_dataset=eval_ds if len(eval_ds) else None, processing_class=tok,
                  callbacks=[CompletionMarker(), *callbacks], **extra)
    apply_dropout(trainer.model, cfg.lora.dropout)
    dropped = {}
    trainer.train_dataset, dropped["train"] = _fit(trainer.train_dataset, cfg.data.max_length, keep_id=True)
    if trainer.eval_dataset is not None:
        trainer.eval_dataset, dropped["eval"] = _fit(trainer.eval_dataset, cfg.data.max_length, keep_id=False)
    if len(trainer.train_dataset) == 0:
        raise ConfigError(f"every training example is longer than data.max_length={cfg.data.max_length}")
    sample_log = SampleLog(out / "samples.jsonl", trainer.data_collator)
    trainer.data_collator = sample_log.collate
    if cfg.data.target == "distribution":  # outermost: the sample log strips the ids it reads
        trainer.data_collator = trainer.soft.collate(trainer.data_collator)
    trainer.add_callback(sample_log)
    if cfg.stopping.enabled:
        _add_stopping(cfg, trainer, tok, validation or [])
    return trainer, sample_log, dropped


def _fit_roles(ds, tok):
    """`ds` with its prompts as the tokenizer's chat template takes them (judge/chat.py): a template
    without a system role (Mistral's, Prometheus-2's) trains on the text serving renders."""
    from datasets import Dataset

    from judgeforge.judge.chat import fold_system, takes_system

    if len(ds) == 0 or takes_system(tok):
        return ds
    return Dataset.from_list([{**ex, "prompt": fold_system(ex["prompt"])} for ex in ds])


def _add_stopping(cfg: TrainConfig, trainer, tok, validation: list[dict]) -> None:
    from transformers import EarlyStoppingCallback

    from judgeforge.train.stopping import prepare_validation

    if _zero3(trainer.args):  # the rule's forward passes are our own, outside the engine's partitioning
        raise ConfigError("stopping needs whole weights for its validation read; it does not run under ZeRO-3")
    trainer.validation = prepare_validation(tok, validation, cfg.data.max_length)
    trainer.add_callback(EarlyStoppingCallback(cfg.stopping.patience, cfg.stopping.min_delta))
    if _start_contends(cfg):
        from judgeforge.train.stopping import start_contender

        trainer.add_callback(start_contender())  # after early stopping: see start_contender
    log.info("stopping: %s", trainer.validation.counts)


def _fit(ds, max_length: int, keep_id: bool):
    """Drop examples longer than `max_length` (a truncated judgment loses its score)."""
    over = [i for i, ids in zip(ds["id"], ds["input_ids"]) if len(ids) > max_length]
    if over:
        bad = set(over)
        ds = ds.filter(lambda e: e["id"] not in bad)
    return ds.select_columns(["id", "input_ids", "labels"] if keep_id else ["input_ids", "labels"]), over


def _resume_point(cfg: TrainConfig, ckpt_root: Path, sample_log, main: bool = True) -> Path | None:
    """The last complete checkpoint (None: start afresh). `main`: this is rank 0, the one that
    removes torn checkpoints and trims the sample log; the other ranks wait for it, then agree."""
    from judgeforge.train.checkpoints import discard_incomplete, last_complete
    from judgeforge.train.distributed import barrier

    if cfg.checkpoint.resume == "never":
        if main:
            sample_log.truncate(0)
        return None
    if main:
        for p in discard_incomplete(ckpt_root):
            log.info("removed incomplete checkpoint %s", p)
    barrier()
    ckpt = last_complete(ckpt_root)
    if main:
        sample_log.truncate(int(ckpt.name.split("-")[1]) if ckpt else 0)
        if ckpt:
            log.info("resuming from %s", ckpt)
    return ckpt


def _log_padding(cfg: TrainConfig, n: int) -> None:
    from judgeforge.train.distributed import padded_examples

    extra = padded_examples(n, cfg.optim.micro_batch_size, cfg.num_gpus)
    if extra:
        log.warning("%d training examples do not fill whole micro-batches of %d on %d processes: accelerate "
                    "repeats the first %d of each epoch's order (listed in samples.jsonl); a multiple of %d "
                    "examples avoids it", n, cfg.optim.micro_batch_size, cfg.num_gpus, extra,
                    cfg.optim.micro_batch_size * cfg.num_gpus)


def _zero3(args) -> bool:
    ds = getattr(args, "deepspeed_plugin", None)
    return ds is not None and ds.zero_stage == 3


def _evaluated_at(trainer, step: int) -> bool:
    return any("eval_loss" in e and e.get("step") == step for e in trainer.state.log_history)


def _save_final(cfg: TrainConfig, trainer, adapter_dir: Path, mix) -> None:
    """Adapter + tokenizer + config + judgeforge.json, moved into place only when complete."""
    from judgeforge.judge.adapters import META_FILE, new_meta
    from judgeforge.judge.weights import resolve_model
    from judgeforge.train.lora import lora_summary
    from judgeforge.train.rounds import window_record

    staging = adapter_dir.with_name(".adapter.staging")
    trainer.save_model(str(staging))  # every rank takes part (ZeRO-3 gathers the weights)
    if not trainer.is_world_process_zero():
        return
    save_resolved(cfg, staging)
    summary = lora_summary(trainer.model)
    atomic_write_json(staging / META_FILE, new_meta(
        base_model=cfg.model.name,
        base_model_resolved=resolve_model(cfg.model.name) if cfg.model.name == "default" else cfg.model.name,
        continued_from=str(adapter_path(cfg.model.adapter)) if cfg.model.adapter else None,
        data=[{**{k: s[k] for k in ("path", "manifest_sha256", "train_sha256", "used")},
               "window": window_record(s["offset"], s["limit"], cfg.data.seed)} for s in mix.sources],
        global_step=trainer.state.global_step, lora_dropout=cfg.lora.dropout, target=cfg.data.target,
        lora_modules=len(summary["modules"]), lora_parameters=summary["parameters"],
        trainable_params=summary["trainable_params"],
        **({"stopping": stopping_summary(trainer.state)} if cfg.stopping.enabled else {})))
    if adapter_dir.exists():
        shutil.rmtree(adapter_dir)
    os.replace(staging, adapter_dir)


def read_samples(out: str | Path) -> list[dict]:
    """The per-step example ids a run recorded (samples.jsonl)."""
    return read_jsonl(Path(out) / "samples.jsonl")


if __name__ == "__main__":
    from judgeforge.logs import configure_logging

    configure_logging()
    sys.exit(main())
