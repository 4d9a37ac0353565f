"""Fast, byte-exact encoding of `Judgment.to_sft()` lines (the builder's hot path).

`Judgment.to_sft()` + `dumps_record` is the reference. It JSON-encodes the big
texts (instruction, response, prompt) four times per judgment (content hash,
item hash, output line) and renders the prompt once per sample, although the 3
GPT-4 samples of a Prometheus line share them. Here each item's texts are
encoded once and shared by its samples; a JSON string's encoding does not
depend on separators, so the pieces slot into both the hash payloads
(`json.dumps` default separators) and the compact output line.
tests/data/test_records.py checks every line against the reference, byte for byte.
"""

from __future__ import annotations

import hashlib
import json

from judgeforge.data.schema import Judgment
from judgeforge.data.templates import (ABS_SYSTEM_PROMPT, RESULT_MARKER, TEMPLATE_VERSION, absolute_prompt,
                                       assistant_target)


_encode_str = json.encoder.encode_basestring  # what json.dumps(str, ensure_ascii=False) calls, in C
_enc_default = json.JSONEncoder(ensure_ascii=False).encode
_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _enc(value) -> str:
    """== json.dumps(value, ensure_ascii=False), without building an encoder per call."""
    if value is None:
        return "null"
    return _encode_str(value) if type(value) is str else _enc_default(value)


# Placeholders rendered into the prompt shell, then replaced by the encoded texts.
_S_INSTR, _S_RESP, _S_REF = "@@jf-instruction-4c1d@@", "@@jf-response-4c1d@@", "@@jf-reference-4c1d@@"
_SYSTEM_MSG = '[{"role":"system","content":' + _enc(ABS_SYSTEM_PROMPT) + '},{"role":"user","content":'
_TEMPLATE_VERSION = _enc(TEMPLATE_VERSION)


class ItemCache:
    """Encodings shared by every sample of one graded item."""

    __slots__ = ("key", "instruction", "response", "reference", "system_prompt", "_prompt", "hash_prefix",
                 "item_hash")

    def __init__(self, j: Judgment, hashes: bool = True):
        self.key = (j.instruction, j.response, j.reference_answer, j.system_prompt, j.rubric, j.scale)
        self.instruction = _enc(j.instruction)
        self.response = _enc(j.response)
        self.reference = _enc(j.reference_answer)
        self.system_prompt = _enc(j.system_prompt)
        self._prompt: str | None = None  # rendered on first write: rejected/dropped items never need it
        self.hash_prefix = self.item_hash = None
        if not hashes:  # a cache re-created for writing: the hashes are known already
            return
        rubric = _enc(j.rubric.to_dict())
        # Judgment.content_hash / item_hash payloads: json.dumps([...]) with default separators.
        head = f"[{self.instruction}, {self.response}, {self.reference}"
        self.hash_prefix = hashlib.sha256(
            f"{head}, {self.system_prompt}, {rubric}, [{j.scale.lo}, {j.scale.hi}], ".encode("utf-8"))
        self.item_hash = hashlib.sha256(f"{head}, {rubric}]".encode("utf-8")).hexdigest()

    @property
    def prompt(self) -> str:
        """The encoded user prompt, composed from the already-encoded texts (JSON string encoding is
        piecewise: enc(a + b) == enc(a)[:-1] + enc(b)[1:]), so the big texts are not encoded twice."""
        if self._prompt is None:
            instruction, response, reference, _, rubric, scale = self.key
            has_ref = bool(reference and reference.strip())
            shell = _enc(absolute_prompt(_S_INSTR, _S_RESP, rubric, _S_REF if has_ref else None, scale))
            parts = ((_S_INSTR, self.instruction), (_S_RESP, self.response)) + (
                ((_S_REF, self.reference),) if has_ref else ())
            if all(shell.count(s) == 1 for s, _ in parts):
                for s, enc in parts:
                    shell = shell.replace(s, enc[1:-1])
                self._prompt = shell
            else:  # a sentinel inside the rubric text: encode the whole prompt
                self._prompt = _enc(absolute_prompt(instruction, response, rubric, reference, scale))
        return self._prompt

    def matches(self, j: Judgment) -> bool:
        """Same item? Identity first: samples of one parsed line share their string objects."""
        k = self.key
        return all(a is b or a == b for a, b in zip(k, (j.instruction, j.response, j.reference_answer,
                                                        j.system_prompt, j.rubric, j.scale)))


_names: dict[str | None, str] = {}


def _name(value: str | None) -> str:
    """Encoding of a short repeated value (model, judge, source, category), memoised."""
    enc = _names.get(value)
    if enc is None:
        if len(_names) > 100_000:  # bounded: free-text categories must not grow it forever
            _names.clear()
        enc = _names[value] = _enc(value)
    return enc


def content_hash(j: Judgment, cache: ItemCache) -> str:
    """== j.content_hash(), reusing the item's encoded prefix."""
    h = cache.hash_prefix.copy()
    h.update(f"{_enc(j.feedback)}, {j.score}]".encode("utf-8"))
    return h.hexdigest()


def compact(value) -> str:
    """The output lines' JSON encoding of a small value (rubric, extra)."""
    return _compact(value)


def sft_line(j: Judgment, cache: ItemCache, chash: str, rubric_json: str, extra_json: str) -> str:
    """== dumps_record(to_sft()) with `rubric` and `extra` replaced by the given encodings
    (key-normalised for Arrow)."""
    item_id = j.item_id or (cache.item_hash or j.item_hash())[:16]
    feedback = _enc(j.feedback)
    if j.feedback == j.feedback.strip():  # the target is the feedback plus its verdict: reuse the encoding
        target = f"{feedback[:-1]} {RESULT_MARKER} {j.score}\""
    else:
        target = _enc(assistant_target(j.feedback, j.score))
    return "".join((
        '{"id":', _enc(chash[:16]),
        ',"messages":', _SYSTEM_MSG, cache.prompt,
        '},{"role":"assistant","content":', target, "}]",
        ',"item_id":', _enc(item_id),
        ',"sample_idx":', str(j.sample_idx),
        ',"instruction":', cache.instruction,
        ',"system_prompt":', cache.system_prompt,
        ',"response":', cache.response,
        ',"reference_answer":', cache.reference,
        ',"rubric":', rubric_json,
        ',"scale":[', str(j.scale.lo), ",", str(j.scale.hi), "]",
        ',"feedback":', feedback,
        ',"score":', str(j.score),
        ',"response_model":', _name(j.response_model),
        ',"judge_model":', _name(j.judge_model),
        ',"source":', _name(j.source),
        ',"category":', _name(j.category),
        ',"content_hash":', _enc(chash),
        ',"template_version":', _TEMPLATE_VERSION,
        ',"extra":', extra_json,
        "}",
    ))
