"""The vendored Auto-J pairwise test set (data/vendor/prometheus-eval, PROVENANCE.md) through `load_autoj`."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest

from judgeforge.eval import sets as S

SHA256 = "56f32fad71d9b6b33bc4d51794c324981e26355bcbf3ce4908d7f8ddcc61f80e"


@pytest.fixture(scope="module")
def autoj(vendor):
    return vendor / "prometheus-eval" / "autoj_testdata_pairwise.jsonl"


@pytest.fixture(scope="module")
def raw(autoj):
    return [json.loads(line) for line in autoj.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def loaded(autoj):
    records = S.Records()
    items, n = S.load_autoj(str(autoj), records=records)
    return items, n, records


def test_file_is_the_published_one_unchanged(autoj):
    assert hashlib.sha256(autoj.read_bytes()).hexdigest() == SHA256


def test_loader_keeps_every_record_and_the_counts_add_up(loaded, raw):
    items, n, records = loaded
    assert records.read == len(raw) == 1392
    assert records.kept + records.rejected == records.read
    assert (records.kept, records.rejected, records.filtered) == (1392, 0, 0) and n == len(items) == 1392
    assert len({i.id for i in items}) == len(items)


def test_ties_and_sides_match_the_label_field(loaded, raw):
    items = loaded[0]
    labels = Counter(r["label"] for r in raw)
    assert labels == {0: 520, 1: 499, 2: 373}
    assert Counter(i.human for i in items) == {"a": labels[0], "b": labels[1], "tie": labels[2]}
    # Item n is line n+1: its texts, side and scenario are the record's.
    for item, r in zip(items, raw):
        assert (item.instruction, item.response_a, item.response_b) == (r["prompt"], r["response 1"], r["response 2"])
        assert item.human == {0: "a", 1: "b", 2: "tie"}[r["label"]] and item.category == r["scenario"]


def test_balanced_over_58_scenarios(loaded):
    per = Counter(i.category for i in loaded[0])
    assert len(per) == 58 and set(per.values()) == {24}
