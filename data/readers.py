"""Raw record readers: files (JSON list/dict, JSONL, Parquet), Hugging Face datasets, and judgment
stores (the teacher judgments a serving replica kept, data/store.py).

A file's format is told by its content (`sniff_format`), never its extension,
here and in the evaluation-set loaders (eval/sets.py uses `read_objects`).

Every record comes with its original text and position, so a rejected record is
written to rejects.jsonl exactly as it was read. A line that is not JSON is not
an error here: it is a record with `obj=None` that the builder rejects as
`unreadable_line`. A file that is no JSON at all (neither one document nor
lines) is an error (`UnreadableFile`) naming the line and column where it fails.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from judgeforge.config import PACKAGE_ROOT, ConfigError, shipped_path
from judgeforge.data.jsontext import (BOM, BOM_BYTES, DuplicateKey, Repeated, as_written, decode_document,
                                      decode_line, repeated_key)
from judgeforge.data.store import JudgmentStore, StoreError
from judgeforge.data.validate import DUPLICATE_KEY

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Raw:
    line: int
    """1-based line number (JSONL) or element number (JSON list, Parquet, HF rows)."""
    text: str
    """The original line, or the element re-serialised for JSON lists and tables."""
    obj: Any = None
    """The parsed object (None when unreadable)."""
    error: str | None = None
    span: tuple[int, int] | None = None
    """Byte range of the line in its file, when `text` was not carried back from a worker."""
    reason: str | None = None
    """The reject reason when `obj` is None (None: unreadable_line)."""


def resolve_path(path: str) -> Path | None:
    """A relative path is tried against the CWD, then the judgeforge checkout root
    (judgeforge.config.shipped_path); None if neither exists."""
    p = shipped_path(path)
    return p if p.exists() else None


def looks_like_hub_id(path: str) -> bool:
    parts = path.split("/")
    return len(parts) == 2 and all(parts) and not path.startswith((".", "~")) and "." not in parts[1][-8:]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)


def _as_record(obj: Any) -> tuple[Any, str | None]:
    return (obj, None) if isinstance(obj, dict) else (None, f"not a JSON object ({type(obj).__name__})")


def line_raw(n: int, line: bytes) -> Raw | None:
    """A JSONL line (split on \\n only, as the parallel reader splits) -> Raw; None for a blank line."""
    # A BOM opens files saved by some Windows tools (and each file of a `cat` of them): no JSON text.
    text = line.decode("utf-8", errors="replace").rstrip("\r\n").removeprefix(BOM)
    if not text.strip():
        return None  # blank lines are not records
    try:
        obj, err = _as_record(decode_line(text))
    except DuplicateKey as e:
        return Raw(n, text, None, str(e), reason=DUPLICATE_KEY)
    except json.JSONDecodeError as e:
        # The line number is the caller's (a worker only knows its chunk-local one); the column is ours.
        obj, err = None, f"bad JSON at column {e.colno}: {e.msg}"
    return Raw(n, text, obj, err)


def iter_jsonl(path: Path) -> Iterator[Raw]:
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            raw = line_raw(n, line)
            if raw is not None:
                yield raw


class UnreadableFile(ConfigError):
    """A local input is neither Parquet, one JSON document nor JSON Lines; the message names the place."""


SNIFF_LINES = 100
"""Lines after a broken first one scanned for a JSON object before calling a file JSON Lines."""
PARQUET_MAGIC = b"PAR1"


def _loads(line: bytes):
    """The line's JSON value, or raise JSONDecodeError."""
    return json.loads(line.decode("utf-8", errors="replace"))


def _parses_as_object(line: bytes) -> bool:
    try:
        return isinstance(_loads(line), dict)
    except ValueError:
        return False


def _is_keyed(value) -> bool:
    """The BiGGen layout: one JSON object of records keyed by id."""
    return isinstance(value, dict) and bool(value) and all(isinstance(v, dict) for v in value.values())


def sniff_format(path: Path) -> str:
    """'parquet', 'json' (one document: a list, or records keyed by id) or 'jsonl', told by the file's
    content, never its name: users save JSONL as .json and the reverse. Cheap on large JSONL: it reads
    the first two non-blank lines (a few more only when the first is broken)."""
    with open(path, "rb") as f:
        if f.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC:
            return "parquet"
        f.seek(0)
        lines = (line for line in f if line.strip())
        first = next(lines, None)
        if first is None:
            return "jsonl"  # an empty file holds no records either way
        first = first.removeprefix(BOM_BYTES)
        try:
            value = _loads(first)
        except ValueError:
            # A pretty-printed document opens with a line that is not JSON on its own; so does a JSON Lines
            # file whose first record is broken: the lines after it tell them apart.
            if first.strip() in (b"[", b"{"):
                return "json"
            return "jsonl" if any(_parses_as_object(ln) for _, ln in zip(range(SNIFF_LINES), lines)) else "json"
        if next(lines, None) is not None:
            return "jsonl"
        # One line: a list or records keyed by id is a document; a single record is JSON Lines of one.
        return "json" if isinstance(value, list) or _is_keyed(value) else "jsonl"


def _load_document(path: Path) -> tuple[Any, bool]:
    """(the document, whether any object in it repeats a key); utf-8-sig drops a leading BOM."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            return decode_document(f.read())
    except json.JSONDecodeError as e:
        # Reached only when the first line is no JSON value on its own, so JSON Lines is ruled out too.
        raise UnreadableFile(f"{path} is neither JSON Lines (its first line is not JSON) nor one JSON document: "
                             f"it fails at line {e.lineno} column {e.colno} ({e.msg})") from None


def iter_json(path: Path) -> Iterator[Raw]:
    """A JSON list, or a dict keyed by id (BiGGen layout). Raises UnreadableFile when it is not one document."""
    data, repeated = _load_document(path)
    if _is_keyed(data):
        yield from _keyed_records(data, repeated)
        return
    if isinstance(data, dict):
        data = [data]  # a single record, pretty-printed
    elif not isinstance(data, list):
        raise UnreadableFile(f"{path}: expected a JSON list or object, got {type(data).__name__}")
    for n, obj in enumerate(data, 1):
        yield _element_raw(n, obj, repeated)


def _element_raw(n: int, obj, repeated: bool) -> Raw:
    """One record of a document; rejected as duplicate_key when an object in it repeats a key."""
    key = repeated_key(obj) if repeated else None  # the walk only when the document holds a repeat
    if key is not None:
        return Raw(n, as_written(obj), None, str(DuplicateKey(key)), reason=DUPLICATE_KEY)
    rec, err = _as_record(obj)
    return Raw(n, _dumps(obj), rec, err)


def _keyed_records(data: dict, repeated: bool) -> Iterator[Raw]:
    """Records keyed by id (BiGGen): a repeated id would have kept only its last record; every record
    is read, and one whose id an earlier record has is a duplicate_key reject."""
    first: dict[str, int] = {}
    for n, (key, value) in enumerate(data.pairs if isinstance(data, Repeated) else data.items(), 1):
        if key in first:
            yield Raw(n, as_written(value), None, f"record id {key!r} repeats record {first[key]}",
                      reason=DUPLICATE_KEY)
            continue
        first[key] = n
        if isinstance(value, dict) and "id" not in value and not (repeated and repeated_key(value)):
            value = {"id": key, **value}
        yield _element_raw(n, value, repeated)


def iter_parquet(path: Path) -> Iterator[Raw]:
    import pyarrow.parquet as pq

    n = 0
    for batch in pq.ParquetFile(path).iter_batches():
        for row in batch.to_pylist():
            n += 1
            yield Raw(n, _dumps(row), row)


def iter_hub(path: str, split: str | None, config: str | None) -> Iterator[Raw]:
    import datasets

    try:
        ds = datasets.load_dataset(path, config, split=split)
    except Exception as e:  # noqa: BLE001 - any hub/network failure becomes one clear message
        raise ConfigError(f"cannot load Hugging Face dataset {path!r} (split={split}): {e}") from e
    splits = [ds] if split else [ds[name] for name in sorted(ds)]
    n = 0
    for part in splits:
        for row in part:
            n += 1
            yield Raw(n, _dumps(row), row)


def iter_file(path: Path, kind: str | None = None) -> Iterator[Raw]:
    """The records of a local file, whatever its name says (see `sniff_format`)."""
    kind = kind or sniff_format(path)
    return {"parquet": iter_parquet, "json": iter_json, "jsonl": iter_jsonl}[kind](path)


def read_objects(path: Path) -> list[tuple[str, dict]]:
    """Every record of a local file with its place ('line 7' in JSON Lines, 'record 3' otherwise).
    Strict, for evaluation sets: an unreadable record is an error naming the file and the place."""
    kind = sniff_format(path)
    unit = "line" if kind == "jsonl" else "record"
    out = []
    for raw in iter_file(path, kind):
        if raw.obj is None:
            raise UnreadableFile(f"{path} {unit} {raw.line}: {raw.error} (read as {kind.upper()})")
        out.append((f"{unit} {raw.line}", raw.obj))
    return out


def open_source(path: str, hf_split: str | None = None,
                hf_config: str | None = None) -> tuple[Iterator[Raw], Path | None]:
    """(records, resolved local path; None for a hub dataset). A directory is loaded with
    `datasets.load_dataset(dir)` like a hub id (e.g. a downloaded BiGGen-Bench-Results snapshot)."""
    local = resolve_path(path)
    if local is None:
        if looks_like_hub_id(path):
            return iter_hub(path, hf_split, hf_config), None
        raise ConfigError(f"input not found: {path} (tried the current directory and {PACKAGE_ROOT})")
    if local.is_dir():  # a local copy of a hub dataset (data files or a snapshot): the same loader
        return iter_hub(str(local), hf_split, hf_config), local
    return iter_file(local), local


def open_store(path: str, since: dict[str, int]) -> tuple[Iterator[Raw], dict]:
    """(the teacher judgments of a judgment store, its manifest description). Reads the rows after the
    seq `since` holds for this store's id (0: all) up to the store's current end, which the description
    records (`max_seq`) for the next build's `since`. `line` is the row's seq. The store is opened
    read-only: a build never writes its input (no checkpoint, no -wal or -shm created or removed). A
    damaged store, or a copy made without its -wal, is a ConfigError naming it (one line, exit 2)."""
    local = resolve_path(path)
    if local is None or not local.is_file():
        raise ConfigError(f"judgment store not found: {path} (tried the current directory and {PACKAGE_ROOT})")
    try:
        store = JudgmentStore(local, readonly=True)
    except StoreError as e:
        raise ConfigError(str(e)) from None
    try:
        # Rows committed after this are left for the next build: the read ends at a seq fixed up front.
        info = {"id": store.id, "since_seq": since.get(store.id, 0), "max_seq": store.max_seq()}
    except StoreError as e:
        store.close()
        raise ConfigError(str(e)) from None
    if info["since_seq"] > info["max_seq"]:
        log.warning("store %s (id %s) ends at seq %d, before the since manifest's %d: restored from an older "
                    "copy? Nothing is read from it", local, store.id, info["max_seq"], info["since_seq"])
    return _store_rows(store, info["since_seq"], info["max_seq"]), info


def _store_rows(store, since_seq: int, upto: int) -> Iterator[Raw]:
    with store:
        try:
            for row in store.iter_teacher(since_seq, upto):
                obj = row.to_dict()
                yield Raw(row.seq, _dumps(obj), obj)
            store.check_unchanged()  # read without locks (no -wal): no writer may have touched it meanwhile
        except StoreError as e:  # damage found mid-read: one line naming the store, not a traceback
            raise ConfigError(str(e)) from None
