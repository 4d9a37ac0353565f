"""What a judgeforge server client does with an answer: retry a 429 after its Retry-After, stop on a
refused key, or take it. The one policy of the sync client (judgeforge.api.RemoteJudge) and the async
one (`judgeforge grade`, serve/client.py); each only sleeps its own way between tries.

Pure: no HTTP library here, the callers pass the answer's status code and Retry-After header. The one
impurity is the jitter's random draw, injectable (`RetryPolicy.rand`) so tests can fix it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

KEY_REFUSED = (401, 403)
TOO_MANY = 429


@dataclass(frozen=True)
class Retry:
    """Send the same request again after `after_s` seconds."""

    after_s: float


@dataclass(frozen=True)
class Refused:
    """The server refused the API key: no retry can help; stop with `message`."""

    message: str


@dataclass(frozen=True)
class RetryPolicy:
    """A bounded wait-and-retry of 429 answers (the server's "busy, come back in N s")."""

    attempts: int = 8
    """Requests sent at most, the first included; the last 429 is then the answer."""
    default_wait_s: float = 1.0
    """The wait when a 429 has no usable Retry-After (missing, an HTTP date, not finite)."""
    key_hint: str = "set JUDGEFORGE_API_KEY to the server's key"
    """How the caller's user passes the key, the tail of the refusal message."""
    jitter: float = 1.0
    """Each wait is drawn uniformly from [w, w * (1 + jitter)], w being what the server asked for: clients
    refused together come back spread over that window instead of all at once (and at once refused
    again). Never shorter than Retry-After; 0 waits exactly it."""
    rand: Callable[[], float] = field(default=random.random, repr=False, compare=False)
    """A draw in [0, 1) per wait; random.random by default (seeded by the OS, so clients differ)."""

    def __post_init__(self):
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if not self.jitter >= 0:
            raise ValueError(f"jitter must be >= 0, got {self.jitter}")

    def wait_s(self, retry_after: str | None) -> float:
        """Seconds a Retry-After header value asks for (delta-seconds; anything else: the default)."""
        try:
            wait = float(self.default_wait_s if retry_after is None else retry_after)
        except ValueError:
            return self.default_wait_s
        # inf would hang asyncio.sleep and crash time.sleep; nan is no duration either
        return max(0.0, wait) if math.isfinite(wait) else self.default_wait_s

    def decide(self, attempt: int, status: int, retry_after: str | None, url: str) -> Retry | Refused | None:
        """After the answer to request number `attempt` (1-based): Retry, Refused, or None to take the
        answer as it is (a success, an error, or a 429 when no attempt is left)."""
        if status in KEY_REFUSED:
            return Refused(f"the server at {url} refused the API key ({status}): {self.key_hint}")
        if status == TOO_MANY and attempt < self.attempts:
            return Retry(self.jittered(self.wait_s(retry_after)))
        return None

    def jittered(self, wait: float) -> float:
        """`wait` stretched by a random share of `jitter` (see there)."""
        return wait * (1 + self.jitter * self.rand())
