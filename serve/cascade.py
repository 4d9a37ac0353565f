"""Cascade serving (Trust or Escalate) and the judgment store behind the grading routes.

Per graded item (`Grader.answer`):
1. with `store.cache`, an identical request already stored, graded by the same local model and
   adapter, and complete under the current threshold (answered locally, or holding the teacher's
   judgment) is answered from the store (`"cached": true`);
2. the local judge grades it; with a `cascade:` section, an item whose confidence is below the
   threshold (`cascade.calibration.escalate`) goes to the teacher: the judge core's `Judge` over the
   `openai` engine, same prompt and parsing, bounded re-asks, under a concurrency limit, a budget
   and a timeout. The teacher's score and feedback answer the item only when it wrote a parseable
   score; otherwise (error, timeout, garbage, no budget) `on_teacher_failure` decides: the local
   judgment flagged (`teacher_error` / `budget_exhausted`) or 503. A score is never invented;
3. with a `store:` section the item (local result, and the teacher's when it answered) is written
   durably (fsync, in a worker thread) BEFORE the answer is returned.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import HTTPException

from judgeforge.cascade.calibration import escalate
from judgeforge.cascade.store import JudgmentStore, LocalResult, Record, Request, Stored, TeacherResult
from judgeforge.config import ConfigError
from judgeforge.judge.judge import Judge
from judgeforge.judge.items import GradeItem
from judgeforge.serve.config import CascadeConfig, StoreConfig

log = logging.getLogger(__name__)


@dataclass
class Answered:
    """One item's answer before it is shaped into a response: the result fields (`Grade.to_dict()`
    or `Comparison.to_dict()` layout), the model that answered, and the cascade/store fields."""

    out: dict
    model: str
    extras: dict = field(default_factory=dict)


def _verdict(out: dict):
    """The answer's value: a score (absolute) or a winner (relative)."""
    return out["score"] if "score" in out else out.get("winner")


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


class Budget:
    """Escalations allowed per rolling minute and in total (None: unlimited)."""

    def __init__(self, per_minute: int | None, total: int | None, clock=time.monotonic):
        self.per_minute, self.total, self.clock = per_minute, total, clock
        self.used = 0
        self._recent: collections.deque[float] = collections.deque()

    def take(self) -> bool:
        """Spend one escalation if the budget allows it."""
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


class TeacherFailure(Exception):
    """No usable teacher judgment: `flag` is the answer field that says why."""

    def __init__(self, flag: str, value):
        super().__init__(f"{flag}: {value}")
        self.flag, self.value = flag, value


class Teacher:
    """The teacher endpoint as a Judge over the `openai` engine (chat API), bounded and timed."""

    def __init__(self, cfg: CascadeConfig, engine=None):
        if engine is None:
            from judgeforge.judge.engines.openai import OpenAIEngine

            engine = OpenAIEngine(cfg.teacher.engine(cfg.timeout_s, cfg.max_concurrency),
                                  max_retries=cfg.teacher.max_retries)
        self.cfg, self.engine = cfg, engine
        self.judge = Judge(engine, cfg.teacher.sampling)
        self.budget = Budget(cfg.budget_per_minute, cfg.budget_total)
        self.slots = asyncio.Semaphore(cfg.max_concurrency)

    @property
    def model(self) -> str:
        return self.engine.model_name

    async def ask(self, item) -> tuple[dict, float]:
        """The teacher's judgment (result dict, latency); raises TeacherFailure."""
        if not self.budget.take():
            raise TeacherFailure("budget_exhausted", True)
        # The client's options (n, adapter, temperature) are for the local judge, not the teacher.
        item = dataclasses.replace(item, options=None)
        t0 = time.monotonic()
        try:
            result = await asyncio.wait_for(self._judge(item), self.cfg.timeout_s)
        except asyncio.TimeoutError:
            raise TeacherFailure("teacher_error", f"no answer within {self.cfg.timeout_s:g}s") from None
        except Exception as e:  # any endpoint failure is the policy's to handle, never a 500
            raise TeacherFailure("teacher_error", f"{type(e).__name__}: {e}"[:500]) from None
        out = result.to_dict()
        if _verdict(out) is None:
            raise TeacherFailure("teacher_error", f"no parseable judgment: {out.get('reason')}"[:500])
        return out, time.monotonic() - t0

    async def _judge(self, item):
        async with self.slots:
            judge = self.judge
            reqs = judge.requests(item)
            return await (judge.agrade(item, reqs) if isinstance(item, GradeItem)
                          else judge.acompare(item, reqs))

    def close(self) -> None:
        self.engine.close()


class Ledger:
    """The judgment store, written from worker threads (each put fsyncs)."""

    def __init__(self, cfg: StoreConfig):
        self.cfg = cfg
        self.store = JudgmentStore(cfg.path)

    async def lookup(self, item) -> Stored | None:
        return await asyncio.to_thread(self.store.get, Request.from_item(item).key())

    async def record(self, item, local: dict, model: str, adapter: str | None, escalated: bool,
                     teacher: TeacherResult | None) -> None:
        rec = Record(Request.from_item(item), LocalResult.from_grade(local, model, adapter),
                     escalated=escalated, teacher=teacher, replica=self.cfg.replica)
        await asyncio.to_thread(self.store.put, rec)

    def close(self) -> None:
        self.store.close()


def _cached_out(stored: Stored, teacher: bool) -> dict:
    """A stored row in the answer layout: the stored value and feedback, no per-sample fields."""
    rec = stored.record
    value = rec.teacher.score if teacher else rec.local.score
    feedback = rec.teacher.feedback if teacher else rec.local.feedback
    dist = {str(value): 1} if teacher else (rec.local.distribution or {})
    common = dict(votes=[], distribution=dist, agreement=None, n_valid=sum(dist.values()),
                  n_unparseable=0, feedback=feedback, reason=None, confidence=rec.local.confidence,
                  samples=None)
    if rec.request.mode == "relative":
        probs = None if teacher else rec.local.probs
        return {**common, "winner": value, "probs": probs, "consistent": None, "swapped_votes": None,
                "n_written": 0, "written_agreement": None}
    return {**common, "score": value, "mean": None, "score_probs": None if teacher else rec.local.probs,
            "expected_score": None, "n_written": 0, "written_agreement": None, "sources": [],
            "n_sampled": 0, "failures": {}}


class Grader:
    """Local judge, optional teacher, optional store: one item's answer (see the module doc)."""

    def __init__(self, local_model: str, cascade: CascadeConfig | None, store: StoreConfig | None,
                 teacher_engine=None):
        self.local_model = local_model
        self.cascade = cascade
        self.threshold, self.guarantee = load_threshold(cascade) if cascade else (None, None)
        self.teacher = Teacher(cascade, teacher_engine) if cascade else None
        self.ledger = Ledger(store) if store else None

    @property
    def active(self) -> bool:
        return self.cascade is not None or self.ledger is not None

    def _decision(self, confidence) -> dict:
        out = {"confidence": confidence, "threshold": self.threshold}
        if self.guarantee is not None:
            out["guarantee"] = self.guarantee
        return out

    async def answer(self, item, reqs, judge_fn, adapter: str | None) -> Answered:
        if self.ledger is not None and self.ledger.cfg.cache:
            hit = await self._from_cache(item, adapter)
            if hit is not None:
                return hit
        local = (await judge_fn(item, reqs)).to_dict()
        answered, escalated, teacher = await self._escalate(item, local)
        if self.ledger is not None:  # durable before the answer leaves
            await self.ledger.record(item, local, self.local_model, adapter, escalated, teacher)
        if isinstance(answered, TeacherFailure):  # policy 503, now that the local grade is kept
            raise HTTPException(503, f"teacher unavailable ({answered}); on_teacher_failure=503")
        return answered

    async def _escalate(self, item, local: dict):
        """(answer or a TeacherFailure to raise, escalated, the teacher's stored result)."""
        model = self.local_model
        if self.cascade is None:
            return Answered(local, model), False, None
        extras = self._decision(local.get("confidence"))
        if not escalate(local.get("confidence"), self.threshold):
            return Answered(local, model, {"judge": "local", **extras}), False, None
        try:
            out, latency = await self.teacher.ask(item)
        except TeacherFailure as e:
            log.warning("escalation failed: %s", e)
            if self.cascade.on_teacher_failure == "503":
                return e, True, None
            return Answered(local, model, {"judge": "local", **extras, e.flag: e.value}), True, None
        result = TeacherResult(self.teacher.model, out.get("feedback"), _verdict(out), latency)
        # The teacher's judgment answers; `confidence` stays the local one the threshold was applied to.
        out = {**out, "confidence": local.get("confidence")}
        return Answered(out, self.teacher.model, {"judge": "teacher", "local_score": _verdict(local),
                                                  **extras}), True, result

    async def _from_cache(self, item, adapter: str | None) -> Answered | None:
        stored = await self.ledger.lookup(item)
        if stored is None:
            return None
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
