"""What every route of the grading API shares: one `AppState` per app, on `app.state.shared`.

Routes get it with the `get_state` dependency (`state: State` in a signature). The bearer key
is checked by the app's `RequireKey` middleware on every path but /health (before routing or
reading a body), and again by the `require_key` dependency of the routers, so that a router
mounted elsewhere stays closed too.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
import time
from typing import Annotated, Awaitable, Callable

from fastapi import Depends, HTTPException, Request

from judgeforge.cascade.runtime import DeadlineExceeded, Grader, StoreDown, TeacherUnavailable
from judgeforge.config import ConfigError
from judgeforge.judge.engines import EngineDead, EngineError, JudgeEngine, PromptTooLong, UnknownAdapter
from judgeforge.judge.judge import Judge
from judgeforge.serve.config import ServeConfig
from judgeforge.serve.schemas import FieldError, validate_limits

log = logging.getLogger(__name__)
UNAUTHORIZED = "missing or wrong API key (Authorization: Bearer ...)"


class Metrics:
    """Prometheus metrics in a registry of their own (one per app)."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = r = CollectorRegistry()
        self.requests = Counter("judgeforge_requests", "HTTP requests", ["route", "status"], registry=r)
        self.latency = Histogram("judgeforge_request_latency_seconds", "Grading latency", ["route"],
                                 registry=r, buckets=(.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300))
        self.samples = Counter("judgeforge_samples", "Judge samples drawn (re-samples included)", registry=r)
        self.parse_failures = Counter("judgeforge_parse_failures", "Samples that did not parse", registry=r)
        self.null_scores = Counter("judgeforge_null_results", "Gradings with no parseable sample", registry=r)
        self.in_flight = Gauge("judgeforge_in_flight", "Gradings admitted and not finished", registry=r)
        self.answers = Counter("judgeforge_answers", "Answers by the engine kind that drew their samples "
                               "(transformers while a handoff's vLLM starts, then vllm)", ["engine"],
                               registry=r)
        self.engine_alive = Gauge("judgeforge_engine_alive", "1 while the engine can serve", registry=r)
        self.teacher_calls = Counter("judgeforge_teacher_calls", "Calls to the cascade's teacher by outcome: "
                                     "answered and timeout are paid (counted by the budget), error is not",
                                     ["outcome"], registry=r)


class Admission:
    """Bounded admission: take `k` slots now or refuse (no queueing behind a full server)."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0

    def try_take(self, k: int) -> bool:
        if self.used + k > self.limit:
            return False
        self.used += k
        return True

    def give(self, k: int) -> None:
        self.used -= k


class NoApiKey(ConfigError):
    """`server.auth=key` without a non-empty key: refuse to start rather than serve everyone."""


def api_key(cfg: ServeConfig) -> str | None:
    """Env JUDGEFORGE_API_KEY over `server.api_key`; empty or blank counts as unset (a key of
    spaces is a templating accident, not a secret)."""
    for key in (os.environ.get("JUDGEFORGE_API_KEY"), cfg.server.api_key):
        if key and key.strip():
            return key.strip()
    return None


def required_key(cfg: ServeConfig) -> str | None:
    """The key every request must carry; None only when auth is explicitly off (server.auth=none)."""
    if cfg.server.auth == "none":
        return None
    key = api_key(cfg)
    if key is None:
        raise NoApiKey("no API key: set JUDGEFORGE_API_KEY or server.api_key (or server.auth=none "
                       "to serve with no auth at all, behind an authenticating proxy)")
    return key


def key_matches(header: bytes, key: bytes) -> bool:
    """`Authorization: Bearer <key>` with the scheme case-insensitive (RFC 7235). Digests are
    compared in constant time, so neither the key's content nor its length leaks."""
    scheme, _, token = header.strip().partition(b" ")
    same = hmac.compare_digest(hashlib.sha256(token.strip()).digest(), hashlib.sha256(key).digest())
    return same and scheme.lower() == b"bearer"


class AppState:
    """The engine, its Judge, metrics, admission, the API key, the engine's liveness, and the
    cascade/store `grader`."""

    def __init__(self, cfg: ServeConfig, engine: JudgeEngine, teacher_engine: JudgeEngine | None = None):
        key = required_key(cfg)  # NoApiKey: an embedder cannot get an open server by accident
        if key is None:
            log.warning("AUTH IS OFF (server.auth=none): every route is open to anyone who can "
                        "reach this server")
        self.key = key.encode() if key else None
        self.cfg, self.engine = cfg, engine
        self.judge = Judge(engine, cfg.sampling)
        self.metrics = Metrics()
        self.admission = Admission(cfg.server.max_in_flight)
        self.alive, self.reason = engine.alive, None
        # Cascade and store (cascade/runtime.py); a pass-through when neither section is configured.
        self.grader = Grader(engine.model_name, cfg.cascade, cfg.store, teacher_engine,
                             on_teacher_call=lambda outcome: self.metrics.teacher_calls.labels(outcome).inc())

    # -- auth and liveness -------------------------------------------------

    @property
    def auth(self) -> str:
        return "none" if self.key is None else "key"

    def authorized(self, header: bytes) -> bool:
        """Whether a raw Authorization header value passes (always, with auth off)."""
        return self.key is None or key_matches(header, self.key)

    def require_key(self, request: Request) -> None:
        # Starlette decodes headers as latin-1: encoding back gives the raw bytes sent.
        if not self.authorized(request.headers.get("authorization", "").encode("latin-1")):
            raise HTTPException(401, UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})

    def engine_ok(self) -> bool:
        """Engine liveness (cheap; the watcher also polls it so /metrics and /health follow)."""
        if self.alive and not self.engine.alive:
            self.alive, self.reason = False, "engine is dead"
        return self.alive

    def dead_reason(self) -> str:
        return self.reason or "engine is dead"

    async def watch_engine(self) -> None:
        """Runs for the app's lifetime: notices a dead engine even with no traffic."""
        while True:
            was = self.alive
            alive = self.engine_ok()
            if was and not alive:
                log.error("engine is dead: answering 503")
            self.metrics.engine_alive.set(1 if alive else 0)
            await asyncio.sleep(self.cfg.server.health_poll_s)

    # -- before admission ----------------------------------------------------

    def check(self, reqs: list, loc_prefix: str | None) -> list[tuple]:
        """Config limits, rubric/adapter names and context length, all before admission; each
        request's (item, prepared engine requests): rendered and tokenized here, once."""
        cfg, judge = self.cfg, self.judge
        if not self.engine_ok():
            raise HTTPException(503, self.dead_reason())
        limit = min(cfg.server.max_batch, cfg.server.max_in_flight)  # a bigger batch could never be admitted
        if loc_prefix and len(reqs) > limit:
            raise FieldError([loc_prefix], f"{len(reqs)} items; the limit is {limit}", "too_long")
        out = []
        for i, req in enumerate(reqs):
            loc = [loc_prefix, i] if loc_prefix else []
            validate_limits(req, cfg, loc)
            item = req.item()
            try:
                out.append((item, judge.requests(item)))
            except UnknownAdapter as e:
                raise FieldError(loc + ["adapter"], str(e)) from None
            except PromptTooLong as e:
                raise HTTPException(413, f"{'item ' + str(i) + ': ' if loc_prefix else ''}{e}") from None
        return out

    # -- admitted work -------------------------------------------------------

    async def guarded_run(self, request: Request, n_items: int, work: Callable[[], Awaitable]):
        """Admit, run with timeout, cancel on disconnect or engine death; the engine's and the
        cascade runtime's refusals as status codes."""
        self._admit(n_items)
        task = asyncio.ensure_future(work())
        try:
            return await self._supervise(request, task)
        except StoreDown as e:
            raise HTTPException(503, f"judgment store unavailable: {e.reason}") from None
        except TeacherUnavailable as e:
            raise HTTPException(503, str(e)) from None
        except DeadlineExceeded as e:
            raise HTTPException(504, str(e)) from None
        except EngineDead as e:
            raise HTTPException(503, str(e)) from None
        except PromptTooLong as e:
            raise HTTPException(413, str(e)) from None
        except ValueError as e:  # the engine's own request validation (e.g. vLLM's)
            raise HTTPException(422, [{"loc": ["body"], "msg": str(e), "type": "value_error"}]) from None
        except EngineError as e:
            log.exception("engine error")
            raise HTTPException(502, f"engine error: {e}") from None
        finally:
            if not task.done():
                task.cancel()  # frees the engine work (vLLM aborts the request)
                with contextlib.suppress(BaseException):
                    await task
            self.admission.give(n_items)
            self.metrics.in_flight.dec(n_items)

    def _admit(self, n_items: int) -> None:
        admission = self.admission
        if not admission.try_take(n_items):
            raise HTTPException(429, f"server busy: {admission.used}/{admission.limit} gradings in flight",
                                headers={"Retry-After": str(self.cfg.server.retry_after_s)})
        self.metrics.in_flight.inc(n_items)

    async def _supervise(self, request: Request, task: asyncio.Future):
        """The task's result, unless the engine dies, the deadline passes or the client leaves."""
        server = self.cfg.server
        deadline = time.monotonic() + server.request_timeout_s
        while True:
            done, _ = await asyncio.wait({task}, timeout=min(0.5, server.health_poll_s))
            if done:
                return task.result()
            if not self.engine_ok():
                raise HTTPException(503, self.dead_reason())
            if time.monotonic() > deadline:
                raise HTTPException(504, f"grading exceeded {server.request_timeout_s:g}s")
            if await request.is_disconnected():
                raise HTTPException(499, "client disconnected")


def get_state(request: Request) -> AppState:
    """FastAPI dependency: the app's shared state."""
    return request.app.state.shared


def require_key(request: Request) -> None:
    """FastAPI dependency: 401 unless the bearer key matches (unless auth is off)."""
    get_state(request).require_key(request)


State = Annotated[AppState, Depends(get_state)]
