"""Self-consistency voting over N judge samples. Pure logic, no framework imports.

Contract (used by serve/judge.py, the HTTP API and batch evaluation):

- `SampleSlots(n)`: N slots, one per requested sample. `fill(parsed, logprobs)`
  puts new samples into the slots that are still unparseable (first round: all
  of them). `missing()` is how many to (re-)sample; the caller re-samples only
  those, at most `max_resample_rounds` extra rounds, so a judge that never
  writes `[RESULT]` costs at most N * (1 + rounds) samples, never a retry storm.
- `vote_scores(slots, scale) -> Grade`: the voted score and its statistics.
  `score` is None (with `reason`) when no slot parsed: a score is never invented.
- Tie-break (deterministic, documented in the API): among the most frequent
  scores, the one closest to the mean of all valid votes; if two are equally
  close, the LOWER score (conservative: a judge gate should not pass on a coin
  flip). E.g. votes [2,2,4,4,5] -> mean 3.4 -> 4; votes [2,2,4,4] -> mean 3 -> 2.
- `agreement` = share of valid votes equal to the voted score; `mean` over valid
  votes; `distribution` = count per scale value (every value present, 0 if none).
- Log-probabilities: each sample's in-scale score log-probs (at the score
  position) are turned into a distribution renormalised over the scale, averaged
  over the samples that have one; `expected_score` = its expectation. These do
  not depend on whether the sample's text parsed.
- Relative grading: `vote_verdicts(ab, ba=None) -> Comparison`. With `ba` (the
  same pair graded with A and B swapped), a winner counts only when both orders
  agree; otherwise `winner` is None with reason "position inconsistent".
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from judgeforge.data.templates import DEFAULT_SCALE, Scale
from judgeforge.serve.parsing import ParseResult


@dataclass
class SampleSlots:
    """N sample slots; unparseable ones get refilled by re-sampling."""

    n: int
    parsed: list[ParseResult | None] = field(default_factory=list)
    logprobs: list[dict[int, float] | None] = field(default_factory=list)
    texts: list[str | None] = field(default_factory=list)
    """Raw text of the sample now in each slot (when the caller passes it)."""
    rounds: int = 0
    """Sampling rounds done (1 = the first N samples, more = re-sampling rounds)."""
    n_sampled: int = 0
    failures: Counter = field(default_factory=Counter)
    """Reason -> count over every unparseable sample seen (re-sampled ones included)."""

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("n must be >= 1")
        self.parsed = [None] * self.n
        self.logprobs = [None] * self.n
        self.texts = [None] * self.n

    def missing(self) -> list[int]:
        return [i for i, p in enumerate(self.parsed) if p is None or not p.ok]

    def fill(self, parsed: Sequence[ParseResult],
             logprobs: Sequence[dict[int, float] | None] | None = None,
             texts: Sequence[str] | None = None) -> None:
        """Put new samples into the missing slots, in order (extra samples are ignored)."""
        slots = self.missing()
        if len(parsed) > len(slots):
            raise ValueError(f"got {len(parsed)} samples for {len(slots)} open slots")
        lps = list(logprobs) if logprobs is not None else [None] * len(parsed)
        self.rounds += 1
        self.n_sampled += len(parsed)
        for k, (slot, p, lp) in enumerate(zip(slots, parsed, lps)):
            if texts is not None:
                self.texts[slot] = texts[k]
            if not p.ok:
                self.failures[p.reason] += 1
            # A failed re-sample keeps the slot's old log-probs if the new one has none.
            self.parsed[slot] = p
            if lp is not None or self.logprobs[slot] is None:
                self.logprobs[slot] = lp

    def to_resample(self, max_resample_rounds: int) -> int:
        """How many samples the next round must draw (0: done)."""
        if self.rounds == 0:
            return self.n
        if self.rounds > max_resample_rounds:
            return 0
        return len(self.missing())


@dataclass
class Grade:
    """The voted result of one absolute grading."""

    score: int | None
    votes: list[int | None]
    distribution: dict[int, int]
    agreement: float | None
    mean: float | None
    n_valid: int
    n_unparseable: int
    feedback: str | None
    reason: str | None = None
    score_probs: dict[int, float] | None = None
    expected_score: float | None = None
    n_sampled: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    samples: list[str | None] | None = None
    """Raw sample texts, one per vote (when known)."""

    def to_dict(self) -> dict:
        return {
            "score": self.score, "reason": self.reason, "votes": self.votes,
            "distribution": {str(k): v for k, v in self.distribution.items()},
            "agreement": self.agreement, "mean": self.mean, "n_valid": self.n_valid,
            "n_unparseable": self.n_unparseable, "feedback": self.feedback,
            "score_probs": ({str(k): v for k, v in self.score_probs.items()}
                            if self.score_probs is not None else None),
            "expected_score": self.expected_score, "n_sampled": self.n_sampled,
            "failures": self.failures, "samples": self.samples,
        }


def majority(votes: Sequence[int]) -> int:
    """Most frequent vote; ties -> closest to the mean, then the lower score."""
    if not votes:
        raise ValueError("no votes")
    counts = Counter(votes)
    top = max(counts.values())
    modes = [s for s, c in counts.items() if c == top]
    mean = sum(votes) / len(votes)
    return min(modes, key=lambda s: (abs(s - mean), s))


def average_score_probs(logprobs: Sequence[dict[int, float] | None],
                        scale: Scale) -> dict[int, float] | None:
    """Per-sample in-scale distributions (renormalised), averaged over samples that have one."""
    dists = []
    for lp in logprobs:
        if not lp:
            continue
        mass = {k: math.exp(v) for k, v in lp.items() if k in scale}
        z = sum(mass.values())
        if z > 0:
            dists.append({k: mass.get(k, 0.0) / z for k in scale.values})
    if not dists:
        return None
    return {k: sum(d[k] for d in dists) / len(dists) for k in scale.values}


def vote_scores(slots: SampleSlots | Sequence[ParseResult], scale: Scale = DEFAULT_SCALE,
                logprobs: Sequence[dict[int, float] | None] | None = None) -> Grade:
    """Vote over parsed samples (a `SampleSlots` or a plain list of ParseResults)."""
    if isinstance(slots, SampleSlots):
        parsed = [p for p in slots.parsed if p is not None]
        logprobs, n_sampled, failures = slots.logprobs, slots.n_sampled, dict(slots.failures)
        samples = list(slots.texts) if any(t is not None for t in slots.texts) else None
    else:
        parsed = list(slots)
        n_sampled = len(parsed)
        failures = dict(Counter(p.reason for p in parsed if not p.ok))
        samples = None
    votes = [p.score if p.ok else None for p in parsed]
    valid = [v for v in votes if v is not None]
    probs = average_score_probs(logprobs or [], scale)
    expected = sum(k * p for k, p in probs.items()) if probs else None
    common = dict(votes=votes, distribution={k: valid.count(k) for k in scale.values},
                  n_valid=len(valid), n_unparseable=len(votes) - len(valid), score_probs=probs,
                  expected_score=expected, n_sampled=n_sampled, failures=failures,
                  samples=samples)
    if not valid:
        why = "; ".join(f"{r} (x{c})" for r, c in sorted(failures.items(), key=lambda x: -x[1]))
        return Grade(score=None, agreement=None, mean=None, feedback=None,
                     reason=f"no parseable sample in {n_sampled} drawn: {why or 'no samples'}", **common)
    score = majority(valid)
    feedback = next(p.feedback for p in parsed if p.ok and p.score == score)
    return Grade(score=score, agreement=valid.count(score) / len(valid), mean=sum(valid) / len(valid),
                 feedback=feedback, **common)


@dataclass
class Comparison:
    """The voted result of a relative (A vs B) grading."""

    winner: str | None
    votes: list[str | None]
    distribution: dict[str, int]
    agreement: float | None
    n_valid: int
    n_unparseable: int
    feedback: str | None
    reason: str | None = None
    consistent: bool | None = None
    """Both-orders mode: whether the swapped order gave the same winner."""
    swapped_votes: list[str | None] | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _vote_ab(parsed: Sequence[ParseResult]) -> tuple[str | None, list[str | None], Counter, str | None]:
    votes = [p.verdict if p.ok else None for p in parsed]
    counts = Counter(v for v in votes if v is not None)
    if not counts:
        return None, votes, counts, "no parseable verdict"
    if counts["A"] == counts["B"]:
        return None, votes, counts, f"tie {counts['A']}-{counts['B']}"
    return ("A" if counts["A"] > counts["B"] else "B"), votes, counts, None


def vote_verdicts(ab: Sequence[ParseResult], ba: Sequence[ParseResult] | None = None) -> Comparison:
    """Majority A/B; with `ba` (positions swapped) a win needs both orders to agree."""
    winner, votes, counts, reason = _vote_ab(ab)
    swapped = None
    consistent = None
    if ba is not None:
        w2, votes2, counts2, reason2 = _vote_ab(ba)
        flip = {"A": "B", "B": "A"}
        swapped = votes2
        # Votes from the swapped order are mapped back to the original labels.
        counts = counts + Counter(flip[v] for v in votes2 if v is not None)
        w2 = flip.get(w2) if w2 else None
        consistent = winner is not None and winner == w2
        if winner is None or w2 is None:
            reason = reason or f"swapped order: {reason2}"
            winner = None
        elif not consistent:
            winner, reason = None, "position inconsistent: the verdict flips when A and B are swapped"
    n_valid = sum(counts.values())
    all_parsed = list(ab) + list(ba or [])
    feedback = None
    if winner is not None:
        feedback = next((p.feedback for p in ab if p.ok and p.verdict == winner), None)
    n_all = len(all_parsed)
    return Comparison(winner=winner, votes=votes, distribution={"A": counts["A"], "B": counts["B"]},
                      agreement=(counts[winner] / n_valid) if winner and n_valid else None,
                      n_valid=n_valid, n_unparseable=n_all - n_valid, feedback=feedback,
                      reason=reason if winner is None else None, consistent=consistent,
                      swapped_votes=swapped)
