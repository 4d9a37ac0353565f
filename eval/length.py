"""Length bias beside the reference's own, and agreement with length controlled (docs/evaluation.md,
"Length bias", has the formulas).

Pure logic (numpy + scipy, no torch/vLLM). Per judge, set and variant:

- absolute sets (`absolute_length`): Pearson r of the judge's scores with response length beside the
  reference's r on the same items, their paired difference, and the partial correlation of judge and
  reference controlling for length (the Pearson of their residuals after a least-squares line on length);
- pairwise sets (`pairwise_length`): accuracy on the reference-decisive pairs where the reference prefers
  the shorter response beside those where it prefers the longer one, and AlpacaEval's length-controlled
  idea: a logistic regression of agreement on the normalized length difference, read at zero difference.

Every interval is eval.metrics' percentile bootstrap over items, all figures of one call from the same
resamples (so differences are paired). Undefined figures are None, as in eval.metrics.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from scipy.special import expit

from judgeforge.eval.metrics import (DEFAULT_BOOT, DEFAULT_SEED, _check_choices, _finite, _pearson_rows,
                                     bootstrap_indices, percentile_ci)

EXPLAINED_TOL = 1e-10
"""A side whose residual variance after the line on length is below this share of its own variance is
taken as fully explained by length (what is left is float round-off, not signal)."""
RIDGE = 1.0
"""L2 penalty on the logistic slope only (a N(0, 1) prior): keeps a fit finite when the length
difference separates agreement from disagreement, as it does for a judge that picks by length alone."""
MAX_STEP = 5.0
MAX_ITER = 100


def _estimate(fn: Callable, args: tuple, idx: np.ndarray | None, level: float) -> dict:
    """{value, lo, hi} of a row statistic on the items and on their bootstrap resamples."""
    value = _finite(np.asarray(fn(*args)).item())
    if idx is None:
        return {"value": value, "lo": None, "hi": None}
    lo, hi, _ = percentile_ci(fn(*(a[idx] for a in args)), level)
    return {"value": value, "lo": lo, "hi": hi}


def residual_corr_rows(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Row by row, the Pearson of x and y after removing from each its least-squares line on z: the
    partial correlation r_xy.z. A side that z explains fully has nothing left to agree with: 0.
    Constant z controls for nothing (plain Pearson); a constant x or y is undefined (NaN)."""
    xc, yc, zc = (a - a.mean(axis=-1, keepdims=True) for a in (x, y, z))
    flat = np.ptp(z, axis=-1, keepdims=True) == 0
    zc = np.where(flat, 0.0, zc)  # a mean's round-off would otherwise leave a direction to project out
    zz = np.where(flat, 1.0, (zc * zc).sum(-1, keepdims=True))
    rx = xc - (xc * zc).sum(-1, keepdims=True) / zz * zc
    ry = yc - (yc * zc).sum(-1, keepdims=True) / zz * zc
    sxx, syy, vx, vy = (rx * rx).sum(-1), (ry * ry).sum(-1), (xc * xc).sum(-1), (yc * yc).sum(-1)
    with np.errstate(all="ignore"):
        r = np.clip((rx * ry).sum(-1) / np.sqrt(sxx * syy), -1.0, 1.0)
    r = np.where((sxx <= EXPLAINED_TOL * vx) | (syy <= EXPLAINED_TOL * vy), 0.0, r)
    return np.where((vx == 0) | (vy == 0), np.nan, r)


def absolute_length(scores: Sequence[float | None], ref: Sequence[float | None],
                    lengths: Sequence[float | None], *, n_boot: int = DEFAULT_BOOT, seed: int = DEFAULT_SEED,
                    level: float = 0.95) -> dict:
    """Length bias of a judge on an absolute set, beside the reference's, on the items where the judge's
    score, the reference and the length are all known (the rest counted in `n_missing`).

    Returns `{n, n_missing, judge, reference, diff, pearson, controlled}`, each figure `{value, lo, hi}`:
    `judge` r(score, length); `reference` r(reference, length); `diff` judge minus reference (paired);
    `pearson` r(score, reference) on these items; `controlled` the partial correlation of score and
    reference controlling for length (`residual_corr_rows`).
    """
    if not len(scores) == len(ref) == len(lengths):
        raise ValueError("scores, ref and lengths differ in length")
    keep = [i for i in range(len(scores)) if None not in (scores[i], ref[i], lengths[i])]
    x, y, z = (np.asarray([v[i] for i in keep], dtype=float) for v in (scores, ref, lengths))
    idx = bootstrap_indices(len(keep), n_boot, seed) if len(keep) >= 3 else None
    figures = {"judge": lambda x, y, z: _pearson_rows(x, z), "reference": lambda x, y, z: _pearson_rows(y, z),
               "diff": lambda x, y, z: _pearson_rows(x, z) - _pearson_rows(y, z),
               "pearson": lambda x, y, z: _pearson_rows(x, y), "controlled": residual_corr_rows}
    out: dict = {"n": len(keep), "n_missing": len(scores) - len(keep)}
    for key, fn in figures.items():
        out[key] = (_estimate(fn, (x, y, z), idx, level) if len(keep) >= 3
                    else {"value": None, "lo": None, "hi": None})
    return out


def logistic_fit(y: np.ndarray, x: np.ndarray, w: np.ndarray | None = None,
                 ridge: float = RIDGE) -> np.ndarray:
    """Rows of (intercept, slope) maximising the w-weighted Bernoulli log-likelihood of y (0/1) under
    p = expit(b0 + b1 x), minus ridge/2 * b1^2, by Newton-Raphson (IRLS), all rows at once.
    A row whose y are all equal has no finite intercept: +/-inf, slope 0 (its fitted p is that y)."""
    if ridge <= 0:
        raise ValueError("ridge must be > 0 (it keeps the Newton system solvable)")
    y, x = np.atleast_2d(y).astype(float), np.atleast_2d(x).astype(float)
    w = np.ones_like(y) if w is None else np.atleast_2d(w).astype(float)
    b = np.zeros((y.shape[0], 2))
    mean = y.mean(axis=-1)
    live = (mean > 0) & (mean < 1)
    for _ in range(MAX_ITER):
        p = expit(b[:, :1] + b[:, 1:] * x)
        h, res = w * p * (1 - p), w * (y - p)
        g0, g1 = res.sum(-1), (res * x).sum(-1) - ridge * b[:, 1]
        h00, h01, h11 = h.sum(-1), (h * x).sum(-1), (h * x * x).sum(-1) + ridge
        with np.errstate(all="ignore"):  # det >= ridge * h00 > 0 on live rows (Cauchy-Schwarz)
            det = h00 * h11 - h01 * h01
            step = np.stack([(h11 * g0 - h01 * g1) / det, (h00 * g1 - h01 * g0) / det], axis=-1)
        step = np.where(live[:, None], np.clip(np.nan_to_num(step), -MAX_STEP, MAX_STEP), 0.0)
        b += step
        if np.abs(step).max(initial=0.0) < 1e-10:
            break
    b[~live, 0] = np.where(mean[~live] >= 1, np.inf, -np.inf)
    return b


def balance_weights(d: np.ndarray) -> np.ndarray:
    """Row by row, weights under which the pairs with d > 0 and those with d < 0 weigh the same (half
    of the unequal pairs' count each; d = 0 weighs 1), so the reference's own taste for longer responses
    does not move the intercept. Without one of the two sides: all 1."""
    d = np.atleast_2d(d)
    pos, neg = d > 0, d < 0
    n_pos, n_neg = pos.sum(-1, keepdims=True), neg.sum(-1, keepdims=True)
    both = (n_pos > 0) & (n_neg > 0)
    half = (n_pos + n_neg) / 2
    with np.errstate(all="ignore"):
        w = np.where(pos, half / n_pos, np.where(neg, half / n_neg, 1.0))
    return np.where(both, w, 1.0)


def normalized_diff(d: np.ndarray) -> np.ndarray:
    """AlpacaEval's length covariate tanh(d / sd(d)): free of the length unit, bounded against outliers;
    all zero when every difference is."""
    sd = float(np.std(d)) if d.size else 0.0
    return np.tanh(d / sd) if sd > 0 else np.zeros_like(d, dtype=float)


def _ratio(num: np.ndarray, den: np.ndarray, idx: np.ndarray | None, level: float) -> dict:
    """{value, lo, hi, n}: the share num/den (0/1 arrays) and its interval over the shared resamples."""
    n = int(den.sum())
    out = {"value": float(num.sum() / n) if n else None, "lo": None, "hi": None, "n": n}
    if idx is not None and n >= 3:
        with np.errstate(all="ignore"):
            out["lo"], out["hi"], _ = percentile_ci(num[idx].sum(1) / den[idx].sum(1), level)
    return out


def _lc(correct: np.ndarray, d: np.ndarray, idx: np.ndarray | None, level: float, ridge: float) -> dict:
    """The length-controlled accuracy expit(b0): agreement predicted at zero length difference, the pairs
    balanced between the reference preferring the longer and the shorter response (`balance_weights`)."""
    out = {"value": None, "lo": None, "hi": None, "slope": None, "ridge": ridge}
    if not correct.size:
        return out
    x = normalized_diff(d)  # normalized once on all pairs: the resamples refit on one covariate scale
    b = logistic_fit(correct, x, balance_weights(d), ridge)[0]
    out.update(value=float(expit(b[0])), slope=float(b[1]))
    if idx is not None:
        b0 = logistic_fit(correct[idx], x[idx], balance_weights(d[idx]), ridge)[:, 0]
        out["lo"], out["hi"], _ = percentile_ci(expit(b0), level)
    return out


def pairwise_length(judge: Sequence[str | None], human: Sequence[str], len_a: Sequence[float | None],
                    len_b: Sequence[float | None], *, n_boot: int = DEFAULT_BOOT, seed: int = DEFAULT_SEED,
                    level: float = 0.95, ridge: float = RIDGE) -> dict:
    """Length bias of a judge's choices ('a'/'b'/'tie'/None) on a pairwise set against the reference's
    ('a'/'b'/'tie'), on the reference-decisive pairs with both lengths known. A judge tie or a pair
    without a choice is a miss, as in `accuracy` of eval.metrics.pairwise_agreement.

    d = length of the response the reference prefers minus the other's. Returns `{n_decisive,
    n_no_length, n, accuracy, shorter, longer, equal, gap, controlled, judge_prefers_longer,
    reference_prefers_longer}`: shares are `{value, lo, hi, n}` (n: the pairs they are over); `shorter`/
    `longer`/`equal` the accuracy where d < 0 / d > 0 / d = 0 (their n add up to `n`); `gap` longer
    minus shorter `{value, lo, hi}`; `controlled` `{value, lo, hi, slope, ridge}`: expit(b0) of the
    balanced logistic fit of agreement on tanh(d / sd(d)) (`logistic_fit`), slope b1 > 0 when the judge agrees
    more where the reference prefers the longer response; `judge_prefers_longer` over the pairs of
    unequal length the judge decided, `reference_prefers_longer` over those of unequal length.
    """
    _check_choices(judge, human)
    if not len(judge) == len(len_a) == len(len_b):
        raise ValueError("choices and lengths differ in length")
    dec = [i for i, h in enumerate(human) if h != "tie"]
    known = [i for i in dec if len_a[i] is not None and len_b[i] is not None]
    j = np.asarray([judge[i] or "" for i in known], dtype=str)
    ab = np.asarray([float(len_a[i]) - float(len_b[i]) for i in known], dtype=float)  # len(A) - len(B)
    d = np.where(np.asarray([human[i] for i in known], dtype=str) == "a", ab, -ab)
    correct = np.asarray([judge[i] == human[i] for i in known], dtype=float)
    idx = bootstrap_indices(len(known), n_boot, seed) if len(known) >= 3 else None
    r = lambda num, den: _ratio(np.asarray(num, dtype=float), np.asarray(den, dtype=float), idx, level)
    decided = (j == "a") | (j == "b")
    return {"n_decisive": len(dec), "n_no_length": len(dec) - len(known), "n": len(known),
            "accuracy": r(correct, np.ones_like(correct)), "shorter": r(correct * (d < 0), d < 0),
            "longer": r(correct * (d > 0), d > 0), "equal": r(correct * (d == 0), d == 0),
            "gap": _gap(correct, d, idx, level), "controlled": _lc(correct, d, idx, level, ridge),
            "judge_prefers_longer": r(((j == "a") & (ab > 0)) | ((j == "b") & (ab < 0)), decided & (ab != 0)),
            "reference_prefers_longer": r(d > 0, d != 0)}


def _gap(correct: np.ndarray, d: np.ndarray, idx: np.ndarray | None, level: float) -> dict:
    """Accuracy where the reference prefers the longer minus where it prefers the shorter response."""
    lg, sh = d > 0, d < 0
    out = {"value": float(correct[lg].mean() - correct[sh].mean()) if lg.any() and sh.any() else None,
           "lo": None, "hi": None}
    if idx is not None and out["value"] is not None:
        c = correct[idx]
        with np.errstate(all="ignore"):
            boot = (c * lg[idx]).sum(1) / lg[idx].sum(1) - (c * sh[idx]).sum(1) / sh[idx].sum(1)
        out["lo"], out["hi"], _ = percentile_ci(boot, level)
    return out
