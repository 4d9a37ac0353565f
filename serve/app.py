"""The grading API (FastAPI): `judgeforge serve --config configs/serve/default.yaml [--host H] [--port P]`.

Routes: POST /v1/grade, /v1/grade/batch, /v1/compare, /v1/compare/batch;
GET /v1/models, /metrics (Prometheus), /health (the only open route).

Failure behaviour (each one tested in tests/serve/):
- auth: `Authorization: Bearer <key>` when a key is set (env JUDGEFORGE_API_KEY
  over `server.api_key`), compared in constant time -> 401 otherwise;
- bad fields -> 422 naming the field (n above `sampling.max_n` included);
- prompt + max_tokens beyond the model context -> 413, counted with the
  tokenizer before anything is queued (never truncated);
- more than `server.max_in_flight` gradings admitted -> 429 + Retry-After at once;
- past `server.request_timeout_s` -> 504; a client that disconnects has its
  engine work cancelled (vLLM aborts the request);
- engine dead -> /health and every grading 503 within `health_poll_s`;
- SIGTERM -> uvicorn stops accepting and drains accepted requests
  (`drain_timeout_s`), then the engine is shut down.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import time
from typing import Awaitable, Callable

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from judgeforge.serve.config import ServeConfig
from judgeforge.serve.engines import EngineDead, EngineError, JudgeEngine, PromptTooLong, UnknownAdapter
from judgeforge.serve.judge import Judge
from judgeforge.serve.schemas import (CompareBatchRequest, CompareRequest, CompareResponse, FieldError,
                                      GradeBatchRequest, GradeRequest, GradeResponse, apply_limits_to_openapi,
                                      rubric_name,
                                      validate_limits)

log = logging.getLogger("judgeforge.serve")


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
        self.engine_alive = Gauge("judgeforge_engine_alive", "1 while the engine can serve", registry=r)


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


class CountRequests:
    """Pure ASGI middleware counting requests by route and status. (Starlette's
    BaseHTTPMiddleware would hide client disconnects from the endpoints.)"""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = {"code": 500}

        async def send_counted(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            self.metrics.requests.labels(scope["path"], str(status["code"])).inc()


def api_key(cfg: ServeConfig) -> str | None:
    return os.environ.get("JUDGEFORGE_API_KEY") or cfg.server.api_key or None


def create_app(cfg: ServeConfig, engine: JudgeEngine) -> FastAPI:
    """The app around a built engine (the app closes it at shutdown)."""
    judge = Judge(engine, cfg.sampling)
    metrics = Metrics()
    admission = Admission(cfg.server.max_in_flight)
    key = api_key(cfg)
    state = {"alive": engine.alive, "reason": None}

    async def watch_engine():
        while True:
            was = state["alive"]
            alive = engine_ok()
            if was and not alive:
                log.error("engine is dead: answering 503")
            metrics.engine_alive.set(1 if alive else 0)
            await asyncio.sleep(cfg.server.health_poll_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        watcher = asyncio.create_task(watch_engine())
        yield
        watcher.cancel()
        await asyncio.to_thread(engine.close)

    app = FastAPI(title="judgeforge grading API", version="1", lifespan=lifespan,
                  description=__doc__.split("\n\n", 1)[1])

    def require_key(request: Request) -> None:
        if key is None:
            return
        got = request.headers.get("authorization", "")
        if not hmac.compare_digest(got.encode(), f"Bearer {key}".encode()):
            raise HTTPException(401, "missing or wrong API key (Authorization: Bearer ...)",
                                headers={"WWW-Authenticate": "Bearer"})

    guarded = [Depends(require_key)]

    def openapi() -> dict:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            spec = get_openapi(title=app.title, version=app.version, description=app.description,
                               routes=app.routes)
            app.openapi_schema = apply_limits_to_openapi(spec, cfg)
        return app.openapi_schema

    app.openapi = openapi

    def engine_ok() -> bool:
        """Engine liveness (cheap; the watcher also polls it so /metrics and /health follow)."""
        if state["alive"] and not engine.alive:
            state["alive"], state["reason"] = False, "engine is dead"
        return state["alive"]

    @app.exception_handler(FieldError)
    async def _field_error(request: Request, exc: FieldError):
        return JSONResponse({"detail": exc.detail()}, status_code=422)

    app.add_middleware(CountRequests, metrics=metrics)

    def check(reqs: list, loc_prefix: str | None) -> None:
        """Config limits, rubric/adapter names and context length: all before admission."""
        if not engine_ok():
            raise HTTPException(503, state["reason"] or "engine is dead")
        limit = min(cfg.server.max_batch, cfg.server.max_in_flight)  # a bigger batch could never be admitted
        if loc_prefix and len(reqs) > limit:
            raise FieldError([loc_prefix], f"{len(reqs)} items; the limit is {limit}", "too_long")
        for i, req in enumerate(reqs):
            loc = [loc_prefix, i] if loc_prefix else []
            validate_limits(req, cfg, loc)
            item = req.item()
            for swapped in ((False, True) if getattr(item, "both_orders", False) else (False,)):
                msgs = item.messages(swapped) if hasattr(item, "both_orders") else item.messages()
                try:
                    engine.check_request(judge.request(msgs, item.options))
                except UnknownAdapter as e:
                    raise FieldError(loc + ["adapter"], str(e)) from None
                except PromptTooLong as e:
                    raise HTTPException(413, f"{'item ' + str(i) + ': ' if loc_prefix else ''}{e}") from None

    async def guarded_run(request: Request, n_items: int, work: Callable[[], Awaitable]):
        """Admit, run with timeout, cancel on disconnect or engine death."""
        if not admission.try_take(n_items):
            raise HTTPException(429, f"server busy: {admission.used}/{admission.limit} gradings in flight",
                                headers={"Retry-After": str(cfg.server.retry_after_s)})
        metrics.in_flight.inc(n_items)
        task = asyncio.ensure_future(work())
        deadline = time.monotonic() + cfg.server.request_timeout_s
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=min(0.5, cfg.server.health_poll_s))
                if done:
                    return task.result()
                if not engine_ok():
                    raise HTTPException(503, state["reason"] or "engine is dead")
                if time.monotonic() > deadline:
                    raise HTTPException(504, f"grading exceeded {cfg.server.request_timeout_s:g}s")
                if await request.is_disconnected():
                    raise HTTPException(499, "client disconnected")
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
            admission.give(n_items)
            metrics.in_flight.dec(n_items)

    def grade_out(req: GradeRequest, grade, t0: float) -> GradeResponse:
        metrics.samples.inc(grade.n_sampled)
        metrics.parse_failures.inc(sum(grade.failures.values()))
        if grade.score is None:
            metrics.null_scores.inc()
        scale = req.scale or [1, 5]
        out = grade.to_dict()
        if not req.include_samples:
            out["samples"] = None
        return GradeResponse(**out, model=engine.model_name, adapter=req.adapter,
                             rubric=rubric_name(req.rubric), scale=scale, latency_s=time.monotonic() - t0)

    def compare_out(req: CompareRequest, cmp, t0: float) -> CompareResponse:
        return CompareResponse(**cmp.to_dict(), model=engine.model_name, adapter=req.adapter,
                               latency_s=time.monotonic() - t0)

    @app.post("/v1/grade", response_model=GradeResponse, dependencies=guarded)
    async def grade(req: GradeRequest, request: Request):
        check([req], None)
        t0 = time.monotonic()
        with metrics.latency.labels("/v1/grade").time():
            g = await guarded_run(request, 1, lambda: judge.agrade(req.item()))
        return grade_out(req, g, t0)

    @app.post("/v1/grade/batch", dependencies=guarded)
    async def grade_batch(body: GradeBatchRequest, request: Request) -> dict[str, list[GradeResponse]]:
        check(body.items, "items")
        t0 = time.monotonic()
        work = lambda: asyncio.gather(*(judge.agrade(r.item()) for r in body.items))  # noqa: E731
        with metrics.latency.labels("/v1/grade/batch").time():
            grades = await guarded_run(request, len(body.items), work)
        return {"results": [grade_out(r, g, t0) for r, g in zip(body.items, grades)]}

    @app.post("/v1/compare", response_model=CompareResponse, dependencies=guarded)
    async def compare(req: CompareRequest, request: Request):
        check([req], None)
        t0 = time.monotonic()
        with metrics.latency.labels("/v1/compare").time():
            c = await guarded_run(request, 1, lambda: judge.acompare(req.item()))
        return compare_out(req, c, t0)

    @app.post("/v1/compare/batch", dependencies=guarded)
    async def compare_batch(body: CompareBatchRequest, request: Request) -> dict[str, list[CompareResponse]]:
        check(body.items, "items")
        t0 = time.monotonic()
        work = lambda: asyncio.gather(*(judge.acompare(r.item()) for r in body.items))  # noqa: E731
        with metrics.latency.labels("/v1/compare/batch").time():
            cmps = await guarded_run(request, len(body.items), work)
        return {"results": [compare_out(r, c, t0) for r, c in zip(body.items, cmps)]}

    @app.get("/v1/models", dependencies=guarded)
    async def models() -> dict:
        data = [{"id": engine.model_name, "object": "model", "type": "base", "engine": engine.kind}]
        data += [{"id": a, "object": "model", "type": "adapter", "parent": engine.model_name}
                 for a in engine.adapters()]
        return {"object": "list", "data": data}

    @app.get("/health")
    async def health():
        alive = engine_ok()
        body = {"status": "ok" if alive else "dead", "engine": engine.kind, "model": engine.model_name,
                "in_flight": admission.used, "max_in_flight": admission.limit,
                "engine_unfinished": engine.num_unfinished() if alive else None}
        if not alive:
            body["reason"] = state["reason"] or "engine is dead"
        return JSONResponse(body, status_code=200 if alive else 503)

    @app.get("/metrics", dependencies=guarded)
    async def prometheus():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def main(argv: list[str] | None = None) -> int:
    """`judgeforge serve`: build the engine, then serve the API until SIGTERM/Ctrl-C."""
    import uvicorn

    from judgeforge.config import command_parser, dump_config, load_config
    from judgeforge.serve.engines import build_engine

    p = command_parser("judgeforge serve", "Serve the judge over HTTP (grading with self-consistency).")
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="bind port (default 8000)")
    args = p.parse_args(argv)
    cfg = load_config(ServeConfig, args.config, args.overrides,
                      extra={"server.host": args.host, "server.port": args.port})
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.info("resolved config:\n%s", dump_config(cfg).replace(cfg.server.api_key or "\0", "***"))
    try:
        engine = build_engine(cfg)
    except EngineError as e:  # bad adapter, template mismatch: a clear message, not a traceback
        log.error("cannot start the engine: %s", e)
        return 2
    app = create_app(cfg, engine)
    uvicorn.run(app, host=cfg.server.host, port=cfg.server.port,
                timeout_graceful_shutdown=int(cfg.server.drain_timeout_s), log_level="info")
    return 0
