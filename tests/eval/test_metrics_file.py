"""The one metrics.json reader: a report's numbers by name, variants parsed, a clear error otherwise."""

from __future__ import annotations

import json

import pytest

from judgeforge.eval.metrics_file import EXPECTED, SCORE_ONLY, Metrics, NotAReport, variant_names, vote_n

METRICS = {
    "meta": {"judges": ["j1"], "n_values": [1, 3], "variants": variant_names([1, 3], score_only=True)},
    "sets": [{"name": "heldout", "kind": "absolute", "role": "unseen", "scale": [1, 5]},
             {"name": "hhh", "kind": "pairwise"}],
    "results": {"j1": {"heldout": {"n3": {"correlation": {"pearson": {"value": 0.5}}}},
                       "hhh": {"absolute": {"n3": {"accuracy": 0.7}}}}},
    "reference": {"heldout": {"length_only": {"r": 0.1}}},
}


def test_reads_a_report_by_name(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps(METRICS))
    m = Metrics.load(tmp_path)
    assert m.judges == ["j1"] and m.variants == ["n1", "n3", EXPECTED, SCORE_ONLY]
    assert m.vote_variants == ["n1", "n3"] and m.primary_variant == "n3"
    assert [s["name"] for s in m.sets("absolute")] == ["heldout"] and m.sets(role="unseen")[0]["scale"] == [1, 5]
    assert m.result("j1", "heldout", "n3")["correlation"]["pearson"]["value"] == 0.5
    assert m.result("j1", "hhh", "n3", mode="absolute")["accuracy"] == 0.7
    assert m.result("j1", "heldout", "n1") is None and m.result("other", "heldout", "n3") is None
    assert m.reference("heldout")["length_only"]["r"] == 0.1 and m.set("nope") is None


def test_variants_and_missing_reports(tmp_path):
    assert [vote_n(v) for v in ("n1", "n12")] == [1, 12]
    for bad in (EXPECTED, SCORE_ONLY, "nx", "5"):
        with pytest.raises(ValueError, match="no vote variant"):
            vote_n(bad)
    with pytest.raises(NotAReport, match="not a judgeforge eval report"):
        Metrics.load(tmp_path)
