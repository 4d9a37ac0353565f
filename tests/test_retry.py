"""judgeforge/retry.py: the 429 policy of both server clients, pure, then as each client runs it.

The clients run against httpx's MockTransport (no server), their sleeps recorded instead of slept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random

import httpx
import pytest
from hypothesis import given, strategies as st

from judgeforge import api
from judgeforge.retry import Refused, Retry, RetryPolicy
from judgeforge.serve import client

URL = "http://judge:8000"
POLICY = RetryPolicy(jitter=0)


def test_a_429_is_retried_after_its_retry_after_until_the_last_attempt():
    assert POLICY.decide(1, 429, "2.5", URL) == Retry(2.5)
    assert POLICY.decide(7, 429, "0", URL) == Retry(0.0)
    assert POLICY.decide(8, 429, "2", URL) is None  # the last 429 is the answer: no wait for nothing
    assert RetryPolicy(attempts=1).decide(1, 429, "2", URL) is None


@pytest.mark.parametrize("header, wait", [(None, 1.0), ("", 1.0), ("soon", 1.0), ("-3", 0.0), ("inf", 1.0),
                                          ("nan", 1.0), ("1e999", 1.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 1.0),
                                          (" 4 ", 4.0)])
def test_an_unusable_retry_after_waits_the_default(header, wait):
    assert POLICY.wait_s(header) == wait
    assert RetryPolicy(default_wait_s=0.25).wait_s("soon") == 0.25


def test_a_refused_key_stops_at_once_naming_the_server_and_how_to_pass_the_key():
    for status in (401, 403):
        for attempt in (1, 8):
            step = RetryPolicy(key_hint="do this").decide(attempt, status, "1", URL)
            assert step == Refused(f"the server at {URL} refused the API key ({status}): do this")


@pytest.mark.parametrize("status", [200, 400, 404, 422, 500, 503])
def test_other_answers_are_taken_as_they_are(status):
    assert POLICY.decide(1, status, "1", URL) is None


def test_attempts_are_at_least_one():
    with pytest.raises(ValueError, match="attempts must be >= 1"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="jitter must be >= 0"):
        RetryPolicy(jitter=float("nan"))


def test_retry_waits_are_jittered_between_retry_after_and_twice_it():
    """16 clients refused together: their waits spread over [Retry-After, 2 x Retry-After] instead of all
    coming back at the same instant (and being refused together again)."""
    clients = [RetryPolicy(rand=random.Random(seed).random) for seed in range(16)]
    waits = [c.decide(1, 429, "2", URL).after_s for c in clients]
    assert all(2.0 <= w < 4.0 for w in waits), waits
    assert len(set(waits)) == 16 and max(waits) - min(waits) > 1.0, waits  # spread, not lockstep
    one = RetryPolicy(rand=random.Random(0).random)
    again = [one.decide(k, 429, "2", URL).after_s for k in range(1, 8)]
    assert len(set(again)) == 7  # one client's successive waits differ too
    assert [RetryPolicy(rand=lambda: x).decide(1, 429, "3", URL) for x in (0.0, 0.5, 0.999)] == \
        [Retry(3.0), Retry(4.5), Retry(3 * 1.999)]
    assert RetryPolicy(jitter=0.25, rand=lambda: 0.999).decide(1, 429, None, URL).after_s < 1.25


def test_the_default_draw_differs_between_policies():
    """No seed given: each client draws from the OS-seeded generator, so two clients built alike differ."""
    waits = {RetryPolicy().decide(1, 429, "2", URL).after_s for _ in range(8)}
    assert len(waits) == 8 and all(2.0 <= w < 4.0 for w in waits)


@given(st.integers(1, 20), st.integers(1, 30), st.integers(100, 599),
       st.one_of(st.none(), st.text(max_size=12), st.floats().map(repr)))
def test_every_decision_is_bounded(attempts, attempt, status, header):
    """Whatever the server sends: a finite, non-negative wait only for a 429 with attempts left, a
    refusal only for 401/403, and a request count that never passes `attempts`."""
    policy = RetryPolicy(attempts=attempts)
    step = policy.decide(attempt, status, header, URL)
    if isinstance(step, Retry):
        assert status == 429 and attempt < attempts
        asked = policy.wait_s(header)
        assert math.isfinite(step.after_s) and asked <= step.after_s <= 2 * asked
    elif isinstance(step, Refused):
        assert status in (401, 403)
    else:
        assert status not in (401, 403) and (status != 429 or attempt >= attempts)


# -- the two clients ---------------------------------------------------------------------------------------


def busy_then(final: httpx.Response, busy: int):
    """A transport answering 429 (Retry-After: 3) `busy` times, then `final`; and its request count."""
    sent = []

    def handle(request):
        sent.append(request)
        return httpx.Response(429, headers={"Retry-After": "3"}, json={"detail": "busy"}) \
            if len(sent) <= busy else final
    return handle, sent


def remote(handle) -> api.RemoteJudge:
    judge = api.RemoteJudge(URL, api_key="k")
    judge.http = httpx.Client(base_url=URL, transport=httpx.MockTransport(handle))
    return judge


@pytest.fixture(autouse=True)
def mid_jitter(monkeypatch):
    """Both clients' policies draw 0.5: each wait is 1.5 x Retry-After, exactly."""
    monkeypatch.setattr(api, "RETRY", dataclasses.replace(api.RETRY, rand=lambda: 0.5))
    monkeypatch.setattr(client, "RETRY", dataclasses.replace(client.RETRY, rand=lambda: 0.5))


def send(handle, monkeypatch) -> tuple[dict, list]:
    waits = []

    async def sleep(s):
        waits.append(s)
    monkeypatch.setattr(client.asyncio, "sleep", sleep)

    async def go():
        async with httpx.AsyncClient(base_url=URL, transport=httpx.MockTransport(handle)) as c:
            return await client._send(c, URL, {"instruction": "q", "response": "a", "rubric": "helpfulness"})
    return asyncio.run(go()), waits


def test_the_sync_client_waits_out_429s_then_gives_up_on_the_last(monkeypatch):
    waits = []
    monkeypatch.setattr(api.time, "sleep", waits.append)
    handle, sent = busy_then(httpx.Response(200, json={"data": []}), busy=2)
    assert remote(handle)._call("GET", "/v1/models") == {"data": []}
    assert len(sent) == 3 and waits == [4.5, 4.5]
    waits.clear()
    handle, sent = busy_then(httpx.Response(200, json={}), busy=99)
    with pytest.raises(api.ServerError, match="429") as e:
        remote(handle)._call("GET", "/v1/models")
    assert e.value.status == 429 and len(sent) == api.RETRY.attempts and waits == [4.5] * (len(sent) - 1)
    handle, _ = busy_then(httpx.Response(401, json={"detail": "bad key"}), busy=1)
    with pytest.raises(PermissionError, match=r"refused the API key \(401\): pass api_key= or set"):
        remote(handle)._call("GET", "/v1/models")


def test_the_async_client_waits_out_429s_then_gives_up_on_the_last(monkeypatch):
    handle, sent = busy_then(httpx.Response(200, json={"score": 4}), busy=2)
    assert send(handle, monkeypatch) == ({"result": {"score": 4}}, [4.5, 4.5]) and len(sent) == 3
    handle, sent = busy_then(httpx.Response(200, json={}), busy=99)
    res, waits = send(handle, monkeypatch)
    assert res == {"error": {"status": 429, "detail": "busy"}}
    assert len(sent) == client.RETRY.attempts and waits == [4.5] * (len(sent) - 1)
    handle, _ = busy_then(httpx.Response(403, json={"detail": "bad key"}), busy=1)
    with pytest.raises(client.GradeError, match=r"refused the API key \(403\): set JUDGEFORGE_API_KEY") as e:
        send(handle, monkeypatch)
    assert e.value.code == client.EXIT_USAGE
