"""Self-consistency voting over N read judge samples (`scores.Judged`). Pure logic.

- `SampleSlots(n)`: N slots, one per requested sample. A slot is open until a sample with a vote
  fills it. With score completion every sample votes; only where the engine cannot complete
  (a chat endpoint) and the text did not parse is a slot re-sampled, at most `max_resample_rounds`
  extra rounds, so a judge costs at most N * (1 + rounds) samples, never a retry storm.
- `vote_scores(slots, scale) -> Grade`: majority over the samples' votes. Ties (deterministic,
  documented in the API): among the most frequent scores, the one closest to the mean vote; if two
  are equally close, the LOWER (a judge gate should not pass on a coin flip). [2,2,4,4,5] -> 4;
  [2,2,4,4] -> 2. `score` is None (with `reason`) only when no sample has a vote (engine errors,
  or an endpoint that cannot complete and wrote nothing parseable): never invented.
- `confidence` in [0, 1]: the judge's own probability of the voted score, from the completed
  distributions averaged over the samples. Chosen over vote agreement because it exists at N=1
  (agreement is always 1 there), reflects the judge's uncertainty rather than sampling luck, and is
  what calibrated escalation (Trust or Escalate) thresholds. Without distributions, the agreement.
- Relative grading: `vote_verdicts(ab, ba=None) -> Comparison`, the same rules over "A"/"B";
  with `ba` (A and B swapped) a winner counts only when both orders agree.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import MISSING, dataclass, field, fields
from typing import Sequence

from judgeforge.judge.prompts import DEFAULT_SCALE, Scale
from judgeforge.judge.items import VERDICTS
from judgeforge.judge.scores import Judged, average, expected


@dataclass
class SampleSlots:
    """N sample slots; slots without a vote get refilled by re-sampling."""

    n: int
    judged: list[Judged | None] = field(default_factory=list)
    rounds: int = 0
    """Sampling rounds done (1 = the first N samples, more = re-sampling rounds)."""
    n_sampled: int = 0
    failures: Counter = field(default_factory=Counter)
    """Reason -> count over every sample whose text gave no valid value (re-sampled ones included)."""

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("n must be >= 1")
        self.judged = [None] * self.n

    def missing(self) -> list[int]:
        return [i for i, j in enumerate(self.judged) if j is None or j.vote is None]

    def fill(self, judged: Sequence[Judged]) -> None:
        """Put new samples into the open slots, in order."""
        slots = self.missing()
        if len(judged) > len(slots):
            raise ValueError(f"got {len(judged)} samples for {len(slots)} open slots")
        self.rounds += 1
        self.n_sampled += len(judged)
        for slot, j in zip(slots, judged):
            if not j.written.ok and j.finish_reason != "score_only":
                self.failures[j.written.reason] += 1
            self.judged[slot] = j

    def to_resample(self, max_resample_rounds: int) -> int:
        """How many samples the next round must draw (0: done)."""
        if self.rounds == 0:
            return self.n
        if self.rounds > max_resample_rounds:
            return 0
        return len(self.missing())


def majority(votes: Sequence[int]) -> int:
    """Most frequent vote; ties -> closest to the mean, then the lower score."""
    if not votes:
        raise ValueError("no votes")
    counts = Counter(votes)
    top = max(counts.values())
    modes = [s for s, c in counts.items() if c == top]
    mean = sum(votes) / len(votes)
    return min(modes, key=lambda s: (abs(s - mean), s))


def _judged(slots: "SampleSlots | Sequence[Judged]") -> tuple[list[Judged], int, dict]:
    if isinstance(slots, SampleSlots):
        return [j for j in slots.judged if j is not None], slots.n_sampled, dict(slots.failures)
    js = list(slots)
    return js, len(js), _failures(js)


def _failures(js: Sequence[Judged]) -> dict[str, int]:
    """Reason -> count of the samples whose text gave no valid value (score-only ones write none)."""
    return dict(Counter(j.written.reason for j in js if not j.written.ok and j.finish_reason != "score_only"))


def _written_stats(js: Sequence[Judged]) -> dict:
    """How often the judge wrote its value itself, and how often that matched the completion."""
    both = [j for j in js if j.written_value and j.probs]
    return {"n_written": sum(1 for j in js if j.written_value),
            "written_agreement": (sum(j.written_value == j.completed for j in both) / len(both))
            if both else None}


def engine_of(js: Sequence[Judged]) -> str | None:
    """The engine kind behind a result's samples; kinds joined by "+" when a handoff fell between
    its sampling rounds (the first samples on one engine, the re-samples on the next)."""
    kinds = list(dict.fromkeys(j.engine for j in js if j.engine))
    return "+".join(kinds) if kinds else None


def _no_vote_reason(n_sampled: int, failures: dict, js: Sequence[Judged]) -> str:
    why = "; ".join(f"{r} (x{c})" for r, c in sorted(failures.items(), key=lambda x: -x[1]))
    why = why or next((j.completion for j in js if j.completion), None) or "no samples"
    return f"no vote in {n_sampled} samples: {why}"


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
    confidence: float | None = None
    n_written: int = 0
    written_agreement: float | None = None
    sources: list[str | None] = field(default_factory=list)
    n_sampled: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    engine: str | None = None
    """The engine kind that drew the samples (see `engine_of`)."""
    judged: list[Judged] = field(default_factory=list, repr=False)
    """Every sample behind the votes, read (eval records them; the API returns texts on request)."""

    @property
    def samples(self) -> list[str]:
        return [j.text for j in self.judged]

    def to_dict(self) -> dict:
        # From the fields themselves, so a new field reaches every answer layout (serve's response
        # models, cached answers, store rows) from here alone; JSON keys are strings.
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in INTERNAL_FIELDS}
        d["distribution"] = {str(k): v for k, v in self.distribution.items()}
        if self.score_probs is not None:
            d["score_probs"] = {str(k): v for k, v in self.score_probs.items()}
        return {**d, "samples": self.samples}

    @classmethod
    def from_dict(cls, d: dict) -> "Grade":
        """The inverse of `to_dict` (a server's answer): the samples themselves do not travel, so a
        rebuilt Grade has no `judged` (nor `samples`); keys that are no field are ignored."""
        f = _result_fields(cls, d)
        f["distribution"] = {int(k): v for k, v in f["distribution"].items()}
        if f.get("score_probs") is not None:
            f["score_probs"] = {int(k): p for k, p in f["score_probs"].items()}
        return cls(**f)


INTERNAL_FIELDS = ("judged", "swapped_judged")
"""Result fields that stay in the process (the read samples); `to_dict` sends `samples` instead."""


def value_of(result: dict):
    """The value of a result in `to_dict` form: its score (a Grade) or its winner (a Comparison)."""
    return result["score"] if "score" in result else result.get("winner")


def probs_of(result: dict) -> dict | None:
    """The judge's distribution in a `to_dict` form: `score_probs` (a Grade) or `probs` (a Comparison)."""
    return result["score_probs"] if "score_probs" in result else result.get("probs")


def _result_fields(cls, d: dict) -> dict:
    """The fields of result class `cls` in a `to_dict` form (answers carry more: model, latency)."""
    names = {f.name for f in fields(cls)} - set(INTERNAL_FIELDS)
    missing = [f.name for f in fields(cls) if f.name in names and f.name not in d
               and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise ValueError(f"not a {cls.__name__}: missing {', '.join(missing)}")
    return {k: v for k, v in d.items() if k in names}


def vote_scores(slots: "SampleSlots | Sequence[Judged]", scale: Scale = DEFAULT_SCALE) -> Grade:
    """Vote over read samples (a `SampleSlots` or a plain list of `Judged`)."""
    js, n_sampled, failures = _judged(slots)
    choices = [str(v) for v in scale.values]
    votes = [int(j.vote) if j.vote is not None else None for j in js]
    valid = [v for v in votes if v is not None]
    avg = average([j.probs for j in js], choices)
    probs = {int(k): p for k, p in avg.items()} if avg else None
    common = dict(votes=votes, distribution={k: valid.count(k) for k in scale.values},
                  n_valid=len(valid), n_unparseable=sum(1 for j in js if not j.written_value),
                  score_probs=probs, expected_score=expected(avg), sources=[j.source for j in js],
                  n_sampled=n_sampled, failures=failures, engine=engine_of(js), judged=js,
                  **_written_stats(js))
    if not valid:
        return Grade(score=None, agreement=None, mean=None, feedback=None,
                     reason=_no_vote_reason(n_sampled, failures, js), **common)
    score = majority(valid)
    agreement = valid.count(score) / len(valid)
    feedback = next(j.written.feedback for j, v in zip(js, votes) if v == score)
    return Grade(score=score, agreement=agreement, mean=sum(valid) / len(valid), feedback=feedback,
                 confidence=probs[score] if probs else agreement, **common)


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
    probs: dict[str, float] | None = None
    """P(A wins), P(B wins): completed distributions averaged over samples (and both orders)."""
    confidence: float | None = None
    n_written: int = 0
    written_agreement: float | None = None
    n_sampled: int = 0
    """Samples drawn, both orders (what /v1/compare counts in the metrics, as /v1/grade does)."""
    failures: dict[str, int] = field(default_factory=dict)
    """Reason -> count over the samples whose text gave no valid verdict."""
    engine: str | None = None
    """The engine kind that drew the samples (see `engine_of`)."""
    judged: list[Judged] = field(default_factory=list, repr=False)
    swapped_judged: list[Judged] | None = field(default=None, repr=False)

    @property
    def samples(self) -> list[str]:
        return [j.text for j in self.judged + (self.swapped_judged or [])]

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in INTERNAL_FIELDS}
        return {**d, "samples": self.samples}

    @classmethod
    def from_dict(cls, d: dict) -> "Comparison":
        """The inverse of `to_dict` (a server's answer), without `judged` (see Grade.from_dict)."""
        return cls(**_result_fields(cls, d))


_FLIP = {"A": "B", "B": "A"}


def _unswap(js: Sequence[Judged]) -> list[Judged]:
    """Swapped-order samples with their votes and probabilities mapped back to the original labels."""
    out = []
    for j in js:
        w = j.written
        written = type(w)(score=w.score, verdict=_FLIP.get(w.verdict) if w.verdict else None,
                          reason=w.reason, feedback=w.feedback)
        probs = {_FLIP[c]: p for c, p in j.probs.items()} if j.probs else None
        out.append(Judged(written=written, probs=probs, text=j.text, finish_reason=j.finish_reason,
                          n_tokens=j.n_tokens, completion=j.completion, engine=j.engine))
    return out


def _winner(js: Sequence[Judged]) -> tuple[str | None, Counter, str | None]:
    counts = Counter(j.vote for j in js if j.vote is not None)
    if not counts:
        return None, counts, "no vote"
    if counts["A"] == counts["B"]:
        return None, counts, f"tie {counts['A']}-{counts['B']}"
    return ("A" if counts["A"] > counts["B"] else "B"), counts, None


def vote_verdicts(ab: Sequence[Judged], ba: Sequence[Judged] | None = None) -> Comparison:
    """Majority A/B; with `ba` (positions swapped) a win needs both orders to agree."""
    winner, counts, reason = _winner(ab)
    allj, consistent, swapped = list(ab), None, None
    if ba is not None:
        back = _unswap(ba)
        w2, counts2, reason2 = _winner(back)
        # swapped_votes are as voted in the swapped prompt (its own A/B labels)
        swapped, allj, counts = [j.vote for j in ba], allj + back, counts + counts2
        consistent = winner is not None and winner == w2
        if winner is None or w2 is None:
            reason, winner = reason or f"swapped order: {reason2}", None
        elif not consistent:
            winner, reason = None, "position inconsistent: the verdict flips when A and B are swapped"
    n_valid = sum(counts.values())
    probs = average([j.probs for j in allj], VERDICTS)
    feedback = next((j.written.feedback for j in ab if j.vote == winner), None) if winner else None
    agreement = counts[winner] / n_valid if winner and n_valid else None
    return Comparison(winner=winner, votes=[j.vote for j in ab], distribution={c: counts[c] for c in VERDICTS},
                      agreement=agreement, n_valid=n_valid,
                      n_unparseable=sum(1 for j in allj if not j.written_value), feedback=feedback,
                      reason=reason if winner is None else None, consistent=consistent,
                      swapped_votes=swapped, probs=probs,
                      confidence=(probs[winner] if probs else agreement) if winner else None,
                      n_sampled=len(allj), failures=_failures(allj), engine=engine_of(allj),
                      judged=list(ab), swapped_judged=list(ba) if ba is not None else None,
                      **_written_stats(allj))
