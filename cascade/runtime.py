"""The cascade at runtime (Trust or Escalate) and the judgment store, behind the grading routes.

It answers items, not HTTP requests: serve/ validates, admits and shapes the answers, and turns the
refusals raised here into status codes (`StoreDown` and `TeacherUnavailable`: 503,
`DeadlineExceeded`: 504).

Per graded item (`Grader.answer`):
1. with `store.cache`, an identical request already stored, graded by the same local model and
   adapter, and complete under the current threshold (answered locally, or holding the teacher's
   judgment) is answered from the store (`"cached": true`);
2. the local judge grades it; with a `cascade:` section, an item whose confidence is below the
   threshold (`eval.calibration.escalate`) goes to the teacher: the judge core's `Judge` over the
   `openai` engine, same prompt and parsing, bounded re-asks, under a concurrency limit, a budget
   of paid calls (re-asks and retries each one; failures counted apart, `Calls`) and a timeout
   (cut to what the request's `deadline_s` leaves). The teacher's score and feedback answer the
   item only when it wrote a valid judgment: a parseable score whose feedback states no other
   verdict (`judge.parsing.feedback_mismatch`, the data builder's rule, so what is served can be
   trained on); otherwise (error, timeout, garbage, no budget) `on_teacher_failure` decides: the
   local judgment flagged (`teacher_error` / `budget_exhausted`) or a refusal (`TeacherUnavailable`). A
   score is never invented,
   and no teacher error text reaches an answer or a log unscrubbed (judgeforge.redact);
3. with a `store:` section the grading (local result, and the teacher's when it answered) is written
   durably (fsync, in a worker thread) BEFORE the answer is returned, each grading a row of its own. An
   escalated grading is written before the teacher is asked (a failing store is found before the
   teacher is paid) and the teacher's judgment is then added to that row; when that write fails the
   judgment goes to the store's spool (put back at the next start). A store that fails refuses with
   SQLite's reason (`StoreDown`) and reports itself failing for /health (`Ledger`); never a bare error.

With `cascade.deadline_s` all of it runs under one end-to-end deadline (`Grader.within`:
`DeadlineExceeded` past it).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from judgeforge.cascade.config import CascadeConfig, StoreConfig
from judgeforge.config import ConfigError
from judgeforge.data.store import (JudgmentStore, LocalResult, Record, Request, Stored, StoreCorrupt, StoreError,
                                   TeacherResult)
from judgeforge.eval.calibration import escalate
from judgeforge.judge.engines import EngineDead, EngineTimeout
from judgeforge.judge.items import GradeItem
from judgeforge.judge.judge import Judge
from judgeforge.judge.voting import Comparison, Grade, value_of
from judgeforge.redact import summary

log = logging.getLogger(__name__)


@dataclass
class Answered:
    """One item's answer before it is shaped into a response: the result fields (`Grade.to_dict()`
    or `Comparison.to_dict()` layout), the model that answered, and the cascade/store fields."""

    out: dict
    model: str
    extras: dict = field(default_factory=dict)


_verdict = value_of


def load_threshold(cfg: CascadeConfig) -> tuple[float, dict | None]:
    """The threshold, and the guarantee {alpha, delta, n} when it comes from a calibration."""
    if cfg.calibration is None:
        return float(cfg.threshold), None
    try:
        cal = json.loads(Path(cfg.calibration).read_text())["calibration"]
        return float(cal["threshold"]), {k: cal[k] for k in ("alpha", "delta", "n")}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"cascade.calibration {cfg.calibration}: not a calibration.json "
                          f"written by `judgeforge cascade calibrate` ({e!r})") from None


RETRY_STATUS = frozenset({408, 409, 429})
"""Besides 5xx: teacher answers worth a retry (the SDK's own list)."""
RETRY_BACKOFF_S = 0.25
"""Wait before a teacher call's first retry, doubled per retry (within the teacher's time)."""
ANSWER_MARGIN_S = 0.5
"""Of a request's deadline, kept back from the teacher for the local answer and the store write."""
OUTCOMES = ("answered", "timeout", "error")
"""A teacher call's outcome: answered (paid), cut off by a timeout (paid: the endpoint may have
generated it), or refused/unreachable (error: given back to the budget)."""
ERROR_CHARS = 300
"""Longest teacher error relayed in an answer or a log line."""


class Budget:
    """Paid teacher calls allowed per rolling minute and in total (None: unlimited): a unit is taken
    before each call and given back when the call turned out unpaid (see OUTCOMES)."""

    def __init__(self, per_minute: int | None, total: int | None, clock=time.monotonic):
        self.per_minute, self.total, self.clock = per_minute, total, clock
        self.used = 0
        self._recent: collections.deque[float] = collections.deque()

    def take(self) -> bool:
        """Spend one call if the budget allows it."""
        now = self.clock()
        while self._recent and now - self._recent[0] >= 60.0:
            self._recent.popleft()
        if self.total is not None and self.used >= self.total:
            return False
        if self.per_minute is not None and len(self._recent) >= self.per_minute:
            return False
        self.used += 1
        self._recent.append(now)
        return True

    def refund(self) -> None:
        """Give one unit back (the newest: concurrent calls' units are alike within the minute)."""
        self.used -= 1
        if self._recent:
            self._recent.pop()


class TeacherFailure(Exception):
    """No usable teacher judgment: `flag` is the answer field that says why; `calls` the escalation's
    teacher calls by outcome."""

    def __init__(self, flag: str, value, calls: dict | None = None):
        super().__init__(f"{flag}: {value}")
        self.flag, self.value, self.calls = flag, value, calls


def _retryable(e: Exception) -> bool:
    status = getattr(e, "status", None)
    return isinstance(e, (EngineDead, EngineTimeout)) or (status is not None and (
        status >= 500 or status in RETRY_STATUS))


class Calls:
    """One escalation's teacher calls, standing in for the engine under the teacher's Judge: each call
    (first asks, re-asks of unparseable answers, retries) takes a budget unit first, a call that got no
    answer is retried up to `retries` times with backoff, and every call is counted by outcome."""

    def __init__(self, engine, budget: Budget, retries: int, on_call=None):
        self.engine, self.budget, self.retries, self.on_call = engine, budget, retries, on_call
        self.counts = dict.fromkeys(OUTCOMES, 0)

    def __getattr__(self, name):  # model_name, can_complete, ...: the engine's
        return getattr(self.engine, name)

    def prepare(self, req):
        return self.engine.prepare(req)

    async def agenerate(self, req):
        for attempt in range(self.retries + 1):
            samples, error = await self._once(req)
            if error is None:
                return samples
            if attempt == self.retries or not _retryable(error):
                raise error
            await asyncio.sleep(RETRY_BACKOFF_S * 2 ** attempt)

    async def _once(self, req):
        """(samples, None) or (None, the call's error); raises when no budget is left or when cancelled."""
        if not self.budget.take():
            raise TeacherFailure("budget_exhausted", True)
        try:
            samples = await self.engine.agenerate(req)
        except asyncio.CancelledError:  # cut off mid-call (timeout, deadline, client gone): may be paid
            self._count("timeout")
            raise
        except EngineTimeout as e:
            self._count("timeout")
            return None, e
        except Exception as e:  # refused or unreachable: not paid
            self.budget.refund()
            self._count("error")
            return None, e
        self._count("answered")
        return samples, None

    def _count(self, outcome: str) -> None:
        self.counts[outcome] += 1
        if self.on_call is not None:
            self.on_call(outcome)


class Teacher:
    """The teacher endpoint as a strict Judge (the data builder's rule for a valid judgment) over the
    `openai` engine (chat API), bounded, timed and budgeted per call."""

    def __init__(self, cfg: CascadeConfig, engine=None, on_call=None):
        if engine is None:
            from judgeforge.judge.engines.openai import OpenAIEngine

            # SDK retries off: they would be calls the budget cannot see; `Calls` retries instead.
            engine = OpenAIEngine(cfg.teacher.engine(cfg.timeout_s, cfg.max_concurrency), max_retries=0)
        self.cfg, self.engine, self.on_call = cfg, engine, on_call
        self.budget = Budget(cfg.budget_per_minute, cfg.budget_total)
        self.slots = asyncio.Semaphore(cfg.max_concurrency)
        self.secrets = (os.environ.get(cfg.teacher.api_key_env),)
        """Masked in every failure relayed (an endpoint may echo the key)."""

    @property
    def model(self) -> str:
        return self.engine.model_name

    async def ask(self, item, deadline: float | None = None) -> tuple[dict, float, dict]:
        """The teacher's judgment (result dict, latency, calls by outcome) within `timeout_s` and the
        request's `deadline` (event-loop time); raises TeacherFailure."""
        # The client's options (n, adapter, temperature) are for the local judge, not the teacher.
        item = dataclasses.replace(item, options=None)
        calls = Calls(self.engine, self.budget, self.cfg.teacher.max_retries, self.on_call)
        wait = self._wait(deadline, calls)
        t0 = time.monotonic()
        try:
            result = await asyncio.wait_for(self._judge(item, calls), wait)
        except TeacherFailure as e:
            raise TeacherFailure(e.flag, e.value, calls.counts) from None
        except asyncio.TimeoutError:
            raise TeacherFailure("teacher_error", f"no answer within {wait:.3g}s", calls.counts) from None
        except Exception as e:  # any endpoint failure is the policy's to handle, never a 500
            raise self._failure(f"{type(e).__name__}: {e}", calls) from None
        out = result.to_dict()
        if _verdict(out) is None:
            raise self._failure(f"no valid judgment: {out.get('reason')}", calls)
        return out, time.monotonic() - t0, calls.counts

    def _wait(self, deadline: float | None, calls: Calls) -> float:
        """How long the teacher may take: `timeout_s`, or less where the request's deadline leaves less."""
        if deadline is None:
            return self.cfg.timeout_s
        left = deadline - asyncio.get_running_loop().time() - ANSWER_MARGIN_S
        if left <= 0:
            raise TeacherFailure("teacher_error", "no time left before the request's deadline", calls.counts)
        return min(self.cfg.timeout_s, left)

    def _failure(self, text: str, calls: Calls) -> TeacherFailure:
        """A teacher_error whose text is scrubbed and bounded: it reaches answers and logs."""
        return TeacherFailure("teacher_error", summary(text, self.secrets, ERROR_CHARS), calls.counts)

    async def _judge(self, item, calls: Calls):
        async with self.slots:
            judge = Judge(calls, self.cfg.teacher.sampling, strict=True)
            reqs = judge.requests(item)
            return await (judge.agrade(item, reqs) if isinstance(item, GradeItem)
                          else judge.acompare(item, reqs))

    def close(self) -> None:
        self.engine.close()


CACHE_DEPTH = 32
"""Newest gradings of an item the cache looks through for one it may answer from (re-grades pile up
only while the teacher fails)."""


class StoreDown(Exception):
    """The judgment store failed (or is known broken): `reason`, SQLite's words. Nothing is answered
    that could not be kept."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class TeacherUnavailable(Exception):
    """The teacher gave no usable judgment and `on_teacher_failure` is "503": the request is refused
    (its local grade is stored first)."""


class DeadlineExceeded(Exception):
    """A request's gradings passed `cascade.deadline_s` and were cancelled."""


class Ledger:
    """The judgment store, written from worker threads (each put fsyncs), and its health for /health:
    a failed operation marks it failing with the reason until one of its kind succeeds (a failed write
    needs a write); a damaged store stays failing, and every grading is then refused before it is
    graded or paid for."""

    def __init__(self, cfg: StoreConfig):
        self.cfg = cfg
        self.store = JudgmentStore(cfg.path)  # StoreError (corrupt, a copy without its -wal): no start
        self.fault: str | None = None
        self.broken = False
        self._write_fault = False  # the fault came from a write: a read that works does not clear it
        try:
            restored = self.store.replay_spool()
        except BaseException:
            self.store.close()
            raise
        if restored:
            log.warning("put %d spooled teacher judgment(s) back into %s", restored, cfg.path)

    def health(self) -> dict:
        return {"status": "ok"} if self.fault is None else {"status": "failing", "reason": self.fault}

    def refuse_if_broken(self) -> None:
        if self.broken:
            raise StoreDown(self.fault)

    async def _call(self, write: bool, fn, *args):
        """fn(*args) in a worker thread; a StoreError marks the store failing and raises StoreDown."""
        self.refuse_if_broken()
        try:
            out = await asyncio.to_thread(fn, *args)
        except StoreError as e:
            log.error("judgment store failing: %s", e)
            self.fault, self._write_fault = e.reason, write
            self.broken = self.broken or isinstance(e, StoreCorrupt)
            raise StoreDown(e.reason) from None
        if not self.broken and (write or not self._write_fault):
            self.fault = None
        return out

    async def history(self, item) -> list[Stored]:
        return await self._call(False, self.store.history, Request.from_item(item).key(), CACHE_DEPTH)

    async def record(self, item, local: dict, model: str, adapter: str | None, escalated: bool,
                     teacher: TeacherResult | None) -> tuple[int, Record]:
        """Store a grading; (its seq, the record)."""
        rec = Record(Request.from_item(item), LocalResult.from_grade(local, model, adapter),
                     escalated=escalated, teacher=teacher, replica=self.cfg.replica)
        return await self._call(True, self.store.put, rec), rec

    async def add_teacher(self, kept: tuple[int, Record], teacher: TeacherResult) -> None:
        """Add the teacher's judgment to the grading stored first; a failed write spools it (paid for)."""
        seq, rec = kept
        try:
            await self._call(True, self.store.add_teacher, seq, teacher)
        except StoreDown as e:
            where = await self._spool(seq, dataclasses.replace(rec, teacher=teacher))
            raise StoreDown(f"{e.reason}; {where}") from None

    async def _spool(self, seq: int, rec: Record) -> str:
        try:
            await asyncio.to_thread(self.store.spool, seq, rec)
        except OSError as e:
            log.error("teacher judgment of grading seq %d lost: the spool %s failed too (%s)", seq,
                      self.store.spool_path, e)
            return "the teacher's judgment could not be kept"
        log.warning("teacher judgment of grading seq %d spooled to %s", seq, self.store.spool_path)
        return "the teacher's judgment is kept in the spool and stored at the next start"

    def close(self) -> None:
        self.store.close()


def _cached_out(stored: Stored, teacher: bool) -> dict:
    """A stored row as a result (`Grade`/`Comparison.to_dict`): its value, feedback and distribution;
    the samples themselves are not stored."""
    rec = stored.record
    value = rec.teacher.score if teacher else rec.local.score
    feedback = rec.teacher.feedback if teacher else rec.local.feedback
    dist = {str(value): 1} if teacher else (rec.local.distribution or {})
    probs = None if teacher else rec.local.probs
    common = dict(votes=[], agreement=None, n_valid=sum(dist.values()), n_unparseable=0, feedback=feedback,
                  confidence=rec.local.confidence)
    if rec.request.mode == "relative":
        result = Comparison(winner=value, distribution=dist, probs=probs, **common)
    else:
        result = Grade(score=value, mean=None, distribution={int(k): n for k, n in dist.items()},
                       score_probs={int(k): p for k, p in probs.items()} if probs is not None else None,
                       **common)
    return {**result.to_dict(), "samples": None}


class Grader:
    """Local judge, optional teacher, optional store: one item's answer (see the module doc)."""

    def __init__(self, local_model: str, cascade: CascadeConfig | None, store: StoreConfig | None,
                 teacher_engine=None, on_teacher_call=None):
        """`on_teacher_call(outcome)`: called for every teacher call (metrics)."""
        self.local_model = local_model
        self.cascade = cascade
        self.threshold, self.guarantee = load_threshold(cascade) if cascade else (None, None)
        self.teacher = Teacher(cascade, teacher_engine, on_teacher_call) if cascade else None
        self.ledger = Ledger(store) if store else None

    @property
    def active(self) -> bool:
        return self.cascade is not None or self.ledger is not None

    def _decision(self, confidence) -> dict:
        out = {"confidence": confidence, "threshold": self.threshold}
        if self.guarantee is not None:
            out["guarantee"] = self.guarantee
        return out

    def deadline(self, start: float) -> float | None:
        """A request's end-to-end deadline (event-loop time) from its arrival at `start`, if any."""
        limit = self.cascade.deadline_s if self.cascade is not None else None
        return None if limit is None else start + limit

    async def within(self, deadline: float | None, work):
        """Await `work` (a request's gradings); past `deadline`, cancel it: DeadlineExceeded."""
        if deadline is None:
            return await work
        timeout = asyncio.timeout_at(deadline)
        try:
            async with timeout:
                return await work
        except TimeoutError:
            if not timeout.expired():
                raise
            raise DeadlineExceeded(f"grading exceeded cascade.deadline_s={self.cascade.deadline_s:g}s "
                                   "(local grading, the teacher and the store write)") from None

    def store_health(self) -> dict | None:
        """The store's part of /health (None: no store)."""
        return None if self.ledger is None else self.ledger.health()

    async def answer(self, item, reqs, judge_fn, adapter: str | None,
                     deadline: float | None = None) -> Answered:
        """One item's answer; raises StoreDown or TeacherUnavailable when it must be refused."""
        ledger = self.ledger
        if ledger is not None:
            ledger.refuse_if_broken()  # nothing graded (or paid for) that could not be kept
            if ledger.cfg.cache:
                hit = await self._from_cache(item, adapter)
                if hit is not None:
                    return hit
        local = (await judge_fn(item, reqs)).to_dict()
        kept = None
        if ledger is not None and self._escalates(local):  # stored before the teacher is paid
            kept = await ledger.record(item, local, self.local_model, adapter, True, None)
        answered, escalated, teacher = await self._escalate(item, local, deadline)
        if kept is None and ledger is not None:  # durable before the answer leaves
            await ledger.record(item, local, self.local_model, adapter, escalated, teacher)
        elif teacher is not None and ledger is not None:
            await ledger.add_teacher(kept, teacher)
        if isinstance(answered, TeacherFailure):  # policy 503, now that the local grade is kept
            raise TeacherUnavailable(f"teacher unavailable ({answered}); on_teacher_failure=503")
        return answered

    def _escalates(self, local: dict) -> bool:
        """Whether `_escalate` asks the teacher for this local grade."""
        return self.cascade is not None and escalate(local.get("confidence"), self.threshold)

    async def _escalate(self, item, local: dict, deadline: float | None = None):
        """(answer or a TeacherFailure to raise, escalated, the teacher's stored result)."""
        model = self.local_model
        if self.cascade is None:
            return Answered(local, model), False, None
        extras = self._decision(local.get("confidence"))
        if not escalate(local.get("confidence"), self.threshold):
            return Answered(local, model, {"judge": "local", **extras}), False, None
        try:
            out, latency, calls = await self.teacher.ask(item, deadline)
        except TeacherFailure as e:
            log.warning("escalation failed: %s (teacher calls: %s)", e, e.calls)
            if self.cascade.on_teacher_failure == "503":
                return e, True, None
            flagged = {"judge": "local", **extras, e.flag: e.value, "teacher_calls": e.calls}
            return Answered(local, model, flagged), True, None
        result = TeacherResult(self.teacher.model, out.get("feedback"), _verdict(out), latency)
        # The teacher's judgment answers; `confidence` stays the local one the threshold was applied to.
        out = {**out, "confidence": local.get("confidence")}
        return Answered(out, self.teacher.model, {"judge": "teacher", "local_score": _verdict(local),
                                                  **extras, "teacher_calls": calls}), True, result

    async def _from_cache(self, item, adapter: str | None) -> Answered | None:
        """The newest stored grading of the item this judge may answer from (every grading is a row: a
        re-grade after a teacher failure must not hide an older grading that holds the teacher's)."""
        for stored in await self.ledger.history(item):
            hit = self._cached(stored, adapter)
            if hit is not None:
                return hit
        return None

    def _cached(self, stored: Stored, adapter: str | None) -> Answered | None:
        loc = stored.record.local
        if loc.model != self.local_model or loc.adapter != adapter:
            return None  # graded by another judge: not this judge's answer
        # Without a cascade the server answers as its local judge, even where a teacher judgment is stored.
        teacher = stored.record.teacher is not None and self.cascade is not None
        if self.cascade is not None and not teacher and escalate(loc.confidence, self.threshold):
            return None  # the current threshold wants the teacher, and the store has no teacher judgment
        extras = {"cached": True}
        if self.cascade is not None:
            extras.update(judge="teacher" if teacher else "local", **self._decision(loc.confidence))
            if teacher:
                extras["local_score"] = loc.score
        model = stored.record.teacher.model if teacher else loc.model
        return Answered(_cached_out(stored, teacher), model, extras)

    def close(self) -> None:
        if self.teacher is not None:
            self.teacher.close()
        if self.ledger is not None:
            self.ledger.close()
