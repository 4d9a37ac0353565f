"""Score distributions: what one judge sample says, read as probabilities. Pure logic.

- `distribution(choice_logprobs, choices)`: the engine's exact log-probabilities of each choice
  (judge.completion), renormalised over exactly those choices. The one merge rule: choices are
  token paths, so nothing is merged by text and no top-k list can miss a value.
- `Judged`: one sample read: what the model WROTE after its last `[RESULT]` (parsed, or why not),
  the COMPLETED distribution, and the sample's vote: the written value when the model wrote a valid
  one, otherwise the completed distribution's most probable value (ties: the earlier choice, i.e.
  the lower score). Never a value from the prompt or the graded text: only the judge's own
  continuation is parsed, and the distribution is read at the judge's own next token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from judgeforge.judge.parsing import ParseResult


def distribution(choice_logprobs: Mapping[str, float] | None, choices: Sequence[str]) -> dict[str, float] | None:
    """Probabilities over exactly `choices` (summing to 1), or None without log-probabilities."""
    if not choice_logprobs:
        return None
    lps = [choice_logprobs.get(c, -math.inf) for c in choices]
    top = max(lps)
    if top == -math.inf or math.isnan(top):
        return None
    mass = [math.exp(lp - top) for lp in lps]
    z = sum(mass)
    return {c: m / z for c, m in zip(choices, mass)}


def most_probable(probs: Mapping[str, float]) -> str:
    """The argmax; ties go to the earlier choice (lower score; A before B)."""
    best = max(probs.values())
    return next(c for c, p in probs.items() if p == best)


def average(dists: Sequence[Mapping[str, float] | None], choices: Sequence[str]) -> dict[str, float] | None:
    """Mean of the per-sample distributions that exist."""
    have = [d for d in dists if d]
    if not have:
        return None
    return {c: sum(d.get(c, 0.0) for d in have) / len(have) for c in choices}


def expected(probs: Mapping[str, float] | None) -> float | None:
    """E[score] of a numeric distribution."""
    if not probs:
        return None
    return sum(int(c) * p for c, p in probs.items())


@dataclass(frozen=True)
class Judged:
    """One judge sample, read."""

    written: ParseResult
    """What the model wrote after its last `[RESULT]` (score/verdict), or why nothing valid."""
    probs: dict[str, float] | None = None
    """Completed distribution over the choices (None where the engine could not complete)."""
    text: str = ""
    finish_reason: str | None = None
    n_tokens: int = 0
    completion: str | None = None
    """Why `probs` is None, when it is."""
    engine: str | None = None
    """The engine kind that drew the sample (a handoff engine's samples name the one that answered)."""

    @property
    def written_value(self) -> str | None:
        if not self.written.ok:
            return None
        return str(self.written.score) if self.written.score is not None else self.written.verdict

    @property
    def completed(self) -> str | None:
        return most_probable(self.probs) if self.probs else None

    @property
    def vote(self) -> str | None:
        return self.written_value or self.completed

    @property
    def source(self) -> str | None:
        """'written', 'completed', or None (no vote)."""
        return "written" if self.written_value else "completed" if self.probs else None

    @classmethod
    def failed(cls, reason: str) -> "Judged":
        """A sample that could not be drawn at all (a prompt too long): no text, the reason twice."""
        return cls(written=ParseResult(reason=reason), completion=reason)

    def to_record(self) -> dict:
        """The predictions.jsonl sample record, its one layout (`from_record` reads it back)."""
        return {"text": self.text, "score": self.written.score, "verdict": self.written.verdict,
                "reason": self.written.reason, "probs": self.probs, "finish_reason": self.finish_reason,
                "n_tokens": self.n_tokens, "completion": self.completion}

    @classmethod
    def from_record(cls, r: dict) -> "Judged":
        written = ParseResult(score=r.get("score"), verdict=r.get("verdict"), reason=r.get("reason"))
        return cls(written=written, probs=r.get("probs"), text=r.get("text", ""),
                   finish_reason=r.get("finish_reason"), n_tokens=r.get("n_tokens", 0),
                   completion=r.get("completion"))
