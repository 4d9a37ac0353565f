"""The cascade's configs (typed; CLI > YAML > defaults): `judgeforge cascade calibrate`'s, and the
runtime's `cascade:` and `store:` sections that `judgeforge serve` embeds (serve/config.py).

The guarantee's parameters (alpha, delta, tolerance, min_n) have one owner, eval's
`GuaranteeConfig`: the calibration takes them, the eval report's what-if takes them, and a server
serves with the threshold and guarantee a calibration.json certified under them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from judgeforge import paths
from judgeforge.config import Config
from judgeforge.eval.config import EvalSampling, GuaranteeConfig, JudgeConfig
from judgeforge.judge.config import Count, EngineConfig, SamplingConfig, plain_base_url
from judgeforge.scale.config import RuntimeConfig


class CalibrateConfig(GuaranteeConfig):
    """Calibrate the escalation threshold of a local judge against GPT-4's cached judgments."""

    alpha: float = Field(0.1, gt=0, lt=1)
    """As in GuaranteeConfig, tighter by default: a server escalates by this certificate, while the
    eval report's what-if keeps the looser 0.3 that small sets can meet."""
    predictions: str | None = None
    """An eval report's predictions.jsonl (or the report directory): calibrate from the samples the
    judge already drew, no engine needed. Leave empty to run `judge` over `data` instead."""
    set: str | None = None
    """Set in `predictions` to calibrate on (an absolute set with GPT-4 references); default: the
    only one there."""
    judge: str | JudgeConfig | None = None
    """A judge name in `predictions` (default: the only one there), or, without `predictions`, a
    judge to run (name, adapter, engine as in `judgeforge eval`) over the held-out split of `data`."""
    data: str = paths.DATA
    """Data build whose held-out split (test.jsonl) the configured judge grades (engine path)."""
    max_items: int | None = None
    """Engine path: seeded subset of held-out items (None: all)."""
    n: int | None = Field(None, ge=1)
    """Samples per item: the engine path draws n (default 3); the predictions path votes over the
    first n recorded samples (default all)."""
    sampling: EvalSampling = EvalSampling()
    """Engine path: how the judge samples (as in `judgeforge eval`)."""
    seed: int = 42
    """Engine path: seed of the held-out subset."""
    runtime: RuntimeConfig = RuntimeConfig()
    """Engine path: where the judge grades, as `judgeforge eval`'s `runtime:` (local, or Ray replicas
    with the finished batches journaled in `out` until the calibration is written)."""
    confidence: Literal["vote_prob", "agreement"] = "vote_prob"
    """vote_prob: the judge's probability of its voted score (the completed distributions averaged
    over samples, Grade.confidence; exists at N=1); agreement: the share of samples voting for it."""
    out: str = paths.CASCADE
    """Output directory: calibration.json, risk_coverage.png, config.yaml. It must not exist, be empty, or hold
    an earlier calibration, which only `--overwrite` replaces."""
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


class TeacherSampling(SamplingConfig):
    """The teacher's sampling, with its own defaults: a partial `cascade.teacher.sampling` section (or a
    key=value override) keeps them instead of falling back to the local judge's n=5."""

    n: Count = 1
    """Samples per escalation: one paid call."""
    max_tokens: Count = 1024
    """Feedback and `[RESULT] N` of a GPT-4-class teacher."""


class TeacherConfig(Config):
    """The teacher the cascade escalates to: an OpenAI-compatible chat endpoint, asked through the
    judge core's `openai` engine with the same Prometheus prompt and score parsing as the local judge."""

    base_url: str = "http://127.0.0.1:8001/v1"
    """Endpoint base URL (e.g. https://api.openai.com/v1, or a `vllm serve` of a bigger judge). Credentials
    (`user:password@`) or a query in it are refused: they would be logged and answered with every error."""
    model: str = "gpt-4"
    """Model name sent to the endpoint."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the teacher endpoint's key (not ours)."""
    max_model_len: int = 8192
    """Context length reported for the teacher (the endpoint itself refuses longer prompts)."""
    max_retries: int = Field(2, ge=0)
    """Retries of a call that got no answer (unreachable, timed out, 408/409/429/5xx), with backoff,
    before a failure. Each retry is a call of its own, counted by the budget like any other: the
    SDK's own retries are off for the teacher, since the budget could not see them."""
    sampling: TeacherSampling = TeacherSampling()
    """How the teacher samples. One sample (one paid call) per escalation; an answer without a parseable
    `[RESULT] N` is re-asked at most `max_resample_rounds` times (not at temperature 0: a greedy
    re-ask repeats the same text), then the item counts as a teacher failure."""

    @field_validator("base_url")
    @classmethod
    def _plain_base_url(cls, v: str) -> str:
        return plain_base_url(v)  # refused at load, as a config error, before anything logs the URL

    def engine(self, timeout_s: float, max_concurrency: int) -> EngineConfig:
        """The judge core's engine config for this teacher (chat API: the endpoint renders the prompt)."""
        return EngineConfig(kind="openai", api="chat", base_url=self.base_url, model=self.model,
                            api_key_env=self.api_key_env, max_model_len=self.max_model_len,
                            timeout_s=timeout_s, max_concurrency=max_concurrency, completion="off")


class CascadeConfig(Config):
    """Trust or escalate: answer locally when the local judge's confidence clears a threshold,
    otherwise ask the teacher."""

    calibration: str | None = None
    """calibration.json written by `judgeforge cascade calibrate`: its certified threshold, and its
    guarantee (alpha, delta, n) reported with every answer. Give this or `threshold`."""
    threshold: float | None = Field(None, ge=0.0)
    """A fixed threshold instead of a calibration: escalate when confidence < threshold (0 never
    escalates a scored item, above 1 escalates every item)."""
    teacher: TeacherConfig = TeacherConfig()
    """The teacher endpoint."""
    max_concurrency: int = Field(8, ge=1)
    """Teacher calls in flight at once (more escalations wait for a slot)."""
    budget_per_minute: int | None = Field(None, ge=0)
    """Paid teacher calls allowed per rolling minute (None: unlimited); beyond it `on_teacher_failure`
    applies. A call is paid when it was answered (an unparseable answer and its re-asks included) or
    cut off by a timeout (the endpoint may have generated it); a call refused with an error status or
    unreachable is given back. Every call is also counted by outcome (`teacher_calls` in the answer,
    `judgeforge_teacher_calls_total` in /metrics), failures apart."""
    budget_total: int | None = Field(None, ge=0)
    """Paid teacher calls allowed over the server's lifetime (None: unlimited), counted as above."""
    timeout_s: float = Field(60.0, gt=0)
    """Longest wait for the teacher's judgment of one item, re-asks and retries included (less when
    `deadline_s` leaves less)."""
    deadline_s: float | None = Field(None, gt=0)
    """End-to-end limit of one request, from its arrival: local grading, the wait for a teacher slot,
    the teacher's calls and the store write. The teacher gets what is left of it (at most `timeout_s`,
    minus a margin for the answer): a teacher cut short is a teacher failure (`on_teacher_failure`).
    A request not answered by the deadline gets 504. None: only `server.request_timeout_s` bounds it."""
    on_teacher_failure: Literal["local", "503"] = "local"
    """Teacher error, timeout, unparseable answer or exhausted budget: "local" answers with the local
    judgment, flagged (`teacher_error` or `budget_exhausted`); "503" refuses the request."""

    @field_validator("on_teacher_failure", mode="before")
    @classmethod
    def _status_as_text(cls, v):
        return str(v) if v == 503 else v  # YAML and key=value overrides read a bare 503 as a number

    @model_validator(mode="after")
    def _one_threshold(self):
        if (self.calibration is None) == (self.threshold is None):
            raise ValueError("set exactly one of cascade.calibration (a calibration.json) and "
                             "cascade.threshold")
        return self


class StoreConfig(Config):
    """The judgment store (data/store.py): every graded item, durable before its answer returns."""

    path: str = paths.STORE
    """SQLite file of this replica's store (created if missing)."""
    cache: bool = False
    """Answer an identical request (same content and template; sampling options aside) from the store
    when it was graded by the same local model and adapter (`"cached": true` in the answer)."""
    replica: str = "local"
    """This replica's id, recorded with every row (a fleet's stores are read together)."""
