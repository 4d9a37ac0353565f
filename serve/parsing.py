"""Reading a judge's output: the score (or A/B verdict) after the LAST `[RESULT]`.

Pure logic, no framework imports. The contract:

- `parse_score(text, scale) -> ParseResult`: `score` is an int inside `scale` or None;
  when None, `reason` says why (no marker, nothing after it, not an integer,
  out of scale). Only generated text is ever parsed, and only what follows the
  last `[RESULT]`: a rubric line "Score 5: ..." or a quoted "[RESULT] 5" earlier
  in the feedback never becomes the score. Never raises on any string.
- `parse_verdict(text) -> ParseResult`: the same for relative grading, `verdict`
  is "A", "B" or None.
- `score_logprobs_from_tokens(tokens, top_logprobs, scale)`: from per-token
  texts of a generation and each position's top-k `{token_text: logprob}`,
  the log-probability of every in-scale score at the score position (the first
  non-blank token after the last `[RESULT]`). A score written as " 3" or "3"
  both count (SmolLM2 emits "]", " ", "3"; other tokenizers emit "]", " 3").
  None when the position is absent or the scale has multi-digit scores (a
  10 would span two tokens, so one position can't hold its probability).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

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


def _split_last(text: str) -> tuple[str, str] | None:
    last = None
    for last in _MARKER_RE.finditer(text):
        pass
    if last is None:
        return None
    return text[: last.start()], text[last.end():]


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


def score_position(tokens: Sequence[str]) -> int | None:
    """Index of the score token: the first token with non-blank text after the last `[RESULT]`."""
    text = "".join(tokens)
    split = _split_last(text)
    if split is None:
        return None
    marker_end = len(split[0]) + len(RESULT_MARKER)
    pos = 0
    for i, tok in enumerate(tokens):
        start, pos = pos, pos + len(tok)
        if pos > marker_end and tok[max(0, marker_end - start):].strip():
            return i
    return None


def score_logprobs_at(top: dict[str, float], scale: Scale = DEFAULT_SCALE) -> dict[int, float] | None:
    """In-scale scores among one position's top-k `{token_text: logprob}` (" 3" and "3" merged)."""
    if scale.hi > 9 or scale.lo < 0:
        return None  # a two-digit score spans two tokens: no single position holds it
    out: dict[int, float] = {}
    for cand, lp in top.items():
        s = cand.strip()
        if len(s) == 1 and s.isdigit() and int(s) in scale:
            k = int(s)
            out[k] = logaddexp(out[k], float(lp)) if k in out else float(lp)
    return out or None


def score_logprobs_from_tokens(tokens: Sequence[str], top_logprobs: Sequence[dict[str, float]],
                               scale: Scale = DEFAULT_SCALE) -> dict[int, float] | None:
    """Log-probabilities of the in-scale scores at the score position (see module doc)."""
    i = score_position(tokens)
    if i is None or i >= len(top_logprobs):
        return None
    return score_logprobs_at(top_logprobs[i], scale)


def logaddexp(a: float, b: float) -> float:
    import math

    hi, lo = max(a, b), min(a, b)
    return hi + math.log1p(math.exp(lo - hi))
