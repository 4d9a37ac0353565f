"""A confidence threshold with a finite-sample guarantee on agreement (Trust or Escalate,
Jung et al., ICLR 2025). Pure logic (numpy + scipy.stats).

The local judge answers an item when its confidence >= threshold and escalates it otherwise.
`calibrate` picks the threshold on labelled items so that, with probability >= 1 - delta over the
draw of those items, the local judge agrees with the teacher on at least 1 - alpha of the items it
answers (items exchangeable with the calibration items):

- candidate thresholds: the distinct confidences with at least `min_n` items at or above them;
- each candidate's disagreement among those items gets an exact one-sided Clopper-Pearson upper
  bound at level delta: beta.ppf(1 - delta, k + 1, n - k) for k disagreements in n items;
- fixed-sequence testing from the most confident candidate down: stop at the first candidate whose
  bound exceeds alpha; the threshold is the last one that passed. Testing in a fixed order lets
  every test spend the whole delta (no union bound over candidates).

Functions work on one row or on a batch of rows (the what-if simulates many splits at once).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
from scipy import stats


class CalibrationError(ValueError):
    """No threshold can be certified; the message says what is missing."""


def upper_bound(k, n, delta: float) -> np.ndarray:
    """Exact one-sided (1 - delta) upper bound on a binomial rate from k events in n trials."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(all="ignore"):
        u = stats.beta.ppf(1.0 - delta, k + 1.0, n - k)
    return np.where(k >= n, 1.0, u)  # beta(k+1, 0) is undefined: every item disagreed (or none)


def items_needed(rate: float, alpha: float, delta: float, cap: int = 10**7) -> int | None:
    """About how many items at this disagreement rate make the bound reach alpha (None: never)."""
    if rate >= alpha:
        return None
    if rate == 0:  # 1 - delta**(1/n) <= alpha, solved exactly
        return math.ceil(math.log(delta) / math.log1p(-alpha) - 1e-12)
    ok = lambda n: upper_bound(math.ceil(rate * n), n, delta) <= alpha  # noqa: E731
    lo, hi = 1, 2
    while not ok(hi):
        lo, hi = hi, hi * 2
        if hi > cap:
            return None
    while hi - lo > 1:  # the bound falls with n (up to rounding of k): bisect
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def ranked(conf: np.ndarray, agree: np.ndarray) -> tuple[np.ndarray, ...]:
    """Items by confidence, most confident first (along the last axis): the sorted confidences,
    items covered and disagreements at each position, and whether a threshold can sit there (the
    last of a run of equal confidences: a threshold never splits ties)."""
    conf, agree = np.asarray(conf, dtype=float), np.asarray(agree, dtype=bool)
    order = np.argsort(-conf, axis=-1, kind="stable")
    c = np.take_along_axis(conf, order, axis=-1)
    miss = np.cumsum(~np.take_along_axis(agree, order, axis=-1), axis=-1)
    n = np.broadcast_to(np.arange(1, c.shape[-1] + 1), c.shape)
    end = np.ones(c.shape, dtype=bool)
    end[..., :-1] = c[..., :-1] != c[..., 1:]
    return c, n, miss, end


def fixed_sequence(passed: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Per row (positions most confident first): the last candidate that passed before the first
    candidate that failed; -1 where the first candidate already failed."""
    width = passed.shape[-1]
    failed = candidate & ~passed
    first_fail = np.where(failed.any(axis=-1), failed.argmax(axis=-1), width)
    ok = candidate & passed & (np.arange(width) < np.expand_dims(first_fail, -1))
    last = width - 1 - ok[..., ::-1].argmax(axis=-1)
    return np.where(ok.any(axis=-1), last, -1)


@dataclass(frozen=True)
class Calibration:
    """A certified threshold and the risk-coverage curve it was chosen on."""

    threshold: float
    """Answer locally when confidence >= threshold; escalate otherwise."""
    alpha: float
    delta: float
    tolerance: int
    """Agreement = local score within this of the teacher's (0 exact, 1 within-1)."""
    min_n: int
    n: int
    """Calibration items."""
    n_covered: int
    coverage: float
    disagreement: float
    """Empirical disagreement among the covered calibration items."""
    upper: float
    """Its (1 - delta) Clopper-Pearson upper bound (<= alpha)."""
    curve: dict[str, list[float]]
    """threshold, coverage, disagreement, upper at every distinct confidence, most confident first."""

    def to_dict(self) -> dict:
        return asdict(self)


def _inputs(confidences: Sequence[float], agree: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    conf, ok = np.asarray(confidences, dtype=float), np.asarray(agree, dtype=bool)
    if conf.ndim != 1 or conf.shape != ok.shape:
        raise ValueError(f"confidences and agree must be 1-d and equal length ({conf.shape} vs {ok.shape})")
    if not np.all(np.isfinite(conf)):
        raise ValueError("confidences must be finite (items without a local score always escalate: "
                         "leave them out of calibration)")
    return conf, ok


def _check_levels(alpha: float, delta: float, min_n: int) -> None:
    if not (0 < alpha < 1 and 0 < delta < 1):
        raise ValueError(f"alpha and delta must lie in (0, 1), got alpha={alpha}, delta={delta}")
    if min_n < 1:
        raise ValueError(f"min_n must be >= 1, got {min_n}")


def _why_not(c, n, miss, upper, candidate, alpha: float, delta: float, min_n: int) -> str:
    """Why no threshold passed, and what would make one pass."""
    total = int(n[-1]) if n.size else 0
    zero = items_needed(0.0, alpha, delta)
    if total < min_n:
        return (f"only {total} calibration items, fewer than min_n={min_n}: need at least "
                f"{max(min_n, zero)} items at confidence >= t, or a smaller min_n")
    best = float(upper_bound(0, total, delta))
    if best > alpha:
        return (f"with {total} items the best achievable bound is {best:.3f} > alpha={alpha}: need at "
                f"least {max(min_n, zero)} items at confidence >= t (all agreeing), or a larger alpha/delta")
    i = int(np.argmax(candidate))
    rate = miss[i] / n[i]
    need = items_needed(rate, alpha, delta)
    more = (f"at that disagreement rate about {need} items would be needed" if need else
            "its empirical disagreement is already >= alpha")
    return (f"no threshold passes: at the most confident candidate (confidence >= {c[i]:.4g}: "
            f"{n[i]} items, {miss[i]} disagreeing, {rate:.3f}) the upper bound is {upper[i]:.3f} > "
            f"alpha={alpha}; {more}, or a larger alpha/delta")


def calibrate(confidences: Sequence[float], agree: Sequence[bool], alpha: float, delta: float,
              min_n: int = 30, *, tolerance: int = 0) -> Calibration:
    """The lowest threshold certified by fixed-sequence testing (see the module doc).

    `agree[i]`: item i's local score is within `tolerance` of the teacher's (`agrees`); the
    tolerance is recorded, not applied here. Raises CalibrationError when nothing passes.
    """
    conf, ok = _inputs(confidences, agree)
    _check_levels(alpha, delta, min_n)
    c, n, miss, end = ranked(conf, ok)
    upper = upper_bound(miss, n, delta)
    candidate = end & (n >= min_n)
    pos = int(fixed_sequence(upper <= alpha, candidate)) if conf.size else -1
    if pos < 0:
        raise CalibrationError(_why_not(c, n, miss, upper, candidate, alpha, delta, min_n))
    total = conf.size
    curve = {"threshold": c[end].tolist(), "coverage": (n[end] / total).tolist(),
             "disagreement": (miss[end] / n[end]).tolist(), "upper": upper[end].tolist()}
    return Calibration(threshold=float(c[pos]), alpha=alpha, delta=delta, tolerance=tolerance, min_n=min_n,
                       n=total, n_covered=int(n[pos]), coverage=float(n[pos] / total),
                       disagreement=float(miss[pos] / n[pos]), upper=float(upper[pos]), curve=curve)


def agrees(local: Sequence[float | None], teacher: Sequence[float | None], tolerance: int = 0) -> np.ndarray:
    """Whether each local score is within `tolerance` of the teacher's (None never agrees)."""
    out = [a is not None and b is not None and abs(float(a) - float(b)) <= tolerance + 1e-9
           for a, b in zip(local, teacher, strict=True)]
    return np.asarray(out, dtype=bool)


def escalate(confidence: float | None, threshold: float) -> bool:
    """Hand the item to the teacher: its confidence is below the threshold. Threshold 0 answers
    every scored item locally, one above 1 none; an item without a confidence (the local judge
    gave no score) always escalates, since there is nothing to answer with."""
    return confidence is None or not confidence >= threshold  # NaN escalates too
