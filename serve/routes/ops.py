"""GET /v1/models, /health (open: load balancers poll it; says whether auth is off and how the judgment
store is: 503 while the engine is dead or the store fails) and /metrics (Prometheus, one series per
route template)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response

from judgeforge.serve.state import State, require_key

router = APIRouter()
guarded = [Depends(require_key)]


@router.get("/v1/models", dependencies=guarded)
async def models(state: State) -> dict:
    engine = state.engine
    data = [{"id": engine.model_name, "object": "model", "type": "base", "engine": engine.kind}]
    data += [{"id": a, "object": "model", "type": "adapter", "parent": engine.model_name}
             for a in engine.adapters()]
    return {"object": "list", "data": data}


@router.get("/health")
async def health(state: State):
    engine, admission = state.engine, state.admission
    alive = state.engine_ok()
    body = {"status": "ok" if alive else "dead", "auth": state.auth, "engine": engine.kind,
            "model": engine.model_name,
            "in_flight": admission.used, "max_in_flight": admission.limit,
            "engine_unfinished": engine.num_unfinished() if alive else None}
    handoff = getattr(engine, "handoff", None)
    if handoff is not None:  # answering on the warm-start engine while the configured one starts
        body["handoff"] = handoff()
    store = state.grader.store_health()  # from the store's last operations: polling costs no I/O
    if store is not None:
        body["store"] = store
    if not alive:
        body["reason"] = state.dead_reason()
    elif store is not None and store["status"] != "ok":  # gradings fail (503): take this replica out
        body["status"], body["reason"] = "store_failing", f"judgment store: {store['reason']}"
    return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)


@router.get("/metrics", dependencies=guarded)
async def prometheus(state: State):
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
