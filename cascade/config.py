"""`judgeforge cascade calibrate` configuration (one typed config; CLI > YAML > defaults)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from judgeforge.config import Config
from judgeforge.eval.config import JudgeConfig, SamplingConfig


class CalibrateConfig(Config):
    """Calibrate the escalation threshold of a local judge against GPT-4's cached judgments."""

    predictions: str | None = None
    """An eval report's predictions.jsonl (or the report directory): calibrate from the samples the
    judge already drew, no engine needed. Leave empty to run `judge` over `data` instead."""
    set: str | None = None
    """Set in `predictions` to calibrate on (an absolute set with GPT-4 references); default: the
    only one there."""
    judge: str | JudgeConfig | None = None
    """A judge name in `predictions` (default: the only one there), or, without `predictions`, a
    judge to run (name, adapter, engine as in `judgeforge eval`) over the held-out split of `data`."""
    data: str = "runs/demo/data"
    """Data build whose held-out split (test.jsonl) the configured judge grades (engine path)."""
    max_items: int | None = None
    """Engine path: seeded subset of held-out items (None: all)."""
    n: int | None = Field(None, ge=1)
    """Samples per item: the engine path draws n (default 3); the predictions path votes over the
    first n recorded samples (default all)."""
    sampling: SamplingConfig = SamplingConfig()
    """Engine path: how the judge samples (as in `judgeforge eval`)."""
    seed: int = 42
    """Engine path: seed of the held-out subset."""
    alpha: float = Field(0.1, gt=0, lt=1)
    """Tolerated disagreement with GPT-4 on the items answered locally (agreement >= 1 - alpha)."""
    delta: float = Field(0.1, gt=0, lt=1)
    """The guarantee may fail with probability at most delta (over the draw of calibration items)."""
    tolerance: int = Field(0, ge=0)
    """Agreement = the local score within this of GPT-4's (0 exact, 1 within-1)."""
    min_n: int = Field(30, ge=1)
    """Only thresholds with at least this many calibration items at or above them are tested."""
    confidence: Literal["vote_prob", "agreement"] = "vote_prob"
    """vote_prob: the judge's probability of its voted score (the completed distributions averaged
    over samples, Grade.confidence; exists at N=1); agreement: the share of samples voting for it."""
    out: str = "runs/cascade/default"
    """Output directory: calibration.json, risk_coverage.png, config.yaml."""
    plot: bool = True
    """Also draw the risk-coverage curve (matplotlib)."""

    @model_validator(mode="after")
    def _one_source(self):
        runs_judge = isinstance(self.judge, JudgeConfig)
        if self.predictions and runs_judge:
            raise ValueError("give either `predictions` or a `judge:` section to run, not both "
                             "(with predictions, `judge` is a judge name)")
        if not self.predictions and not runs_judge:
            raise ValueError("set `predictions` (an eval report's predictions.jsonl) or configure "
                             "`judge:` with an engine to grade the held-out split of `data`")
        return self
