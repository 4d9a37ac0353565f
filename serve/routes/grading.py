"""POST /v1/grade, /v1/grade/batch, /v1/compare, /v1/compare/batch (all behind the API key).

Each one checks every item before admission (`AppState.check`), then runs the
judge under `AppState.guarded_run` (429/503/504/499) and times it per route. Every item goes
through `AppState.grader` (cascade/runtime.py): the store's cache, the teacher on low confidence,
the durable store write; a pass-through without `cascade:`/`store:`. Cascade fields an answer
does not set are left out of it (`response_model_exclude_unset`).
"""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Depends, Request

from judgeforge.cascade.runtime import Answered
from judgeforge.serve.schemas import (CompareBatchRequest, CompareRequest, CompareResponse,
                                      GradeBatchRequest, GradeRequest, GradeResponse, rubric_name)
from judgeforge.serve.state import AppState, State, require_key

router = APIRouter(dependencies=[Depends(require_key)])


def _count(state: AppState, out: dict) -> None:
    """The judge metrics of one answer, the same for grade and compare (samples, parse failures, nulls)."""
    metrics = state.metrics
    metrics.samples.inc(out.get("n_sampled", 0))
    metrics.answers.labels(out.get("engine") or "none").inc()
    metrics.parse_failures.inc(sum(out.get("failures", {}).values()))
    if not out.get("n_valid"):  # no sample voted (a compare's tie has votes: not a null result)
        metrics.null_scores.inc()


def _answer(state: AppState, req, ans: Answered) -> dict:
    out = {**ans.out, **ans.extras}
    _count(state, out)
    if not req.include_samples:
        out["samples"] = None
    return out


def grade_out(state: AppState, req: GradeRequest, ans: Answered, t0: float) -> GradeResponse:
    return GradeResponse(**_answer(state, req, ans), model=ans.model, adapter=req.adapter,
                         rubric=rubric_name(req.rubric), scale=req.scale or [1, 5],
                         latency_s=time.monotonic() - t0)


def compare_out(state: AppState, req: CompareRequest, ans: Answered, t0: float) -> CompareResponse:
    return CompareResponse(**_answer(state, req, ans), model=ans.model, adapter=req.adapter,
                           latency_s=time.monotonic() - t0)


async def _run(state: AppState, request: Request, reqs: list, loc: str | None, route: str,
               judge_fn, out_fn) -> list:
    """Check every request (before admission), run them under admission (through the cascade and
    store when configured), shape the answers."""
    grader = state.grader
    deadline = grader.deadline(asyncio.get_running_loop().time())  # from arrival: checks count too
    checked = state.check(reqs, loc)
    t0 = time.monotonic()
    work = lambda: grader.within(deadline, asyncio.gather(  # noqa: E731
        *(grader.answer(it, rs, judge_fn, r.adapter, deadline) for (it, rs), r in zip(checked, reqs))))
    with state.metrics.latency.labels(route).time():
        results = await state.guarded_run(request, len(checked), work)
    return [out_fn(state, r, res, t0) for r, res in zip(reqs, results)]


@router.post("/v1/grade", response_model=GradeResponse, response_model_exclude_unset=True)
async def grade(req: GradeRequest, request: Request, state: State):
    return (await _run(state, request, [req], None, "/v1/grade", state.judge.agrade, grade_out))[0]


@router.post("/v1/grade/batch", response_model_exclude_unset=True)
async def grade_batch(body: GradeBatchRequest, request: Request,
                      state: State) -> dict[str, list[GradeResponse]]:
    return {"results": await _run(state, request, body.items, "items", "/v1/grade/batch",
                                  state.judge.agrade, grade_out)}


@router.post("/v1/compare", response_model=CompareResponse, response_model_exclude_unset=True)
async def compare(req: CompareRequest, request: Request, state: State):
    return (await _run(state, request, [req], None, "/v1/compare", state.judge.acompare, compare_out))[0]


@router.post("/v1/compare/batch", response_model_exclude_unset=True)
async def compare_batch(body: CompareBatchRequest, request: Request,
                        state: State) -> dict[str, list[CompareResponse]]:
    return {"results": await _run(state, request, body.items, "items", "/v1/compare/batch",
                                  state.judge.acompare, compare_out)}
