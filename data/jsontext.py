"""JSON text as the builder reads it: a leading UTF-8 BOM is dropped, and an object that names a key
twice is caught instead of resolved silently (json keeps the last value, so `"score": 1, ...,
"score": 2` used to be read as a score of 2).

A JSONL line is one record: `decode_line` raises DuplicateKey and the line is rejected. A JSON
document holds many records: `decode_document` marks each object with a repeated key (`Repeated`,
every pair kept as written), so only the records that hold one are rejected, and each is shown in
rejects.jsonl as it was written.

A record no output line can hold is `Poisoned` (a reason code of data/validate.py and a detail): an
integer beyond 64 bits or a number past a float's range (json would fail on 4,300 digits, or read
1e400 as inf), nesting deeper than MAX_DEPTH (json would exhaust the stack), a string holding a lone
surrogate (`"\\ud800"` decodes, but no UTF-8 writer can encode it), bytes that are not UTF-8. Such a
record is rejected alone: a JSON document is then read member by member (`document_members`), so one
poisoned member does not make the whole file unreadable.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any, Callable

from judgeforge.data.validate import INVALID_UTF8, LONE_SURROGATE, NESTING_TOO_DEEP, NUMBER_TOO_LARGE

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


MAX_DEPTH = 100
"""The deepest nesting a record may have (the record itself is level 1). Judgment records nest a few
levels; a deeper one is hostile, and whatever walks it next (json.dumps, as_written) would recurse."""
# What Arrow can hold (the output loads with datasets): no score, id or count of a judgment log is larger.
INT_MIN, INT_END = -(1 << 63), 1 << 64
_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")  # a false hit (an escaped backslash) only costs a walk
# Bytes that are not UTF-8, as surrogateescape decodes them: U+DC80-U+DCFF, one per byte.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


class Poisoned(ValueError):
    """A record no output line can hold; `reason` is a reason code of data/validate.py."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _int(text: str) -> int:
    # json would call int(text), which raises a ValueError past 4,300 digits (aborting the whole read).
    # An integer literal has no leading zeros: over 20 characters is past 64 bits without converting it.
    if len(text) <= 20 and INT_MIN <= (value := int(text)) < INT_END:
        return value
    raise Poisoned(NUMBER_TOO_LARGE, f"integer {text[:24]}{'...' if len(text) > 24 else ''} "
                                     f"({len(text.lstrip('-'))} digits) is beyond 64 bits")


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):  # json would read 1e400 as inf: the number changes
        raise Poisoned(NUMBER_TOO_LARGE, f"number {text[:24]}{'...' if len(text) > 24 else ''} overflows a float")
    return value


def _too_deep() -> Poisoned:
    return Poisoned(NESTING_TOO_DEEP, f"nested deeper than {MAX_DEPTH} levels")


def check(value: Any) -> None:
    """Raise Poisoned when `value` nests deeper than MAX_DEPTH, holds a string (or key) with a lone
    surrogate, or an integer beyond 64 bits. Iterative: a deep value must not exhaust the stack here."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, str):
            if (m := _SURROGATE.search(v)) is not None:
                raise Poisoned(LONE_SURROGATE, f"lone surrogate U+{ord(m.group()):04X} at character "
                                               f"{m.start()} of a string (UTF-8 cannot encode it)")
        elif isinstance(v, (dict, list, tuple)):
            if depth > MAX_DEPTH:
                raise _too_deep()
            if isinstance(v, dict):
                stack += ((k, depth) for k in v)
                v = v.values()
            stack += ((x, depth + 1) for x in v)
        elif isinstance(v, int) and not isinstance(v, bool) and not INT_MIN <= v < INT_END:
            raise Poisoned(NUMBER_TOO_LARGE, f"integer of {v.bit_length()} bits is beyond 64 bits")


def check_depth(value: Any) -> None:
    """Raise Poisoned when `value` nests deeper than MAX_DEPTH. Visits containers only: on the hot path
    it costs about a tenth of decoding the line."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep()
        for x in (v.values() if isinstance(v, dict) else v):
            if isinstance(x, (dict, list)):
                stack.append((x, depth + 1))


def checker(text: str) -> Callable[[Any], None]:
    """What checks the values decoded from `text` (their numbers checked by the decoder): `check`, or
    `check_depth` alone when the text escapes no surrogate, the only way JSON text can hold one (the
    search costs about a fifth of decoding the text; `check` on every string, more than decoding)."""
    return check_depth if _ESCAPED_SURROGATE.search(text) is None else check


# Built once: json.loads(text, object_pairs_hook=...) would build a decoder on every call.
_line_decoder = json.JSONDecoder(object_pairs_hook=_unique, parse_int=_int, parse_float=_float)


def decode_line(text: str) -> Any:
    """The JSON value of one line; raises DuplicateKey, Poisoned or json.JSONDecodeError."""
    try:
        value = _line_decoder.decode(text)
    except RecursionError:
        raise _too_deep() from None
    checker(text)(value)
    return value


def decode_utf8(data: bytes) -> tuple[str, UnicodeDecodeError | None]:
    """(text, the first error when `data` is not UTF-8). Bytes that are not UTF-8 become U+DC80-U+DCFF
    (surrogateescape: `text.encode("utf-8", "surrogateescape")` gives them back), so that the record
    holding them is rejected as invalid_utf8: U+FFFD in their place would alter it silently."""
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        return data.decode("utf-8", "surrogateescape"), e


def invalid_utf8(data: bytes, err: UnicodeDecodeError) -> Poisoned:
    return Poisoned(INVALID_UTF8, f"invalid UTF-8 at byte {err.start}: {data[err.start:err.start + 4]!r} "
                                  f"({err.reason})")


def _marking_decoder() -> tuple[json.JSONDecoder, list]:
    """A decoder that marks each object naming a key twice (`Repeated`), and the list it appends to then."""
    repeats = []

    def mark(pairs: list) -> dict:
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        repeats.append(1)
        marked = Repeated(obj)
        marked.pairs = pairs
        return marked

    return json.JSONDecoder(object_pairs_hook=mark, parse_int=_int, parse_float=_float), repeats


def decode_document(text: str) -> tuple[Any, bool]:
    """(the JSON value of a whole document, whether any of its objects repeats a key). Raises
    json.JSONDecodeError, or Poisoned where a member is (then read it with `document_members`)."""
    decoder, repeats = _marking_decoder()
    try:
        value = decoder.decode(text.removeprefix(BOM))
    except RecursionError:
        raise _too_deep() from None
    return value, bool(repeats)


# A string (escapes included) or a structural character: enough to find where a value ends.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]')
_WS = re.compile(r"[ \t\n\r]*")


def _skip_value(text: str, i: int) -> int:
    """Where the JSON value at `i` ends, found by matching brackets (strings skipped whole) without
    building it: the way past a member too deep or too large to decode."""
    depth = 0
    for m in _TOKEN.finditer(text, i):
        c = m.group()[0]
        if c in "[{":
            depth += 1
        elif not depth:  # a scalar at the top: a string ends itself, a number ends at the next , ] or }
            return m.end() if c == '"' else m.start()
        elif c in "]}":
            depth -= 1
            if not depth:
                return m.end()
    raise json.JSONDecodeError("unterminated value", text, i)


def _member(decoder: json.JSONDecoder, text: str, start: int, key: str | None, i: int) -> tuple[Any, int]:
    """(the member value at `i`, or its Poisoned error; where it ends). `start`: where the member (its
    key, in an object) starts, for the check of its bytes."""
    try:
        value, end = decoder.raw_decode(text, i)
    except Poisoned as e:
        return e, _skip_value(text, i)
    except RecursionError:
        return _too_deep(), _skip_value(text, i)
    try:
        if (m := _ESCAPED_BYTE.search(text, start, end)) is not None:
            raise Poisoned(INVALID_UTF8, f"invalid UTF-8 at character {m.start() - start} of the record: "
                                         f"{m.group().encode('utf-8', 'surrogateescape')!r}")
        check(value)
        check(key)
    except Poisoned as e:
        return e, end
    return value, end


def _expect(text: str, i: int, chars: str, what: str) -> int:
    """The position after the whitespace following `i`, which must hold one of `chars`."""
    i = _WS.match(text, i).end()
    if i >= len(text) or text[i] not in chars:
        raise json.JSONDecodeError(f"Expecting {what}", text, i)
    return i


def document_members(text: str) -> tuple[str, list[tuple[str | None, Any, str]], bool]:
    """A document read member by member: ('list' or 'object', [(key or None, value or its Poisoned
    error, the value's text as written)], whether any object repeats a key). Only its members may be
    poisoned: a broken structure raises json.JSONDecodeError."""
    decoder, repeats = _marking_decoder()
    text = text.removeprefix(BOM)
    i = _expect(text, 0, "[{", "a list or an object")
    kind, close = ("list", "]") if text[i] == "[" else ("object", "}")
    members = []
    i = _WS.match(text, i + 1).end()
    while not (text.startswith(close, i) and not members):  # `[]`, `{}`; a comma before a close is an error
        start, key = i, None
        if kind == "object":
            i = _expect(text, i, '"', "property name enclosed in double quotes")
            key, i = json.decoder.scanstring(text, i + 1)
            i = _WS.match(text, _expect(text, i, ":", "':' delimiter") + 1).end()
        value, end = _member(decoder, text, start, key, i)
        members.append((key, value, text[i:end]))
        i = _expect(text, end, "," + close, "',' delimiter")
        if text[i] == close:
            break
        i = _WS.match(text, i + 1).end()
    if _WS.match(text, i + 1).end() != len(text):
        raise json.JSONDecodeError("Extra data", text, i + 1)
    return kind, members, bool(repeats)


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
