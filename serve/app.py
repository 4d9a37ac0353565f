"""The grading API (FastAPI): `judgeforge serve --config configs/serve/default.yaml [--host H] [--port P]`.

Routes: POST /v1/grade, /v1/grade/batch, /v1/compare, /v1/compare/batch;
GET /v1/models, /metrics (Prometheus), /openapi.json, /health (the only open route).

Failure behaviour (each one tested in tests/serve/):
- headers: a request head over `server.max_header_bytes` -> 431 (bounded where uvicorn's h11
  buffers it, serve/headers.py), more than `server.max_headers` fields -> 431, a head not complete
  within `server.header_timeout_s` -> 408; all before auth;
- connections: while more than `server.max_connections` are open, a request gets 503 and its
  connection is closed, before auth;
- auth: every path but /health (unknown paths and /openapi.json included) needs
  `Authorization: Bearer <key>` (scheme case-insensitive; env JUDGEFORGE_API_KEY over
  `server.api_key`), compared in constant time -> 401 otherwise. With no non-empty key the
  server refuses to start, unless `server.auth=none` says so explicitly (then a warning at
  start and "auth": "none" in /health);
- bodies: not complete within `server.body_timeout_s` of the head -> 408 and the connection
  closed; more than `server.max_body_bytes` -> 413 before parsing; not sent as
  `content-type: application/json` -> 415; not UTF-8 or not JSON -> 400 saying where;
  nested deeper than MAX_JSON_DEPTH -> 422;
- bad fields -> 422 naming the field (n above `sampling.max_n` and NaN/Infinity included);
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
import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from judgeforge.serve.config import ServeConfig
from judgeforge.judge.engines import EngineError, JudgeEngine
from judgeforge.redact import redact_url
from judgeforge.serve.headers import HeaderLimits, uvicorn_options
from judgeforge.serve.routes import ROUTERS
from judgeforge.serve.schemas import FieldError, apply_limits_to_openapi, safe_errors
from judgeforge.serve.state import UNAUTHORIZED, AppState, Metrics, required_key

log = logging.getLogger("judgeforge.serve")

OPEN_PATHS = frozenset({"/health"})  # load balancers poll it without a key
UNMATCHED = "unmatched"  # the one metrics label of every path no route matches
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
MAX_JSON_DEPTH = 32  # our deepest request (batch > item > rubric) nests 3; stops "[[[[..." early


class ErrorResponse(JSONResponse):
    """Error bodies as ASCII JSON: they may quote client text, and a lone surrogate ("\\ud800" in
    the request's JSON) cannot be encoded as UTF-8."""

    def render(self, content) -> bytes:
        text = json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
        return text.encode()


def header(scope, name: bytes) -> bytes:
    """A request header's raw value (ASGI servers lower-case the names)."""
    return next((v for k, v in scope["headers"] if k == name), b"")


def route_label(scope) -> str:
    """The template of the route the path matches (a 405 too), else "unmatched": one metrics series
    per route, however many paths clients invent."""
    for route in scope["app"].router.routes:
        if route.matches(scope)[0] is not Match.NONE:
            return getattr(route, "path", UNMATCHED)
    return UNMATCHED


class CountRequests:
    """Pure ASGI middleware counting requests by route template and status. (Starlette's
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
            self.metrics.requests.labels(route_label(scope), str(status["code"])).inc()


class RequireKey:
    """Pure ASGI: the key on every path but /health, before routing and before any body is read,
    so strangers learn nothing (not even which paths exist) and cost no parsing."""

    def __init__(self, app, state: AppState):
        self.app, self.state = app, state

    async def __call__(self, scope, receive, send):
        if (scope["type"] == "http" and scope["path"] not in OPEN_PATHS
                and not self.state.authorized(header(scope, b"authorization"))):
            response = ErrorResponse({"detail": UNAUTHORIZED}, 401, {"WWW-Authenticate": "Bearer"})
            return await response(scope, receive, send)
        await self.app(scope, receive, send)


class BodyError(Exception):
    """A request body refused before FastAPI parses it: the status and the detail to send."""

    def __init__(self, status: int, detail, kind: str | None = None):
        super().__init__(detail)
        self.status = status
        self.detail = [{"loc": ["body"], "msg": detail, "type": kind}] if kind else detail

    def headers(self) -> dict | None:
        # A stalled body's connection is closed: the client is not sending, so it reads the 408 (a
        # 413's client may still be writing; it would lose the answer to a reset, so that one stays).
        return {"connection": "close"} if self.status == 408 else None


class JSONBodies:
    """Pure ASGI: a body is read here, at most `max_bytes` within `timeout_s`, and must be UTF-8 JSON
    no deeper than MAX_JSON_DEPTH, else 413/408/415/400/422 saying which. (FastAPI alone answers
    "Input should be a valid dictionary" to JSON sent as text/plain and "error parsing the body" to
    the rest.) The checked body is then replayed to the app."""

    def __init__(self, app, max_bytes: int, timeout_s: float):
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            return await self.app(scope, receive, send)
        try:
            body = await read_body(scope, receive, self.max_bytes, self.timeout_s)
            check_json(header(scope, b"content-type").decode("latin-1"), body)
        except ClientDisconnect:
            return  # nobody to answer
        except BodyError as e:
            response = ErrorResponse({"detail": e.detail}, e.status, e.headers())
            return await response(scope, receive, send)
        await self.app(scope, replay(body, receive), send)


async def read_body(scope, receive, limit: int, timeout_s: float | None = None) -> bytes:
    """The whole body, refused (413) as soon as it is known to exceed `limit` bytes, and (408) when it
    is not complete within `timeout_s`: a stalled upload would otherwise hold its bytes and its
    connection for as long as the client keeps it open."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _read_chunks(scope, receive, limit)
    except TimeoutError:
        raise BodyError(408, f"request body not complete within {timeout_s:g}s") from None


async def _read_chunks(scope, receive, limit: int) -> bytes:
    declared = header(scope, b"content-length")
    if declared.isdigit() and int(declared) > limit:
        raise BodyError(413, f"body of {int(declared)} bytes; the limit is {limit} bytes")
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > limit:  # chunked, or a lying content-length
            raise BodyError(413, f"body over the limit of {limit} bytes")
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive):
    """The checked body as one message, then the real channel (polled for disconnects)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive_again():
        return pending.pop() if pending else await receive()

    return receive_again


def check_json(content_type: str, body: bytes) -> None:
    """Raises BodyError unless `body` is empty (the route's 422 names what is missing) or UTF-8
    JSON, sent as such, nested at most MAX_JSON_DEPTH deep."""
    if not body:
        return
    if not is_json(content_type):
        raise BodyError(415, "send the body as JSON with content-type: application/json (got "
                        f"{content_type[:100] or 'no content-type'!r})")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BodyError(400, f"body is not valid UTF-8 (byte {e.start})", "utf8_invalid") from None
    value, deep = None, False
    try:
        value = json.loads(text)
    except RecursionError:  # json's C parser gives up around 1000 levels
        deep = True
    except ValueError as e:  # JSONDecodeError (with the position); ints over 4300 digits
        raise BodyError(400, f"body is not valid JSON: {e}", "json_invalid") from None
    if deep or too_deep(body, value, MAX_JSON_DEPTH):
        raise BodyError(422, f"JSON nesting deeper than {MAX_JSON_DEPTH}", "json_too_deep")


def is_json(content_type: str) -> bool:
    """application/json or application/<anything>+json, parameters (charset) aside, as FastAPI."""
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


def too_deep(body: bytes, value, limit: int) -> bool:
    """Whether containers nest deeper than `limit` (level by level: the check cannot recurse)."""
    if body.count(b"[") + body.count(b"{") <= limit:  # a cheap bound first: the usual case
        return False
    level, depth = [value], 0
    while level:
        containers = [v for v in level if isinstance(v, (dict, list))]
        if not containers:
            return False
        depth += 1
        if depth > limit:
            return True
        level = [c for v in containers for c in (v.values() if isinstance(v, dict) else v)]
    return False


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI):
    """Watch the engine while serving; close it once uvicorn has drained."""
    shared: AppState = app.state.shared
    watcher = asyncio.create_task(shared.watch_engine())
    yield
    watcher.cancel()
    await asyncio.to_thread(shared.engine.close)
    await asyncio.to_thread(shared.grader.close)


def openapi(app: FastAPI, cfg: ServeConfig) -> dict:
    """The spec, with this server's configured limits written in (built once)."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        spec = get_openapi(title=app.title, version=app.version, description=app.description,
                           routes=app.routes)
        app.openapi_schema = apply_limits_to_openapi(spec, cfg)
    return app.openapi_schema


async def field_error(request: Request, exc: FieldError):
    return ErrorResponse({"detail": exc.detail()}, status_code=422)


async def validation_error(request: Request, exc: RequestValidationError):
    # FastAPI's own handler echoes every input: a NaN made it raise (500), a whole body came back.
    return ErrorResponse({"detail": safe_errors(exc.errors())}, status_code=422)


def create_app(cfg: ServeConfig, engine: JudgeEngine, teacher_engine: JudgeEngine | None = None) -> FastAPI:
    """The app around a built engine (the app closes it at shutdown); raises NoApiKey (a
    ConfigError) when `server.auth=key` and no non-empty key is configured. With a `cascade:`
    section the teacher engine is built from it unless `teacher_engine` is given.

    The endpoints live in `judgeforge.serve.routes`; what they share (engine,
    Judge, metrics, admission, key, liveness) in `judgeforge.serve.state`.
    """
    # No /docs or /redoc: a browser cannot send the key to fetch the spec they render. The spec
    # itself is served at /openapi.json behind the key.
    app = FastAPI(title="judgeforge grading API", version="1", lifespan=lifespan,
                  description=__doc__.split("\n\n", 1)[1], docs_url=None, redoc_url=None)
    app.state.shared = shared = AppState(cfg, engine, teacher_engine)
    app.openapi = functools.partial(openapi, app, cfg)
    app.add_exception_handler(FieldError, field_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    # Added innermost first: requests pass CountRequests, HeaderLimits, RequireKey, then JSONBodies.
    app.add_middleware(JSONBodies, max_bytes=cfg.server.max_body_bytes, timeout_s=cfg.server.body_timeout_s)
    app.add_middleware(RequireKey, state=shared)
    app.add_middleware(HeaderLimits, max_headers=cfg.server.max_headers,
                       max_bytes=cfg.server.max_header_bytes)
    app.add_middleware(CountRequests, metrics=shared.metrics)
    for router in ROUTERS:
        app.include_router(router)
    return app


def main(argv: list[str] | None = None) -> int:
    """`judgeforge serve`: build the engine, then serve the API until SIGTERM/Ctrl-C."""
    import uvicorn

    from judgeforge.cascade.runtime import load_threshold
    from judgeforge.config import ConfigError, command_parser, dump_config, load_config
    from judgeforge.data.store import StoreError
    from judgeforge.judge.engines import TemplateVersionMismatch, build_engine
    from judgeforge.logs import configure_logging

    p = command_parser("judgeforge serve", "Serve the judge over HTTP (grading with self-consistency).",
                       stage="serve")
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="bind port (default 8000)")
    args = p.parse_args(argv)
    cfg = load_config(ServeConfig, args.config, args.overrides,
                      extra={"server.host": args.host, "server.port": args.port})
    configure_logging()
    required_key(cfg)  # no key, no server: before minutes of model loading (exit 2 via the CLI)
    if cfg.cascade is not None:
        load_threshold(cfg.cascade)  # a bad calibration.json fails before the model loads too
    log.info("resolved config:\n%s", dump_config(shown_config(cfg)))
    try:
        engine = build_engine(cfg)
    except (EngineError, TemplateVersionMismatch) as e:  # bad adapter: a clear message, not a traceback
        log.error("cannot start the engine: %s", e)
        return 2
    try:
        app = create_app(cfg, engine)
    except (ConfigError, StoreError) as e:  # an unusable store or teacher: say so, free the engine
        log.error("cannot start: %s", e)
        engine.close()
        return 2
    uvicorn.run(app, host=cfg.server.host, port=cfg.server.port,
                timeout_graceful_shutdown=int(cfg.server.drain_timeout_s), log_level="info",
                **uvicorn_options(cfg.server))
    return 0


def shown_config(cfg: ServeConfig) -> ServeConfig:
    """The config as logged: the API key masked, endpoint URLs redacted."""
    update = {"server": cfg.server.model_copy(update={"api_key": "***" if cfg.server.api_key else None}),
              "engine": cfg.engine.model_copy(update={"base_url": redact_url(cfg.engine.base_url)})}
    if cfg.cascade is not None:
        teacher = cfg.cascade.teacher
        teacher = teacher.model_copy(update={"base_url": redact_url(teacher.base_url)})
        update["cascade"] = cfg.cascade.model_copy(update={"teacher": teacher})
    return cfg.model_copy(update=update)
