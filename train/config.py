"""`judgeforge train` configuration (one typed config; CLI > YAML > defaults).

Sections follow the recipe's vocabulary (BiGGen-Bench App. E, Table 15):
`model` (base + optional adapter to continue from), `lora`, `data` (build
directories and the replay mix), `optim`, `checkpoint`, `tracking`; `distill`
adds a pairwise-to-pointwise RankNet objective.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from judgeforge import paths
from judgeforge.config import Config


class ModelConfig(Config):
    """What is trained: a base model and, for a later round, the adapter it continues from."""

    name: str = "default"
    """Base model: `default` (embedded SmolLM2), a local path (also a merged model), or a hub id."""
    adapter: str | None = None
    """Existing LoRA adapter to continue training (a previous run's `adapter/` dir or its run dir)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights dtype when loading; `auto` follows `precision` (bf16 -> bfloat16, else float32)."""
    attn_implementation: str | None = None
    """transformers attention backend (e.g. sdpa, flash_attention_2); None: transformers' default."""
    trust_remote_code: bool = False
    """Allow hub models that ship their own modelling code."""


class LoraSection(Config):
    """PEFT LoRA adapter (the paper: r=256, alpha=512, dropout 0.1)."""

    r: int = Field(16, gt=0)
    """LoRA rank."""
    alpha: int = Field(32, gt=0)
    """LoRA alpha (scaling = alpha / r)."""
    dropout: float = Field(0.05, ge=0.0, lt=1.0)
    """Dropout on the adapter input of module (nn.Linear) targets. Fused-expert parameter targets
    (transformers 5 Mixtral `experts.gate_up_proj`/`down_proj`) take none: PEFT cannot factor it."""
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj"]
    """Names of what to adapt: module suffixes (q_proj, lm_head, ...), parameter suffixes
    (experts.gate_up_proj) or Mixtral's legacy expert names w1/w2/w3, which map onto the fused
    expert parameters (w1+w3 -> gate_up_proj, w2 -> down_proj). Every name must match something."""
    bias: Literal["none", "all", "lora_only"] = "none"
    """Which biases are trained."""




class SourceSection(Config):
    """One data-build directory (from `judgeforge data build`) and how much of it to use."""

    path: str
    """Data-build output directory (holds train.jsonl, test.jsonl, manifest.json)."""
    fraction: float = Field(1.0, gt=0.0, le=1.0)
    """Fraction of its training records to use (seeded draw): 1.0 for this round's new data,
    less for replayed earlier rounds."""
    limit: int | None = None
    """At most this many training records from it (after `fraction`)."""
    offset: int | None = None
    """Continual rounds: take the records at positions [offset, offset + limit) of one seeded
    shuffle of this build (fixed by `data.seed`, not by the round), so round k+1 trains on new
    records only, `offset` being what earlier rounds took. None: the plain seeded draw."""



class DataSection(Config):
    """Training data: one or more builds mixed (the replay mix), assistant-turn loss only."""

    sources: list[SourceSection] = [SourceSection(path=paths.DATA)]
    """Data builds to mix; duplicates across builds (same content hash) are used once."""
    eval_limit: int | None = 16
    """Held-out examples (the builds' test.jsonl) for eval loss; 0 disables eval, None uses all."""
    max_length: int = 4096
    """Max tokens of prompt + target; longer examples are dropped (never truncated, which would
    cut off the score) and listed in data.json."""
    seed: int = 42
    """Seed for the replay draws and the eval subset."""
    length_decorrelate: float | None = None
    """Drop whole graded items from the mix until the Pearson correlation of the teacher's score with
    response length (characters) is at most this, per scale (greedy, deterministic; train.data
    `decorrelate_length`), so the records stop rewarding length as a shortcut. The counts and r before
    and after are in data.json (`length`). None: keep every record."""
    target: Literal["feedback", "score", "distribution"] = "feedback"
    """What the assistant turn trains: `feedback` = GPT-4's feedback then `[RESULT] n` (the
    Prometheus format); `score` = `[RESULT] n` alone, the score straight after the prompt (a
    score-only judge: no rationale written, every target token is the verdict); `distribution` = a
    score-only judge whose target is the teacher's sample distribution over the scale's values (soft
    targets: one example per item of a `sample_policy: distribution` build, cross-entropy over the
    values read exactly as serving reads them; train/soft.py)."""


class OptimSection(Config):
    """Optimisation (HF TrainingArguments under the names of the recipe)."""

    lr: float = 1e-5
    """Peak learning rate."""
    scheduler: str = "linear"
    """LR schedule (transformers SchedulerType: linear, cosine, constant, constant_with_warmup, ...)."""
    warmup_ratio: float = 0.0
    """Fraction of steps for linear warm-up."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    epochs: float = 1.0
    """Training epochs (ignored when max_steps > 0)."""
    max_steps: int = -1
    """Stop after this many optimizer steps (-1: run `epochs`)."""
    batch_size: int = 8
    """Global batch size (examples per optimizer step, summed over devices and accumulation)."""
    micro_batch_size: int = 1
    """Examples per device per forward pass; accumulation = batch_size / (micro_batch_size * devices)."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
    optimizer: str = "adamw_torch"
    """transformers optimizer name (adamw_torch, adamw_torch_fused, paged_adamw_8bit, ...)."""
    gradient_checkpointing: bool = True
    """Recompute activations in backward (needed at 4096 tokens on 8x7B; slower on tiny models)."""


class CheckpointSection(Config):
    """Checkpoints every `every` steps; a rerun of the same command resumes from the last complete one."""

    every: int = Field(100, gt=0)
    """Save a checkpoint every this many optimizer steps."""
    keep: int | None = 2
    """Keep at most this many checkpoints (None: all)."""
    resume: Literal["auto", "never"] = "auto"
    """auto: continue from the newest complete checkpoint in `out`; never: refuse to reuse a run dir."""



class TrackingSection(Config):
    """Experiment tracking."""

    wandb: bool = True
    """Log to Weights & Biases (offline unless WANDB_API_KEY is set; WANDB_MODE=disabled turns it off)."""
    project: str = "judgeforge"
    """wandb project."""
    run_name: str | None = None
    """wandb run name (default: the out dir's name)."""
    group: str | None = None
    """wandb run group (set as WANDB_RUN_GROUP): give a continual round's training and its
    evaluation (eval's `tracking.group`) the same group. None: WANDB_RUN_GROUP if set, else none."""
    logging_steps: int = 1
    """Log the train loss every this many steps (the loss curve's resolution)."""
    eval_steps: int | None = None
    """Evaluate every this many steps (None: at checkpoint steps)."""


class DistillSection(Config):
    """Pairwise-to-pointwise distillation (Instruction Distillation, arXiv 2311.01555; train/ranking.py):
    on pairs of responses to one instruction that GPT-4 compared (relative records), a RankNet loss on
    the judge's own expected absolute scores, E[score] read after the score-only prompt's `[RESULT] `,
    pulls the preferred response's E above the other's. Added to the SFT loss with `weight`."""

    enabled: bool = False
    """Add the distillation loss to every training micro-step."""
    weight: float = Field(1.0, ge=0.0)
    """Its weight: loss = SFT loss + weight x RankNet loss."""
    sources: list[str] = []
    """Data-build directories whose train.jsonl relative records give the pairs (all of them; absolute
    records are skipped). Empty: the relative records of the training mix (`data.sources`)."""
    scale: tuple[int, int] = (1, 5)
    """Score range of the absolute prompt each response is graded with (its values must share their
    first tokens, as 1-5 and 1-10 do: one forward pass reads them)."""
    sigma: float = Field(1.0, gt=0.0)
    """RankNet steepness: P(first better) = sigmoid(sigma x (E_first - E_second))."""
    ties: Literal["skip", "half"] = "skip"
    """Pairs whose judgments are balanced (a split tie, or orders that disagree): skip, or keep with
    target 0.5 (pulls their expected scores together)."""
    max_pairs: int | None = None
    """At most this many pairs (a seeded draw, `seed`); None: all."""
    score_pairs: bool = False
    """Also pair the absolute records of `sources` (or the mix): two responses to one item graded on
    `scale`, P(first better) from GPT-4's scores (data.pairwise.score_pairs). A log of several response
    models' absolute judgments holds their ranking on the very prompt the judge is used with."""
    counterfactuals: int = Field(0, ge=0)
    """Add up to this many counterfactual length pairs of each kind from the absolute records on `scale`
    (data.counterfactual: a response against itself padded with its own repeated half, the original
    preferred; against itself cut in half where GPT-4 scored it in the top half of the scale, the original
    preferred). 0: none."""
    counterfactual_kinds: list[Literal["pad", "truncate", "offtopic"]] = Field(["pad", "truncate"], min_length=1)
    """Which counterfactuals to make: `pad` and `truncate` as above, `offtopic` (the response followed by half
    of another item's response, the original preferred: added length that answers nothing, with no repeated
    half to spot)."""
    cross_item: int = Field(0, ge=0)
    """Also up to this many pairs of graded responses to two *different* items on `scale`, ordered by GPT-4's
    scores (data.pairwise.cross_item_pairs): one absolute scale across items is what Pearson over items
    reads, and logs with one graded response per item (MT-Bench's 1-5) give no `score_pairs`. 0: none."""
    cross_item_gap: float = Field(1.0, gt=0.0)
    """Cross-item pairs only between responses whose mean GPT-4 scores differ by at least this much."""
    length_balance: bool = False
    """Repeat (seeded, with replacement) the pairs on the rarer side of length, preferred-shorter or
    preferred-longer, until both count the same (train/ranking.length_balance): the ranking loss can then
    not be lowered by preferring the longer response. Counted in distill.json (`length_repeats`)."""
    measure: bool = True
    """Score every pair before and after training into distill.json (their ordering by E[score]). Two
    forward passes over all pairs: on 2 CPU cores, 253 FastChat pairs (~1,000 tokens a prompt) took ~35
    minutes a pass, longer than the training round itself; false leaves distill.json without them."""
    batch_pairs: int = Field(2, gt=0)
    """Pairs per micro-step (two score-only forward sequences each), drawn in seeded epochs of the pairs."""

    @model_validator(mode="after")
    def _scale_ok(self):
        if not self.scale[0] < self.scale[1]:
            raise ValueError(f"distill.scale lo must be < hi, got {list(self.scale)}")
        return self


class StoppingSection(Config):
    """The stopping rule for epochs over all records (train/stopping.py): `validation` items of the training
    mix are held out, the judge is evaluated on them the way it is used (score-only E[score] against
    GPT-4's score, Pearson), the best evaluation's adapter is the one saved, and training stops once
    `patience` evaluations in a row bring no gain (HF's early stopping)."""

    enabled: bool = False
    """Hold the validation items out, evaluate on them and stop by the rule. Checkpoints then follow the
    evaluations (`every`), not `checkpoint.every`: the best one must be on disk to be loaded at the end,
    and the evaluations' SFT eval loss is read on the validation items too (not on the builds' test split)."""
    validation: int = Field(64, gt=2)
    """Items held out of training for the rule (every GPT-4 sample of one graded response goes together)."""
    every: int | None = Field(None, gt=0)
    """Evaluate every this many optimizer steps; None: at the end of every epoch."""
    patience: int = Field(1, ge=1)
    """Evaluations in a row without a gain over the best before training stops."""
    min_delta: float = Field(0.0, ge=0.0)
    """A gain counts only above this many Pearson units."""
    start: bool = True
    """Continuing an adapter (`model.adapter`): read it on the validation items before the first step and
    count it as a contender. An evaluation must beat it to be kept, early stopping counts from it, and if
    none beats it the saved adapter is the start's weights (judgeforge.json: `kept: start`): a second pass
    that only hurts costs `every` steps, not the whole run."""


class TrainConfig(Config):
    """`judgeforge train`: LoRA SFT of a judge on data builds, resumable, round after round."""

    out: str = paths.TRAIN
    """Run directory: checkpoints/, adapter/ (final), config.yaml, data.json, loss.json/png. A rerun continues
    the run there; `--overwrite` discards it and starts over. A directory that is not a train run is refused
    untouched, and one `judgeforge train` at a time writes it (a second one stops at once)."""
    model: ModelConfig = ModelConfig()
    """Base model and optional adapter to continue from."""
    lora: LoraSection = LoraSection()
    """LoRA adapter settings."""
    data: DataSection = DataSection()
    """Data builds and the replay mix."""
    optim: OptimSection = OptimSection()
    """Optimisation."""
    checkpoint: CheckpointSection = CheckpointSection()
    """Checkpointing and resume."""
    tracking: TrackingSection = TrackingSection()
    """Logging and wandb."""
    distill: DistillSection = DistillSection()
    """Pairwise-to-pointwise distillation loss (off by default)."""
    stopping: StoppingSection = StoppingSection()
    """The stopping rule for several epochs (off by default: `optim.epochs` run whole)."""
    continue_from: str | None = None
    """A continual round (train/rounds.py): the trained adapter (a run dir or its `adapter/`) to continue
    on the next window of its data. `model.adapter` becomes it, and every `data.sources` entry of a
    build the adapter took a window of (recorded in its judgeforge.json) starts where that window
    ended: `offset` = its end, `limit` kept (unset: the window's size). `judgeforge train --continue
    ADAPTER` sets it; without `--config` the round reuses the adapter's own recipe."""
    precision: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    """Mixed precision. `auto` (judgeforge.hardware): bf16 on GPUs; on a CPU bf16 autocast only
    where the CPU has native bf16 (avx512_bf16/AMX, Arm bf16), else fp32 (emulated bf16 matmuls are
    slower than fp32). The resolved value is what the saved config records."""
    seed: int = 42
    """Seed for model init of the adapter, data order and dropout."""
    num_gpus: int = Field(1, gt=0)
    """Training processes (GPUs, or CPU processes on a machine without one); >1: `judgeforge train`
    starts them with `accelerate launch` and `accelerate_config`. Under an `accelerate launch` of its
    own the launched world size is used instead, and gradient accumulation is divided by it so the
    global batch (`optim.batch_size`) stays the configured one (train/distributed.py)."""
    accelerate_config: str | None = None
    """accelerate launch config used when num_gpus > 1 (relative to cwd, else the checkout). None:
    configs/train/accelerate/zero3.yaml (DeepSpeed ZeRO-3) on GPUs, ddp_cpu.yaml (DDP, gloo) without one."""

    @model_validator(mode="after")
    def _batch_divides(self):
        per_step = self.optim.micro_batch_size * self.num_gpus
        if self.optim.batch_size % per_step:
            raise ValueError(f"optim.batch_size ({self.optim.batch_size}) must be a multiple of "
                             f"micro_batch_size x processes ({self.optim.micro_batch_size} x {self.num_gpus}) "
                             "to keep the global batch on every process count")
        if not self.data.sources:
            raise ValueError("data.sources is empty: give at least one data-build directory")
        if self.distill.enabled and self.data.target == "distribution":
            raise ValueError("distill and data.target=distribution each replace the training loss; use one")
        return self

    def grad_accumulation(self) -> int:
        return self.optim.batch_size // (self.optim.micro_batch_size * self.num_gpus)
