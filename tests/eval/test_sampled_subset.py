"""`sampled_items`: the sampled pass on a seeded subset of a set's units, score-only on all of them.

The subset's selection (pure, with hypothesis properties), its marking of units (pairs and probes go
with their item, relative units always sampled), the config's checks, and the report on a
deterministic engine: the sampled variants over the subset, score-only over every unit, and no
unsampled unit counted as "no score"."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from judgeforge.config import load_config
from judgeforge.eval import judges as J
from judgeforge.eval import run as R
from judgeforge.eval.config import EvalConfig
from judgeforge.eval.report import render_markdown
from judgeforge.eval.sets import AbsItem, EvalSet, PairItem
from judgeforge.judge.prompts import Rubric

from .conftest import BiasedEngine

ids = st.lists(st.text(min_size=1, max_size=6), max_size=40)

# ---------------------------------------------------------------- selection (pure)


@given(ids, st.integers(1, 50), st.integers(0, 2**32))
def test_subset_size_and_membership(pool, k, seed):
    got = J.sampled_ids(pool, k, seed)
    assert got <= set(pool) and len(got) == min(k, len(set(pool)))


@given(ids, st.integers(1, 50), st.integers(0, 2**32), st.randoms(use_true_random=False))
def test_subset_ignores_order_and_repeats(pool, k, seed, rnd):
    shuffled = pool + pool[: len(pool) // 2]
    rnd.shuffle(shuffled)
    assert J.sampled_ids(shuffled, k, seed) == J.sampled_ids(pool, k, seed)


@given(ids, st.integers(1, 50), st.integers(0, 2**32), st.data())
def test_subset_stable_when_items_are_dropped(pool, k, seed, data):
    """A smaller `max_items` keeps every chosen id it still loads chosen."""
    kept = data.draw(st.lists(st.sampled_from(pool), unique=True) if pool else st.just([]))
    assert J.sampled_ids(pool, k, seed) & set(kept) <= J.sampled_ids(kept, k, seed)


def test_subset_none_is_all_and_the_seed_matters():
    pool = [f"item{i}" for i in range(200)]
    assert J.sampled_ids(pool, None, 1) == set(pool)
    assert J.sampled_ids(pool, 20, 1) == J.sampled_ids(list(reversed(pool)), 20, 1)
    assert J.sampled_ids(pool, 20, 1) != J.sampled_ids(pool, 20, 2)


def test_subset_is_not_the_tie_calibration_share():
    """tie_margin: fit hashes the bare ids with the same seed; the subset must not be its lowest ranks."""
    from judgeforge.data.split import seeded_fraction

    pool = [f"pair{i}" for i in range(400)]
    cal = {i for i in pool if seeded_fraction(i, 42, 0.3)}
    chosen = J.sampled_ids(pool, 40, 42)
    assert 0.1 < len(chosen & cal) / len(chosen) < 0.5  # about the share, not all of it


# ---------------------------------------------------------------- marking units


def _sets():
    r = Rubric("Is it helpful?")
    items = [AbsItem(id=f"x{i}", instruction=f"q{i}", response=f"r{i}", rubric=r, ref_score=3.0) for i in range(10)]
    pairs = [PairItem(id=f"p{i}", instruction=f"q{i}", response_a="a", response_b="b", rubric=r, human="a")
             for i in range(6)]
    return [EvalSet("abs", "absolute", "gpt-4", items, "mem", 10), EvalSet("pw", "pairwise", "human", pairs, "mem", 6)]


def test_mark_unsampled_keeps_pairs_probes_and_relative_together():
    from judgeforge.eval.config import ProbesConfig

    units = J.build_units(_sets(), {"pw": ["absolute", "relative"]}, ProbesConfig(injection=True))
    J.mark_unsampled(units, {"abs": 4, "pw": 2}, seed=7)
    by_item: dict = {}
    for u in units:
        if u.mode != "relative" and not (u.mode == J.PROBE and u.probe == "swap"):
            by_item.setdefault((u.set, u.item_id), set()).add(J.is_sampled(u))
    assert all(len(v) == 1 for v in by_item.values())  # an item's units: all in or all out
    sampled = Counter(s for (s, _), v in by_item.items() if v == {True})
    assert sampled == {"abs": 4, "pw": 2}
    assert all(J.is_sampled(u) for u in units if u.unit == "pair")  # relative units: no score-only read
    assert J.sampled_ids([f"x{i}" for i in range(10)], 4, 7) == {i for (s, i), v in by_item.items()
                                                                 if s == "abs" and v == {True}}


def test_sampled_items_needs_score_only_and_is_ignored_without_a_sampled_pass():
    sets = "sets=[{name: v, kind: prometheus, path: x.json, sampled_items: 3}]"
    with pytest.raises(Exception, match="score_only"):
        load_config(EvalConfig, None, [sets])
    with pytest.raises(Exception, match="greater than or equal to 1"):
        load_config(EvalConfig, None, ["sampling.score_only=true",
                                       "sets=[{name: v, kind: prometheus, path: x.json, sampled_items: 0}]"])
    cfg = load_config(EvalConfig, None, [sets, "sampling.score_only=true", "sampling.sampled=false", "n_values=[1]"])
    assert cfg.sets[0].sampled_items == 3


# ---------------------------------------------------------------- the report


class CountingEngine(BiasedEngine):
    """The biased engine, counting each prompt's requests: (prompt, feedback) -> requests."""

    seen: Counter = Counter()

    def generate(self, requests):
        for r in requests:
            CountingEngine.seen[(r.messages[-1]["content"], r.feedback)] += 1
        return super().generate(requests)


@pytest.fixture
def subset_config(tmp_path, vendor, biased_engine, monkeypatch):
    import judgeforge.judge.engines as E

    CountingEngine.seen = Counter()
    monkeypatch.setattr(E, "build_engine", lambda cfg: CountingEngine(cfg))
    pv = vendor / "prometheus-eval"
    return load_config(EvalConfig, None, [
        f"out={tmp_path / 'report'}", "n_values=[1, 3]", "bootstrap.n_resamples=100", "plots=false",
        "sampling.score_only=true", "probes.injection=true", "judges=[{name: base, engine: {model: m}}]",
        "sets=[{name: vicuna, kind: prometheus, path: " + str(pv / "vicuna_eval.json") + ", max_items: 16,"
        " sampled_items: 6}, {name: hhh, kind: hhh, path: " + str(pv / "hhh_alignment_eval.json") + ","
        " max_items: 10, sampled_items: 4, modes: [absolute, relative]}]"])


def test_report_reads_sampled_variants_on_the_subset_only(subset_config, tmp_path):
    m = R.run_eval(subset_config)
    vic, hhh = m["results"]["base"]["vicuna"], m["results"]["base"]["hhh"]
    for v in ("n1", "n3", "expected"):
        assert vic[v]["n"] == 6 and vic[v]["parse_failures"] == 0  # no unsampled unit counted as "no score"
        assert hhh["absolute"][v]["n"] == 4 and hhh["absolute"][v]["parse_failures"] == 0
    assert vic["score_only"]["n"] == 16 and vic["score_only"]["parse_failures"] == 0
    assert hhh["absolute"]["score_only"]["n"] == 10 and hhh["relative"]["n3"]["n"] == 10
    assert vic["n3"]["length"]["n"] == 6 and vic["score_only"]["length"]["n"] == 16  # length follows the units
    assert m["samples"]["base"]["vicuna"]["n"] == 6 * 3
    assert m["sampled_units"] == {"vicuna": {"sampled": 6, "of": 16}, "hhh": {"sampled": 4, "of": 10}}
    inj = m["probes"]["base"]["vicuna"]["injection"]
    assert inj["n3"]["n"] + inj["n3"]["n_missing"] == 6 and inj["score_only"]["n"] == 16
    report = (tmp_path / "report" / "report.md").read_text()
    assert report == render_markdown(m)
    assert "sampled pass on K of N units per set" in report and "`vicuna` 6 of 16 items; `hhh` 4 of 10 pairs" in report


def test_unsampled_units_are_read_once_score_only(subset_config, tmp_path):
    R.run_eval(subset_config)
    preds = [json.loads(x) for x in (tmp_path / "report" / "predictions.jsonl").read_text().splitlines()]
    absolute = [r for r in preds if r["unit"] != "pair"]
    out = [r for r in absolute if r.get("sampled") is False]
    assert len(out) == (16 - 6) * 2 + (10 - 4) * 2  # vicuna items and their injection probes; both sides of hhh pairs
    assert all(r["samples"] == [] and r["score_only_probs"] for r in out)
    assert all(len(r["samples"]) == 3 and r["score_only_probs"] for r in absolute if r.get("sampled") is not False)
    # one sampled request per sampled prompt, one score-only read per absolute prompt, nothing else
    # (relative: each of the 10 pairs and its swap probe, in one order each)
    feedback = Counter(fb for (_, fb), n in CountingEngine.seen.items() for _ in range(n))
    assert feedback[False] == len(absolute) and feedback[True] == len(absolute) - len(out) + 10 + 10
    assert all(n == 1 for (_, fb), n in CountingEngine.seen.items() if not fb)


def test_comparisons_and_cascade_follow_the_variant_units():
    """Two judges on a mimic set whose last 12 of 20 items had no sampled pass: the paired differences
    and the cascade what-if (its confidence is the samples') are over the 8 sampled items."""
    from testing.records import synthetic_predictions
    from judgeforge.eval.report import compute_metrics

    preds = []
    for judge, seed in (("base", 1), ("trained", 2)):
        for i, r in enumerate(synthetic_predictions(20, judge=judge, set_name="heldout", seed=seed)):
            r["score_only_probs"] = r["samples"][0]["probs"]
            if i >= 8:
                r.update(samples=[], sampled=False)
            preds.append(r)
    sets = [{"name": "heldout", "kind": "absolute", "role": "mimic", "reference": "gpt-4", "n_items": 20,
             "n_available": 20, "source": "synthetic", "scale": [1, 5]}]
    m = compute_metrics(preds, sets=sets, judges=["base", "trained"], baseline="base", n_values=[1, 3],
                        score_only=True, n_boot=50, level=0.95, seed=0, cascade={"min_n": 2, "n_splits": 20})
    d = m["comparisons"]["trained"]["heldout"]
    assert d["n3"]["n"] == d["expected"]["n"] == 8 and d["score_only"]["n"] == 20
    assert m["cascade"]["base"]["heldout"]["n"] == 8 and m["cascade"]["base"]["heldout"]["n_no_score"] == 0
    assert m["results"]["trained"]["heldout"]["n1"]["parse_failures"] == 0
    assert m["sampled_units"]["heldout"] == {"sampled": 8, "of": 20}
