"""Fast, byte-exact encoding of `Judgment.to_sft()` lines (the builder's hot path).

`Judgment.to_sft()` + `dumps_record` is the reference. It JSON-encodes the big
texts (instruction, response, prompt) four times per judgment (content hash,
item hash, output line) and renders the prompt once per sample, although the 3
GPT-4 samples of a Prometheus line share them. Here each item's texts are
encoded once and shared by its samples; a JSON string's encoding does not
depend on separators, so the pieces slot into both the hash payloads
(`json.dumps` default separators) and the compact output line.

The line is encoded where the judgment is parsed (a worker process, in a
parallel build) as UTF-8 `Parts` and spooled to a file; only `rubric` and
`extra`, whose keys are normalised over the whole build, are left to the
writer (`Spool.line`).
tests/data/test_records.py checks every line against the reference, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import mmap
from pathlib import Path

from judgeforge.data.schema import Judgment
from judgeforge.judge.prompts import (ABS_SYSTEM_PROMPT, RESULT_MARKER, TEMPLATE_VERSION, Rubric, Scale,
                                       absolute_prompt, assistant_target)


_encode_str = json.encoder.encode_basestring  # what json.dumps(str, ensure_ascii=False) calls, in C
_enc_default = json.JSONEncoder(ensure_ascii=False).encode
_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _enc(value) -> str:
    """== json.dumps(value, ensure_ascii=False), without building an encoder per call."""
    if value is None:
        return "null"
    return _encode_str(value) if type(value) is str else _enc_default(value)


# Placeholders rendered into the prompt shell, which is then cut at them.
_S_INSTR, _S_RESP, _S_REF = "@@jf-instruction-4c1d@@", "@@jf-response-4c1d@@", "@@jf-reference-4c1d@@"
_SYSTEM_MSG = ('[{"role":"system","content":' + _enc(ABS_SYSTEM_PROMPT) + '},{"role":"user","content":').encode()
_TEMPLATE_VERSION = _enc(TEMPLATE_VERSION)

# (head, item blocks, mid, tail): one line is head + blocks[0] + mid + blocks[1] + rubric + tail + extra + "}",
# where rubric is blocks[2] or the rubric normalised to the build's keys.
# The blocks are shared by the samples of one item (and spooled once for them).
Parts = tuple[bytes, tuple[bytes, bytes, bytes], bytes, bytes]


class _Bounded(dict):
    """A memo that forgets everything when it grows too big (free-text values must not grow it forever)."""

    def put(self, key, value):
        if len(self) > 100_000:
            self.clear()
        self[key] = value
        return value


_shells = _Bounded()


def _cut(shell: str, marks: tuple[str, ...]) -> list[str] | None:
    """`shell` cut at each mark, in order; None unless each occurs exactly once, in that order."""
    if any(shell.count(m) != 1 for m in marks):
        return None
    pieces = []
    for m in marks:
        before, found, shell = shell.partition(m)
        if not found:
            return None
        pieces.append(before)
    return pieces + [shell]


def _prompt_shell(rubric: Rubric, scale: Scale, has_ref: bool) -> list[bytes] | None:
    """The encoded prompt (UTF-8) cut at its texts: [before instruction, before response, (before
    reference,) rest]. Memoised: items share rubrics (FastChat's preset, BiGGen's per-capability ones).
    None when a placeholder occurs in the rubric text itself."""
    key = (rubric.criteria, tuple(rubric.descriptions.items()), scale, has_ref)
    pieces = _shells.get(key)
    if pieces is None:
        shell = _enc(absolute_prompt(_S_INSTR, _S_RESP, rubric, _S_REF if has_ref else None, scale))
        cut = _cut(shell, (_S_INSTR, _S_RESP, _S_REF)[:2 + has_ref])
        pieces = _shells.put(key, [p.encode("utf-8") for p in cut] if cut else False)
    return pieces or None


def _rubric_encodings(rubric: Rubric) -> tuple[str, str]:
    """json.dumps(rubric.to_dict()) with default separators (for the hashes) and compact (for the line),
    from one encoding of each key and value."""
    d = rubric.to_dict()
    if not all(type(v) is str for v in d.values()):
        return _enc_default(d), _compact(d)
    pairs = [(_encode_str(k), _encode_str(v)) for k, v in d.items()]
    return ("{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}",
            "{" + ",".join(f"{k}:{v}" for k, v in pairs) + "}")


def _utf8(value) -> bytes:
    return _enc(value).encode("utf-8")


class ItemCache:
    """Encodings (UTF-8 JSON) shared by every sample of one graded item."""

    __slots__ = ("key", "instruction", "response", "reference", "system_prompt", "rubric", "hash_prefix",
                 "item_hash", "_blocks")

    def __init__(self, j: Judgment):
        self.key = (j.instruction, j.response, j.reference_answer, j.system_prompt, j.rubric, j.scale)
        self.instruction = _utf8(j.instruction)
        self.response = _utf8(j.response)
        self.reference = _utf8(j.reference_answer)
        self.system_prompt = _utf8(j.system_prompt)
        self._blocks: tuple[bytes, bytes, bytes] | None = None  # on first use: rejected items never need them
        rubric, compact_rubric = _rubric_encodings(j.rubric)
        self.rubric = compact_rubric.encode("utf-8")
        # Judgment.content_hash / item_hash payloads: json.dumps([...]) with default separators. Both start
        # with the big texts: hash them once and branch.
        head = hashlib.sha256(b"[")
        for text in (self.instruction, b", ", self.response, b", ", self.reference):
            head.update(text)
        self.hash_prefix = head.copy()
        self.hash_prefix.update(b", " + self.system_prompt)
        self.hash_prefix.update(f", {rubric}, [{j.scale.lo}, {j.scale.hi}], ".encode("utf-8"))
        head.update(f", {rubric}]".encode("utf-8"))
        self.item_hash = head.hexdigest()

    def prompt(self) -> bytes:
        """The encoded user prompt, composed from the already-encoded texts (JSON string encoding is
        piecewise: enc(a + b) == enc(a)[:-1] + enc(b)[1:]), so the big texts are not encoded twice."""
        instruction, response, reference, _, rubric, scale = self.key
        has_ref = bool(reference and reference.strip())
        shell = _prompt_shell(rubric, scale, has_ref)
        if shell is None:
            return _utf8(absolute_prompt(instruction, response, rubric, reference, scale))
        texts = (self.instruction, self.response, self.reference)[:2 + has_ref]
        out = [shell[0]]
        for text, after in zip(texts, shell[1:]):
            out += (memoryview(text)[1:-1], after)  # without the quotes, uncopied
        return b"".join(out)

    def blocks(self) -> tuple[bytes, bytes, bytes]:
        """The item's share of each output line: the messages up to the end of the user prompt, the
        fields from `instruction` to the `rubric` key, and the rubric as it is (the writer uses it unless
        other rubrics of the build have other score levels)."""
        if self._blocks is None:
            self._blocks = (
                _SYSTEM_MSG + self.prompt(),
                b"".join((b',"instruction":', self.instruction, b',"system_prompt":', self.system_prompt,
                          b',"response":', self.response, b',"reference_answer":', self.reference,
                          b',"rubric":')),
                self.rubric)
        return self._blocks

    def matches(self, j: Judgment) -> bool:
        """Same item? Identity first: samples of one parsed line share their string objects."""
        k = self.key
        return all(a is b or a == b for a, b in zip(k, (j.instruction, j.response, j.reference_answer,
                                                        j.system_prompt, j.rubric, j.scale)))


_names = _Bounded()


def _name(value: str | None) -> str:
    """Encoding of a short repeated value (model, judge, source, category), memoised."""
    enc = _names.get(value)
    return enc if enc is not None else _names.put(value, _enc(value))


def content_hash(j: Judgment, cache: ItemCache, feedback: str | None = None) -> str:
    """== j.content_hash(), reusing the item's encoded prefix (and the feedback's encoding, if given)."""
    h = cache.hash_prefix.copy()
    h.update(f"{feedback or _enc(j.feedback)}, {j.score}]".encode("utf-8"))
    return h.hexdigest()


def compact(value) -> bytes:
    """The output lines' JSON encoding of a small value (rubric, extra), UTF-8."""
    return _compact(value).encode("utf-8")


def encode(j: Judgment, cache: ItemCache) -> tuple[str, Parts]:
    """(content hash, the line's parts) of a judgment whose item_id is set."""
    feedback = _enc(j.feedback)
    chash = content_hash(j, cache, feedback)
    if j.feedback == j.feedback.strip():  # the target is the feedback plus its verdict: reuse the encoding
        target = f"{feedback[:-1]} {RESULT_MARKER} {j.score}\""
    else:
        target = _enc(assistant_target(j.feedback, j.score))
    head = f'{{"id":"{chash[:16]}","messages":'.encode("utf-8")
    mid = "".join(('},{"role":"assistant","content":', target, '}],"item_id":', _enc(j.item_id or cache.item_hash[:16]),
                   ',"sample_idx":', str(j.sample_idx))).encode("utf-8")
    tail = "".join((
        ',"scale":[', str(j.scale.lo), ",", str(j.scale.hi), "]",
        ',"feedback":', feedback,
        ',"score":', str(j.score),
        ',"response_model":', _name(j.response_model),
        ',"judge_model":', _name(j.judge_model),
        ',"source":', _name(j.source),
        ',"category":', _name(j.category),
        ',"content_hash":"', chash, '"',
        ',"template_version":', _TEMPLATE_VERSION,
        ',"extra":',
    )).encode("utf-8")
    return chash, (head, cache.blocks(), mid, tail)


# Where a judgment's parts lie in a spool file: (path, item messages start, messages end = fields start,
# fields end = rubric start, rubric end, sample head start, head end = mid start, mid end = tail start, tail end).
Ref = tuple[str, int, int, int, int, int, int, int, int]


class SpoolWriter:
    """Appends encoded line parts to a file (in the process that parsed them), so that they reach the
    writer through the page cache instead of being pickled through a pipe. Samples of one item, which
    come one after the other, share one copy of the item's blocks."""

    def __init__(self, path: str):
        self.path = path
        self._f = open(path, "wb", buffering=1 << 20)
        self._pos = 0
        self._item: tuple = (None, None)  # (blocks, their offsets): the item of the previous sample

    def _append(self, pieces) -> list[int]:
        """Offsets of the start and of each piece's end."""
        offsets = [self._pos]
        for piece in pieces:
            self._pos += len(piece)
            offsets.append(self._pos)
        self._f.writelines(pieces)
        return offsets

    def add(self, parts: Parts) -> Ref:
        head, blocks, mid, tail = parts
        if blocks is not self._item[0]:
            self._item = (blocks, self._append(blocks))
        return (self.path, *self._item[1], *self._append((head, mid, tail)))

    def close(self) -> None:
        self._f.close()


class Spool:
    """The directory of spool files of one build, and the writer's view of them."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self._files = 0
        self._views: dict[str, memoryview] = {}

    def new_file(self) -> str:
        self._files += 1
        return str(self.dir / f"{self._files}.bin")

    def _view(self, path: str) -> memoryview:
        view = self._views.get(path)
        if view is None:
            with open(path, "rb") as f:  # mapped, not read: the pieces go from the page cache to the output
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            view = self._views[path] = memoryview(mm)
        return view

    def line(self, ref: Ref, rubric: bytes | None, extra: bytes) -> tuple:
        """One output line (with its newline) as pieces to write: == dumps_record(to_sft()) + "\\n" with
        `rubric` (None: the spooled one) and `extra` replaced by the given encodings (key-normalised for Arrow)."""
        path, m0, m1, m2, m3, s0, s1, s2, s3 = ref
        v = self._view(path)
        if rubric is None:
            return v[s0:s1], v[m0:m1], v[s1:s2], v[m1:m3], v[s2:s3], extra, b"}\n"
        return v[s0:s1], v[m0:m1], v[s1:s2], v[m1:m2], rubric, v[s2:s3], extra, b"}\n"

    def close(self) -> None:
        self._views.clear()  # the maps close once the last slice of them is gone
