"""`judgeforge serve` / `judgeforge grade` config: the judge core's engine and sampling sections
(judgeforge.judge.config) plus the HTTP server's own."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from judgeforge.config import Config
from judgeforge.judge.config import EngineConfig, SamplingConfig, plain_base_url


class ServerConfig(Config):
    host: str = "127.0.0.1"
    """Bind address."""
    port: int = 8000
    """Bind port."""
    auth: Literal["key", "none"] = "key"
    """With "key", every path but /health needs `Authorization: Bearer <key>`, and the server
    refuses to start without a non-empty key (env JUDGEFORGE_API_KEY over `api_key`). "none": no
    auth at all, only behind an authenticating proxy; warned about at start, shown in /health."""
    api_key: str | None = None
    """Bearer key required on every path but /health; env JUDGEFORGE_API_KEY overrides it."""
    max_body_bytes: int = Field(4 * 2**20, ge=1)
    """Largest request body read (413 beyond it, before anything is parsed; bodies must be UTF-8
    JSON sent as `content-type: application/json`). 4 MiB holds a batch of 64 items of 64 KB; a
    hostile body of that size costs about a second of parsing, so raise it only as far as needed."""
    max_in_flight: int = 64
    """Gradings admitted at once (queued or running); above it requests get 429 at once."""
    retry_after_s: int = 2
    """`Retry-After` sent with 429."""
    request_timeout_s: float = 300.0
    """A grading still running after this gets 504 (and its engine work is aborted)."""
    max_batch: int = 64
    """Most items in one /v1/grade/batch or /v1/compare/batch request."""
    max_input_chars: int = 200_000
    """Any text field longer than this is refused before tokenising (422)."""
    drain_timeout_s: float = 60.0
    """On SIGTERM: how long to let accepted requests finish."""
    health_poll_s: float = 1.0
    """How often the engine's liveness is checked (503 within about this)."""
    max_header_bytes: int = Field(32 * 1024, ge=1024)
    """Largest request head (request line and headers together) read; beyond it 431, before auth. Enforced
    where the bytes are buffered (uvicorn's h11 parser, serve/headers.py), so a header that never ends
    costs at most this much memory per connection."""
    max_headers: int = Field(100, ge=8)
    """Most header fields in one request (431 beyond, before auth)."""
    header_timeout_s: float = Field(10.0, gt=0)
    """A request head not complete this long after its first byte (or after the connection opened) is
    answered 408 and its connection closed: a client trickling headers holds no connection for long."""




class TeacherSampling(SamplingConfig):
    """The teacher's sampling, with its own defaults: a partial `cascade.teacher.sampling` section (or a
    key=value override) keeps them instead of falling back to the local judge's n=5."""

    n: int = Field(1, ge=1)
    """Samples per escalation: one paid call."""
    max_tokens: int = Field(1024, ge=1)
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
    """The judgment store (cascade/store.py): every graded item, durable before its answer returns."""

    path: str = "runs/store/judgments.sqlite"
    """SQLite file of this replica's store (created if missing)."""
    cache: bool = False
    """Answer an identical request (same content and template; sampling options aside) from the store
    when it was graded by the same local model and adapter (`"cached": true` in the answer)."""
    replica: str = "local"
    """This replica's id, recorded with every row (a fleet's stores are read together)."""


class ServeConfig(Config):
    engine: EngineConfig = EngineConfig()
    """The local judge's engine."""
    sampling: SamplingConfig = SamplingConfig()
    """How the local judge samples and scores."""
    server: ServerConfig = ServerConfig()
    """The HTTP server."""
    cascade: CascadeConfig | None = None
    """Escalate low-confidence items to a teacher (absent: every answer is the local judge's)."""
    store: StoreConfig | None = None
    """Keep every graded item in a judgment store (absent: nothing is stored)."""
