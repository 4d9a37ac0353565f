"""PandaLM test-set loader: majority reference, ties apart, absolute and relative modes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judgeforge.eval import sets as S
from judgeforge.eval.config import SET_KINDS, SetConfig
from judgeforge.eval.report import _published_lines, published_figures
from judgeforge.eval.run import load_set

FIXTURE = Path(__file__).parent / "fixtures" / "pandalm_testset.json"


def test_majority_and_three_way_tie():
    assert S.pandalm_majority([1, 1, 0]) == "a"
    assert S.pandalm_majority([2, 2, 0]) == "b"
    assert S.pandalm_majority([0, 0, 1]) == "tie"
    assert S.pandalm_majority([0, 1, 2]) == "tie"  # no majority counts as a tie


def test_load_pandalm_fixture():
    items, n = S.load_pandalm(str(FIXTURE))
    assert n == 4 and [i.human for i in items] == ["a", "b", "tie", "tie"]
    assert items[0].instruction.endswith("\n\nShe don't like going to the park on weekends.")
    assert items[1].instruction == "Give three tips for staying healthy."  # empty input: nothing appended
    assert items[0].category == "Grammarly" and items[0].rubric.criteria


def test_pandalm_bad_label_names_record(tmp_path):
    rec = json.loads(FIXTURE.read_text())[0] | {"annotator2": 3}
    p = tmp_path / "bad.json"
    p.write_text(json.dumps([rec]))
    with pytest.raises(S.SetLayoutError, match="record 1.*0, 1 or 2"):
        S.load_pandalm(str(p))
    del rec["response2"]
    p.write_text(json.dumps([rec]))
    with pytest.raises(S.SetLayoutError, match="response2"):
        S.load_pandalm(str(p))


def test_pandalm_is_a_pairwise_set_with_both_modes():
    assert "pandalm" in SET_KINDS and SET_KINDS.get("pandalm").pairwise
    sc = SetConfig(name="pandalm", kind="pandalm", path=str(FIXTURE), modes=["absolute", "relative"])
    assert sc.role == "human"
    es = load_set(sc, seed=0)
    assert es.kind == "pairwise" and es.reference == "human" and len(es.items) == 4
    assert es.rubric_preset == "helpfulness"


def test_published_figures_go_through_metrics():
    sets = [{"name": "pl", "kind": "pairwise", "set_kind": "pandalm"},
            {"name": "aj", "kind": "pairwise", "set_kind": "autoj"},
            {"name": "hhh", "kind": "pairwise", "set_kind": "hhh"}]
    pub = published_figures(sets)
    assert pub == {"pl": {"PandaLM-7B": 0.668, "GPT-3.5": 0.711},
                   "aj": {"GPT-4": 0.6228, "Auto-J-13B": 0.5496}}
    line = _published_lines({"published": pub})[-1]
    assert "PandaLM-7B 0.668" in line and "GPT-4 0.623" in line and line.startswith("published")
