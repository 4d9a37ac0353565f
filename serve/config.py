"""`judgeforge serve` / `judgeforge grade` config: the judge core's engine and sampling sections
(judgeforge.judge.config), the cascade runtime's `cascade:` and `store:` (judgeforge.cascade.config),
plus the HTTP server's own."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from judgeforge.cascade.config import CascadeConfig, StoreConfig
from judgeforge.config import Config
from judgeforge.judge.config import EngineConfig, SamplingConfig


class ServerConfig(Config):
    host: str = "127.0.0.1"
    """Bind address."""
    port: int = 8000
    """Bind port."""
    auth: Literal["key", "none"] = "key"
    """With "key", every path but /health needs `Authorization: Bearer <key>`, and the server
    refuses to start without a non-empty key (env JUDGEFORGE_API_KEY over `api_key`). "none": no
    auth at all, only behind an authenticating proxy; warned about at start, shown in /health."""
    api_key: str | None = None
    """Bearer key required on every path but /health; env JUDGEFORGE_API_KEY overrides it."""
    max_body_bytes: int = Field(4 * 2**20, ge=1)
    """Largest request body read (413 beyond it, before anything is parsed; bodies must be UTF-8
    JSON sent as `content-type: application/json`). 4 MiB holds a batch of 64 items of 64 KB; a
    hostile body of that size costs about a second of parsing, so raise it only as far as needed."""
    max_in_flight: int = 64
    """Gradings admitted at once (queued or running); above it requests get 429 at once."""
    retry_after_s: int = 2
    """`Retry-After` sent with 429."""
    request_timeout_s: float = 300.0
    """A grading still running after this gets 504 (and its engine work is aborted)."""
    max_batch: int = 64
    """Most items in one /v1/grade/batch or /v1/compare/batch request."""
    max_input_chars: int = 200_000
    """Any text field longer than this is refused before tokenising (422)."""
    drain_timeout_s: float = 60.0
    """On SIGTERM: how long to let accepted requests finish."""
    health_poll_s: float = 1.0
    """How often the engine's liveness is checked (503 within about this)."""
    max_header_bytes: int = Field(32 * 1024, ge=1024)
    """Largest request head (request line and headers together) read; beyond it 431, before auth. Enforced
    where the bytes are buffered (uvicorn's h11 parser, serve/headers.py), so a header that never ends
    costs at most this much memory per connection."""
    max_headers: int = Field(100, ge=8)
    """Most header fields in one request (431 beyond, before auth)."""
    header_timeout_s: float = Field(10.0, gt=0)
    """A request head not complete this long after its first byte (or after the connection opened) is
    answered 408 and its connection closed: a client trickling headers holds no connection for long."""
    body_timeout_s: float = Field(30.0, gt=0)
    """A request body not complete this long after its head is answered 408 and its connection closed (one
    the server already answered without reading it, a 401 say, is just closed): a stalled upload holds its
    buffered bytes and its connection no longer than this. 30 s carries a 4 MiB body at about 1 Mbit/s."""
    max_connections: int | None = Field(None, ge=1)
    """Connections served at once; while more are open a request is answered 503 and its connection
    closed, before auth. None: twice `max_in_flight` (128 by default), room for every admitted grading plus
    as many connections waiting for their 429 or idle between requests. Memory held by request bodies is
    at most about this times `max_body_bytes`, each for at most `body_timeout_s`."""

    def connection_limit(self) -> int:
        """`max_connections`, or its default."""
        return self.max_connections or 2 * self.max_in_flight


class ServeConfig(Config):
    engine: EngineConfig = EngineConfig()
    """The local judge's engine."""
    sampling: SamplingConfig = SamplingConfig()
    """How the local judge samples and scores."""
    server: ServerConfig = ServerConfig()
    """The HTTP server."""
    cascade: CascadeConfig | None = None
    """Escalate low-confidence items to a teacher (absent: every answer is the local judge's)."""
    store: StoreConfig | None = None
    """Keep every graded item in a judgment store (absent: nothing is stored)."""
