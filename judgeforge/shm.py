"""The POSIX shared memory of a process tree: which `/dev/shm` files a process holds, and the removal
of the segments that only dead processes held (the watchdog's, judgeforge/watchdog.py).

vLLM's EngineCore and Workers create `psm_*` segments (multiprocessing.shared_memory: their message
queues, 160-250 MB each) and multiprocessing's `sem.mp-*` semaphores; their creator or its resource
tracker unlinks them on a clean exit. After a kill -9 of the engine's parent, the watchdog SIGKILLs
what ignores its SIGTERM, the resource tracker included (it ignores SIGTERM by design), so nothing
unlinked them: 7 segments after 4 kills, held in RAM (tmpfs) until someone removes them by hand.

Files are told apart by inode, not name: glibc's sem_open maps a temporary file and then links it to
its `sem.mp-*` name, so the creator's mapping shows another (deleted) name. Only the two name
patterns are ever removed: multiprocessing's random names for objects that live as long as their
processes, never files meant to outlive them. A segment is removed only if a process of the dead
engine was seen holding it and no live process holds it now (an fd or a mapping in /proc), so a live
engine's segments are never touched. The processes of other users cannot be inspected; the segments
are 0600, so only root's could hold them. Linux only (elsewhere: no-op). Stdlib only: it runs in the
watchdog process.
"""

from __future__ import annotations

import contextlib
import os
import re

SHM_DIR = "/dev/shm"
PREFIXES = ("psm_", "sem.mp-")
# /proc/<pid>/maps: "address perms offset dev inode path"; the inode of every mapping of a /dev/shm file.
_MAPPED_RE = re.compile(rb"^\S+ \S+ \S+ \S+ (\d+) +/dev/shm/", re.M)


def _open_inodes(pid: int) -> set[int]:
    """/dev/shm files `pid` has an fd on (a shared_memory object keeps its fd: a few readlinks)."""
    inodes = set()
    with contextlib.suppress(OSError):  # gone, or not ours to read
        for fd in os.listdir(f"/proc/{pid}/fd"):
            link = f"/proc/{pid}/fd/{fd}"
            with contextlib.suppress(OSError):
                if os.readlink(link).startswith(SHM_DIR + "/"):
                    inodes.add(os.stat(link).st_ino)
    return inodes


def _mapped_inodes(pid: int) -> set[int]:
    """/dev/shm files `pid` maps (a semaphore is only mapped; ~3 ms for a vLLM Worker's maps)."""
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/maps", "rb") as f:
            data = f.read()
        if b" /dev/shm/" in data:
            return {int(inode) for inode in _MAPPED_RE.findall(data)}
    return set()


def held_inodes(pid: int, maps: bool = True) -> set[int]:
    """The /dev/shm files `pid` holds open (with `maps`, also those it maps), by inode."""
    return _open_inodes(pid) | (_mapped_inodes(pid) if maps else set())


def _held_by_live_processes() -> set[int]:
    inodes: set[int] = set()
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                inodes |= held_inodes(int(entry))
    return inodes


def segments() -> dict[int, str]:
    """inode -> name of the `psm_*` and `sem.mp-*` files in /dev/shm."""
    out = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(SHM_DIR):
            if entry.name.startswith(PREFIXES):
                with contextlib.suppress(OSError):
                    out[entry.inode()] = entry.name
    return out


def remove_unheld(inodes: set[int]) -> tuple[list[str], list[str]]:
    """Unlink the segments among `inodes` that no live process holds: (removed, still held). Call it
    once the processes seen holding them are dead."""
    present = {inode: name for inode, name in segments().items() if inode in inodes}
    if not present:
        return [], []
    live = _held_by_live_processes()
    removed = []
    for inode, name in sorted(present.items(), key=lambda item: item[1]):
        if inode not in live:
            with contextlib.suppress(FileNotFoundError):  # a resource tracker got there first
                os.unlink(os.path.join(SHM_DIR, name))
                removed.append(name)
    return removed, sorted(name for inode, name in present.items() if inode in live)
