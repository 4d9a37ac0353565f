"""`judgeforge grade --url A --url B ...` (serve/client.py over serve/client_fleet.py): lines spread over
a fleet by least outstanding requests, a server that dies or answers 503 has its lines retried on the
others.

The servers are real: uvicorn on 127.0.0.1 in threads over ScriptedEngines (`scripted_server`), and for
the command as deployed, `judgeforge serve` processes over ScriptedEngines killed with SIGKILL mid-run.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from judgeforge.serve import client
from judgeforge.serve.client_fleet import MAX_STRIKES, Fleet
from judgeforge.serve.process import ServerProcess, free_port
from testing.engines import ScriptedEngine
from testing.servers import scripted_server

KEY = "fleet-test-key"
BODY = {"instruction": "What is 2+2?", "response": "4", "rubric": "helpfulness", "n": 1}
SCRIPTED = (str(Path(__file__).with_name("scripted_serve.py")),)


@pytest.fixture(autouse=True)
def keyed(monkeypatch, caplog):
    monkeypatch.setenv("JUDGEFORGE_API_KEY", KEY)
    caplog.set_level(logging.INFO, logger="judgeforge.serve.client")  # the summary line is INFO


def servers(stack: ExitStack, *delays: float, **engine_kw) -> list:
    """One in-process server per delay; `.engine` is its ScriptedEngine."""
    out = []
    for delay in delays:
        engine = ScriptedEngine(delay=delay)
        srv = stack.enter_context(scripted_server(engine, KEY, "server.health_poll_s=0.05"))
        srv.engine = engine
        out.append(srv)
    return out


def requests(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", **BODY, "response": f"answer {i}"}) + "\n"
                            for i in range(n)))
    return path


def records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def grade(inp: Path, out: Path, urls, *extra: str) -> int:
    return client.main(["-i", str(inp), "-o", str(out), *(a for u in urls for a in ("--url", u)), *extra])


def summary(caplog) -> str:
    return [r.getMessage() for r in caplog.records if "graded=" in r.getMessage()][-1]


def retried(caplog) -> int:
    return int(re.search(r"retried=(\d+)", summary(caplog)).group(1))


def answered(caplog, url: str) -> int:
    return int(re.search(re.escape(url) + r"=(\d+)", summary(caplog)).group(1))


def when(cond, then, timeout: float = 60) -> threading.Thread:
    """`then()` in a thread as soon as `cond()` holds: an event in the middle of a run."""

    def watch():
        deadline = time.monotonic() + timeout
        while not cond() and time.monotonic() < deadline:
            time.sleep(0.005)
        then()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def assert_each_line_once(out: Path, n: int) -> list[dict]:
    recs = records(out)
    assert [r["line"] for r in recs] == list(range(1, n + 1)), [r["line"] for r in recs]
    assert [r["id"] for r in recs] == [f"r{i}" for i in range(n)] and all("result" in r for r in recs)
    return recs


# -- the balancing state (pure) -------------------------------------------------------------------------


def test_take_is_least_outstanding_with_round_robin_ties():
    fleet = Fleet(["a", "b", "c"])
    assert [fleet.take(set()).url for _ in range(4)] == ["a", "b", "c", "a"]  # ties rotate
    a, b, c = fleet.servers
    assert (a.in_flight, b.in_flight, c.in_flight) == (2, 1, 1)
    fleet.answered(b)
    assert fleet.take(set()) is b  # the one with fewest in flight, whatever the rotation
    assert fleet.take({"c"}).url in ("a", "b") and fleet.retried == 1  # a send after a failure is a retry
    assert fleet.take({"a", "b", "c"}) is None


def test_strikes_take_a_server_out_only_while_another_is_in():
    outs = []
    fleet = Fleet(["a", "b"], on_out=outs.append)
    a, b = fleet.servers
    for k in range(MAX_STRIKES):
        fleet.take({"a"})
        fleet.failed(b, "b broke")
        assert (b.why is None) == (k < MAX_STRIKES - 1)
    assert outs == [b] and fleet.up() == [a] and fleet.take({"a"}) is None
    for _ in range(MAX_STRIKES + 1):  # the last one standing keeps grading: its lines fail one by one
        fleet.take(set())
        fleet.failed(a, "a broke")
    assert fleet.up() == [a] and outs == [b]
    fleet.back(b)
    fleet.take({"a"})
    fleet.unreachable(b, "nothing listens")  # out at once
    assert b.why == "nothing listens" and b.unreachable and b.downs == 2


def test_summary_names_every_server_and_who_went_down():
    fleet = Fleet(["http://a", "http://b", "http://c"])
    a, b, c = fleet.servers
    fleet.skip(c, "cannot reach", unreachable=True)
    for _ in range(3):
        fleet.answered(fleet.take(set()))
    fleet.take({"http://a"})
    fleet.unreachable(b, "gone")
    assert fleet.summary() == ("retried=1 servers: http://a=2 http://b=1 http://c=0 "
                               "(http://b: 1 down, http://c: not up at start)")
    fleet.back(c)
    assert fleet.summary().endswith("(http://b: 1 down, http://c: not up at start, back)")


# -- real servers ---------------------------------------------------------------------------------------


def test_lines_spread_over_three_servers_with_the_single_server_records(tmp_path, caplog):
    n = 12
    inp = requests(tmp_path / "in.jsonl", n)
    with ExitStack() as stack:
        fleet = servers(stack, 0.1, 0.1, 0.1)
        urls = [s.url for s in fleet]
        assert grade(inp, tmp_path / "fleet.jsonl", urls, "-j", "6") == 0
        posts = [len(s.app.posts) for s in fleet]
        assert grade(inp, tmp_path / "one.jsonl", urls[:1]) == 0
    assert sum(posts) == n and min(posts) >= 2, posts  # every server took its share, each line once
    many, one = assert_each_line_once(tmp_path / "fleet.jsonl", n), assert_each_line_once(tmp_path / "one.jsonl", n)
    assert [r.keys() for r in many] == [r.keys() for r in one]
    assert [r["result"]["score"] for r in many] == [r["result"]["score"] for r in one]
    s = [m for m in (r.getMessage() for r in caplog.records) if "graded=" in m]
    assert s[0].startswith(f"done: graded={n} failed=0 skipped=0 retried=0 servers: ")
    assert "servers:" not in s[1]  # one --url: the summary of old
    for url, count in zip(urls, posts):
        assert f"{url}={count}" in s[0]


def test_a_slow_server_takes_fewer_lines(tmp_path, caplog):
    n = 24
    inp = requests(tmp_path / "in.jsonl", n)
    with ExitStack() as stack:
        slow, fast = servers(stack, 1.0, 0.05)
        assert grade(inp, tmp_path / "out.jsonl", [slow.url, fast.url], "-j", "4") == 0
    assert_each_line_once(tmp_path / "out.jsonl", n)
    # Round-robin would give 12 each; by least outstanding the slow one keeps ~2 in flight for a second.
    assert len(fast.app.posts) >= 2 * len(slow.app.posts) > 0, (len(fast.app.posts), len(slow.app.posts))
    assert answered(caplog, fast.url) == len(fast.app.posts)


def test_a_server_whose_engine_dies_has_its_lines_retried_on_the_others(tmp_path, caplog):
    n = 18
    inp = requests(tmp_path / "in.jsonl", n)
    with ExitStack() as stack:
        a, b, c = servers(stack, 0.2, 0.2, 0.2)
        killer = when(lambda: len(b.app.posts) >= 2, lambda: setattr(b.engine, "dead", True))
        assert grade(inp, tmp_path / "out.jsonl", [a.url, b.url, c.url], "-j", "6") == 0
        killer.join()
        posts = [len(s.app.posts) for s in (a, b, c)]
    assert_each_line_once(tmp_path / "out.jsonl", n)  # every line graded exactly once, by the live ones
    r = retried(caplog)
    assert r >= MAX_STRIKES and sum(posts) == n + r  # each retry is one more request, nothing else
    assert f"{b.url}: 1 down" in summary(caplog) and answered(caplog, b.url) < posts[1]
    assert answered(caplog, a.url) + answered(caplog, b.url) + answered(caplog, c.url) == n
    assert any(f"{b.url} out of rotation" in m.getMessage() and "503" in m.getMessage() for m in caplog.records)


def test_a_server_shut_down_mid_run_has_its_lines_retried(tmp_path, caplog):
    n = 16
    inp = requests(tmp_path / "in.jsonl", n)
    with ExitStack() as stack:
        a, b = servers(stack, 0.1, 0.1)
        stopper = when(lambda: len(b.app.posts) >= 2, lambda: setattr(b, "should_exit", True))
        assert grade(inp, tmp_path / "out.jsonl", [a.url, b.url], "-j", "4") == 0
        stopper.join()
    assert_each_line_once(tmp_path / "out.jsonl", n)
    assert retried(caplog) >= 1 and f"{b.url}: 1 down" in summary(caplog)
    assert answered(caplog, a.url) + answered(caplog, b.url) == n


def test_a_server_down_at_start_is_skipped_and_comes_back(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(client, "REPROBE_S", 0.05)
    n = 16
    inp = requests(tmp_path / "in.jsonl", n)
    with ExitStack() as stack:
        a, b = servers(stack, 0.15, 0.15)
        gate = Gate(b.app.app)
        b.app.app = gate  # b's PostLog now answers through the gate: 503 until it opens
        opener = when(lambda: len(a.app.posts) >= 4, gate.open)
        assert grade(inp, tmp_path / "out.jsonl", [a.url, b.url], "-j", "2") == 0
        opener.join()
    assert_each_line_once(tmp_path / "out.jsonl", n)
    assert f"{b.url}: not up at start, back" in summary(caplog) and answered(caplog, b.url) >= 1
    assert retried(caplog) == 0 and b.app.posts  # skipped at start: no line was sent there until it was back
    warned = [m.getMessage() for m in caplog.records if m.levelno == logging.WARNING]
    assert any(b.url in m and "skipping" in m for m in warned), warned


def test_a_server_not_listening_at_start_is_skipped(tmp_path, caplog):
    dead = f"http://127.0.0.1:{free_port()}"
    inp = requests(tmp_path / "in.jsonl", 4)
    with ExitStack() as stack:
        (a,) = servers(stack, 0.0)
        assert grade(inp, tmp_path / "out.jsonl", [dead, a.url]) == 0
    assert_each_line_once(tmp_path / "out.jsonl", 4)
    assert f"{dead}: not up at start" in summary(caplog) and f"{a.url}=4" in summary(caplog)
    assert any(dead in m.getMessage() and "cannot reach" in m.getMessage() for m in caplog.records
               if m.levelno == logging.WARNING)


def test_all_servers_down_exits_5_naming_each(tmp_path, caplog):
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    inp = requests(tmp_path / "in.jsonl", 2)
    assert grade(inp, tmp_path / "out.jsonl", dead) == client.EXIT_UNREACHABLE
    err = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(err) == 1 and all(u in err[0] for u in dead), err
    assert "none of the 2 servers" in err[0] and "judgeforge serve" in err[0]
    assert not (tmp_path / "out.jsonl").exists()


def test_a_fleet_that_dies_mid_run_resumes_on_another(tmp_path, caplog):
    n = 20
    inp = requests(tmp_path / "in.jsonl", n)
    out = tmp_path / "out.jsonl"
    with ExitStack() as stack:
        a, b, c, d = servers(stack, 0.1, 0.1, 0.0, 0.0)

        def stop_both():
            a.should_exit = b.should_exit = True

        stopper = when(lambda: len(a.app.posts) + len(b.app.posts) >= 6, stop_both)
        assert grade(inp, out, [a.url, b.url], "-j", "4") == client.EXIT_UNREACHABLE
        stopper.join()
        err = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(err) == 1 and a.url in err[0] and b.url in err[0], err
        # A line whose answer was lost on one and that the other refused is written as failed: retried below.
        first = [r for r in records(out) if "result" in r]
        k = len(first)
        assert 0 < k < n
        caplog.clear()
        assert grade(inp, out, [c.url, d.url]) == 0  # another fleet: the same records, so it resumes
        assert len(c.app.posts) + len(d.app.posts) == n - k  # only what was missing, failures included
    assert f"graded={n - k} failed=0 skipped={k}" in summary(caplog)
    final = assert_each_line_once(out, n)
    assert {x["hash"]: x for x in first}.items() <= {x["hash"]: x for x in final}.items()


def test_a_refused_key_stops_the_fleet(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("JUDGEFORGE_API_KEY", "wrong")
    inp = requests(tmp_path / "in.jsonl", 3)
    with ExitStack() as stack:
        a, b = servers(stack, 0.0, 0.0)
        assert grade(inp, tmp_path / "out.jsonl", [a.url, b.url]) == client.EXIT_USAGE
    assert "JUDGEFORGE_API_KEY" in caplog.text and "401" in caplog.text


def test_a_url_given_twice_is_a_usage_error(tmp_path, capsys):
    inp = requests(tmp_path / "in.jsonl", 1)
    with pytest.raises(SystemExit) as e:
        grade(inp, tmp_path / "out.jsonl", ["http://127.0.0.1:9", "http://127.0.0.1:9/"])
    assert e.value.code == 2 and "given twice" in capsys.readouterr().err


def test_the_command_over_server_processes_survives_a_kill(tmp_path):
    """The README's "Scaling out" command, over two `judgeforge serve` processes; one is killed mid-run."""
    env = {"JUDGEFORGE_API_KEY": KEY, "JUDGEFORGE_SCRIPTED_DELAY": "0.2"}
    procs = [ServerProcess(None, ["engine.max_model_len=4096"], env=env, log=tmp_path / f"serve{i}.log",
                           entry=SCRIPTED) for i in range(2)]
    n, out = 24, tmp_path / "results.jsonl"
    inp = requests(tmp_path / "requests.jsonl", n)
    try:
        for p in procs:
            p.wait_ready(120)
        a, b = (p.url for p in procs)
        cmd = [sys.executable, "-m", "judgeforge.cli", "grade", "--input", str(inp), "--output", str(out),
               "--url", a, "--url", b, "-j", "8"]
        run = subprocess.Popen(cmd, env={**os.environ, **env, "NO_PROXY": "127.0.0.1"},
                               stderr=subprocess.PIPE, text=True)
        while not out.exists() or out.read_bytes().count(b"\n") < 4:
            assert run.poll() is None, run.communicate()
            time.sleep(0.01)
        os.killpg(procs[1].proc.pid, signal.SIGKILL)  # b dies with lines in flight: their answers are lost
        _, err = run.communicate(timeout=120)
    finally:
        for p in procs:
            p.stop(30)
    assert run.returncode == 0, err
    assert_each_line_once(out, n)
    found = re.search(r"retried=(\d+) servers: (\S+)=(\d+) (\S+)=(\d+) \((\S+): 1 down\)", err)
    assert found and int(found[1]) >= 1 and found[6] == b, err
    assert int(found[3]) + int(found[5]) == n and "Traceback" not in err


class Gate:
    """ASGI wrapper answering 503 to everything, /health included, until `open()`: a server that
    cannot grade yet (its engine still loading, say)."""

    def __init__(self, app):
        self.app, self.closed = app, True

    def open(self) -> None:
        self.closed = False

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.closed:
            return await self.app(scope, receive, send)
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"detail": "engine loading"}'})


# -- hung servers: stopped (SIGSTOP) processes, whose kernel still accepts connections ----------------


@pytest.fixture(scope="module")
def processes(tmp_path_factory):
    """Two `judgeforge serve` processes over ScriptedEngines; a test may stop one, and continues it."""
    env = {"JUDGEFORGE_API_KEY": KEY, "JUDGEFORGE_SCRIPTED_DELAY": "0.1"}
    logs = tmp_path_factory.mktemp("hung")
    procs = [ServerProcess(None, ["engine.max_model_len=4096"], env=env, log=logs / f"serve{i}.log",
                           entry=SCRIPTED) for i in range(2)]
    try:
        for p in procs:
            p.wait_ready(120)
        yield procs
    finally:
        for p in procs:
            if p.proc.poll() is None:
                os.kill(p.proc.pid, signal.SIGCONT)  # a stopped process would not see the SIGTERM
            p.stop(30)


def start_grade(inp: Path, out: Path, urls, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "judgeforge.cli", "grade", "--input", str(inp), "--output", str(out),
           *(a for u in urls for a in ("--url", u)), *extra]
    env = {**os.environ, "JUDGEFORGE_API_KEY": KEY, "NO_PROXY": "127.0.0.1"}
    return subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)


def finish(run: subprocess.Popen, timeout: float) -> tuple[int, str]:
    """The run's exit code and stderr; a failure when it is still running after `timeout` s (it stalled)."""
    try:
        _, err = run.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        run.kill()
        _, err = run.communicate()
        pytest.fail(f"`judgeforge grade` still running after {timeout}s: {err[-2000:]}")
    return run.returncode, err


def test_a_server_stopped_before_the_run_does_not_stall_it(tmp_path, processes):
    """With the default deadlines: the stopped server's /health probe gives up after HEALTH_TIMEOUT_S, so it
    is skipped and the healthy one grades every line; alone, a stopped server ends the run with exit 5."""
    a, b = processes
    n, out = 16, tmp_path / "out.jsonl"
    inp = requests(tmp_path / "in.jsonl", n)
    os.kill(b.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        rc, err = finish(start_grade(inp, out, [a.url, b.url], "-j", "8"), timeout=90)
        took = time.monotonic() - t0
        t0 = time.monotonic()
        rc_alone, err_alone = finish(start_grade(inp, tmp_path / "alone.jsonl", [b.url]), timeout=90)
        took_alone = time.monotonic() - t0
    finally:
        os.kill(b.proc.pid, signal.SIGCONT)
    assert rc == 0, err + "".join(line for line in out.read_text().splitlines(True) if '"error"' in line)
    assert_each_line_once(out, n)
    assert f"{a.url}={n} {b.url}=0 ({b.url}: not up at start)" in err, err
    assert f"did not answer in time (/health probe of {client.HEALTH_TIMEOUT_S:g}s" in err, err
    # The probe, the CLI's start and 16 short gradings (generous: a loaded 2-core machine starts Python slowly).
    assert took < client.HEALTH_TIMEOUT_S + 40, took
    assert rc_alone == client.EXIT_UNREACHABLE and f"the server at {b.url} did not answer in time" in err_alone
    assert took_alone < client.HEALTH_TIMEOUT_S + 30, took_alone
    assert not (tmp_path / "alone.jsonl").exists()


@pytest.mark.parametrize("flag, what", [("--read-timeout", "read timeout"),
                                        ("--request-timeout", "request deadline")])
def test_a_server_stopped_mid_run_has_its_lines_sent_on_after_the_deadline(tmp_path, processes, flag, what):
    """Stopped once the run is under way (after its /health check): the lines in flight there, and the next
    one sent there, wait out the deadline, then go to the other server; the stopped one is out of rotation."""
    a, b = processes
    n, out, deadline = 24, tmp_path / "out.jsonl", 5  # well above a 0.1 s grading, even on a loaded machine
    inp = requests(tmp_path / "in.jsonl", n)
    run = start_grade(inp, out, [a.url, b.url], "-j", "8", flag, str(deadline))
    try:
        limit = time.monotonic() + 60
        while not out.exists() or out.read_bytes().count(b"\n") < 4:
            assert run.poll() is None and time.monotonic() < limit, run.communicate()
            time.sleep(0.01)
        os.kill(b.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        rc, err = finish(run, timeout=90)
        took = time.monotonic() - stopped
    finally:
        if run.poll() is None:
            run.kill()
        os.kill(b.proc.pid, signal.SIGCONT)
    assert rc == 0, err
    assert_each_line_once(out, n)
    found = re.search(r"retried=(\d+) servers: (\S+)=(\d+) (\S+)=(\d+) \((\S+): 1 down\)", err)
    assert found and int(found[1]) >= 1 and found[6] == b.url, err
    assert int(found[3]) + int(found[5]) == n and int(found[3]) > int(found[5]), err  # a took the rest
    assert f"{b.url} out of rotation: the server at {b.url} did not answer in time ({what} of {deadline}s" in err
    assert took < deadline + 30, took  # the deadline, then the remaining lines on a
