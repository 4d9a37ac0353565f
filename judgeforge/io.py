"""Atomic, deterministic file output and small JSONL helpers.

Readers of an output never see a half-written file: everything is written to
a temporary sibling and renamed into place (rename is atomic on POSIX).

Output directories are judgeforge's own: each holds a marker naming its kind
(`OUTPUT_MARKER`), and a command writes only where nothing is, or replaces an
earlier output of its own kind when asked to (`--overwrite`); a user's directory or
file is refused untouched (`check_out`). A directory written as a run goes (train,
eval) has one writer at a time (`run_lock`, `claim_dir`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

log = logging.getLogger(__name__)
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; outputs are ordinary files
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def dumps_record(record: Any) -> str:
    """One canonical JSON line: stable key order is the caller's, no ASCII escaping."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def write_jsonl(path: str | Path, records: Iterable[Any]) -> int:
    """Write records as JSONL (not atomic on its own: use inside `atomic_dir`)."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(dumps_record(r))
            f.write("\n")
            n += 1
    return n


def atomic_write_jsonl(path: str | Path, records: Iterable[Any]) -> int:
    lines = [dumps_record(r) + "\n" for r in records]
    atomic_write_text(path, "".join(lines))
    return len(lines)


def read_jsonl(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_complete_jsonl(path: str | Path, complete: Callable[[dict], bool]) -> tuple[list[dict], int]:
    """(the JSON objects of `path`'s lines that `complete` accepts, how many non-blank lines it
    dropped): an append-only results file whose last line may be torn by a kill mid-write.
    No file there is ([], 0)."""
    path = Path(path)
    if not path.is_file():
        return [], 0
    recs, dropped = [], 0
    for raw in path.read_bytes().splitlines():
        try:
            rec = json.loads(raw)
            ok = isinstance(rec, dict) and complete(rec)
        except ValueError:
            ok = False
        if ok:
            recs.append(rec)
        elif raw.strip():
            dropped += 1
    return recs, dropped


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=False) + "\n")


OUTPUT_MARKER = ".judgeforge-output.json"
"""Written into every output directory, {"kind": KIND}: what makes a directory judgeforge's to replace."""
RUN_LOCK = ".judgeforge.lock"
"""The advisory lock file inside a run directory (`run_lock`); it holds the writer's PID."""
OWN_FILES = frozenset({OUTPUT_MARKER, RUN_LOCK})

KINDS = {
    "data": "a `judgeforge data build` output",
    "eval": "a `judgeforge eval` report",
    "train": "a `judgeforge train` run",
    "model": "a merged model (`judgeforge train merge`)",
    "adapter": "a shipped adapter (`judgeforge model ship`)",
    "calibrate": "a `judgeforge cascade calibrate` output",
}
# Outputs written before the marker existed, recognised by files each kind always writes; a
# directory that holds them all is that kind (first match wins).
LEGACY_SIGNATURES = {
    "data": ("manifest.json", "train.jsonl", "test.jsonl"),
    "eval": ("metrics.json", "predictions.jsonl"),
    "train": ("config.yaml", "data.json"),
    "adapter": ("adapter_config.json", "adapter_model.safetensors"),
    "model": ("config.json", "judgeforge.json"),
    "calibrate": ("calibration.json",),
}


class OutputError(ValueError):
    """An output location judgeforge will not write to (or not now); the message says why and
    what to do. Nothing was changed there."""


def output_kind(path: str | Path) -> str | None:
    """The kind of judgeforge output directory `path` is (its marker, else a legacy signature),
    None when it is not one."""
    path = Path(path)
    marker = path / OUTPUT_MARKER
    if marker.is_file():
        try:
            kind = json.loads(marker.read_text(encoding="utf-8")).get("kind")
        except (OSError, ValueError, AttributeError):
            return None
        return kind if isinstance(kind, str) else None
    for kind, files in LEGACY_SIGNATURES.items():
        if all((path / f).exists() for f in files):
            return kind
    return None


def check_out(out: str | Path, kind: str, *, overwrite: bool = False, resume: bool = False) -> str:
    """May a `kind` output be written at `out`? "new" (nothing there, or an empty directory),
    "resume" (an earlier `kind` output the caller continues: `resume`), "replace" (one that
    `overwrite` lets go); anything else raises OutputError, before anything is touched."""
    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        what = "a symbolic link" if out.is_symlink() else "an existing file"
        raise OutputError(f"output directory {out} is {what}, not a directory: nothing was changed; give a "
                          "directory path")
    entries = sorted(set(os.listdir(out)) - OWN_FILES) if out.exists() else []
    if not entries:
        return "new"
    found = output_kind(out)
    if found != kind:
        raise OutputError(f"output directory {out} exists and is {_describe(found, entries)}: refusing to "
                          f"replace it (nothing was changed); --overwrite replaces only {KINDS.get(kind, kind)}: "
                          "give a new or empty directory")
    if resume:
        return "resume"
    if not overwrite:
        raise OutputError(f"output directory {out} already holds {KINDS.get(kind, kind)}: pass --overwrite to "
                          "replace it, or give a new directory (nothing was changed)")
    return "replace"


def _describe(kind: str | None, entries: list[str]) -> str:
    if kind:
        return KINDS.get(kind, f"a `{kind}` output")
    return f"not a judgeforge output (it holds {', '.join(entries[:3])}{', ...' if len(entries) > 3 else ''})"


def check_file_out(path: str | Path, what: str, ours: Callable[[Path], bool], *, overwrite: bool = False) -> None:
    """`check_out` for a command that writes single files (eval compare's --out, --json): a
    directory or a link there, or a file `ours` does not take for `what`, is refused; an earlier
    `what` is replaced only with `overwrite`."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_file():
        raise OutputError(f"{path} exists and is not a file: refusing to write {what} there (nothing was changed)")
    try:
        mine = ours(path)
    except (OSError, ValueError):
        mine = False
    if not mine:
        raise OutputError(f"{path} exists and is not {what}: refusing to replace it (nothing was changed); "
                          f"--overwrite replaces only {what}: give another path")
    if not overwrite:
        raise OutputError(f"{path} already holds {what}: pass --overwrite to replace it, or give another path")


@contextlib.contextmanager
def atomic_dir(final: str | Path, kind: str | None, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a staging directory beside `final`; on success it replaces `final` in one step.

    `final` is checked (`check_out`) before anything is created and again before the swap, and the
    staging directory gets the `kind` marker. `kind` None is for judgeforge's own paths (the model
    cache): whatever is there is replaced. On error the staging directory is removed and `final`
    is left as it was; no hidden sibling outlives the call (a killed writer's are removed by the
    next write of `final`).
    """
    final = Path(final)
    remove_stale_siblings(final)
    if kind is not None:
        check_out(final, kind, overwrite=overwrite)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.{os.getpid()}-", suffix=".tmp"))
    os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp makes 0700; outputs are ordinary directories
    try:
        yield tmp
        if kind is not None:
            check_out(final, kind, overwrite=overwrite)  # something may have appeared there meanwhile
            atomic_write_json(tmp / OUTPUT_MARKER, {"kind": kind})
        publish_dir(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the failed staging, or the old output swapped out


def publish_dir(src: Path, final: Path) -> None:
    """Move the directory `src` to `final`. An existing `final` is exchanged with `src` in one
    step where the file system can (renameat2 RENAME_EXCHANGE), so readers always find one of the
    two; the old output is then at `src`, for the caller to remove. A run lock inside `final` is
    hard-linked into `src` first: the same file, so its holder keeps the lock across the swap."""
    if not final.exists() and not final.is_symlink():
        os.rename(src, final)
        return
    if (final / RUN_LOCK).is_file() and not (src / RUN_LOCK).exists():
        os.link(final / RUN_LOCK, src / RUN_LOCK)
    if _exchange(src, final):
        return
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    os.rename(final, old)
    try:
        os.rename(src, final)
    except BaseException:
        os.rename(old, final)
        raise
    os.rename(old, src)  # the caller removes `src`: nothing named .old is left


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where the platform or file system cannot."""
    import ctypes
    import errno

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(b))


def remove_stale_siblings(final: Path) -> None:
    """Clear up after a killed `atomic_dir` of `final`, when its process is gone (a live writer's
    siblings are left alone): its `.NAME.PID-*.tmp` staging directories are removed, and an
    `.NAME.old-PID` one (killed mid-swap, without RENAME_EXCHANGE) is the previous output: put
    back when `final` is missing, else removed."""
    import re

    pattern = re.compile(rf"\.{re.escape(final.name)}\.(?:old-(\d+)|(\d+)-[^/]*\.tmp)")
    for p in sorted(final.parent.iterdir()) if final.parent.is_dir() else ():
        m = pattern.fullmatch(p.name)
        if not m or not p.is_dir() or p.is_symlink() or _alive(int(m.group(1) or m.group(2))):
            continue
        if m.group(1) and not final.exists():
            log.warning("restoring %s from %s, left by a writer killed while replacing it", final, p)
            os.rename(p, final)
        else:
            log.info("removing %s, left by a killed writer of %s", p, final)
            shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


_HELD_LOCKS: set[int] = set()


def _drop_locks_in_child() -> None:
    """A forked child (an engine's worker) closes its copies of the run locks: the lock then dies
    with the process that took it, not with the last of its children. The parent keeps it."""
    for fd in _HELD_LOCKS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD_LOCKS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_locks_in_child)


@contextlib.contextmanager
def run_lock(out: str | Path) -> Iterator[Path]:
    """Hold the advisory lock of the run directory `out` (created if missing) for the block: a
    second writer gets OutputError at once, naming the holder's PID. It is an flock, so the kernel
    drops it when the holder exits, `kill -9` included; neither programs the holder starts nor
    its forked children keep it. Not re-entrant: one holder per process and directory."""
    import fcntl

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RUN_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise OutputError(f"{out} is in use by another judgeforge process (PID {holder}): a run directory "
                              "has one writer; wait for it to end or stop it, or give another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD_LOCKS.add(fd)
        yield path
    finally:
        _HELD_LOCKS.discard(fd)
        os.close(fd)  # closing the only descriptor releases the lock


@contextlib.contextmanager
def claim_dir(out: str | Path, kind: str, *, overwrite: bool = False, resume: bool = False,
              fresh: bool = False) -> Iterator[str]:
    """For commands that write into their directory as they go (train's checkpoints, eval's
    journal): check `out` (`check_out`), hold its `run_lock` and mark it a `kind` output for the
    block, which gets check_out's verdict. `fresh`: an earlier output there is emptied first
    (train --overwrite). The directories this call created are removed again when the run left
    nothing in `out` but its own files (it failed before writing anything)."""
    out = Path(out)
    check_out(out, kind, overwrite=overwrite, resume=resume)
    created = [d for d in (out, *out.parents) if not d.exists()]  # what a failed run removes again
    with run_lock(out):
        state = check_out(out, kind, overwrite=overwrite, resume=resume)  # now that no one else writes
        if fresh and state != "new":
            _empty_dir(out)
        mark_out(out, kind)
        try:
            yield state
        finally:
            if created and not set(os.listdir(out)) - OWN_FILES:
                with contextlib.suppress(OSError):
                    os.unlink(out / OUTPUT_MARKER)
                    os.unlink(out / RUN_LOCK)
                    for d in created:  # innermost first; stops at one that is not empty
                        os.rmdir(d)


def mark_out(out: str | Path, kind: str) -> None:
    """Make `out` a directory marked as a `kind` output, for a writer that fills it in place; an
    existing `out` must be empty or an output of that kind already (check_out)."""
    out = Path(out)
    check_out(out, kind, resume=True)
    out.mkdir(parents=True, exist_ok=True)
    marker = out / OUTPUT_MARKER
    if not marker.is_file() or output_kind(out) != kind:
        atomic_write_json(marker, {"kind": kind})


def _empty_dir(out: Path) -> None:
    """Remove everything in `out` but its run lock, which the caller holds."""
    for p in out.iterdir():
        if p.name == RUN_LOCK:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
