"""Ties for absolute-graded pairs: the tie margin, its fit on a calibration split, 3-way agreement, and
its place in the eval report (pure logic; the report test runs on the biased fake engine)."""

from __future__ import annotations

import json
import math
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judgeforge.config import load_config
from judgeforge.eval import metrics as M
from judgeforge.eval import run as R
from judgeforge.eval.config import EvalConfig, SetConfig
from judgeforge.judge.engines import Sample
from testing.engines import PromptEngine, shipped_tokenizer

score = st.one_of(st.none(), st.floats(1, 5, allow_nan=False))
human = st.sampled_from(["a", "b", "tie"])
pairs = st.lists(st.tuples(score, score, human), max_size=40)


def _three_way(diffs, hum, m):
    return sum(c == h for c, h in zip(M.margin_choices(diffs, m), hum))


# --- the margin ---------------------------------------------------------------------------------------

@given(pairs)
@settings(max_examples=100, deadline=None)
def test_margin_zero_is_todays_decisive_rule(ps):
    sa, sb, hum = [p[0] for p in ps], [p[1] for p in ps], [p[2] for p in ps]
    assert M.margin_choices(M.score_diffs(sa, sb), 0.0) == M.outcomes(sa, sb)
    rep = M.tie_margin_report([str(i) for i in range(len(ps))], sa, sb, hum, margin=0.0, fraction=0.3, n_boot=50)
    today = M.absolute_pairwise(sa, sb, hum, n_boot=50)
    assert rep["decisive"]["accuracy"] == today["accuracy"] and rep["n_calibration"] == 0
    assert rep["accuracy"] == rep["accuracy_margin0"]
    assert rep["judge_ties"] == sum(a is not None and a == b for a, b in zip(sa, sb))


@given(st.lists(st.floats(0, 0.99), min_size=1, max_size=20), st.lists(st.floats(1.01, 4), min_size=1, max_size=20),
       st.lists(st.booleans(), min_size=20, max_size=20))
@settings(max_examples=100, deadline=None)
def test_fit_recovers_a_margin_between_tie_and_decisive_diffs(tie_d, dec_d, signs):
    diffs = tie_d + [d if s else -d for d, s in zip(dec_d, signs)]
    hum = ["tie"] * len(tie_d) + ["a" if s else "b" for _, s in zip(dec_d, signs)]
    m = M.fit_tie_margin(diffs, hum)
    assert max(tie_d) < m < min(dec_d) or max(tie_d) == m == 0.0  # equal scores are ties at margin 0
    assert _three_way(diffs, hum, m) == len(diffs)  # every pair right


@given(st.lists(st.tuples(st.one_of(st.none(), st.floats(-4, 4, allow_nan=False)), human), max_size=40))
@settings(max_examples=150, deadline=None)
def test_fit_is_the_smallest_best_candidate(ps):
    diffs, hum = [p[0] for p in ps], [p[1] for p in ps]
    m = M.fit_tie_margin(diffs, hum)
    absd = sorted({abs(d) for d in diffs if d is not None})
    cands = [0.0] + [(x + y) / 2 for x, y in zip(absd, absd[1:])]
    best = max(_three_way(diffs, hum, c) for c in cands)
    assert m == pytest.approx(min(c for c in cands if _three_way(diffs, hum, c) == best))
    assert _three_way(diffs, hum, m) == best and m >= 0
    # Between candidates nothing better hides: a margin just above any |diff| but the largest.
    assert all(_three_way(diffs, hum, math.nextafter(x, math.inf)) <= best for x in absd[:-1])


def test_fit_skips_missing_scores_and_has_a_default():
    diffs, hum = [0.1, None, 2.0, None], ["tie", "tie", "a", "b"]
    assert M.fit_tie_margin(diffs, hum) == M.fit_tie_margin([0.1, 2.0], ["tie", "a"]) == pytest.approx(1.05)
    assert M.fit_tie_margin([], []) == 0.0 and M.fit_tie_margin([None], ["tie"]) == 0.0
    assert M.fit_tie_margin([1.0, -2.0], ["a", "b"]) == 0.0  # all decisive and right: no margin needed


# --- 3-way agreement --------------------------------------------------------------------------------

@given(st.lists(st.tuples(st.sampled_from(["a", "b", "tie", None]), human), max_size=40))
@settings(max_examples=100, deadline=None)
def test_three_way_accuracy_is_a_share_of_all_pairs(ps):
    judge, hum = [p[0] for p in ps], [p[1] for p in ps]
    r = M.three_way_agreement(judge, hum, n_boot=50)
    assert r["n"] == len(ps) and r["n_ties"] == hum.count("tie") and r["missing"] == judge.count(None)
    if not ps:
        assert r["accuracy"] is None
        return
    assert 0.0 <= r["accuracy"] <= 1.0
    assert r["accuracy"] == pytest.approx(sum(j == h for j, h in ps) / len(ps))
    if r["lo"] is not None:
        assert 0.0 <= r["lo"] <= r["hi"] <= 1.0


def test_missing_scores_are_misses_counted_never_invented():
    r = M.tie_margin_report(["p0", "p1", "p2", "p3"], [3.0, None, 4.0, 2.0], [3.1, 2.0, None, 4.0],
                            ["tie", "tie", "tie", "b"], margin=0.5, fraction=0.3, n_boot=50)
    assert (r["n"], r["missing"], r["judge_ties"], r["n_ties"]) == (4, 2, 1, 3)
    assert r["accuracy"] == 0.5 and r["accuracy_margin0"] == 0.25  # only p0 (tie) and p3 (b) are right
    with pytest.raises(ValueError, match="'a', 'b' or 'tie'"):
        M.three_way_agreement(["a"], ["left"])


# --- the calibration / report split -----------------------------------------------------------------

@given(st.lists(st.text(min_size=1, max_size=8), unique=True, max_size=60), st.integers(0, 10**6),
       st.floats(0.05, 0.95))
@settings(max_examples=100, deadline=None)
def test_split_is_disjoint_covering_and_seeded(ids, seed, fraction):
    cal, rep = M.calibration_split(ids, fraction, seed)
    assert set(cal).isdisjoint(rep) and sorted(cal + rep) == list(range(len(ids)))
    assert (cal, rep) == M.calibration_split(ids, fraction, seed)  # deterministic under the seed
    # A pair's side depends on its id alone, not on the order of the others.
    back = M.calibration_split(ids[::-1], fraction, seed)[0]
    assert {ids[i] for i in cal} == {ids[::-1][i] for i in back}


def test_split_takes_about_the_fraction_and_moves_with_the_seed():
    ids = [f"autoj:{n}" for n in range(1392)]
    cal, _ = M.calibration_split(ids, 0.3, 42)
    assert 0.26 < len(cal) / len(ids) < 0.34
    assert M.calibration_split(ids, 0.3, 43)[0] != cal


def test_fitted_margin_never_sees_the_report_pairs():
    ids = [f"p{n}" for n in range(200)]
    cal, rep = M.calibration_split(ids, 0.3, 7)
    # Calibration pairs: ties at |diff| 0.2, decisive at 3.0, so the fit is their midpoint 1.6. The report
    # pairs (decisive at |diff| 1.0) would pull it under 1.0 had the fit seen them.
    diff = {i: 1.0 for i in rep} | {i: 0.2 if k % 2 else 3.0 for k, i in enumerate(cal)}
    hum = ["tie" if diff[i] == 0.2 else "a" for i in range(200)]
    r = M.tie_margin_report(ids, [3.0 + diff[i] for i in range(200)], [3.0] * 200, hum, margin="fit",
                            fraction=0.3, seed=7, n_boot=50)
    assert r["fitted"] and r["n_calibration"] == len(cal) and r["n"] == len(rep) > 0
    assert r["margin"] == pytest.approx(1.6)
    assert r["accuracy"] == 0.0 and r["accuracy_margin0"] == 1.0 and r["judge_ties"] == len(rep)


# --- config and report --------------------------------------------------------------------------------

def test_config_field():
    assert SetConfig(name="x", kind="autoj", path="f").tie_margin is None  # default: today's tables
    assert SetConfig(name="x", kind="autoj", path="f", tie_margin="fit").tie_calibration_fraction == 0.3
    assert SetConfig(name="x", kind="pandalm", path="f", tie_margin=0.25).tie_margin == 0.25
    for bad in ({"tie_margin": "best"}, {"tie_margin": -0.1}, {"tie_margin": "fit", "modes": ["relative"]},
                {"kind": "prometheus", "tie_margin": "fit"}, {"tie_calibration_fraction": 1.0}):
        with pytest.raises(ValueError):
            SetConfig(**{"name": "x", "kind": "autoj", "path": "f", **bad})


def test_generalization_config_validates(repo):
    cfg = load_config(EvalConfig, repo / "configs/eval/generalization.yaml", [])
    ties = {s.name: s.tie_margin for s in cfg.sets}
    assert ties["autoj"] == ties["pandalm"] == "fit" and ties["hhh_alignment"] is None
    assert [j.engine.model for j in cfg.judges] == ["default", "default-judge"]
    assert cfg.sampling.score_only and not cfg.sampling.sampled and cfg.n_values == [1]


class SpreadEngine(PromptEngine):
    """Score-only and sampled grades whose distribution is a stable hash of the whole prompt, so the two
    sides of a pair get different expected scores (a real judge's E[A] - E[B] is never exactly 0)."""

    kind = "spread"

    def _sample(self, req):
        h = zlib.crc32(req.messages[-1]["content"].encode())
        lps = {c: -float((h >> (3 * k)) % 7) for k, c in enumerate(req.choices)}
        if not req.feedback:
            return Sample(text="", finish_reason="score_only", choice_logprobs=lps)
        return Sample(text=f"Fine. [RESULT] {max(lps, key=lps.get)}", finish_reason="stop", choice_logprobs=lps)


@pytest.fixture
def spread_engine(monkeypatch):
    import judgeforge.judge.engines as E

    monkeypatch.setattr(E, "build_engine", lambda cfg: SpreadEngine(cfg))
    monkeypatch.setattr(R, "_length_tokenizer", lambda cfg: shipped_tokenizer())


def _autoj_file(tmp_path, n=40):
    p = tmp_path / "autoj.jsonl"
    p.write_text("".join(json.dumps({"scenario": "s", "label": k % 3, "prompt": f"question {k}?",
                                     "response 1": f"answer one {k}", "response 2": f"answer two {k * 7}"}) + "\n"
                         for k in range(n)))
    return p


def _run(tmp_path, ties: str):
    cfg = load_config(EvalConfig, None, [
        f"out={tmp_path / 'report'}", "n_values=[1]", "plots=false", "bootstrap.n_resamples=50",
        "sampling.score_only=true", "judges=[{name: base, engine: {model: m}}]",
        f"sets=[{{name: aj, kind: autoj, path: {_autoj_file(tmp_path)}{ties}}}]"])
    R.run_eval(cfg)
    out = tmp_path / "report"
    return out, json.loads((out / "metrics.json").read_text())


def test_report_gains_the_three_way_figure_beside_the_published_ones(tmp_path, spread_engine):
    out, m = _run(tmp_path, ", tie_margin: fit")
    cal, kept = M.calibration_split([f"autoj:{k}" for k in range(40)], 0.3, 42)  # bootstrap.seed
    for v, rep in m["results"]["base"]["aj"]["absolute"].items():
        t = rep["three_way"]
        assert t["fitted"] and t["margin"] >= 0 and 0 <= t["accuracy"] <= 1
        assert (t["n_calibration"], t["n"], t["n_ties"]) == (len(cal), len(kept), sum(k % 3 == 2 for k in kept))
    so = m["results"]["base"]["aj"]["absolute"]["score_only"]["three_way"]
    assert so["margin"] > 0 and so["judge_ties"] > 0  # the fitted margin makes ties of unequal scores
    # At margin 0 no two expected scores are equal here, so its 3-way hits are the decisive hits.
    assert so["accuracy_margin0"] * so["n"] == pytest.approx(so["decisive"]["accuracy"] * so["decisive"]["n_decisive"])
    text = (out / "report.md").read_text()
    assert "### Three-way agreement" in text and "(fitted)" in text
    assert text.index("### Three-way agreement") < text.index("published (paper figures") \
        and "GPT-4 0.623" in text
    R.recompute(out, plots=False)  # the margin comes back from metrics.json's sets
    again = json.loads((out / "metrics.json").read_text())
    assert again["results"]["base"]["aj"] == m["results"]["base"]["aj"]


def test_without_a_margin_the_report_is_unchanged(tmp_path, spread_engine):
    out, m = _run(tmp_path, "")
    assert all("three_way" not in rep for rep in m["results"]["base"]["aj"]["absolute"].values())
    assert "ties" not in m["sets"][0] and "Three-way" not in (out / "report.md").read_text()
