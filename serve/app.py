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
import functools
import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from judgeforge.serve.config import ServeConfig
from judgeforge.judge.engines import EngineError, JudgeEngine
from judgeforge.serve.routes import ROUTERS
from judgeforge.serve.schemas import FieldError, apply_limits_to_openapi
from judgeforge.serve.state import AppState, Metrics

log = logging.getLogger("judgeforge.serve")


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


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI):
    """Watch the engine while serving; close it once uvicorn has drained."""
    shared: AppState = app.state.shared
    watcher = asyncio.create_task(shared.watch_engine())
    yield
    watcher.cancel()
    await asyncio.to_thread(shared.engine.close)


def openapi(app: FastAPI, cfg: ServeConfig) -> dict:
    """The spec, with this server's configured limits written in (built once)."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        spec = get_openapi(title=app.title, version=app.version, description=app.description,
                           routes=app.routes)
        app.openapi_schema = apply_limits_to_openapi(spec, cfg)
    return app.openapi_schema


async def field_error(request: Request, exc: FieldError):
    return JSONResponse({"detail": exc.detail()}, status_code=422)


def create_app(cfg: ServeConfig, engine: JudgeEngine) -> FastAPI:
    """The app around a built engine (the app closes it at shutdown).

    The endpoints live in `judgeforge.serve.routes`; what they share (engine,
    Judge, metrics, admission, key, liveness) in `judgeforge.serve.state`.
    """
    app = FastAPI(title="judgeforge grading API", version="1", lifespan=lifespan,
                  description=__doc__.split("\n\n", 1)[1])
    app.state.shared = shared = AppState(cfg, engine)
    app.openapi = functools.partial(openapi, app, cfg)
    app.add_exception_handler(FieldError, field_error)
    app.add_middleware(CountRequests, metrics=shared.metrics)
    for router in ROUTERS:
        app.include_router(router)
    return app


def main(argv: list[str] | None = None) -> int:
    """`judgeforge serve`: build the engine, then serve the API until SIGTERM/Ctrl-C."""
    import uvicorn

    from judgeforge.cli import configure_logging
    from judgeforge.config import command_parser, dump_config, load_config
    from judgeforge.judge.engines import build_engine

    p = command_parser("judgeforge serve", "Serve the judge over HTTP (grading with self-consistency).")
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="bind port (default 8000)")
    args = p.parse_args(argv)
    cfg = load_config(ServeConfig, args.config, args.overrides,
                      extra={"server.host": args.host, "server.port": args.port})
    configure_logging()
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
