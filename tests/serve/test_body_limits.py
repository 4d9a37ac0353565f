"""Request bodies and connections of the real `judgeforge serve` process (the CLI with its uvicorn options,
over a ScriptedEngine): a body that stalls is answered 408 and its connection closed `server.body_timeout_s`
after its head, one that stalls after an early answer (a 401) has its connection closed then too, and while
`server.max_connections` connections are open a further request gets 503 at once instead of being held.
Raw sockets on 127.0.0.1, each read with a timeout and every loop bounded in time."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from judgeforge.serve.process import ServerProcess

KEY = "body-limits-key"
BODY_TIMEOUT_S = 2.0
MAX_CONNECTIONS = 8
DECLARED = 4_000_000  # under the default server.max_body_bytes (4 MiB): a body the server would read whole
SENT = 3_900_000  # then the client stalls
SCRIPTED = (str(Path(__file__).with_name("scripted_serve.py")),)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("body-limits") / "serve.log"
    srv = ServerProcess(None, [f"server.api_key={KEY}", "engine.max_model_len=4096",
                               f"server.body_timeout_s={BODY_TIMEOUT_S}",
                               f"server.max_connections={MAX_CONNECTIONS}"], log=log, entry=SCRIPTED)
    try:
        srv.wait_ready(120)
        yield srv
    finally:
        srv.stop(30)


def _head(length: int, auth: bool = True, extra: str = "") -> bytes:
    return (f"POST /v1/grade HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {length}\r\n" + (f"Authorization: Bearer {KEY}\r\n" if auth else "")
            + extra + "\r\n").encode()


def _stalled(srv, sent: int, auth: bool = True) -> socket.socket:
    """A connection that sent a POST head declaring DECLARED bytes, then `sent` of them, and stalls."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(_head(DECLARED, auth) + b" " * sent)
    return s


def _until_closed(s: socket.socket, by: float) -> tuple[bytes, float | None]:
    """What the server sends on `s` until it closes it (or `by`, a monotonic time, passes: then None)."""
    out = b""
    s.settimeout(0.05)
    while time.monotonic() < by:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return out, time.monotonic()
        out += chunk
    return out, None


def _status(answer: bytes) -> int | None:
    parts = answer.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def _held(srv, ports: set[int]) -> int:
    """How many connections from our local `ports` the server holds open: its end ESTABLISHED, or
    CLOSE_WAIT (we closed, it did not), in the kernel's table."""
    held = 0
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = row.split()[1:4]
        held += (int(local.split(":")[1], 16) == srv.port and int(remote.split(":")[1], 16) in ports
                 and state in ("01", "08"))
    return held


def _graded_in_pieces(srv) -> bytes:
    """The answer to a whole body sent in two pieces, the second a while after the head: a slow upload
    within the deadline."""
    body = b'{"instruction": "What is 2+2?", "response": "4", "rubric": "helpfulness", "n": 1}'
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(_head(len(body), extra="Connection: close\r\n") + body[:20])
        time.sleep(BODY_TIMEOUT_S / 4)
        s.sendall(body[20:])
        return _until_closed(s, time.monotonic() + 10)[0]


def test_stalled_bodies_get_408_and_connections_beyond_the_cap_get_503(server):
    conns, opened = [], []
    try:
        for _ in range(MAX_CONNECTIONS):
            conns.append(_stalled(server, SENT))
            opened.append(time.monotonic())
        with _stalled(server, 1024) as extra:  # one more while the others are held: refused at once
            t0 = time.monotonic()
            answer, closed_at = _until_closed(extra, t0 + 5)
        assert _status(answer) == 503 and closed_at is not None and closed_at - t0 < 1.0, answer[:200]
        assert opened[-1] - opened[0] < BODY_TIMEOUT_S / 2  # all still within their deadline when refused
        ports = {s.getsockname()[1] for s in conns}
        assert _held(server, ports) == MAX_CONNECTIONS  # held, as a stalled upload is before its deadline
        results = [_until_closed(s, t + BODY_TIMEOUT_S + 3) for s, t in zip(conns, opened)]
        assert _held(server, ports) == 0  # every one released by the server, before we close ours
    finally:
        for s in conns:
            s.close()
    for (answer, closed_at), t in zip(results, opened):
        assert closed_at is not None, "a stalled body's connection is still open"
        assert BODY_TIMEOUT_S - 0.2 < closed_at - t < BODY_TIMEOUT_S + 2, closed_at - t
        assert _status(answer) == 408 and b"request body not complete within 2s" in answer, answer[:200]
        assert b"connection: close" in answer.lower()
    answer = _graded_in_pieces(server)  # the server serves again, slow uploads within the deadline too
    assert _status(answer) == 200 and b'"score"' in answer, answer[:300]


def test_a_body_trickled_after_an_early_answer_is_cut_off(server):
    """No key: 401 at once, before the body is read; uvicorn would then read and drop the rest of the body
    for as long as it trickles in, each byte keeping the connection alive."""
    with _stalled(server, 100, auth=False) as s:
        t0 = time.monotonic()
        answer, closed_at = _until_closed(s, t0 + 0.5)
        assert _status(answer) == 401 and closed_at is None  # answered, kept alive
        s.settimeout(1)
        while closed_at is None and time.monotonic() - t0 < BODY_TIMEOUT_S + 5:
            try:
                s.sendall(b" ")
                _, closed_at = _until_closed(s, time.monotonic() + 0.2)
            except (BrokenPipeError, ConnectionResetError):
                closed_at = time.monotonic()
    assert closed_at is not None, "a trickled body held its connection past the body deadline"
    assert BODY_TIMEOUT_S - 0.2 < closed_at - t0 < BODY_TIMEOUT_S + 2, closed_at - t0

