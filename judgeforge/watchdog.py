"""Ends the processes a process started when it dies, kill -9 included.

Started processes outlive their parent unless something ends them. vLLM's `VLLM::EngineCore` (and its
`VLLM::Worker`s) watches nothing: a `judgeforge eval` killed with SIGTERM or kill -9 left both
re-parented to PID 1, busy (190% CPU, ~8 GB) until killed by hand. The launcher and ranks of `judgeforge
train --num-processes N` went on training after a kill -9 of the command. A local Ray's GCS and raylet
die with their driver, but its `ray::DashboardAgent` and `ray::RuntimeEnvAgent` stay, re-parented.

    dog = Watchdog.start()   # before the processes are started (vLLM's engine, ray.init)
    ...
    dog.stop()               # they were ended cleanly: the watchdog exits and signals nothing

    run_owned(cmd)           # a command run to its end (train's launcher), its processes tied to this one

The watchdog is a small process of its own (stdlib + psutil). While its parent lives it records the
parent's descendants every POLL_S. The parent is gone when its end of the pipe on the watchdog's
stdin closes without "stop" (the kernel closes it on any death, kill -9 included, at once) or when
the watchdog is re-parented (the fallback when a forked child inherited that pipe end). It then
SIGTERMs what it recorded (plus whatever those spawned since), SIGKILLs what is left after GRACE_S,
and exits. It signals only processes it recorded as the parent's descendants; psutil matches pid and
start time, so a reused pid is never hit. Another watchdog among them (a second engine's, an engine's
inside a Ray replica) is left to its own clean-up. A process started less than POLL_S before the
parent died can be missed (its children are not: they are found below the recorded ones).

It also records the `/dev/shm` segments (vLLM's `psm_*`, multiprocessing's `sem.mp-*`) that the
parent and its descendants hold (once more, mappings included, when the parent is found dead, so a
segment opened since the last poll is not missed), and once it has ended them, removes those no live
process holds (judgeforge/shm.py): the SIGKILL that ends what ignores SIGTERM also ends the
resource tracker that would have unlinked them.

Why not prctl(PR_SET_PDEATHSIG) alone: it covers one generation only (a vLLM Worker's parent is the
EngineCore, a rank's is the launcher); for processes a library starts itself (vLLM's multiprocessing
spawn, ray.init) it would have to be patched into the library; and it fires when the *thread* that
started the child exits, which would kill an engine built on a worker thread (asyncio.to_thread) while
its process lives. run_owned sets it on the one command it starts, from the thread that then waits for
that command, so the command hears of a death at once, even within the watchdog's first POLL_S.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shlex
import signal
import subprocess
import sys
import time
import weakref

from judgeforge.hardware import pid_alive, pid_start_time
from judgeforge.logs import LOG_FORMAT
from judgeforge.shm import held_inodes, remove_unheld

POLL_S = 0.5
"""How often the parent's descendants are recorded (a /proc scan: a few ms)."""
GRACE_S = 2.0
"""Between SIGTERM (vLLM's processes shut down on it) and SIGKILL."""
STOP = b"stop\n"
STOP_GRACE_S = 15.0
"""run_owned: how long a command stopped with SIGTERM may take to end its own processes (torchrun
SIGTERMs its ranks and waits for them) before what is left of its tree is ended."""
PR_SET_PDEATHSIG = 1  # linux/prctl.h
MAPS_EVERY = 4
"""Shared-memory mappings are recorded every MAPS_EVERY polls and for each new process (reading a vLLM
Worker's /proc/<pid>/maps costs ~3 ms); open segments (a few readlinks) every poll."""
# psutil is imported where used: the watchdog process needs it, the parent's side only to stop a command.

MODULE = "judgeforge.watchdog"
log = logging.getLogger(MODULE)  # __main__ when run


class Watchdog:
    """The parent's handle on its watchdog process."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc

    @classmethod
    def start(cls) -> "Watchdog":
        # Its own session: a Ctrl-C or a signal to the job's process group must not end the
        # watchdog together with the parent, before it has cleaned up.
        cmd = [sys.executable, "-m", MODULE, str(os.getpid())]
        return cls(subprocess.Popen(cmd, stdin=subprocess.PIPE, start_new_session=True))

    def stop(self, timeout: float = 5.0) -> None:
        """The processes were ended cleanly: the watchdog exits without signalling anything."""
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):  # already gone: nothing to tell
                self.proc.stdin.write(STOP)
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_started: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Each process's start when `running` was first asked about it (psutil.Process keys: pid and start)."""


def running(p) -> bool:
    """Running, not a zombie (an orphan's zombie stays until PID 1 reaps it; some never are), and still
    the process first asked about, not a later one given its pid (judgeforge.hardware.pid_alive)."""
    start = _started.get(p)
    if start is None:
        start = pid_start_time(p.pid)
        if start is not None:
            _started[p] = start
    return pid_alive(p.pid, start)


def watch(parent: int):
    """Record the parent's descendants and the shared-memory segments they and the parent hold until
    the parent is gone (returns (descendants, segments)) or says stop (None)."""
    import psutil

    seen, others, segments, polls = set(), set(), set(), 0
    while os.getppid() == parent:
        before = seen
        with contextlib.suppress(psutil.Error):  # a process ending during the scan
            seen = set(filter(running, seen))
            new = set(psutil.Process(parent).children(recursive=True)) - seen - others
            others |= set(filter(is_watchdog, new))  # this one, and any other: each ends its own
            seen |= new - others
        segments |= record_segments(parent, seen, before, polls % MAPS_EVERY == 0)
        polls += 1
        if select.select([sys.stdin], [], [], POLL_S)[0]:
            data = os.read(sys.stdin.fileno(), 64)
            if data == STOP:
                return None
            if not data:  # EOF without "stop": the parent died
                break
    return seen, segments


def is_watchdog(p) -> bool:
    import psutil

    try:
        return p.cmdline()[1:3] == ["-m", MODULE]
    except psutil.Error:
        return False


def record_segments(parent: int, procs: set, known: set, maps: bool) -> set[int]:
    """The /dev/shm files (by inode) the parent and `procs` hold open, and those they map when `maps`
    (for a process not in `known`, at once: it may not live until the next full scan)."""
    inodes = held_inodes(parent, maps)
    for p in procs:
        inodes |= held_inodes(p.pid, maps or p not in known)
    return inodes


def remove_segments(inodes: set[int]) -> None:
    """Once the recorded processes are ended: unlink their segments that no live process holds."""
    removed, held = remove_unheld(inodes)
    if removed:
        log.warning("removed the shared memory of the ended processes: %s", ", ".join(removed))
    if held:
        log.info("left the shared memory that live processes still hold: %s", ", ".join(held))


def alive_with_children(procs) -> set:
    """The processes still running, with what they have started since they were recorded; no watchdog
    (one recorded between its fork and its exec looked like any other process then)."""
    import psutil

    out = set()
    for p in filter(running, procs):
        with contextlib.suppress(psutil.Error):
            out |= {p, *filter(running, p.children(recursive=True))}
    return {p for p in out if not is_watchdog(p)}


def wait_ended(procs, timeout: float) -> set:
    """Those of `procs` still running after `timeout` (psutil.wait_procs waits on zombies)."""
    deadline = time.monotonic() + timeout
    while (procs := set(filter(running, procs))) and time.monotonic() < deadline:
        time.sleep(0.1)
    return procs


def describe(p) -> str:
    import psutil

    try:
        return f"{p.pid} ({p.name()})"
    except psutil.Error:
        return str(p.pid)


def end(procs, grace: float = GRACE_S, why: str = "their parent is gone", before_kill=None) -> None:
    """SIGTERM the processes (and their descendants), then SIGKILL what is left after `grace`.
    `before_kill(procs)` runs on those left while they are stopped (SIGSTOP): nothing they do then
    (a vLLM EngineCore that ignores SIGTERM goes on loading and opening segments) escapes it."""
    import psutil

    for sig in (signal.SIGTERM, signal.SIGKILL):
        procs = alive_with_children(procs)
        if not procs:
            return
        if sig == signal.SIGKILL and before_kill is not None:
            _signal(procs, signal.SIGSTOP)
            _wait_stopped(procs)
            procs = alive_with_children(procs)
            before_kill(procs)
        log.warning("%s: %s to %s", why, sig.name,
                    ", ".join(describe(p) for p in sorted(procs, key=lambda p: p.pid)))
        _signal(procs, sig)
        procs = wait_ended(procs, grace)


def _wait_stopped(procs, timeout: float = 2.0) -> None:
    """Wait until each of `procs` is stopped or gone (at most `timeout` s): SIGSTOP takes effect when the
    kernel next schedules the process, which on a loaded CPU is after `send_signal` returns (CI saw one
    still running)."""
    import psutil

    done = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    pending, deadline = set(procs), time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for p in list(pending):
            try:
                if p.status() in done:
                    pending.discard(p)
            except psutil.Error:
                pending.discard(p)
        if pending:
            time.sleep(0.01)


def _signal(procs, sig) -> None:
    import psutil

    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)


def run_owned(cmd: list[str], grace: float = STOP_GRACE_S, **popen) -> int:
    """Run `cmd` to its end and return its exit status, its processes tied to this one's life: killed
    (kill -9 included), the watchdog ends the command's tree and the command gets SIGTERM at once
    (PR_SET_PDEATHSIG); stopped by an exception while waiting (the CLI's SIGTERM, Ctrl-C), the command
    gets SIGTERM, `grace` to end its own processes, and what is left is ended before it re-raises."""
    dog = Watchdog.start()
    try:
        # Its own session: Ctrl-C on a terminal reaches this process alone, which stops the command
        # in order, instead of interrupting the launcher and its ranks all at once.
        proc = subprocess.Popen(cmd, start_new_session=True, preexec_fn=_die_with_parent(), **popen)
    except BaseException:
        dog.stop()
        raise
    try:
        code = proc.wait()
    except BaseException:
        _stop(proc, grace)
        dog.stop()  # not reached if interrupted again: the watchdog ends the rest when this process exits
        raise
    dog.stop()
    return code


def _die_with_parent():
    """run_owned's preexec_fn (None off Linux): the command gets SIGTERM when the thread that started it
    ends, which run_owned's does only after the command has (or with the process)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl, parent = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()  # looked up before the fork

    def set_death_signal():
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # the parent died before the call: no signal will come
            os._exit(1)

    return set_death_signal


def _stop(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the command (a launcher ends its ranks on it), wait up to `grace`, then end what is left of
    the tree it had (ranks in sessions of their own are not in its process group)."""
    import psutil

    tree = set()
    with contextlib.suppress(psutil.Error):
        tree = {psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)}
    log.info("stopping %s (pid %d) and its processes", shlex.join(map(str, proc.args[:3])), proc.pid)
    proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)
    end(tree, why="left after the stop")
    proc.wait()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)  # the CLI's, same stderr
    parent = int((argv if argv is not None else sys.argv[1:])[0])
    recorded = watch(parent)
    if recorded is not None:
        procs, segments = recorded
        # The processes outlive their parent until ended: record once more, mappings too, what
        # they opened since the last poll (a segment created then leaked on kill -9).
        procs = alive_with_children(procs)
        segments |= record_segments(parent, procs, set(), True)
        # ... and what they open during the SIGTERM grace (CI once leaked a psm_ segment created then).
        end(procs, before_kill=lambda left: segments.update(record_segments(parent, left, set(), True)))
        remove_segments(segments)
    return 0


if __name__ == "__main__":
    sys.exit(main())
