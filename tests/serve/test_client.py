"""`judgeforge grade` (serve/client.py): clear errors, exit codes, resumable output, Ctrl-C.

HTTP-mode runs talk to a real server: uvicorn on 127.0.0.1 in a thread, serving
`create_app` over a ScriptedEngine (0.3 s per grading) with an API key. Where a
hang or a signal matters, the real CLI runs as a subprocess.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from judgeforge.serve import client
from judgeforge.serve.process import free_port
from testing.engines import ScriptedEngine
from testing.servers import scripted_server

KEY = "client-test-key"
BODY = {"instruction": "What is 2+2?", "response": "4", "rubric": "helpfulness", "n": 1}
N = 10


@pytest.fixture(scope="module")
def server():
    with scripted_server(ScriptedEngine(delay=0.3), KEY) as srv:
        yield srv


@pytest.fixture(autouse=True)
def info_logs(caplog):
    caplog.set_level(logging.INFO, logger="judgeforge.serve.client")  # the summary line is INFO


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv("JUDGEFORGE_API_KEY", KEY)


def write_requests(path: Path, bodies: list) -> Path:
    path.write_text("".join((b if isinstance(b, str) else json.dumps(b)) + "\n" for b in bodies))
    return path


def good(n: int = N) -> list[dict]:
    return [{"id": f"r{i}", **BODY, "response": f"answer {i}"} for i in range(n)]


def records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def complete_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def cli_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "judgeforge.cli", "grade", *args]


def cli_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "JUDGEFORGE_API_KEY"}
    return {**env, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1", **extra}


def grade(inp: Path, out: Path, *extra: str) -> int:
    return client.main(["-i", str(inp), "-o", str(out), *extra])


def summary(caplog) -> str:
    return [r.getMessage() for r in caplog.records if "graded=" in r.getMessage()][-1]


# -- 1. bad flags and inputs: a clear message and exit 2, never a hang or a traceback ----------


@pytest.mark.parametrize("j", ["0", "-1", "two"])
def test_concurrency_below_one_is_a_usage_error(server, tmp_path, j):
    inp = write_requests(tmp_path / "in.jsonl", good(2))
    r = subprocess.run(cli_cmd("-i", str(inp), "-o", str(tmp_path / "out.jsonl"), "--url", server.url,
                               "-j", j), env=cli_env(JUDGEFORGE_API_KEY=KEY), capture_output=True,
                       text=True, timeout=60)  # -j 0 used to wait forever on Semaphore(0)
    assert r.returncode == 2 and ">= 1" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_missing_input_names_the_file(tmp_path, caplog):
    missing = tmp_path / "nope.jsonl"
    assert grade(missing, tmp_path / "out.jsonl") == client.EXIT_USAGE
    assert str(missing) in caplog.text and "does not exist" in caplog.text
    assert not (tmp_path / "out.jsonl").exists()


def test_unreachable_server_names_the_url(tmp_path, caplog, keyed):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    inp = write_requests(tmp_path / "in.jsonl", good(2))
    assert grade(inp, tmp_path / "out.jsonl", "--url", url) == client.EXIT_UNREACHABLE
    err = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(err) == 1 and url in err[0].getMessage() and "judgeforge serve" in err[0].getMessage()
    assert not err[0].exc_info  # no traceback without --debug
    assert not (tmp_path / "out.jsonl").exists()


def test_debug_shows_the_traceback(tmp_path, caplog, keyed):
    url = f"http://127.0.0.1:{free_port()}"
    inp = write_requests(tmp_path / "in.jsonl", good(1))
    assert grade(inp, tmp_path / "out.jsonl", "--url", url, "--debug") == client.EXIT_UNREACHABLE
    err = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert err and err[0].exc_info and err[0].exc_info[0] is client.GradeError


def test_unreachable_server_cli_has_no_traceback(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    inp = write_requests(tmp_path / "in.jsonl", good(1))
    r = subprocess.run(cli_cmd("-i", str(inp), "-o", str(tmp_path / "o.jsonl"), "--url", url),
                       env=cli_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 5 and url in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_wrong_key_is_a_usage_error(server, tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("JUDGEFORGE_API_KEY", "wrong")
    inp = write_requests(tmp_path / "in.jsonl", good(3))
    assert grade(inp, tmp_path / "out.jsonl", "--url", server.url) == client.EXIT_USAGE
    assert "JUDGEFORGE_API_KEY" in caplog.text and "401" in caplog.text


# -- 3. --output that is --input is refused -----------------------------------------------------


@pytest.mark.parametrize("how", ["same", "dotted", "symlink", "hardlink"])
def test_output_equal_to_input_is_refused(tmp_path, caplog, how):
    inp = write_requests(tmp_path / "in.jsonl", good(2))
    before = inp.read_bytes()
    out = {"same": inp, "dotted": tmp_path / "sub" / ".." / "in.jsonl", "symlink": tmp_path / "link.jsonl",
           "hardlink": tmp_path / "hard.jsonl"}[how]
    (tmp_path / "sub").mkdir()
    if how == "symlink":
        out.symlink_to(inp)
    elif how == "hardlink":
        os.link(inp, out)
    assert grade(inp, out, "--url", "http://127.0.0.1:9") == client.EXIT_USAGE
    assert "same file as --input" in caplog.text and inp.read_bytes() == before


# -- 4. exit codes tell all-ok / some failed / none ok ------------------------------------------


def test_some_failed_exits_3_in_input_order(server, tmp_path, caplog, keyed):
    bodies = good(7) + ["not json", {**BODY, "n": 99}, {**BODY, "rubric": "nope"}]
    inp = write_requests(tmp_path / "in.jsonl", bodies)
    out = tmp_path / "out.jsonl"
    assert grade(inp, out, "--url", server.url, "-j", "4") == client.EXIT_SOME_FAILED
    recs = records(out)
    assert [r["line"] for r in recs] == list(range(1, 11)) and [r["index"] for r in recs] == list(range(10))
    assert [r["id"] for r in recs[:7]] == [f"r{i}" for i in range(7)]
    assert [r["error"]["status"] for r in recs[7:]] == [400, 422, 422]
    assert "graded=7 failed=3 skipped=0" in summary(caplog)


def test_none_ok_exits_4(server, tmp_path, keyed):
    inp = write_requests(tmp_path / "in.jsonl", ["not json", {**BODY, "n": 99}])
    assert grade(inp, tmp_path / "out.jsonl", "--url", server.url) == client.EXIT_ALL_FAILED


def test_help_documents_exit_codes(capsys):
    with pytest.raises(SystemExit) as e:
        client.main(["--help"])
    text = capsys.readouterr().out
    assert e.value.code == 0 and "Exit codes:" in text
    assert all(f"  {c} " in text for c in ("0", "2", "3", "4", "5", "130"))


# -- 2. results land as they finish; reruns resume ----------------------------------------------


def test_sigint_keeps_finished_results_and_rerun_grades_only_the_rest(server, tmp_path):
    inp = write_requests(tmp_path / "in.jsonl", good())
    out = tmp_path / "out.jsonl"
    cmd = cli_cmd("-i", str(inp), "-o", str(out), "--url", server.url, "-j", "1")
    env = cli_env(JUDGEFORGE_API_KEY=KEY)
    # Ctrl-C as in a terminal: a suite started in the background by a shell without job control (nohup
    # cmd &) has SIGINT ignored, and a child inheriting that would rightly ignore the signal.
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while complete_lines(out) < 3:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == client.EXIT_INTERRUPTED, err
    assert "Traceback" not in err and out.read_bytes().endswith(b"\n")
    first = records(out)
    k = len(first)
    assert 0 < k < N and all("result" in r for r in first), err
    assert f"graded={k} failed=0 skipped=0" in err

    posts = len(server.app.posts)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and f"graded={N - k} failed=0 skipped={k}" in r.stderr, r.stderr
    assert len(server.app.posts) - posts == N - k  # the server saw only the remaining lines
    final = records(out)
    assert [x["line"] for x in final] == list(range(1, N + 1))  # each line once, in input order
    assert [x["id"] for x in final] == [f"r{i}" for i in range(N)]
    assert {x["hash"]: x for x in first}.items() <= {x["hash"]: x for x in final}.items()


def test_torn_last_line_is_dropped_and_regraded(server, tmp_path, caplog, keyed):
    inp = write_requests(tmp_path / "in.jsonl", good())
    out = tmp_path / "out.jsonl"
    assert grade(inp, out, "--url", server.url) == 0
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:-2]) + lines[-1][: len(lines[-1]) // 2])  # killed mid-write
    caplog.clear()
    assert grade(inp, out, "--url", server.url) == 0
    assert "graded=2 failed=0 skipped=8" in summary(caplog)
    assert [r["line"] for r in records(out)] == list(range(1, N + 1))


def test_failed_lines_are_retried_and_replaced(server, tmp_path, caplog, keyed):
    inp = write_requests(tmp_path / "in.jsonl", good(4))
    out = tmp_path / "out.jsonl"
    assert grade(inp, out, "--url", server.url) == 0
    recs = records(out)
    recs[2] = {k: v for k, v in recs[2].items() if k != "result"} | {"error": {"status": 504, "detail": "x"}}
    out.write_text("".join(json.dumps(r) + "\n" for r in recs))
    caplog.clear()
    assert grade(inp, out, "--url", server.url) == 0
    assert "graded=1 failed=0 skipped=3" in summary(caplog)
    again = records(out)
    assert [r["line"] for r in again] == [1, 2, 3, 4] and all("result" in r for r in again)


def test_rerun_when_done_sends_nothing(server, tmp_path, caplog, keyed):
    inp = write_requests(tmp_path / "in.jsonl", good(3))
    out = tmp_path / "out.jsonl"
    assert grade(inp, out, "--url", server.url) == 0
    posts, before = len(server.app.posts), out.read_bytes()
    assert grade(inp, out, "--url", server.url) == 0
    assert len(server.app.posts) == posts and out.read_bytes() == before
    assert "graded=0 failed=0 skipped=3" in summary(caplog)


def test_progress_is_logged_when_stderr_is_not_a_terminal(server, tmp_path, caplog, keyed, monkeypatch):
    """Under nohup or CI (stderr not a TTY, as under pytest) the bar becomes timed log lines."""
    monkeypatch.setenv("JUDGEFORGE_PROGRESS_INTERVAL", "0")
    caplog.set_level(logging.INFO, logger="judgeforge.progress")
    inp = write_requests(tmp_path / "in.jsonl", good(3))
    out = tmp_path / "out.jsonl"
    assert grade(inp, out, "--url", server.url) == 0
    shown = [r.getMessage() for r in caplog.records if r.name == "judgeforge.progress"]
    assert [m.split(",")[0] for m in shown] == [f"grading: {k}/3 ({k * 100 // 3}%)" for k in (1, 2, 3)]
    assert "req/s" in shown[-1] and "ETA" not in shown[-1] and "ETA" in shown[0]


def test_plan_matches_by_hash_across_moved_lines_and_duplicates():
    rows = [client._parse(n, i, json.dumps(b).encode()) for i, (n, b) in
            enumerate([(1, {"a": 1}), (2, {"a": 1}), (4, {"b": 2}), (5, {"c": 3})])]
    earlier = [{"line": 3, "index": 2, "hash": rows[2].hash, "result": {}},  # moved: line 3 -> 4
               {"line": 2, "index": 1, "hash": rows[0].hash, "result": {}},  # one of two duplicates
               {"line": 5, "index": 3, "hash": rows[3].hash, "error": {}},  # failed: retried
               {"line": 9, "index": 8, "hash": "stale", "result": {}}]  # no longer in the input
    todo, kept = client.plan(rows, earlier)
    assert [r.line for r in todo] == [1, 5]
    assert sorted((r["line"], r["index"]) for r in kept) == [(2, 1), (4, 2)]


def test_local_mode_writes_as_it_goes_and_resumes(tmp_path, caplog, monkeypatch):
    from judgeforge.judge import engines

    engine = ScriptedEngine()
    monkeypatch.setattr(engines, "build_engine", lambda cfg: engine)
    cmp = {"instruction": "Pick", "response_a": "4", "response_b": "5", "rubric": "helpfulness", "n": 1}
    inp = write_requests(tmp_path / "in.jsonl", [{**BODY, "rubric": "nope"}, *good(3), cmp])
    out = tmp_path / "out.jsonl"
    assert grade(inp, out, "--local", "engine.max_model_len=4096") == client.EXIT_SOME_FAILED
    recs = records(out)
    assert [r["line"] for r in recs] == [1, 2, 3, 4, 5] and recs[0]["error"]["status"] == 422
    assert "winner" in recs[4]["result"]
    calls = len(engine.calls)
    caplog.clear()
    assert grade(inp, out, "--local", "engine.max_model_len=4096") == client.EXIT_SOME_FAILED
    assert "graded=0 failed=1 skipped=4" in summary(caplog) and len(engine.calls) == calls


def test_local_bad_config_and_undecodable_line(tmp_path, caplog, monkeypatch):
    from judgeforge.judge import engines

    monkeypatch.setattr(engines, "build_engine", lambda cfg: ScriptedEngine())
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(json.dumps(BODY).encode() + b"\n\xff\xfe not utf-8\n")
    out = tmp_path / "out.jsonl"
    missing = tmp_path / "missing.yaml"
    assert grade(inp, out, "--local", "-c", str(missing)) == client.EXIT_USAGE
    assert "config error" in caplog.text and str(missing) in caplog.text
    assert grade(inp, out, "--local") == client.EXIT_SOME_FAILED
    assert [r.get("error", {}).get("status") for r in records(out)] == [None, 400]
