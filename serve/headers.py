"""HTTP header limits of the grading server: a client controls every header byte, so they are bounded
before any ASGI code, auth included, can run.

Where: uvicorn's default parser here is httptools, which buffers a header of any size (a 50 MB value was
accepted, and eight connections sending 20 MB each of unfinished header grew the server by 170 MB).
An ASGI middleware only sees headers once they are parsed, i.e. after the memory is spent. So
`judgeforge serve` runs uvicorn's h11 protocol, whose receive buffer is bounded, with three changes
(`LimitedH11Protocol`):

- a request head (request line and headers) over `server.max_header_bytes` is answered 431 and the
  connection closed (uvicorn itself answers h11's refusal with a bare 400);
- a head not complete `server.header_timeout_s` after its first byte (or after the connection opened)
  is answered 408 and closed: trickled headers hold no connection for long;
- memory per connection is therefore about `max_header_bytes` plus one socket read;
- a request body still incomplete `server.body_timeout_s` after its head, on a request already answered
  without it (a 401, say), has its connection closed: uvicorn would otherwise read and drop such a body
  for as long as it trickles in. (A body the app is reading gets its 408 from the app, serve/app.py.)

uvicorn's own `limit_concurrency` bounds the connections (`server.max_connections`): beyond them a
request is answered 503 and its connection closed.

`HeaderLimits` (ASGI, outside auth) refuses more than `server.max_headers` fields with 431, and repeats
the size check for servers other than `judgeforge serve` (TestClient, an embedding program's own).
`uvicorn_options(server_cfg)` is what `judgeforge serve` passes to `uvicorn.run`.
"""

from __future__ import annotations

import json
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)


def _too_large(limit: int) -> str:
    return f"request header fields too large: the request line and headers may take {limit} bytes"


def _error_bytes(status: int, reason: str, detail: str) -> bytes:
    """A complete `Connection: close` error response (written raw: h11's state is an error state)."""
    body = json.dumps({"detail": detail}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body


class _Connection(h11.Connection):
    """h11's connection, remembering the status h11 suggests for the request it refuses (431: the
    receive buffer outgrew `max_incomplete_event_size` before the head was complete)."""

    refused_status = 400

    def next_event(self):
        try:
            return super().next_event()
        except h11.RemoteProtocolError as e:
            self.refused_status = e.error_status_hint
            raise


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a bounded, timed request head (see the module doc). The limits are
    class attributes: `uvicorn_options` makes a subclass per server config."""

    max_header_bytes = 32 * 1024
    header_timeout_s = 10.0
    body_timeout_s = 30.0

    def __init__(self, config, server_state, app_state, _loop=None):
        super().__init__(config, server_state, app_state, _loop)
        self.conn = _Connection(h11.SERVER, self.max_header_bytes)
        self._head_timer = None
        self._body_timer = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:  # (still) waiting for a complete head
            self._arm_head_timer()
        else:
            self._cancel_head_timer()
        if self.conn.their_state is h11.SEND_BODY:  # a head, and not all of its body yet
            self._arm_body_timer()
        else:
            self._cancel_body_timer()

    def connection_lost(self, exc) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        if self.conn.refused_status != 431:
            return super().send_400_response(msg)
        self.logger.warning("request head over %d bytes: 431", self.max_header_bytes)
        self._refuse(431, "Request Header Fields Too Large", _too_large(self.max_header_bytes))

    def _refuse(self, status: int, reason: str, detail: str) -> None:
        self._cancel_head_timer()
        if not self.transport.is_closing():
            self.transport.write(_error_bytes(status, reason, detail))
            self.transport.close()

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:  # runs from the head's first byte: more bytes do not extend it
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        # IDLE: no complete head yet (h11 leaves IDLE with the head, and returns to it only once the
        # response is finished), so no request is running.
        if self.conn.their_state is h11.IDLE:
            self._refuse(408, "Request Timeout",
                         f"request head not complete within {self.header_timeout_s:g}s")

    def _arm_body_timer(self) -> None:
        if self._body_timer is None:  # runs from the head's end: more body bytes do not extend it
            self._body_timer = self.loop.call_later(self.body_timeout_s, self._body_timed_out)

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timed_out(self) -> None:
        self._body_timer = None
        answered = self.cycle is not None and self.cycle.response_complete
        if self.conn.their_state is h11.SEND_BODY and answered and not self.transport.is_closing():
            self.logger.info("request body not complete within %gs of its head: connection closed",
                             self.body_timeout_s)
            self.transport.close()


class HeaderLimits:
    """Pure ASGI, outside auth: more than `max_headers` fields, or a head over `max_bytes` (a server
    that does not bound it itself), is answered 431 before anything else runs."""

    def __init__(self, app, max_headers: int, max_bytes: int):
        self.app, self.max_headers, self.max_bytes = app, max_headers, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            detail = self._problem(scope)
            if detail is not None:
                return await _send_431(send, detail)
        await self.app(scope, receive, send)

    def _problem(self, scope) -> str | None:
        headers = scope["headers"]
        if len(headers) > self.max_headers:
            return f"{len(headers)} header fields; the limit is {self.max_headers}"
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        size += sum(len(k) + len(v) + 4 for k, v in headers)  # ": " and CRLF
        return _too_large(self.max_bytes) if size > self.max_bytes else None


async def _send_431(send, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 431, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def uvicorn_options(server) -> dict:
    """`uvicorn.run` keyword arguments enforcing a ServerConfig's header, body and connection limits."""
    protocol = type("LimitedH11Protocol", (LimitedH11Protocol,), {
        "max_header_bytes": server.max_header_bytes, "header_timeout_s": server.header_timeout_s,
        "body_timeout_s": server.body_timeout_s})
    # uvicorn refuses a request once the open connections, its own included, reach the limit: +1 serves
    # exactly max_connections.
    return {"http": protocol, "h11_max_incomplete_event_size": server.max_header_bytes,
            "limit_concurrency": server.connection_limit() + 1}
