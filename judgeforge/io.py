"""Atomic, deterministic file output and small JSONL helpers.

Readers of an output never see a half-written file: everything is written to
a temporary sibling and renamed into place (rename is atomic on POSIX).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

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


@contextlib.contextmanager
def atomic_dir(final: str | Path, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary directory beside `final`; on success it replaces `final`.

    On error the temporary directory is removed and `final` is left as it was.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
    os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp makes 0700; outputs are ordinary directories
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        if not overwrite:
            shutil.rmtree(tmp, ignore_errors=True)
            raise FileExistsError(final)
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
