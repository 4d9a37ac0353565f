"""`data.length_decorrelate` (train.data.decorrelate_length): whole items leave the training mix until
the teacher's scores stop following response length, as pure logic with its properties, and on the
real default data build through `load_datasets`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import pearsonr

from judgeforge.train.data import decorrelate_length

_item = st.tuples(st.integers(1, 400), st.integers(1, 5), st.integers(1, 3), st.sampled_from([(1, 5), (1, 10)]))


def _records(items) -> list[dict]:
    """(length, score, samples, scale) per item; every sample of an item shares its response."""
    out = []
    for i, (length, score, samples, scale) in enumerate(items):
        for k in range(samples):
            out.append({"id": f"{i}-{k}", "item_id": f"i{i}", "response": "x" * length,
                        "score": min(score + k % 2, scale[1]), "scale": list(scale)})
    out.append({"id": "rel", "mode": "relative", "verdict": "A"})  # pairs are never dropped
    return out


def _r(records, scale) -> float | None:
    rs = [r for r in records if r.get("scale") == list(scale)]
    xs, ys = [len(r["response"]) for r in rs], [r["score"] for r in rs]
    if len(rs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return pearsonr(xs, ys)[0]


@settings(deadline=None, max_examples=60)
@given(st.lists(_item, min_size=3, max_size=40), st.floats(-0.2, 0.5))
def test_every_record_kept_or_dropped_items_whole_and_r_at_most_the_limit(items, limit):
    records = _records(items)
    kept, dropped, summary = decorrelate_length(records, limit)
    assert sorted(r["id"] for r in kept + dropped) == sorted(r["id"] for r in records)  # counts add up
    assert not {r.get("item_id") for r in kept} & {r.get("item_id") for r in dropped}  # items whole
    assert any(r["id"] == "rel" for r in kept)
    assert sum(s["dropped"] for s in summary.values()) == len(dropped)
    for scale in ((1, 5), (1, 10)):
        s = summary.get(f"{scale[0]}-{scale[1]}")
        if s is None:
            continue
        after = _r(kept, scale)
        if s["r_after"] is None or after is None:
            continue
        assert after == pytest.approx(s["r_after"], abs=1e-6)  # the summary is the kept records' r
        if after > limit + 1e-9:  # it stops at the limit, or where no one item's removal lowers r
            for item in {r["item_id"] for r in kept if r.get("scale") == list(scale)}:
                rest = _r([r for r in kept if r.get("item_id") != item], scale)
                assert rest is None or rest >= after - 1e-9
        if s["r_before"] is not None and s["r_before"] <= limit:
            assert s["dropped"] == 0  # a mix already under the limit is kept whole
    assert decorrelate_length(list(records), limit) == (kept, dropped, summary)  # deterministic


def test_it_drops_the_items_that_make_the_shortcut():
    # Long answers score high except one long, low one and one short, high one: those two carry the
    # anti-shortcut signal and must stay; the r falls to the limit by dropping long-high/short-low items.
    items = [(100 * i, 1 + i // 4, 1, (1, 5)) for i in range(16)] + [(1700, 1, 1, (1, 5)), (50, 5, 1, (1, 5))]
    records = _records(items)
    kept, dropped, summary = decorrelate_length(records, 0.0)
    ids = {r["id"] for r in kept}
    assert {"16-0", "17-0"} <= ids and dropped
    assert summary["1-5"]["r_before"] > 0.3 and summary["1-5"]["r_after"] <= 0.0


def test_load_datasets_applies_it_to_the_real_build_and_reports_it(build_dir, tmp_path):
    from judgeforge.config import load_config
    from judgeforge.train.config import TrainConfig
    from judgeforge.train.run import load_datasets

    base = [f"out={tmp_path}", f"data.sources=[{{path: {build_dir}}}]"]
    full = load_datasets(load_config(TrainConfig, None, base))[0]
    mix = load_datasets(load_config(TrainConfig, None, [*base, "data.length_decorrelate=0.05"]))[0]
    report = mix.length
    assert report["limit"] == 0.05 and report["dropped"] == len(full.train) - len(mix.train) > 0
    (scale, s), = report["by_scale"].items()  # the default build is MT-Bench's 1-5 alone
    assert scale == "1-5" and s["r_before"] > 0.05 >= s["r_after"]
    assert _r(mix.train, (1, 5)) == pytest.approx(s["r_after"], abs=1e-6)
