"""A run stopped with SIGTERM while it starts a local Ray, or killed with kill -9 while it grades,
leaves no Ray process behind.

A `runtime: ray` eval stopped just as it started Ray for its second judge left `ray::DashboardAgent` and
`ray::RuntimeEnvAgent` re-parented to PID 1, ignoring SIGTERM: the signal landed inside `ray.init`,
before the `try` whose `finally` shuts Ray down. A kill -9 of `judgeforge grade --ray` left the same two:
the GCS and the raylet die with the driver, the agents do not. Its own module: the diff of Ray processes
before and after must not see another module's local Ray start or stop.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

pytestmark = pytest.mark.slow

CHILD = textwrap.dedent("""
    import os, signal, sys, time
    import ray._private.services as services
    from judgeforge.cli import _terminate
    from judgeforge.scale.config import RuntimeConfig
    from judgeforge.scale.ray_runner import ray_session

    signal.signal(signal.SIGTERM, _terminate)  # as `judgeforge eval` runs
    if sys.argv[1] == "mid-start":  # the stop lands inside ray.init, right after the raylet is spawned
        start_raylet = services.start_raylet

        def start_raylet_then_stop(*args, **kwargs):
            info = start_raylet(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGTERM)
            return info

        services.start_raylet = start_raylet_then_stop
    with ray_session(RuntimeConfig(kind="ray", replicas=1, num_cpus=1)):
        print("up", flush=True)
        time.sleep(120)
""")

RAY_NAMES = ("gcs_server", "raylet", "ray::", "dashboard", "runtime_env", "log_monitor", "monitor.py",
             "default_worker")


def ray_processes() -> dict[tuple[int, float], str]:
    """Every Ray process on the machine, keyed by (pid, start time) so a reused pid is another one."""
    out = {}
    for p in psutil.process_iter(["pid", "create_time", "cmdline", "name"]):
        cmd = " ".join(p.info["cmdline"] or []) or (p.info["name"] or "")
        if any(n in cmd for n in RAY_NAMES) and p.info["pid"] != os.getpid():
            out[(p.info["pid"], p.info["create_time"])] = cmd[:120]
    return out


def kill_all(keys) -> None:
    for pid, _ in keys:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_and_collect_leftovers(child: subprocess.Popen, before: dict, within: float = 30) -> dict:
    try:
        child.wait(timeout=120)
    finally:
        child.kill()
    deadline, left = time.monotonic() + within, {}
    while time.monotonic() < deadline:
        left = {k: v for k, v in ray_processes().items() if k not in before}
        if not left:
            break
        time.sleep(0.5)
    kill_all(left)  # so a failure here does not leak them into the rest of the suite
    return left


@pytest.mark.parametrize("when", ["mid-start", "up"])
def test_sigterm_while_or_after_ray_starts_leaves_no_ray_process(monkeypatch, when):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    before = ray_processes()
    child = subprocess.Popen([sys.executable, "-c", CHILD, when], stdout=subprocess.PIPE, text=True)
    if when == "up":
        assert child.stdout.readline().strip() == "up"
        child.send_signal(signal.SIGTERM)
    left = stop_and_collect_leftovers(child, before)
    out = child.stdout.read()
    assert child.returncode == 128 + signal.SIGTERM  # Terminated's code, after the clean-up
    if when == "mid-start":
        assert "up" not in out  # the stop was not held past the start: the run never began
    assert not left, f"Ray processes left after SIGTERM ({when}): {sorted(left.values())}"


def descendants(pid: int) -> dict[tuple[int, float], str]:
    """The Ray processes below `pid` (another test's Ray, elsewhere on the machine, is not counted)."""
    try:
        below = {(p.pid, p.create_time()) for p in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return {}
    return {k: v for k, v in ray_processes().items() if k in below}


def running(procs: dict) -> dict:
    """Those of `procs` still running: not ended, not a zombie (re-parented, it waits for PID 1 to reap it)."""
    live = {k: v for k, v in ray_processes().items() if k in procs}
    for pid, start in list(live):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                del live[(pid, start)]
        except psutil.Error:
            del live[(pid, start)]
    return live


def replica(procs: dict) -> bool:
    """A Ray worker that hosts an actor (Ray titles an idle worker ray::IDLE)."""
    agents = ("ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray::IDLE")
    return any(v.startswith("ray::") and v.split()[0] not in agents for v in procs.values())


def test_kill_9_of_grade_ray_leaves_no_ray_process(monkeypatch, tiny_model, tmp_path):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps({"instruction": "What is 2+2?", "response": f"answer {i}",
                                       "rubric": "helpfulness", "n": 1}) + "\n" for i in range(200)))
    cmd = [sys.executable, "-m", "judgeforge.cli", "grade", "-i", str(inp), "-o", str(out), "--ray", "--replicas",
           "1", f"engine.model={tiny_model}", "engine.kind=transformers", "engine.dtype=float32",
           "sampling.max_tokens=8", "runtime.batch_size=1"]
    with open(tmp_path / "stderr", "w") as err:
        driver = subprocess.Popen(cmd, stderr=err)
    seen: dict = {}
    try:
        deadline = time.monotonic() + 300
        while not replica(seen):  # Ray is all up and the replica starts its engine (the run would grade next)
            assert driver.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr").read_text()[-3000:]
            seen |= descendants(driver.pid)
            time.sleep(0.2)
        assert {"ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= {v.split()[0] for v in seen.values() if v}, seen
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 10
        while (left := running(seen)) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        kill_all(running(seen))  # a failure here must not leak them into the rest of the suite
    assert not out.exists()  # killed before the first result
    assert not left, f"Ray processes left 10 s after kill -9 of the driver: {sorted(left.values())}"
