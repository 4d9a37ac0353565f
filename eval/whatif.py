"""Offline what-if of a cascade from recorded predictions: no engine, no teacher calls (the
teacher's answers are the cached GPT-4 judgments). Pure logic (numpy + scipy.stats).

- `coverage_curve`: agreement with the teacher among the items answered locally, as the share
  answered grows (most confident first, one point per distinct confidence), and its area;
- `blend_curve`: Pearson of the blended judge (teacher on the least confident items, local on the
  rest) with the reference, against the share escalated;
- `guarantee_rate`: how often the calibrated guarantee held over many random calibration/test
  splits, all splits at once (one (splits, items) array: 1,000 splits of 200 items take ms).
"""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import numpy as np

from judgeforge.eval.calibration import agrees, fixed_sequence, items_needed, ranked, upper_bound
from judgeforge.eval.cascade_inputs import CascadeInputs

NO_SCORE = -1.0  # confidence of an item without a local score: below every real one


def _conf(confidence: Sequence[float | None]) -> np.ndarray:
    return np.asarray([NO_SCORE if c is None else c for c in confidence], dtype=float)


def coverage_curve(conf: np.ndarray, agree: np.ndarray) -> dict:
    """Agreement among the covered items at every distinct confidence (ties never split), and the
    area under it against coverage (equals the overall agreement when confidence says nothing;
    higher when the confident items are the agreeing ones)."""
    if conf.size == 0:
        return {"coverage": [], "agreement": [], "overall": None, "area": None}
    _, n, miss, end = ranked(conf, agree)
    cov, agr = n[end] / conf.size, 1.0 - miss[end] / n[end]
    area = float(np.sum(np.diff(cov, prepend=0.0) * agr))
    return {"coverage": cov.tolist(), "agreement": agr.tolist(), "overall": float(agr[-1]), "area": area}


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> list[float | None]:
    """Row-wise Pearson of x (rows, n) with y (n,); None where undefined (constant, n < 3)."""
    if x.shape[-1] < 3:
        return [None] * x.shape[0]
    xc, yc = x - x.mean(axis=-1, keepdims=True), y - y.mean()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        r = (xc @ yc) / np.sqrt((xc ** 2).sum(axis=-1) * (yc ** 2).sum())
    return [float(v) if math.isfinite(v) else None for v in r]


def blend_curve(inp: CascadeInputs, shares: Sequence[float]) -> dict:
    """The blended judge at each nominal share escalated: the least confident items go to the
    teacher (ties in confidence cut in item order, so it is deterministic); items without a local
    score always go, so the share actually escalated can exceed the nominal one."""
    n = len(inp)
    conf = _conf(inp.confidence)
    local = np.asarray([np.nan if s is None else s for s in inp.local], dtype=float)
    order = np.argsort(conf, kind="stable")
    n_missing = int(np.isnan(local).sum())
    ks = [max(int(math.floor(s * n + 0.5)), n_missing) for s in shares]
    esc = np.zeros((len(ks), n), dtype=bool)
    for row, k in enumerate(ks):
        esc[row, order[:k]] = True
    blended = np.where(esc, np.asarray(inp.teacher, dtype=float), local)
    return {"share": [float(s) for s in shares], "escalated": [k / n for k in ks],
            "teacher_calls_per_1000": [1000.0 * k / n for k in ks],
            "pearson": _pearson_rows(blended, np.asarray(inp.ref, dtype=float))}


def _splits(n: int, n_cal: int, n_splits: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(seed).random((n_splits, n)).argsort(axis=1)
    return perm[:, :n_cal], perm[:, n_cal:]


def _bounds(miss: np.ndarray, n: np.ndarray, delta: float) -> np.ndarray:
    """upper_bound over a (splits, items) array, computed once per distinct (n, k) pair."""
    base = int(n.max()) + 1
    uniq, inv = np.unique(n.astype(np.int64) * base + miss, return_inverse=True)
    return upper_bound(uniq % base, uniq // base, delta)[inv].reshape(n.shape)


def guarantee_rate(conf: np.ndarray, agree: np.ndarray, *, alpha: float, delta: float, min_n: int,
                   calibration_share: float, n_splits: int, seed: int) -> dict:
    """Calibrate on a random share of the items and check agreement on the rest, n_splits times.

    The guarantee holds on a split when the local judge's agreement with the teacher on the test
    items it answers is >= 1 - alpha (vacuously when it answers none), the paper's "guarantee
    success rate". min_n is capped at the calibration size so small sets still get a (strict)
    answer. The guarantee is about the population; a finite test split adds its own sampling
    noise, so this rate can fall below 1 - delta without the guarantee failing (more so on small
    sets, and when the certified threshold sits just inside alpha)."""
    n = conf.size
    n_cal = int(math.floor(n * calibration_share + 0.5))
    min_n = max(1, min(min_n, n_cal))
    out = {"n_splits": n_splits, "n_calibration": n_cal, "n_test": n - n_cal, "min_n": min_n,
           "alpha": alpha, "delta": delta, "target": 1.0 - delta, "best_bound": None, "status": "ok",
           "items_needed": items_needed(0.0, alpha, delta), "threshold_found_rate": None,
           "holds_rate": None, "holds_rate_when_answering": None, "coverage_mean": None}
    if n_cal < 1 or n - n_cal < 1:
        return {**out, "status": "too_few_items"}
    out["best_bound"] = float(upper_bound(0, n_cal, delta))
    if out["best_bound"] > alpha:
        return {**out, "status": "infeasible"}  # even perfect agreement cannot certify alpha
    return {**out, **_simulate(conf, agree, alpha, delta, min_n, _splits(n, n_cal, n_splits, seed))}


def _simulate(conf, agree, alpha, delta, min_n, split) -> dict:
    cal, test = split
    c, n, miss, end = ranked(conf[cal], agree[cal])
    pos = fixed_sequence(_bounds(miss, n, delta) <= alpha, end & (n >= min_n))
    found = pos >= 0
    thr = np.where(found, c[np.arange(c.shape[0]), np.maximum(pos, 0)], np.inf)
    covered = conf[test] >= thr[:, None]
    n_cov, n_agree = covered.sum(axis=1), (covered & agree[test]).sum(axis=1)
    holds = n_agree >= (1.0 - alpha) * n_cov - 1e-9
    answering = found & (n_cov > 0)
    return {"status": "ok" if found.any() else "no_threshold", "threshold_found_rate": float(found.mean()),
            "holds_rate": float(holds.mean()),
            "holds_rate_when_answering": float(holds[answering].mean()) if answering.any() else None,
            "coverage_mean": float((n_cov / test.shape[1])[found].mean()) if found.any() else None}


def simulate(inp: CascadeInputs, *, alpha: float, delta: float, tolerance: int, min_n: int,
             calibration_share: float, n_splits: int, seed: int, shares: Sequence[float]) -> dict:
    """Everything the eval report shows about a cascade for one judge on one set."""
    conf = _conf(inp.confidence)
    agree = agrees(inp.local, inp.teacher, tolerance)
    return {"n": len(inp), "n_no_score": sum(s is None for s in inp.local), "tolerance": tolerance,
            "coverage_curve": coverage_curve(conf, agree), "blend": blend_curve(inp, shares),
            "guarantee": guarantee_rate(conf, agree, alpha=alpha, delta=delta, min_n=min_n,
                                        calibration_share=calibration_share, n_splits=n_splits, seed=seed)}
