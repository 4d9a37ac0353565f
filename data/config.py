"""`judgeforge data build` configuration (one typed config; CLI > YAML > defaults).

Relative paths (inputs, eval sets, `out`) are resolved against the current
directory first and, when nothing exists there, against the judgeforge checkout
root, so the shipped configs work from the repository root and from tests.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from judgeforge import paths
from judgeforge.config import Config

FORMATS = ("prometheus", "biggen", "fastchat", "jsonl", "store")
FastChatPrompt = Literal["single-v1", "single-math-v1", "single-v1-multi-turn", "single-math-v1-multi-turn"]


class SourceConfig(Config):
    """One input: a file (JSON list, JSONL, Parquet), a Hugging Face dataset id, or a judgment store
    (`format: store`: the teacher judgments a serving replica kept, data/store.py)."""

    path: str
    """File path or HF dataset id (loaded with `datasets.load_dataset` when no such file exists)."""
    format: Literal["prometheus", "biggen", "fastchat", "jsonl", "store", "alpaca_eval"] = "jsonl"
    """Reader: prometheus | biggen | fastchat | jsonl (generic, see `columns`) | store (a judgment store
    file: one record per teacher judgment, each with the scale of its request)."""
    name: str | None = None
    """Source name in records and counts (default: format:file stem)."""
    scale: tuple[int, int] | None = None
    """Score range [lo, hi] (default: 1-5, FastChat 1-10)."""
    judge_model: str | None = None
    """Judge model name when the records do not say (prometheus: gpt-4)."""
    hf_split: str | None = None
    """HF dataset split to load (default: all splits, concatenated in name order)."""
    hf_config: str | None = None
    """HF dataset configuration name."""
    columns: dict[str, str] = {}
    """jsonl only: canonical field -> column name. Fields: instruction, response, score, feedback
    (required), reference_answer, system_prompt, rubric (dict or criteria string), criteria,
    response_model, judge_model, category, item_id, sample_idx. Pairwise (relative grading) when it maps
    `response_a`: instruction, response_a, response_b, verdict (A|B|tie, 1|2) required; feedback,
    reference_answer, criteria, response_model_a, response_model_b, judge_model, category optional."""
    rubric_preset: str | None = None
    """jsonl, alpaca_eval: a named rubric (judge.prompts.RUBRIC_PRESETS) for records without one (pairwise
    default: helpfulness)."""
    prompt_name: FastChatPrompt | None = None
    """fastchat only: the FastChat judge prompt the logs were graded with (single-v1, single-math-v1 and their
    -multi-turn variants). Default: each record's `judge[1]`, else inferred from its prompt's section markers
    (logs derived from FastChat, e.g. arena-hard, have no `judge` field)."""
    swap: bool = False
    """Pairwise sources (alpaca_eval, jsonl with response_a/response_b columns): also train on every pair in
    the other order, verdict flipped and the rationale's A/B labels exchanged. FastChat pair logs hold both
    orders already."""
    pair_inconsistent: Literal["reject", "keep_first", "keep"] = "reject"
    """FastChat pair logs whose two game orders pick different winners: reject both games (reason
    pair_inconsistent), keep_first (game 1; game 2 rejected) or keep both."""
    ties: Literal["reject", "split"] = "reject"
    """Pairwise sources: a tied judgment has no A/B target. reject: rejected with reason `tie`.
    split: kept as two records of the same order, verdict A and verdict B (`extra.tie: true`), so the
    judge learns P(A) = P(B) for that pair and no position preference; a split tie counts as two
    records read (like `swap`), and `swap` then adds both in the other order too. There is no plain
    `keep`: a relative record's target must be A or B."""

    rescale: tuple[int, int] | None = None
    """Absolute judgments: map every score linearly onto this scale, rounded half up (1-10 -> 1-5 is
    ceil(s/2)), and grade the item on it (the prompt shows the new scale); the teacher's own score and
    scale stay in `extra.original_score` / `original_scale`. A rubric that describes each level of the old
    scale cannot be carried over: such records are rejected (reason `rescale_rubric_levels`).
    null: every record keeps its own scale (a judge trained on both reads each item on its own)."""

    @field_validator("scale", "rescale")
    @classmethod
    def _scale_ok(cls, v):
        if v is not None and not v[0] < v[1]:
            raise ValueError(f"a scale's lo must be < hi, got {list(v)}")
        return v

    @model_validator(mode="after")
    def _columns_ok(self):
        if self.format == "jsonl":
            need = ({"instruction", "response_a", "response_b", "verdict"} if "response_a" in self.columns
                    else {"instruction", "response", "score", "feedback"})
            missing = need - set(self.columns)
            if missing:
                raise ValueError(f"jsonl source {self.path!r} needs columns for {sorted(missing)}")
        if self.prompt_name and self.format != "fastchat":
            raise ValueError(f"prompt_name is a fastchat option; source {self.path!r} is {self.format}")
        pairwise = self.format in ("fastchat", "alpaca_eval") or "response_a" in self.columns
        if self.rescale is not None and self.format == "alpaca_eval":
            raise ValueError(f"rescale maps absolute scores; source {self.path!r} holds pairs")
        if self.ties != "reject" and not pairwise:
            raise ValueError(f"ties is a pairwise option; source {self.path!r} ({self.format}) holds no pairs")
        return self

    def column_warnings(self) -> list[str]:
        """Suspicious `columns`: two text fields read from one column (a copy-paste slip in the mapping
        that still validates, and would teach the judge to grade an echo of the question)."""
        texts = ("instruction", "response", "feedback", "reference_answer")
        by_column: dict[str, list[str]] = {}
        for name in texts:
            if name in self.columns:
                by_column.setdefault(self.columns[name], []).append(name)
        return [f"source {self.display_name()!r}: {' and '.join(names)} read the same column {col!r}"
                for col, names in by_column.items() if len(names) > 1]

    def display_name(self) -> str:
        if self.name:
            return self.name
        if self.format == "store":  # a fleet's stores often share a file name: name them by path
            return "store:" + self.path.rstrip("/").removesuffix(".db").removesuffix(".sqlite")
        stem = self.path.rstrip("/").rsplit("/", 1)[-1]
        for ext in (".jsonl", ".json", ".parquet"):
            stem = stem.removesuffix(ext)
        return f"{self.format}:{stem}"


class EvalSetConfig(Config):
    """An evaluation set whose texts must not leak into training data."""

    path: str
    """File with the evaluation items."""
    format: Literal["prometheus", "jsonl"] = "prometheus"
    """prometheus: texts recovered from every full grading prompt in the record (`instruction`,
    `chosen_instruction`, `rejected_instruction`); jsonl: the string columns in `fields`."""
    fields: list[str] = []
    """jsonl only: columns whose text is checked."""


class SplitConfig(Config):
    """Leak-free train/test split: by response model, optionally by instruction too."""

    test_models: list[str] = []
    """Response models held out for test (exact names)."""
    test_model_fraction: float = Field(0.0, ge=0.0, lt=1.0)
    """If no `test_models`: hold out this fraction of the response models (seeded, at least one when > 0)."""
    test_instruction_fraction: float = Field(0.0, ge=0.0, lt=1.0)
    """Also hold out this fraction of instructions (seeded): train never sees them, and records that
    pair a held-out instruction with a train model are dropped (counted as `dropped_by_split`). With no
    held-out model, the held-out instructions' records are the test split (instruction-only split)."""
    seed: int = 42
    """Seed for the fractional hold-outs."""



class DecontamConfig(Config):
    """Drop or flag training records sharing an n-gram with evaluation sets."""

    eval_sets: list[EvalSetConfig] = []
    """Evaluation sets to protect (none: no decontamination)."""
    ngram: int = 13
    """n-gram length in normalised words (13 as in the benchmark-leakage check)."""
    mode: Literal["drop", "flag"] = "drop"
    """drop: remove contaminated training records; flag: keep them with extra.contaminated=true."""
    fields: list[Literal["instruction", "response", "reference_answer"]] = ["instruction", "response"]
    """Which record texts are checked."""


class BuildConfig(Config):
    """`judgeforge data build`: judgment logs -> validated, leak-free SFT records."""

    sources: list[SourceConfig] = []
    """Inputs; `--input FORMAT:PATH` on the command line replaces them. `judgeforge data build` with neither
    inputs nor `--config` builds the built-in default config (configs/data/default.yaml)."""
    out: str = paths.DATA
    """Output directory (written atomically: train/test/rejects.jsonl, manifest.json, config.yaml). It must not
    exist, be empty, or hold an earlier data build, which only `--overwrite` replaces; anything else there is
    refused untouched."""
    sample_policy: Literal["all", "majority", "consistent", "distribution"] = "all"
    """Several judgments of one item: all (one record each), majority (one record with the strict
    majority score, else drop the item), consistent (keep the item only if scores agree within 1),
    distribution (one record per item, the first sample, with every sample's score in
    `extra.score_samples`: the soft target of `judgeforge train` with `data.target: distribution`)."""
    split: SplitConfig = SplitConfig()
    """Train/test split."""
    decontamination: DecontamConfig = DecontamConfig()
    """n-gram decontamination of the training split."""
    check_feedback_score: bool = True
    """Reject records whose feedback states a score different from the record's score."""
    dedup: bool = True
    """Reject exact duplicates (same content hash) after the first."""
    progress: bool = True
    """Show progress while reading: a bar on a terminal, log lines otherwise (false: nothing)."""
    allow_empty: bool = False
    """Write a build that keeps no records (or writes none to train/test) instead of failing: an empty
    build is almost always the wrong reader or column mapping, so it is an error unless asked for."""
    since: str | None = None
    """A previous build's manifest.json (or its directory): judgment-store inputs read only the rows
    stored after what that build read from the same store (matched by the store's id), so a continual
    round trains on the new teacher judgments only. Other inputs are read in full."""
    max_tokens: int | None = Field(32768, ge=1)
    """Reject (reason `too_long`) a record whose messages (the judge's system prompt, the user prompt and
    the target) are longer than this many tokens: training would truncate it (a judgment that loses its
    score) or drop it. Set it to the training `max_length` (e.g. 2048); null: no limit. Counted with
    `tokenizer`, or without one as characters / 4 (an estimate: ~4.5 characters a token on English
    prose, far fewer on code, maths and non-Latin scripts; data/length.py)."""
    tokenizer: str | None = None
    """The tokenizer that counts `max_tokens` (a model as named elsewhere: `default`, `default-judge`, a hub
    id or a local path): the chat-templated messages, counted as training counts them. Only records near
    the limit are tokenized. null: characters / 4."""
    workers: int = 0
    """Processes that parse large JSONL inputs (>= 8 MiB) in parallel; 0: one per available core,
    1: in this process. Outputs are byte-identical whatever the number."""
