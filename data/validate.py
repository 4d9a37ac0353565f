"""Record validation: reason codes, score coercion, feedback/score agreement.

Pure logic, hot path: precompiled regexes and plain functions only.
"""

from __future__ import annotations

import re

from judgeforge.judge.prompts import RESULT_MARKER
# The verdicts a feedback states (and so score_feedback_mismatch) are the judge core's one rule for a
# valid judgment, shared with the server's acceptance of teacher judgments.
from judgeforge.judge.parsing import (TAIL, feedback_mismatch, may_close_with_score,  # noqa: F401
                                      stated_scores)

# Reason codes (every rejected record carries exactly one).
UNREADABLE_LINE = "unreadable_line"
# A JSON object that names one key twice: json keeps the last value silently, so the record is ambiguous.
DUPLICATE_KEY = "duplicate_key"
# A record no output line can hold, found as it is read (data/jsontext.py): bytes that are not UTF-8
# (replacing them would alter the record silently), an integer beyond 64 bits or a number past a float's
# range, nesting deeper than jsontext.MAX_DEPTH, a string holding a lone surrogate (UTF-8 cannot encode it).
INVALID_UTF8 = "invalid_utf8"
NUMBER_TOO_LARGE = "number_too_large"
NESTING_TOO_DEEP = "nesting_too_deep"
LONE_SURROGATE = "lone_surrogate"
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
# Longer than the build's `max_tokens` (data/length.py): training would truncate or drop it.
TOO_LONG = "too_long"
# Pairwise: a tie is no relative-grading target; a FastChat pair whose two orders disagree.
TIE = "tie"
PAIR_INCONSISTENT = "pair_inconsistent"
# A source rescaled to another scale (`rescale`) whose rubric describes each level of its own scale:
# the descriptions cannot be carried over, and a prompt that mixes both scales would mislead the judge.
RESCALE_RUBRIC_LEVELS = "rescale_rubric_levels"
REASONS = (UNREADABLE_LINE, INVALID_UTF8, NUMBER_TOO_LARGE, NESTING_TOO_DEEP, LONE_SURROGATE, DUPLICATE_KEY,
           MISSING_FIELD, UNPARSEABLE_PROMPT, UNSUPPORTED_MODE, UPSTREAM_PARSE_FAILURE,
           NON_INTEGER_SCORE, SCORE_OUT_OF_SCALE, EMPTY_RESPONSE, EMPTY_FEEDBACK, SCORE_FEEDBACK_MISMATCH,
           TOO_LONG, TIE, PAIR_INCONSISTENT, RESCALE_RUBRIC_LEVELS, DUPLICATE)


class Reject(Exception):
    """A record that cannot become a judgment; `reason` is one of REASONS."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


_FEEDBACK_LABEL_RE = re.compile(r"^\s*(?:###\s*)?feedback\s*:\s*", re.I)
_TRAILING_RATING_RE = re.compile(r"\s*\"?(?:Rating:\s*)?\[\[\s*-?\d+(?:\.\d+)?\s*\]\]\"?\s*\.?\s*$")
_TRAILING_SCORE_RE = re.compile(r"(?:^|(?<=[.!?\n]))\s*(?:###\s*)?(?:score|rating)\s*:\s*-?\d+(?:\.\d+)?\s*\.?\s*$",
                                re.I)


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


def rescale_score(score: int, src: tuple[int, int], dst: tuple[int, int]) -> int:
    """`score` on the scale `src` mapped linearly onto `dst`, rounded half up (exact: rational arithmetic).
    1-10 -> 1-5 is ceil(s / 2): 1,2 -> 1; 3,4 -> 2; ...; 9,10 -> 5. Ends map to ends, order is kept."""
    (lo, hi), (dlo, dhi) = src, dst
    if not lo <= score <= hi:
        raise ValueError(f"score {score} outside {lo}-{hi}")
    num, den = (score - lo) * (dhi - dlo), hi - lo
    return dlo + (2 * num + den) // (2 * den)


def check_feedback_score(feedback: str, score: int) -> None:
    """Reject when the feedback states a verdict other than `score`: the rule is the judge core's
    (`judge.parsing.feedback_mismatch`), the one the server applies to teacher judgments."""
    why = feedback_mismatch(feedback, score)
    if why is not None:
        raise Reject(SCORE_FEEDBACK_MISMATCH, why)


def _strip_tail(text: str, rx: re.Pattern) -> str:
    cut = max(0, len(text) - TAIL)
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
    if "]]" in text[-TAIL:]:
        text = _strip_tail(text, _TRAILING_RATING_RE)
    if may_close_with_score(text[-TAIL:]):
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
