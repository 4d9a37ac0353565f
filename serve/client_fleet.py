"""Which server of a fleet grades the next line (`judgeforge grade --url A --url B ...`).

Client-side, beside serve/client.py (the `judgeforge grade` client), which sends the requests and tells
the fleet how each went; this is pure bookkeeping, no I/O.

- A line goes to the server in rotation with the fewest requests in flight, among those it has not
  already failed on; ties go round-robin, so equal servers alternate and a slow one takes fewer lines.
- A server is taken out of rotation at once when nothing answers (connection refused, or no answer
  within the client's deadlines: a hung or stopped process), and after
  MAX_STRIKES failed answers in a row (503, answer lost) while another server is in rotation: the last
  one standing keeps grading, its failures written per line as with a single server.
- A server out of rotation comes back when its /health answers again (the client re-probes it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

MAX_STRIKES = 3
"""Failed answers in a row that take a server out of rotation: one 503 can be a passing store or teacher
outage, three in a row is a server that should not get more lines for now."""


@dataclass(eq=False)
class Server:
    """One server's share of the run."""

    url: str
    """Its base URL, as given to --url."""
    index: int
    """Its position among the --url flags (the round-robin order of ties)."""
    in_flight: int = 0
    """Requests sent to it and not answered yet."""
    answered: int = 0
    """Lines whose written record is its answer (a result, or an error no other server would fix)."""
    strikes: int = 0
    """Failed answers since its last good one."""
    downs: int = 0
    """Times it was taken out of rotation during the run."""
    why: str | None = None
    """Why it is out of rotation; None while it is in."""
    unreachable: bool = False
    """Out because nothing answered at all (not listening, or hung), rather than answering that it cannot
    grade."""
    skipped: bool = False
    """It could not grade when the run started, so it began out of rotation."""


class Fleet:
    """The servers of one run and who grades next."""

    def __init__(self, urls: Iterable[str], on_out: Callable[[Server], None] | None = None):
        self.servers = [Server(url, i) for i, url in enumerate(urls)]
        self.on_out = on_out
        """Called with each server taken out of rotation during the run (the client starts its re-probe)."""
        self.retried = 0
        """Sends of a line to another server after a failure."""
        self._next = 0  # index the next tie goes to

    def up(self) -> list[Server]:
        return [s for s in self.servers if s.why is None]

    def take(self, tried: set[str]) -> Server | None:
        """The server the next send of a line goes to (counted in flight), or None when every server in
        rotation is in `tried`; a send after earlier tries counts as a retry."""
        free = [s for s in self.up() if s.url not in tried]
        if not free:
            return None
        n = len(self.servers)
        best = min(free, key=lambda s: (s.in_flight, (s.index - self._next) % n))
        self._next = best.index + 1
        best.in_flight += 1
        self.retried += bool(tried)
        return best

    def answered(self, server: Server) -> None:
        server.in_flight -= 1
        server.answered += 1
        server.strikes = 0

    def failed(self, server: Server, why: str) -> None:
        """A failed answer (503, answer lost): out of rotation at MAX_STRIKES while another server is in."""
        server.in_flight -= 1
        server.strikes += 1
        if server.strikes >= MAX_STRIKES and server.why is None and len(self.up()) > 1:
            self._out(server, why, unreachable=False)

    def unreachable(self, server: Server, why: str) -> None:
        """Nothing answered (refused, or not in time): out of rotation at once, even the last one (then no
        line can be graded)."""
        server.in_flight -= 1
        if server.why is None:
            self._out(server, why, unreachable=True)

    def skip(self, server: Server, why: str, unreachable: bool) -> None:
        """Not able to grade at the start of the run."""
        server.why, server.unreachable, server.skipped = why, unreachable, True

    def back(self, server: Server) -> None:
        """Its /health answers again: back in rotation."""
        server.why, server.strikes = None, 0

    def _out(self, server: Server, why: str, unreachable: bool) -> None:
        server.why, server.unreachable, server.strikes = why, unreachable, 0
        server.downs += 1
        if self.on_out is not None:
            self.on_out(server)

    def summary(self) -> str:
        """`retried=3 servers: A=12 B=8 (B: 1 down)`: for the run's final log line."""
        counts = " ".join(f"{s.url}={s.answered}" for s in self.servers)
        notes = [f"{s.url}: {note}" for s in self.servers if (note := _note(s))]
        return f"retried={self.retried} servers: {counts}" + (f" ({', '.join(notes)})" if notes else "")


def _note(s: Server) -> str:
    parts = (["not up at start"] if s.skipped else []) + ([f"{s.downs} down"] if s.downs else [])
    if parts and s.why is None:
        parts.append("back")
    return ", ".join(parts)
