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
- `feedback_mismatch(feedback, score)`: the one rule for a valid judgment beyond its
  parse: its feedback must not itself state another verdict (a quoted `[RESULT] 3`
  before the final `[RESULT] 5`, "overall score is 3", "I would give it a 3", "3/5").
  The server applies it to teacher judgments before it serves them, and the data
  builder rejects what breaks it as `score_feedback_mismatch` (data/validate.py), so
  what is served can be trained on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from judgeforge.judge.prompts import DEFAULT_SCALE, RESULT_MARKER, Scale

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


# --- one rule for a valid judgment (server and data builder) -----------------------------------
# On the data builder's hot path: precompiled regexes, each scan run only when its words occur.

_NUM = r"(-?\d+(?:\.\d+)?)"
# The judge's own verdict markers: Prometheus `[RESULT] 4` (also `[RESULT] Score: 4`), FastChat `[[4]]`.
_RESULT_RE = re.compile(re.escape(RESULT_MARKER) + r"\s*(?:\(?\s*(?:score|rating)\s*[:=]?\s*)?" + _NUM, re.I)
_BRACKET_RE = re.compile(r"\[\[\s*" + _NUM + r"\s*\]\]")
# Explicit verdict statements in prose, matched on the lowercased text. Deliberately narrow: GPT-4
# feedback often cites rubric levels ("falls short of a score of 5", "Score 2 describes ..."), which
# are not verdicts. Each pattern starts with a literal so the scan stays fast (hot path).
_OVERALL_RE = re.compile(r"(?:overall|final|total)\s+(?:score|rating)\s*(?:is|would be|should be|of|:|=)\s*"
                         r"(?:a\s+|an\s+)?" + _NUM)
_OUT_OF_RE = re.compile(r"(?:score|rating|rated|grade)\s*(?:is|of|:|=)?\s*" + _NUM + r"\s*(?:/|out of)\s*\d+")
# "I (would) give it a 4": matched from the verb; the subject is checked just before it.
_GIVE_RE = re.compile(r"(?:give|assign|award|rate)\s+(?:it|this|the response|the answer)?"
                      r"\s*(?:a\s+)?(?:score\s+of\s+|rating\s+of\s+)?" + _NUM + r"\b")
_SUBJECTS = ("i ", "we ", "i would ", "we would ")
# A closing "Score: 4" / "###Score: 4" / "Rating: 4" at the very end (matched on the tail only).
_CLOSING_SCORE_RE = re.compile(r"(?:^|(?<=[.!?\n#\s]))(?:###\s*)?(?:score|rating)\s*:\s*" + _NUM
                               + r"\s*\.?\s*$", re.I)
TAIL = 120  # end-anchored patterns only look at the last characters


def stated_scores(text: str) -> list[float]:
    """Distinct scores the feedback text itself states as a verdict (empty when it states none)."""
    found: list[str] = []
    lower = text.lower()
    if "[result]" in lower:
        found += _RESULT_RE.findall(text)
    if "[[" in text:
        found += _BRACKET_RE.findall(text)
    # Each pattern runs only when its words occur: most feedback never pays for the scan.
    has_score = "score" in lower or "rating" in lower
    if has_score and ("overall" in lower or "final" in lower or "total" in lower):
        found += _OVERALL_RE.findall(lower)
    if ("/" in lower or "out of" in lower) and (has_score or "rate" in lower or "grade" in lower):
        found += _OUT_OF_RE.findall(lower)
    # A counted "rate" needs a subject (ending in a space) before it: " rate" skips "accurate", "generate".
    if "give" in lower or "assign" in lower or "award" in lower or (" rate" in lower and "rate " in lower):
        found += [m.group(1) for m in _GIVE_RE.finditer(lower)
                  if lower[max(0, m.start() - 9):m.start()].endswith(_SUBJECTS)]
    if has_score and may_close_with_score(text[-TAIL:]):
        found += _CLOSING_SCORE_RE.findall(text[-TAIL:])
    return sorted({float(m) for m in found})


def may_close_with_score(tail: str) -> bool:
    """Cheap necessary condition for _CLOSING_SCORE_RE: a colon, and a digit before the trailing `.`/spaces."""
    if ":" not in tail:
        return False
    end = tail.rstrip()
    if end.endswith("."):
        end = end[:-1].rstrip()
    return end[-1:].isdigit()


def feedback_mismatch(feedback: str, score: int) -> str | None:
    """Why a judgment with this feedback and score is not valid (the feedback itself states another
    verdict), or None. Only verdicts are counted: citing rubric levels ("falls short of a score of 5")
    is not one (see the patterns above)."""
    other = next((s for s in stated_scores(feedback) if s != score), None)
    return None if other is None else f"feedback states {other:g}, score is {score}"


def valid_judgment(result: ParseResult) -> ParseResult:
    """`result`, or a failed one saying why when its feedback states another verdict than its score."""
    if result.score is None:
        return result
    why = feedback_mismatch(result.feedback, result.score)
    return result if why is None else ParseResult(reason=f"score_feedback_mismatch: {why}",
                                                  feedback=result.feedback)
