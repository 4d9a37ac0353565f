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


async def _run(state: AppState, request: Request, reqs: list, loc: str | None, route: str,
               judge_fn, out_fn) -> list:
    """Check every request (before admission), run them under admission, shape the answers."""
    checked = state.check(reqs, loc)
    t0 = time.monotonic()
    work = lambda: asyncio.gather(*(judge_fn(it, rs) for it, rs in checked))  # noqa: E731
    with state.metrics.latency.labels(route).time():
        results = await state.guarded_run(request, len(checked), work)
    return [out_fn(state, r, res, t0) for r, res in zip(reqs, results)]


@router.post("/v1/grade", response_model=GradeResponse)
async def grade(req: GradeRequest, request: Request, state: State):
    return (await _run(state, request, [req], None, "/v1/grade", state.judge.agrade, grade_out))[0]


@router.post("/v1/grade/batch")
async def grade_batch(body: GradeBatchRequest, request: Request,
                      state: State) -> dict[str, list[GradeResponse]]:
    return {"results": await _run(state, request, body.items, "items", "/v1/grade/batch",
                                  state.judge.agrade, grade_out)}


@router.post("/v1/compare", response_model=CompareResponse)
async def compare(req: CompareRequest, request: Request, state: State):
    return (await _run(state, request, [req], None, "/v1/compare", state.judge.acompare, compare_out))[0]


@router.post("/v1/compare/batch")
async def compare_batch(body: CompareBatchRequest, request: Request,
                        state: State) -> dict[str, list[CompareResponse]]:
    return {"results": await _run(state, request, body.items, "items", "/v1/compare/batch",
                                  state.judge.acompare, compare_out)}
