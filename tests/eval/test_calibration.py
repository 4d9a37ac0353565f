"""Trust or Escalate calibration: exact bounds, the fixed-sequence choice, errors, the guarantee."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judgeforge.eval.calibration import (CalibrationError, agrees, calibrate, escalate, items_needed,
                                            upper_bound)


def _cdf(k: int, n: int, p) -> float:
    """P(Bin(n, p) <= k) by direct summation of the pmf."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))


def _cp_upper(k: int, n: int, delta: float) -> float:
    """Clopper-Pearson upper bound by bisection on the summed pmf: P(Bin(n, u) <= k) = delta."""
    if k >= n:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _cdf(k, n, mid) > delta else (lo, mid)
    return hi


def _passes(k: int, n: int, alpha: float, delta: float) -> bool:
    """bound <= alpha  <=>  P(Bin(n, alpha) <= k) <= delta, in exact rational arithmetic."""
    return k < n and _cdf(k, n, Fraction(alpha)) <= Fraction(delta)


def _brute_force(conf, agree, alpha, delta, min_n):
    """Every distinct threshold from the most confident down; stop at the first failure."""
    chosen = None
    for t in sorted(set(conf), reverse=True):
        cov = [a for c, a in zip(conf, agree) if c >= t]
        if len(cov) < min_n:
            continue
        if not _passes(len(cov) - sum(cov), len(cov), alpha, delta):
            break
        chosen = t
    return chosen


@pytest.mark.parametrize("n", [1, 2, 5, 13, 40])
@pytest.mark.parametrize("delta", [0.05, 0.1, 0.3])
def test_upper_bound_is_clopper_pearson(n, delta):
    for k in range(n + 1):
        assert upper_bound(k, n, delta) == pytest.approx(_cp_upper(k, n, delta), abs=1e-9)
    assert upper_bound(0, n, delta) == pytest.approx(1 - delta ** (1 / n))  # the closed form at k=0


def test_fixed_sequence_matches_brute_force_on_small_cases():
    rng = np.random.default_rng(0)
    outcomes = set()
    for _ in range(400):
        n = int(rng.integers(1, 14))
        conf = rng.choice([0.2, 0.4, 0.5, 0.7, 0.9, 1.0], size=n).tolist()  # ties on purpose
        agree = (rng.random(n) < np.asarray(conf) ** 0.3).tolist()
        alpha, delta = float(rng.uniform(0.05, 0.7)), float(rng.uniform(0.05, 0.5))
        min_n = int(rng.integers(1, 6))
        want = _brute_force(conf, agree, alpha, delta, min_n)
        if want is None:
            with pytest.raises(CalibrationError):
                calibrate(conf, agree, alpha, delta, min_n)
            outcomes.add("none")
            continue
        got = calibrate(conf, agree, alpha, delta, min_n)
        assert got.threshold == want
        covered = [a for c, a in zip(conf, agree) if c >= want]
        assert got.n_covered == len(covered) and got.coverage == len(covered) / n
        assert got.disagreement == pytest.approx(1 - sum(covered) / len(covered))
        assert got.upper <= alpha
        outcomes.add("stopped early" if want > min(conf) else "all")
    assert outcomes == {"none", "stopped early", "all"}  # every branch was exercised


def test_fixed_sequence_stops_at_first_failure_even_if_a_lower_threshold_would_pass():
    # Top 10 all agree (passes), the next 10 all disagree (fails), then 200 agreeing items would
    # bring the overall rate back under alpha: fixed-sequence must not jump past the failure.
    conf = [0.99] * 10 + [0.9] * 10 + [0.5] * 200
    agree = [True] * 10 + [False] * 10 + [True] * 200
    cal = calibrate(conf, agree, alpha=0.3, delta=0.1, min_n=10)
    assert cal.threshold == 0.99 and cal.n_covered == 10
    assert upper_bound(10, 220, 0.1) <= 0.3  # the lower threshold would have passed on its own


def test_curve_lists_every_distinct_confidence():
    conf = [0.9, 0.9, 0.8, 0.7, 0.7, 0.7]
    cal = calibrate(conf, [True] * 6, alpha=0.6, delta=0.2, min_n=1, tolerance=1)
    c = cal.curve
    assert c["threshold"] == [0.9, 0.8, 0.7]
    assert c["coverage"] == [2 / 6, 3 / 6, 1.0]
    assert c["disagreement"] == [0.0, 0.0, 0.0]
    assert c["upper"] == pytest.approx([1 - 0.2 ** (1 / k) for k in (2, 3, 6)])
    assert cal.threshold == 0.7 and cal.tolerance == 1 and cal.to_dict()["curve"] == c


@given(st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=1, max_size=60),
       st.floats(0.05, 0.6), st.floats(0.05, 0.5), st.integers(1, 20))
@settings(max_examples=150, deadline=None)
def test_properties_of_any_calibration(items, alpha, delta, min_n):
    conf, agree = [c for c, _ in items], [a for _, a in items]
    try:
        cal = calibrate(conf, agree, alpha, delta, min_n)
    except CalibrationError as e:
        assert "alpha" in str(e) or "min_n" in str(e)
        return
    assert cal.threshold in conf
    assert cal.n_covered == sum(c >= cal.threshold for c in conf) >= min_n
    assert cal.upper <= alpha
    # Every tested candidate above the chosen one passed too (fixed sequence).
    for t, cov, u in zip(cal.curve["threshold"], cal.curve["coverage"], cal.curve["upper"]):
        if t > cal.threshold and cov * len(conf) >= min_n - 1e-9:
            assert u <= alpha
    # Escalation is exactly "below the threshold".
    assert sum(not escalate(c, cal.threshold) for c in conf) == cal.n_covered


def test_errors_say_what_is_missing():
    with pytest.raises(CalibrationError, match=r"with 40 items the best achievable bound is 0\.072 > "
                                               r"alpha=0\.05: need at least 59 items"):
        calibrate([0.9] * 40, [True] * 40, alpha=0.05, delta=0.05, min_n=30)
    with pytest.raises(CalibrationError, match=r"only 16 calibration items, fewer than min_n=30"):
        calibrate([0.9] * 16, [True] * 16, alpha=0.3, delta=0.1)
    with pytest.raises(CalibrationError, match=r"no threshold passes: .*30 items, 6 disagreeing"
                                               r".*> alpha=0\.1"):
        calibrate([0.9] * 30 + [0.5] * 70, [False] * 6 + [True] * 94, alpha=0.1, delta=0.1)
    with pytest.raises(ValueError, match="alpha and delta"):
        calibrate([0.5], [True], alpha=0.0, delta=0.1)
    with pytest.raises(ValueError, match="finite"):
        calibrate([float("nan")], [True], alpha=0.1, delta=0.1)


def test_items_needed():
    assert items_needed(0.0, 0.1, 0.1) == 22  # 0.9**22 <= 0.1 < 0.9**21
    n = items_needed(0.05, 0.1, 0.1)
    assert upper_bound(math.ceil(0.05 * n), n, 0.1) <= 0.1
    assert items_needed(0.1, 0.1, 0.1) is None


def test_escalate_and_agrees():
    assert not escalate(0.0, 0.0) and not escalate(0.3, 0.0)  # threshold 0 never escalates
    assert escalate(1.0, 1.0001) and escalate(0.0, 1.5)  # above 1 always escalates
    assert not escalate(0.8, 0.8) and escalate(0.79, 0.8)
    assert escalate(None, 0.0) and escalate(float("nan"), 0.0)  # no local score: nothing to trust
    assert agrees([3, 4, None, 5], [3, 5, 3, 3], 0).tolist() == [True, False, False, False]
    assert agrees([3, 4, None, 5], [3, 5, 3, 3], 1).tolist() == [True, True, False, False]


def _population(n: int, rng, risk_at):
    conf = rng.uniform(0, 1, n)
    return conf, rng.random(n) >= risk_at(conf)


def _risk_above(conf, agree, t):
    cov = conf >= t
    return 1 - agree[cov].mean()


@pytest.mark.parametrize("risk_at, min_found", [
    (lambda c: 0.4 * (1 - c) ** 2, 0.9),  # informative confidence: certifiable, nearly always found
    (lambda c: np.full_like(c, 0.115), 0.0),  # just above alpha everywhere: any threshold is wrong
])
def test_guarantee_holds_over_random_calibration_sets(risk_at, min_found):
    """With probability >= 1 - delta over the calibration draw, the population disagreement of the
    items answered locally is <= alpha."""
    rng = np.random.default_rng(7)
    conf, agree = _population(40_000, rng, risk_at)
    alpha, delta, trials = 0.1, 0.1, 300
    held = found = 0
    for _ in range(trials):
        idx = rng.choice(conf.size, size=300, replace=False)
        try:
            cal = calibrate(conf[idx], agree[idx], alpha, delta, min_n=30)
        except CalibrationError:
            held += 1  # everything escalates: nothing answered locally, nothing violated
            continue
        found += 1
        held += _risk_above(conf, agree, cal.threshold) <= alpha
    assert held / trials >= 1 - delta
    assert found / trials >= min_found
