"""Prediction records (eval's predictions.jsonl, one absolute unit each) -> what a cascade needs.

Per item: the local judge's vote and confidence over its recorded samples (judge.voting), the
teacher's answer and the reference. The teacher is GPT-4's FIRST cached judgment (`ref_samples[0]`):
escalating an item means asking GPT-4 once, not averaging three calls. The reference for
correlations stays the mean of GPT-4's samples (`ref`), as everywhere in the eval report.
Pure logic (no torch/vLLM).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Literal

from judgeforge.judge.prompts import Scale
from judgeforge.judge.scores import Judged
from judgeforge.judge.voting import vote_scores

CONFIDENCES = ("vote_prob", "agreement")
Confidence = Literal["vote_prob", "agreement"]


@dataclass
class CascadeInputs:
    item_ids: list[str] = field(default_factory=list)
    local: list[int | None] = field(default_factory=list)
    """The local judge's voted score (None: no sample voted; such items always escalate)."""
    confidence: list[float | None] = field(default_factory=list)
    teacher: list[int] = field(default_factory=list)
    """The teacher's score on escalation: GPT-4's first sample."""
    ref: list[float] = field(default_factory=list)
    """The reference for correlations: the mean of GPT-4's samples."""

    def __len__(self) -> int:
        return len(self.local)


def _round(x: float) -> int:
    return int(math.floor(float(x) + 0.5))  # half up, as eval.metrics.to_int_scores


def from_records(recs: Iterable[dict], scale: Scale, *, k: int | None = None,
                 confidence: Confidence = "vote_prob") -> CascadeInputs:
    """Units with a reference and a sampled pass (not `sampled: false`: eval's `sampled_items` left
    them out, with no samples to vote), in the given order. `k`: vote over the first k samples (None: all).
    `confidence`: "vote_prob" = the judge's probability of the voted score (Grade.confidence, from
    the completed distributions); "agreement" = the share of samples voting for it."""
    if confidence not in CONFIDENCES:
        raise ValueError(f"confidence must be one of {CONFIDENCES}, got {confidence!r}")
    out = CascadeInputs()
    for r in recs:
        if r.get("ref") is None or r.get("sampled") is False:
            continue  # nothing to escalate to, or no local vote to calibrate
        g = vote_scores([Judged.from_record(s) for s in r["samples"][:k]], scale)
        first = (r.get("ref_samples") or [r["ref"]])[0]
        out.item_ids.append(str(r.get("item_id")))
        out.local.append(g.score)
        out.confidence.append(None if g.score is None else
                              g.confidence if confidence == "vote_prob" else g.agreement)
        out.teacher.append(_round(first))
        out.ref.append(float(r["ref"]))
    return out
