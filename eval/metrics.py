"""Evaluation metrics: how closely a judge's scores track a reference (GPT-4 or humans).

Pure logic (numpy + scipy.stats, no torch/vLLM; the data builder's seeded split). Every interval is a
percentile bootstrap over items from a seeded numpy generator, so a report is
reproducible bit for bit. Scores that could not be parsed arrive as `None`:
they are excluded from correlations but always counted (`parse_failure_rate`).

Conventions: every function returns plain JSON-able dicts; a statistic that is
undefined (too few items, constant scores) is `None`, never an invented number.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
from scipy import stats

from judgeforge.data.split import seeded_fraction

CORRELATIONS = ("pearson", "spearman", "kendall")
DEFAULT_BOOT = 1000
DEFAULT_SEED = 0


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _quiet(fn: Callable, *args, **kw):
    """scipy warns (ConstantInputWarning, degrees of freedom) where the answer is NaN; NaN -> None later."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(*args, **kw)


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return _quiet(stats.pearsonr, x, y, axis=-1).statistic


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # Spearman's rho is Pearson's r on average ranks (ties included), row by row.
    return _pearson_rows(stats.rankdata(x, axis=-1), stats.rankdata(y, axis=-1))


def _kendall_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.ndim == 1:
        return np.asarray(_quiet(stats.kendalltau, x, y).statistic)
    return np.array([_quiet(stats.kendalltau, a, b).statistic for a, b in zip(x, y)])


ROW_STATS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "pearson": _pearson_rows, "spearman": _spearman_rows, "kendall": _kendall_rows,
}


def bootstrap_indices(n: int, n_boot: int = DEFAULT_BOOT, seed: int = DEFAULT_SEED) -> np.ndarray:
    """(n_boot, n) item indices drawn with replacement; the same seed gives the same draws."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def percentile_ci(samples: np.ndarray, level: float = 0.95) -> tuple[float | None, float | None, int]:
    """Percentile interval over the finite bootstrap statistics; also how many were undefined."""
    samples = np.asarray(samples, dtype=float)
    ok = samples[np.isfinite(samples)]
    dropped = int(samples.size - ok.size)
    if ok.size < max(10, samples.size // 2):  # mostly degenerate resamples: no honest interval
        return None, None, dropped
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(ok, [a, 1.0 - a])
    return float(lo), float(hi), dropped


def _paired(pred: Sequence[float | None], ref: Sequence[float | None]) -> tuple[np.ndarray, np.ndarray]:
    if len(pred) != len(ref):
        raise ValueError(f"pred and ref differ in length ({len(pred)} vs {len(ref)})")
    keep = [(p, r) for p, r in zip(pred, ref) if p is not None and r is not None]
    if not keep:
        return np.zeros(0), np.zeros(0)
    a = np.asarray(keep, dtype=float)
    return a[:, 0], a[:, 1]


def correlation(pred: Sequence[float | None], ref: Sequence[float | None], *,
                methods: Iterable[str] = CORRELATIONS, n_boot: int = DEFAULT_BOOT,
                seed: int = DEFAULT_SEED, level: float = 0.95) -> dict:
    """Pearson/Spearman/Kendall of pred vs ref with bootstrap CIs over items.

    Items where either side is None are left out of the statistics and counted
    in `n_missing`. Returns `{n, n_missing, <method>: {value, p, lo, hi, undefined_resamples}}`.
    """
    x, y = _paired(pred, ref)
    out: dict = {"n": int(x.size), "n_missing": len(pred) - int(x.size)}
    idx = bootstrap_indices(x.size, n_boot, seed) if x.size >= 3 else None
    scipy_fns = {"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}
    for m in methods:
        entry = {"value": None, "p": None, "lo": None, "hi": None, "undefined_resamples": None}
        if x.size >= 3:
            res = _quiet(scipy_fns[m], x, y)
            entry["value"], entry["p"] = _finite(res.statistic), _finite(res.pvalue)
            boot = ROW_STATS[m](x[idx], y[idx])
            entry["lo"], entry["hi"], entry["undefined_resamples"] = percentile_ci(boot, level)
        out[m] = entry
    return out


def to_int_scores(values: Sequence[float | None]) -> list[int | None]:
    """Round half up (a mean of 3 samples 3.5 -> 4); None stays None."""
    return [None if v is None else int(math.floor(float(v) + 0.5)) for v in values]


def agreement(pred: Sequence[float | None], ref: Sequence[float | None]) -> dict:
    """Exact and within-1 agreement after rounding both sides to integers (parsed items only)."""
    x, y = _paired(to_int_scores(pred), to_int_scores(ref))
    if x.size == 0:
        return {"n": 0, "exact": None, "within1": None, "mae": None}
    d = np.abs(x - y)
    raw_x, raw_y = _paired(pred, ref)  # MAE on the unrounded values
    return {"n": int(x.size), "exact": float(np.mean(d == 0)), "within1": float(np.mean(d <= 1)),
            "mae": float(np.mean(np.abs(raw_x - raw_y)))}


def parse_stats(pred: Sequence[float | None]) -> dict:
    n = len(pred)
    failed = sum(p is None for p in pred)
    return {"n": n, "parse_failures": failed, "parse_failure_rate": (failed / n) if n else None}


def confusion(pred: Sequence[float | None], ref: Sequence[float | None], scale: Sequence[int]) -> dict:
    """Counts[ref][pred] over integer scores (rows = reference); failures in an extra 'unparsed' column."""
    labels = list(scale)
    pos = {v: i for i, v in enumerate(labels)}
    mat = np.zeros((len(labels), len(labels) + 1), dtype=int)
    for p, r in zip(to_int_scores(pred), to_int_scores(ref)):
        if r is None or r not in pos:
            continue
        col = len(labels) if p is None or p not in pos else pos[p]
        mat[pos[r], col] += 1
    return {"labels": labels, "columns": labels + ["unparsed"], "counts": mat.tolist()}


def score_report(pred: Sequence[float | None], ref: Sequence[float | None], *,
                 categories: Sequence[str | None] | None = None, n_boot: int = DEFAULT_BOOT,
                 seed: int = DEFAULT_SEED, level: float = 0.95) -> dict:
    """Everything for one judge on one absolute set: correlations, agreement, failures, per category."""
    rep = {**parse_stats(pred), **{"agreement": agreement(pred, ref)},
           "correlation": correlation(pred, ref, n_boot=n_boot, seed=seed, level=level)}
    if categories is not None:
        rep["per_category"] = per_category(pred, ref, categories, n_boot=n_boot, seed=seed, level=level)
    return rep


def per_category(pred: Sequence[float | None], ref: Sequence[float | None],
                 categories: Sequence[str | None], *, n_boot: int = DEFAULT_BOOT,
                 seed: int = DEFAULT_SEED, level: float = 0.95) -> dict:
    """Pearson with CI, agreement and failure rate per category (Table 3 rows)."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(categories):
        groups[c or "uncategorised"].append(i)
    out = {}
    for cat in sorted(groups):
        ii = groups[cat]
        p, r = [pred[i] for i in ii], [ref[i] for i in ii]
        out[cat] = {**parse_stats(p), "agreement": agreement(p, r),
                    "correlation": correlation(p, r, methods=("pearson",), n_boot=n_boot, seed=seed,
                                               level=level)}
    return out


def self_agreement(samples: Sequence[Sequence[float]], *, n_boot: int = DEFAULT_BOOT,
                   seed: int = DEFAULT_SEED, level: float = 0.95) -> dict:
    """The reference judge's ceiling: Pearson of one sample against the mean of the others.

    `samples[i]` are the reference judge's k>=2 scores of item i (items with fewer are
    skipped). The value is averaged over which sample is held out; the CI resamples items.
    """
    rows = [list(map(float, s)) for s in samples if s is not None and len(s) >= 2]
    if not rows:
        return {"n": 0, "k": 0, "pearson": {"value": None, "lo": None, "hi": None},
                "first_sample_pearson": None}
    k = min(len(r) for r in rows)
    s = np.asarray([r[:k] for r in rows])  # (n, k)

    def stat(mat: np.ndarray) -> np.ndarray:  # mat (..., n, k) -> (...)
        vals = []
        for j in range(k):
            others = np.delete(mat, j, axis=-1).mean(axis=-1)
            vals.append(_pearson_rows(mat[..., j], others))
        return np.nanmean(np.stack(vals), axis=0) if k > 1 else vals[0]

    value = _finite(_quiet(stat, s))
    # Sample 0 alone against the mean of the rest (the single-split number often quoted).
    first = _finite(_quiet(_pearson_rows, s[:, 0], np.delete(s, 0, axis=1).mean(axis=1)))
    lo = hi = None
    if s.shape[0] >= 3:
        boot = _quiet(stat, s[bootstrap_indices(s.shape[0], n_boot, seed)])
        lo, hi, _ = percentile_ci(boot, level)
    return {"n": int(s.shape[0]), "k": int(k), "pearson": {"value": value, "lo": lo, "hi": hi},
            "first_sample_pearson": first}


def paired_difference(pred_a: Sequence[float | None], pred_b: Sequence[float | None],
                      ref: Sequence[float | None], *, method: str = "pearson",
                      n_boot: int = DEFAULT_BOOT, seed: int = DEFAULT_SEED, level: float = 0.95) -> dict:
    """B minus A in `method` against the same reference, on the items both judges parsed.

    Both judges are resampled with the same item indices (paired bootstrap), so the
    interval reflects the difference, not two independent noises. `significant` when
    the CI excludes 0; `forgetting` when B is significantly worse than A.
    """
    if not (len(pred_a) == len(pred_b) == len(ref)):
        raise ValueError("paired_difference needs equal-length pred_a, pred_b, ref")
    keep = [i for i in range(len(ref)) if None not in (pred_a[i], pred_b[i], ref[i])]
    a = np.asarray([pred_a[i] for i in keep], dtype=float)
    b = np.asarray([pred_b[i] for i in keep], dtype=float)
    y = np.asarray([ref[i] for i in keep], dtype=float)
    out = {"method": method, "n": len(keep), "a": None, "b": None, "diff": None, "lo": None,
           "hi": None, "p": None, "significant": False, "forgetting": False}
    if len(keep) < 3:
        return out
    fn = ROW_STATS[method]
    va, vb = _finite(fn(a, y)), _finite(fn(b, y))
    out.update(a=va, b=vb, diff=None if va is None or vb is None else vb - va)
    idx = bootstrap_indices(len(keep), n_boot, seed)
    diffs = fn(b[idx], y[idx]) - fn(a[idx], y[idx])
    lo, hi, _ = percentile_ci(diffs, level)
    out.update(lo=lo, hi=hi)
    ok = diffs[np.isfinite(diffs)]
    if lo is not None and ok.size:
        # two-sided bootstrap p: twice the smaller tail mass beyond zero
        out["p"] = float(min(1.0, 2 * min(np.mean(ok <= 0), np.mean(ok >= 0))))
        out["significant"] = bool(lo > 0 or hi < 0)
        out["forgetting"] = bool(hi < 0)
    return out


def outcomes(scores_a: Sequence[float | None], scores_b: Sequence[float | None]) -> list[str | None]:
    """Each pair's choice from its two absolute scores: the higher side, 'tie' when equal, None without both."""
    return [None if a is None or b is None else "a" if a > b else "b" if b > a else "tie"
            for a, b in zip(scores_a, scores_b)]


def _accuracy_ci(correct: np.ndarray, n_boot: int, seed: int, level: float) -> tuple:
    if correct.size < 3:
        return None, None
    boot = correct[bootstrap_indices(correct.size, n_boot, seed)].mean(axis=1)
    lo, hi, _ = percentile_ci(boot, level)
    return lo, hi


def _check_choices(judge: Sequence[str | None], human: Sequence[str]) -> None:
    if len(judge) != len(human):
        raise ValueError("judge and human choices differ in length")
    bad = {h for h in human if h not in ("a", "b", "tie")}
    if bad:
        raise ValueError(f"human choices must be 'a', 'b' or 'tie', got {sorted(map(str, bad))}")


def pairwise_agreement(judge: Sequence[str | None], human: Sequence[str], *,
                       n_boot: int = DEFAULT_BOOT, seed: int = DEFAULT_SEED, level: float = 0.95) -> dict:
    """Agreement of judge choices ('a'/'b'/'tie'/None) with human choices ('a'/'b'/'tie').

    Pairs the humans called a tie are reported apart (`human_ties`). On the decisive
    pairs: `accuracy` counts a judge tie or failure as a miss (the strict number),
    `accuracy_decided` is over the pairs the judge decided (the Prometheus-2 number when
    ties are dropped); judge ties and parse failures are counted.
    """
    _check_choices(judge, human)
    dec = [(j, h) for j, h in zip(judge, human) if h != "tie"]
    ties = [j for j, h in zip(judge, human) if h == "tie"]
    correct = np.asarray([j == h for j, h in dec], dtype=float)
    decided = np.asarray([j == h for j, h in dec if j in ("a", "b")], dtype=float)
    lo, hi = _accuracy_ci(correct, n_boot, seed, level)
    dlo, dhi = _accuracy_ci(decided, n_boot, seed, level)
    return {
        "n": len(judge), "n_decisive": len(dec),
        "accuracy": float(correct.mean()) if correct.size else None, "lo": lo, "hi": hi,
        "accuracy_decided": float(decided.mean()) if decided.size else None, "decided_lo": dlo,
        "decided_hi": dhi, "n_decided": int(decided.size),
        "judge_ties": sum(j == "tie" for j, _ in dec),
        "parse_failures": sum(j is None for j in judge),
        "parse_failure_rate": sum(j is None for j in judge) / len(judge) if judge else None,
        "human_ties": {"n": len(ties), "judge_tie_rate": (sum(j == "tie" for j in ties) / len(ties))
                       if ties else None},
    }


def absolute_pairwise(scores_a: Sequence[float | None], scores_b: Sequence[float | None],
                      human: Sequence[str], **kw) -> dict:
    """Prometheus-2 protocol for absolute judges: grade both responses, higher score wins."""
    choices = outcomes(scores_a, scores_b)
    return pairwise_agreement(choices, human, **kw)


# ---------------------------------------------------------------- ties for absolute-graded pairs
# Two expected scores are never exactly equal, so `outcomes` never says 'tie' and every human tie of a
# 3-way protocol (about a quarter of Auto-J's and PandaLM's pairs) is lost. A margin on |E[A] - E[B]|,
# fitted on a calibration share of the pairs and scored on the rest, gives the judge ties honestly.

def score_diffs(scores_a: Sequence[float | None], scores_b: Sequence[float | None]) -> list[float | None]:
    """E[A] - E[B] per pair; None where either side has no score (counted downstream, never filled in)."""
    return [None if a is None or b is None else float(a) - float(b) for a, b in zip(scores_a, scores_b)]


def margin_choices(diffs: Sequence[float | None], margin: float) -> list[str | None]:
    """'tie' when |diff| < margin or the scores are equal (so margin 0 is `outcomes`), else the higher side."""
    return [None if d is None else "tie" if d == 0 or abs(d) < margin else "a" if d > 0 else "b"
            for d in diffs]


def fit_tie_margin(diffs: Sequence[float | None], human: Sequence[str]) -> float:
    """The margin m >= 0 maximising 3-way accuracy of `margin_choices(diffs, m)` against `human`.

    Candidates: 0 and the midpoints between consecutive distinct |diff| values (every other margin
    gives one of their partitions); the smallest of the best wins. Pairs without a diff are skipped;
    no pair at all gives 0.
    """
    _check_choices(diffs, human)
    keep = sorted((abs(d), d, h) for d, h in zip(diffs, human) if d is not None)
    if not keep:
        return 0.0
    a = np.array([k[0] for k in keep])
    tie_hits = np.cumsum([0] + [h == "tie" for _, _, h in keep])
    side_hits = np.cumsum([0] + [(d > 0 and h == "a") or (d < 0 and h == "b") for _, d, h in keep])
    values = np.unique(a)
    cands = np.concatenate([[0.0], (values[:-1] + values[1:]) / 2])
    # The pairs called ties at margin m are the first k in |diff| order: |diff| < m, and every zero.
    k = np.maximum(np.searchsorted(a, cands, "left"), np.searchsorted(a, 0.0, "right"))
    correct = tie_hits[k] + side_hits[-1] - side_hits[k]
    return float(cands[int(np.argmax(correct))])  # argmax: the first, i.e. smallest, best margin


def three_way_agreement(judge: Sequence[str | None], human: Sequence[str], *, n_boot: int = DEFAULT_BOOT,
                        seed: int = DEFAULT_SEED, level: float = 0.95) -> dict:
    """Accuracy over ALL pairs, ties included (the Auto-J/PandaLM protocol): a judge tie matches a
    human tie; a pair the judge could not score (None) is a miss, counted in `missing`."""
    _check_choices(judge, human)
    correct = np.asarray([j == h for j, h in zip(judge, human)], dtype=float)
    lo, hi = _accuracy_ci(correct, n_boot, seed, level)
    return {"n": len(human), "accuracy": float(correct.mean()) if correct.size else None, "lo": lo, "hi": hi,
            "n_ties": sum(h == "tie" for h in human), "judge_ties": sum(j == "tie" for j in judge),
            "missing": sum(j is None for j in judge)}


def calibration_split(ids: Sequence[str], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(calibration, report) indices: each pair's side is a seeded hash of its id (the data builder's
    `seeded_fraction`), so the split depends on neither the order nor the other pairs."""
    cal = [i for i, key in enumerate(ids) if seeded_fraction(str(key), seed, fraction)]
    chosen = set(cal)
    return cal, [i for i in range(len(ids)) if i not in chosen]


def tie_margin_report(ids: Sequence[str], scores_a: Sequence[float | None], scores_b: Sequence[float | None],
                      human: Sequence[str], *, margin: str | float, fraction: float, n_boot: int = DEFAULT_BOOT,
                      seed: int = DEFAULT_SEED, level: float = 0.95) -> dict:
    """3-way agreement of an absolute judge with a tie margin. `margin='fit'`: fitted on the seeded
    calibration share of the pairs, every figure on the other pairs only (nothing is scored on what it
    was fitted on); a number: that margin on every pair. Beside it, on the same pairs: the 3-way accuracy
    at margin 0 and the decisive-pairs accuracy (human ties left out)."""
    diffs = score_diffs(scores_a, scores_b)
    if margin == "fit":
        cal, rep = calibration_split(ids, fraction, seed)
        m = fit_tie_margin([diffs[i] for i in cal], [human[i] for i in cal])
    else:
        cal, rep, m = [], list(range(len(diffs))), float(margin)
    d, h = [diffs[i] for i in rep], [human[i] for i in rep]
    boot = {"n_boot": n_boot, "seed": seed, "level": level}
    decisive = pairwise_agreement(margin_choices(d, 0.0), h, **boot)
    at_zero = three_way_agreement(margin_choices(d, 0.0), h, **boot)
    return {"margin": m, "fitted": margin == "fit", "n_calibration": len(cal),
            "calibration_missing": sum(diffs[i] is None for i in cal),
            **three_way_agreement(margin_choices(d, m), h, **boot), "accuracy_margin0": at_zero["accuracy"],
            "decisive": {k: decisive[k] for k in ("accuracy", "lo", "hi", "n_decisive")}}


def length_bias(scores: Sequence[float | None], lengths: Sequence[int]) -> dict:
    """Linear fit of score on response length in tokens: r, R^2, p, slope (parsed items only)."""
    x, y = _paired(list(lengths), scores)
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"n": int(x.size), "r": None, "r2": None, "p": None, "slope": None}
    res = stats.linregress(x, y)
    return {"n": int(x.size), "r": float(res.rvalue), "r2": float(res.rvalue ** 2),
            "p": float(res.pvalue), "slope": float(res.slope)}


def ranking(scores: Sequence[float | None], models: Sequence[str], external: Mapping[str, float],
            *, higher_is_better: bool = True) -> dict:
    """Per-response-model mean score vs an external ranking (Spearman, Kendall over shared models).

    `external` maps model -> a score where higher is better (e.g. an Elo), or a rank
    position with `higher_is_better=False` (1 = best).
    """
    sums: dict[str, list[float]] = defaultdict(list)
    for s, m in zip(scores, models):
        if s is not None:
            sums[m].append(float(s))
    means = {m: float(np.mean(v)) for m, v in sorted(sums.items())}
    shared = [m for m in means if m in external]
    out = {"n_models": len(shared), "model_means": means, "spearman": None, "kendall": None,
           "spearman_p": None, "kendall_p": None}
    if len(shared) < 3:
        return out
    ours = [means[m] for m in shared]
    theirs = [float(external[m]) * (1 if higher_is_better else -1) for m in shared]
    sp, kt = _quiet(stats.spearmanr, ours, theirs), _quiet(stats.kendalltau, ours, theirs)
    out.update(spearman=_finite(sp.statistic), spearman_p=_finite(sp.pvalue),
               kendall=_finite(kt.statistic), kendall_p=_finite(kt.pvalue))
    return out


def paired_accuracy_difference(judge_a: Sequence[str | None], judge_b: Sequence[str | None],
                               human: Sequence[str], *, n_boot: int = DEFAULT_BOOT,
                               seed: int = DEFAULT_SEED, level: float = 0.95) -> dict:
    """B minus A in pairwise accuracy on the human-decisive pairs (ties and failures are misses),
    paired bootstrap over pairs; `forgetting` when B is significantly worse."""
    dec = [i for i, h in enumerate(human) if h != "tie"]
    ca = np.asarray([judge_a[i] == human[i] for i in dec], dtype=float)
    cb = np.asarray([judge_b[i] == human[i] for i in dec], dtype=float)
    out = {"method": "accuracy", "n": len(dec), "a": None, "b": None, "diff": None, "lo": None,
           "hi": None, "p": None, "significant": False, "forgetting": False}
    if len(dec) < 3:
        return out
    out.update(a=float(ca.mean()), b=float(cb.mean()), diff=float(cb.mean() - ca.mean()))
    idx = bootstrap_indices(len(dec), n_boot, seed)
    diffs = cb[idx].mean(axis=1) - ca[idx].mean(axis=1)
    lo, hi, _ = percentile_ci(diffs, level)
    out.update(lo=lo, hi=hi, p=float(min(1.0, 2 * min(np.mean(diffs <= 0), np.mean(diffs >= 0)))),
               significant=bool(lo > 0 or hi < 0), forgetting=bool(hi < 0))
    return out
