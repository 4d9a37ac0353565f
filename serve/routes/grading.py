"""POST /v1/grade, /v1/grade/batch, /v1/compare, /v1/compare/batch (all behind the API key).

Each one checks every item before admission (`AppState.check`), then runs the
judge under `AppState.guarded_run` (429/503/504/499) and times it per route.
"""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Depends, Request

from judgeforge.serve.schemas import (CompareBatchRequest, CompareRequest, CompareResponse,
                                      GradeBatchRequest, GradeRequest, GradeResponse, rubric_name)
from judgeforge.serve.state import AppState, State, require_key

router = APIRouter(dependencies=[Depends(require_key)])


def grade_out(state: AppState, req: GradeRequest, grade, t0: float) -> GradeResponse:
    metrics = state.metrics
    metrics.samples.inc(grade.n_sampled)
    metrics.parse_failures.inc(sum(grade.failures.values()))
    if grade.score is None:
        metrics.null_scores.inc()
    scale = req.scale or [1, 5]
    out = grade.to_dict()
    if not req.include_samples:
        out["samples"] = None
    return GradeResponse(**out, model=state.engine.model_name, adapter=req.adapter,
                         rubric=rubric_name(req.rubric), scale=scale, latency_s=time.monotonic() - t0)


def compare_out(state: AppState, req: CompareRequest, cmp, t0: float) -> CompareResponse:
    out = cmp.to_dict()
    if not req.include_samples:
        out["samples"] = None
    return CompareResponse(**out, model=state.engine.model_name, adapter=req.adapter,
                           latency_s=time.monotonic() - t0)


@router.post("/v1/grade", response_model=GradeResponse)
async def grade(req: GradeRequest, request: Request, state: State):
    judge = state.judge
    [(item, prepared)] = state.check([req], None)
    t0 = time.monotonic()
    with state.metrics.latency.labels("/v1/grade").time():
        g = await state.guarded_run(request, 1, lambda: judge.agrade(item, prepared))
    return grade_out(state, req, g, t0)


@router.post("/v1/grade/batch")
async def grade_batch(body: GradeBatchRequest, request: Request,
                      state: State) -> dict[str, list[GradeResponse]]:
    judge = state.judge
    checked = state.check(body.items, "items")
    t0 = time.monotonic()
    work = lambda: asyncio.gather(*(judge.agrade(it, rs) for it, rs in checked))  # noqa: E731
    with state.metrics.latency.labels("/v1/grade/batch").time():
        grades = await state.guarded_run(request, len(body.items), work)
    return {"results": [grade_out(state, r, g, t0) for r, g in zip(body.items, grades)]}


@router.post("/v1/compare", response_model=CompareResponse)
async def compare(req: CompareRequest, request: Request, state: State):
    judge = state.judge
    [(item, prepared)] = state.check([req], None)
    t0 = time.monotonic()
    with state.metrics.latency.labels("/v1/compare").time():
        c = await state.guarded_run(request, 1, lambda: judge.acompare(item, prepared))
    return compare_out(state, req, c, t0)


@router.post("/v1/compare/batch")
async def compare_batch(body: CompareBatchRequest, request: Request,
                        state: State) -> dict[str, list[CompareResponse]]:
    judge = state.judge
    checked = state.check(body.items, "items")
    t0 = time.monotonic()
    work = lambda: asyncio.gather(*(judge.acompare(it, rs) for it, rs in checked))  # noqa: E731
    with state.metrics.latency.labels("/v1/compare/batch").time():
        cmps = await state.guarded_run(request, len(body.items), work)
    return {"results": [compare_out(state, r, c, t0) for r, c in zip(body.items, cmps)]}
