"""Record validation: reason codes, score coercion, feedback/score agreement.

Pure logic, hot path: precompiled regexes and plain functions only.
"""

from __future__ import annotations

import re

from judgeforge.data.templates import RESULT_MARKER

# Reason codes (every rejected record carries exactly one).
UNREADABLE_LINE = "unreadable_line"
MISSING_FIELD = "missing_field"
UNPARSEABLE_PROMPT = "unparseable_prompt"
# A judgment the builder cannot turn into a record (a relative A/B verdict from the judgment store).
UNSUPPORTED_MODE = "unsupported_mode"
SCORE_OUT_OF_SCALE = "score_out_of_scale"
NON_INTEGER_SCORE = "non_integer_score"
UPSTREAM_PARSE_FAILURE = "upstream_parse_failure"
SCORE_FEEDBACK_MISMATCH = "score_feedback_mismatch"
EMPTY_FEEDBACK = "empty_feedback"
EMPTY_RESPONSE = "empty_response"
DUPLICATE = "duplicate"
# Pairwise: a tie is no relative-grading target; a FastChat pair whose two orders disagree.
TIE = "tie"
PAIR_INCONSISTENT = "pair_inconsistent"
REASONS = (UNREADABLE_LINE, MISSING_FIELD, UNPARSEABLE_PROMPT, UNSUPPORTED_MODE, UPSTREAM_PARSE_FAILURE,
           NON_INTEGER_SCORE, SCORE_OUT_OF_SCALE, EMPTY_RESPONSE, EMPTY_FEEDBACK, SCORE_FEEDBACK_MISMATCH,
           TIE, PAIR_INCONSISTENT, DUPLICATE)


class Reject(Exception):
    """A record that cannot become a judgment; `reason` is one of REASONS."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


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
_FEEDBACK_LABEL_RE = re.compile(r"^\s*(?:###\s*)?feedback\s*:\s*", re.I)
_TRAILING_RATING_RE = re.compile(r"\s*\"?(?:Rating:\s*)?\[\[\s*-?\d+(?:\.\d+)?\s*\]\]\"?\s*\.?\s*$")
_TRAILING_SCORE_RE = re.compile(r"(?:^|(?<=[.!?\n]))\s*(?:###\s*)?(?:score|rating)\s*:\s*-?\d+(?:\.\d+)?\s*\.?\s*$",
                                re.I)
_TAIL = 120  # end-anchored patterns only look at the last characters


def coerce_score(value, lo: int, hi: int) -> int:
    """The record's score as an int in [lo, hi], or Reject with the precise reason."""
    if value is None or isinstance(value, bool):
        raise Reject(MISSING_FIELD, "score")
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise Reject(NON_INTEGER_SCORE, f"score {text!r} is not a number") from None
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise Reject(NON_INTEGER_SCORE, f"score {value}")
        if not value.is_integer():
            raise Reject(NON_INTEGER_SCORE, f"score {value}")
        value = int(value)
    if not isinstance(value, int):
        raise Reject(NON_INTEGER_SCORE, f"score of type {type(value).__name__}")
    if not lo <= value <= hi:
        raise Reject(SCORE_OUT_OF_SCALE, f"score {value} outside {lo}-{hi}")
    return value


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
    if has_score and _may_close_with_score(text[-_TAIL:]):
        found += _CLOSING_SCORE_RE.findall(text[-_TAIL:])
    return sorted({float(m) for m in found})


def _may_close_with_score(tail: str) -> bool:
    """Cheap necessary condition for _CLOSING_SCORE_RE: a colon, and a digit before the trailing `.`/spaces."""
    if ":" not in tail:
        return False
    end = tail.rstrip()
    if end.endswith("."):
        end = end[:-1].rstrip()
    return end[-1:].isdigit()


def check_feedback_score(feedback: str, score: int) -> None:
    """Reject when the feedback states a verdict other than `score`."""
    for stated in stated_scores(feedback):
        if stated != score:
            raise Reject(SCORE_FEEDBACK_MISMATCH, f"feedback states {stated:g}, score is {score}")


def _strip_tail(text: str, rx: re.Pattern) -> str:
    cut = max(0, len(text) - _TAIL)
    return text[:cut] + rx.sub("", text[cut:])


def clean_feedback(text: str) -> str:
    """Strip a leading `Feedback:` label and a trailing verdict (`[RESULT] n`, `Rating: [[n]]`, `Score: n`):
    the SFT target appends its own `[RESULT] n`. Call after `check_feedback_score`."""
    if text[:40].lstrip().lstrip("#").lstrip().lower().startswith("feedback"):
        text = _FEEDBACK_LABEL_RE.sub("", text, count=1)
    i = text.rfind(RESULT_MARKER)
    if i >= 0 and "[" not in text[i + 1:]:
        text = text[:i]
    text = text.rstrip()
    if "]]" in text[-_TAIL:]:
        text = _strip_tail(text, _TRAILING_RATING_RE)
    if _may_close_with_score(text[-_TAIL:]):
        text = _strip_tail(text, _TRAILING_SCORE_RE)
    return text.strip()


def require_text(value, name: str, empty_reason: str | None = None) -> str:
    """A required string field: missing -> missing_field, blank -> `empty_reason` (if given)."""
    if value is None:
        raise Reject(MISSING_FIELD, name)
    if not isinstance(value, str):
        raise Reject(MISSING_FIELD, f"{name} is {type(value).__name__}, not text")
    if empty_reason and not value.strip():
        raise Reject(empty_reason, name)
    return value


def optional_text(value) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return text if text.strip() else None
