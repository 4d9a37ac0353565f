"""Reading a judge's output: the score (or A/B verdict) after the LAST `[RESULT]`.

Pure logic, no framework imports. The contract:

- `parse_score(text, scale) -> ParseResult`: `score` is an int inside `scale` or None;
  when None, `reason` says why (no marker, nothing after it, not an integer,
  out of scale). Only generated text is ever parsed, and only what follows the
  last `[RESULT]`: a rubric line "Score 5: ..." or a quoted "[RESULT] 5" earlier
  in the feedback never becomes the score. Never raises on any string.
- `parse_verdict(text) -> ParseResult`: the same for relative grading, `verdict`
  is "A", "B" or None.
- `last_marker_start(text)`: where the last `[RESULT]` starts (score completion
  continues the sequence there, see judge.completion).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from judgeforge.data.templates import DEFAULT_SCALE, RESULT_MARKER, Scale

_MARKER_RE = re.compile(re.escape(RESULT_MARKER), re.IGNORECASE)
# After the marker: optional separators / "Score:" / opening brackets or quotes, then a number.
_SCORE_RE = re.compile(
    r"""^[\s:=\-]*(?:score\s*[:=]?\s*)?[\s(\["'*]*(?P<num>[+-]?\d+(?:[.,]\d+)?)""", re.IGNORECASE)
_VERDICT_RE = re.compile(r"""^[\s:=\-]*(?:response\s*)?[\s(\["'*]*(?P<v>[AB])(?![A-Za-z0-9])""",
                         re.IGNORECASE)


@dataclass(frozen=True)
class ParseResult:
    """One parsed judge sample. Exactly one of (score|verdict) and reason is set."""

    score: int | None = None
    verdict: str | None = None
    reason: str | None = None
    feedback: str = ""

    @property
    def ok(self) -> bool:
        return self.reason is None


def last_marker_start(text: str) -> int | None:
    """Character offset of the last `[RESULT]` in `text` (None when there is none)."""
    last = None
    for last in _MARKER_RE.finditer(text):
        pass
    return None if last is None else last.start()


def _split_last(text: str) -> tuple[str, str] | None:
    start = last_marker_start(text)
    if start is None:
        return None
    return text[:start], text[start + len(RESULT_MARKER):]


def clean_feedback(before: str) -> str:
    """Feedback text as written before the marker (a leading `Feedback:` label dropped)."""
    fb = before.strip()
    if fb[:9].lower() == "feedback:":
        fb = fb[9:].strip()
    return fb


def _split_output(text: object) -> "tuple[str, str] | ParseResult":
    """(feedback, text after the last marker), or the failed ParseResult saying why not."""
    if not isinstance(text, str):
        return ParseResult(reason=f"output is {type(text).__name__}, not text")
    split = _split_last(text)
    if split is None:
        return ParseResult(reason=f"no {RESULT_MARKER} marker", feedback=text.strip())
    return clean_feedback(split[0]), split[1]


def parse_score(text: str, scale: Scale = DEFAULT_SCALE) -> ParseResult:
    """The integer after the last `[RESULT]`, if it is inside `scale`."""
    head = _split_output(text)
    if isinstance(head, ParseResult):
        return head
    feedback, after = head
    if not after.strip():
        return ParseResult(reason=f"nothing after the last {RESULT_MARKER}", feedback=feedback)
    m = _SCORE_RE.match(after)
    if m is None:
        return ParseResult(reason=f"no integer after the last {RESULT_MARKER}: {after.strip()[:40]!r}",
                           feedback=feedback)
    num = m.group("num")
    if "." in num or "," in num:
        return ParseResult(reason=f"score {num!r} is not an integer", feedback=feedback)
    if len(num.lstrip("+-")) > 6:
        return ParseResult(reason=f"score {num[:12]!r}... is outside {scale.label()}", feedback=feedback)
    score = int(num)
    if score not in scale:
        return ParseResult(reason=f"score {score} is outside {scale.label()}", feedback=feedback)
    return ParseResult(score=score, feedback=feedback)


def parse_verdict(text: str) -> ParseResult:
    """"A" or "B" after the last `[RESULT]` (relative grading)."""
    head = _split_output(text)
    if isinstance(head, ParseResult):
        return head
    feedback, after = head
    m = _VERDICT_RE.match(after)
    if m is None:
        return ParseResult(reason=f"no A/B verdict after the last {RESULT_MARKER}: {after.strip()[:40]!r}",
                           feedback=feedback)
    return ParseResult(verdict=m.group("v").upper(), feedback=feedback)
