"""JSON text as the builder reads it: a leading UTF-8 BOM is dropped, and an object that names a key
twice is caught instead of resolved silently (json keeps the last value, so `"score": 1, ...,
"score": 2` used to be read as a score of 2).

A JSONL line is one record: `decode_line` raises DuplicateKey and the line is rejected. A JSON
document holds many records: `decode_document` marks each object with a repeated key (`Repeated`,
every pair kept as written), so only the records that hold one are rejected, and each is shown in
rejects.jsonl as it was written.
"""

from __future__ import annotations

import codecs
import json
from typing import Any

BOM = "\ufeff"
BOM_BYTES = codecs.BOM_UTF8


class DuplicateKey(ValueError):
    """A JSON object names `key` twice."""

    def __init__(self, key: str):
        super().__init__(f"duplicate key {key!r} (JSON keeps only its last value)")
        self.key = key


class Repeated(dict):
    """An object that names a key twice: the dict json builds (the last value wins), and `pairs`, every
    (key, value) as written."""

    __slots__ = ("pairs",)


def first_repeated(pairs) -> str | None:
    seen = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    return None


def _unique(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # the only cost on the hot path: one len() per object
        raise DuplicateKey(first_repeated(pairs))
    return obj


# Built once: json.loads(text, object_pairs_hook=...) would build a decoder on every call.
_line_decoder = json.JSONDecoder(object_pairs_hook=_unique)


def decode_line(text: str) -> Any:
    """The JSON value of one line; raises DuplicateKey or json.JSONDecodeError."""
    return _line_decoder.decode(text)


def decode_document(text: str) -> tuple[Any, bool]:
    """(the JSON value of a whole document, whether any of its objects repeats a key)."""
    repeats = []

    def mark(pairs: list) -> dict:
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        repeats.append(1)
        marked = Repeated(obj)
        marked.pairs = pairs
        return marked

    value = json.JSONDecoder(object_pairs_hook=mark).decode(text.removeprefix(BOM))
    return value, bool(repeats)


def repeated_key(value: Any) -> str | None:
    """The first key named twice by an object anywhere inside `value` (None: none is)."""
    if isinstance(value, Repeated):
        return first_repeated(value.pairs)
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in children:
        key = repeated_key(child)
        if key is not None:
            return key
    return None


def as_written(value: Any) -> str:
    """`value` serialised with every pair of its objects, repeated keys included."""
    if isinstance(value, dict):
        pairs = value.pairs if isinstance(value, Repeated) else value.items()
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {as_written(v)}" for k, v in pairs) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(as_written, value)) + "]"
    return json.dumps(value, ensure_ascii=False, default=str)
