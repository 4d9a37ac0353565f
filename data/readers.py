"""Raw record readers: files (JSON list/dict, JSONL, Parquet), Hugging Face datasets, and judgment
stores (the teacher judgments a serving replica kept, data/store.py).

A file's format is told by its content (`sniff_format`), never its extension,
here and in the evaluation-set loaders (eval/sets.py uses `read_objects`).

Every record comes with its original text and position, so a rejected record is
written to rejects.jsonl exactly as it was read. A line that is not JSON is not
an error here: it is a record with `obj=None` that the builder rejects as
`unreadable_line`; so is a record no output line can hold (data/jsontext.py:
bytes that are not UTF-8, a number too large, nesting too deep, a lone
surrogate), with its own reason, whichever reader read it. A file that is no
JSON at all (neither one document nor lines) is an error (`UnreadableFile`)
naming the line and column where it fails.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from judgeforge.config import PACKAGE_ROOT, ConfigError, shipped_path
from judgeforge.data.jsontext import (BOM, BOM_BYTES, DuplicateKey, Poisoned, Repeated, as_written, check, checker,
                                      decode_document, decode_line, decode_utf8, document_members, invalid_utf8,
                                      repeated_key)
from judgeforge.data.store import JudgmentStore, StoreError
from judgeforge.data.validate import DUPLICATE_KEY, INVALID_UTF8

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Raw:
    line: int
    """1-based line number (JSONL) or element number (JSON list, Parquet, HF rows)."""
    text: str
    """The original line, or the element re-serialised for JSON lists and tables. Bytes that are not UTF-8
    are in it as surrogateescape decodes them (U+DC80-U+DCFF), so that it encodes back to them."""
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


def _shown(obj: Any) -> str:
    """A poisoned value as rejects.jsonl can show it: lone surrogates escaped (`\\ud800`), as JSON writes them."""
    try:
        return json.dumps(obj, default=str)
    except (RecursionError, ValueError):  # past MAX_DEPTH: checked before any walk that recurses
        return f"<{type(obj).__name__} nested too deep to show>"


def _decoded_raw(n: int, obj: Any) -> Raw:
    """A record a reader decoded itself (a table or store row): rejected when no output line can hold it."""
    try:
        check(obj)
    except Poisoned as e:
        return Raw(n, _shown(obj), None, e.detail, reason=e.reason)
    return Raw(n, _dumps(obj), obj)


def _as_record(obj: Any) -> tuple[Any, str | None]:
    return (obj, None) if isinstance(obj, dict) else (None, f"not a JSON object ({type(obj).__name__})")


def line_raw(n: int, line: bytes) -> Raw | None:
    """A JSONL line (split on \\n only, as the parallel reader splits) -> Raw; None for a blank line."""
    # A BOM opens files saved by some Windows tools (and each file of a `cat` of them): no JSON text.
    text, bad_bytes = decode_utf8(line)
    text = text.rstrip("\r\n").removeprefix(BOM)
    if not text.strip():
        return None  # blank lines are not records
    if bad_bytes is not None:
        return Raw(n, text, None, invalid_utf8(line, bad_bytes).detail, reason=INVALID_UTF8)
    try:
        obj, err = _as_record(decode_line(text))
    except DuplicateKey as e:
        return Raw(n, text, None, str(e), reason=DUPLICATE_KEY)
    except Poisoned as e:
        return Raw(n, text, None, e.detail, reason=e.reason)
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
    """The line's JSON value, or raise ValueError (a poisoned line's too: sniffing only needs its shape)."""
    try:
        return json.loads(decode_utf8(line)[0])
    except RecursionError:
        raise ValueError("nested too deep") from None


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


Member = tuple["str | None", Any, "str | None"]
"""A member of a JSON document: (key, or None in a list; its value, or its Poisoned error; its text as
written, or None when the document was decoded whole)."""


def _load_document(path: Path) -> tuple[str, list[Member], bool, str]:
    """('list' or 'object', its members, whether any object in it repeats a key, the document's text).
    Decoded whole (fast) unless a member is poisoned or not UTF-8; then member by member, so that only
    that member is rejected."""
    text, bad_bytes = decode_utf8(path.read_bytes())
    text = text.removeprefix(BOM)
    try:
        whole = _decode_whole(path, text) if bad_bytes is None else None
        return (*(whole or document_members(text)), text)
    except json.JSONDecodeError as e:
        # Reached only when the first line is no JSON value on its own, so JSON Lines is ruled out too.
        raise UnreadableFile(f"{path} is neither JSON Lines (its first line is not JSON) nor one JSON document: "
                             f"it fails at line {e.lineno} column {e.colno} ({e.msg})") from None


def _decode_whole(path: Path, text: str) -> tuple[str, list[Member], bool] | None:
    """The document decoded whole; None when a member is poisoned."""
    try:
        data, repeated = decode_document(text)
    except Poisoned:
        return None
    if isinstance(data, list):
        members = [(None, value, None) for value in data]
    elif isinstance(data, dict):
        members = [(key, value, None) for key, value in (data.pairs if isinstance(data, Repeated) else data.items())]
    else:
        raise UnreadableFile(f"{path}: expected a JSON list or object, got {type(data).__name__}")
    check_member = checker(text)
    try:
        for key, value, _ in members:
            check_member(value)
            check_member(key)
    except Poisoned:
        return None
    return ("list" if isinstance(data, list) else "object"), members, repeated


def _is_keyed_members(members: list[Member]) -> bool:
    """The BiGGen layout (`_is_keyed`), told also when a member is poisoned: by how its text opens."""
    return bool(members) and all(isinstance(v, dict) or (isinstance(v, Poisoned) and text.startswith("{"))
                                 for _, v, text in members)


def iter_json(path: Path) -> Iterator[Raw]:
    """A JSON list, or a dict keyed by id (BiGGen layout). Raises UnreadableFile when it is not one document."""
    kind, members, repeated, text = _load_document(path)
    if kind == "object" and _is_keyed_members(members):
        yield from _keyed_records(members, repeated)
    elif kind == "object":  # a single record, pretty-printed: one poisoned field poisons it whole
        poison = next((v for _, v, _ in members if isinstance(v, Poisoned)), None)
        yield (Raw(1, text, None, poison.detail, reason=poison.reason) if poison
               else _element_raw(1, _record([(k, v) for k, v, _ in members]), repeated))
    else:
        for n, (_, obj, written) in enumerate(members, 1):
            yield _element_raw(n, obj, repeated, written)


def _record(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    marked = Repeated(obj)
    marked.pairs = pairs
    return marked


def _element_raw(n: int, obj, repeated: bool, written: str | None = None) -> Raw:
    """One record of a document; rejected with its own reason when poisoned (shown as written), as
    duplicate_key when an object in it repeats a key."""
    if isinstance(obj, Poisoned):
        return Raw(n, written, None, obj.detail, reason=obj.reason)
    key = repeated_key(obj) if repeated else None  # the walk only when the document holds a repeat
    if key is not None:
        return Raw(n, as_written(obj), None, str(DuplicateKey(key)), reason=DUPLICATE_KEY)
    rec, err = _as_record(obj)
    return Raw(n, _dumps(obj), rec, err)


def _keyed_records(members: list[Member], repeated: bool) -> Iterator[Raw]:
    """Records keyed by id (BiGGen): a repeated id would have kept only its last record; every record
    is read, and one whose id an earlier record has is a duplicate_key reject."""
    first: dict[str, int] = {}
    for n, (key, value, written) in enumerate(members, 1):
        if key in first and not isinstance(value, Poisoned):
            yield Raw(n, as_written(value), None, f"record id {key!r} repeats record {first[key]}",
                      reason=DUPLICATE_KEY)
            continue
        first.setdefault(key, n)
        if isinstance(value, dict) and "id" not in value and not (repeated and repeated_key(value)):
            value = {"id": key, **value}
        yield _element_raw(n, value, repeated, written)


def iter_parquet(path: Path) -> Iterator[Raw]:
    import pyarrow.parquet as pq

    return _arrow_rows(pq.ParquetFile(path).iter_batches())


def _arrow_rows(batches) -> Iterator[Raw]:
    """The rows of Arrow record batches (or tables). Arrow does not check that strings are UTF-8 (a
    Parquet writer may store any bytes): a batch that cannot be converted is converted row by row, and
    each row that holds such a string is rejected as invalid_utf8."""
    n = 0
    for batch in batches:
        try:
            rows = batch.to_pylist()
        except UnicodeDecodeError:
            rows = None
        for i in range(batch.num_rows):
            n += 1
            yield _decoded_raw(n, rows[i]) if rows is not None else _arrow_row(n, batch.slice(i, 1))


def _arrow_row(n: int, row) -> Raw:
    """One row of a batch that holds a string that is not UTF-8."""
    try:
        return _decoded_raw(n, row.to_pylist()[0])
    except UnicodeDecodeError as e:
        shown = {}
        for name, column in zip(row.schema.names, row.columns):
            try:
                shown[name] = column.to_pylist()[0]
            except UnicodeDecodeError:  # its bytes, as surrogateescape gives them back to rejects.jsonl
                shown[name] = column.cast("binary").to_pylist()[0] if column.type in ("string", "large_string") \
                    else "<not UTF-8>"
        text = _dumps({k: v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v
                       for k, v in shown.items()})
        return Raw(n, text, None, f"invalid UTF-8 in a string ({e.reason})", reason=INVALID_UTF8)


def iter_hub(path: str, split: str | None, config: str | None) -> Iterator[Raw]:
    import datasets

    try:
        ds = datasets.load_dataset(path, config, split=split)
    except Exception as e:  # noqa: BLE001 - any hub/network failure becomes one clear message
        raise ConfigError(f"cannot load Hugging Face dataset {path!r} (split={split}): {e}") from e
    splits = [ds] if split else [ds[name] for name in sorted(ds)]
    n = 0
    for part in splits:
        for raw in _arrow_rows(part.with_format("arrow").iter(batch_size=1000)):  # rows as Arrow gives them
            n += 1
            raw.line = n
            yield raw


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
                yield _decoded_raw(row.seq, row.to_dict())
            store.check_unchanged()  # read without locks (no -wal): no writer may have touched it meanwhile
        except StoreError as e:  # damage found mid-read: one line naming the store, not a traceback
            raise ConfigError(str(e)) from None
