""""The same item": one rule per mode (judge.items), shared by the data records, the pair builder and
the judgment store, and stable (the hashes below are those stored before the rule moved here)."""

from __future__ import annotations

import pytest

from judgeforge.data.pairwise import PairJudgment, _pair_key
from judgeforge.data.schema import Judgment, Provenance
from judgeforge.data.store import Request
from judgeforge.judge.items import CompareItem, GradeItem, item_hash
from judgeforge.judge.prompts import Rubric

RUBRIC = Rubric("Is it correct?")
ABSOLUTE = "0baa6ad13ca397b922987b7a1c6331f91441a8be2486d6b6bb15f41f9b52245d"
PAIR = "ea08fbdab2a39ea2bbcb664e82ca667cc3284e5d73b5d8a3e194386cd9868a12"


def test_absolute_rule_is_stable_and_shared():
    j = Judgment("What is 2+2?", "4", RUBRIC, "Right.", 5, reference_answer="4")
    assert j.item_hash() == GradeItem("What is 2+2?", "4", RUBRIC, "4").item_hash() == ABSOLUTE
    no_reference = Judgment("What is 2+2?", "4", RUBRIC, "Right.", 5)
    assert j.item_hash() != no_reference.item_hash()  # an absolute item's reference counts


def test_pair_rule_is_order_free_stable_and_shared():
    p = PairJudgment("What is 2+2?", "5", "4", RUBRIC, "B is right.", "B", judge_model="gpt-4")
    swapped = PairJudgment("What is 2+2?", "4", "5", RUBRIC, "A is right.", "A")
    assert p.item_hash() == swapped.item_hash() == PAIR
    assert CompareItem("What is 2+2?", "4", "5", RUBRIC).item_hash() == PAIR
    # the pair builder groups records by the same rule
    rec = {"instruction": "What is 2+2?", "response_a": "5", "response_b": "4", "rubric": RUBRIC.to_dict()}
    assert _pair_key(rec) == PAIR


def test_request_key_is_ordered_and_stable():
    req = Request("absolute", "What is 2+2?", ("4",), RUBRIC.to_dict(), "4", (1, 5))
    # as stored under template prometheus2-v1: a template bump changes it on purpose
    assert req.key() == "d968726458dade505174994587722b07e043c4d23ad1629be7b11b85c6f077db"
    ab = Request("relative", "What is 2+2?", ("4", "5"), "Is it correct?")
    ba = Request("relative", "What is 2+2?", ("5", "4"), "Is it correct?")
    assert ab.key() != ba.key()  # the judge sees another prompt: not the same request


def test_an_item_has_one_or_two_responses():
    with pytest.raises(ValueError, match="one response"):
        item_hash("q", ("a", "b", "c"), RUBRIC.to_dict())


def test_provenance_is_one_base():
    j = Judgment("q", "a", RUBRIC, "f", 3, judge_model="gpt-4", item_id="x", extra={"turn": 1})
    p = PairJudgment("q", "a", "b", RUBRIC, "f", "A", judge_model="gpt-4", item_id="x", extra={"turn": 1})
    assert isinstance(j, Provenance) and isinstance(p, Provenance)
    for name in ("judge_model", "source", "category", "item_id", "sample_idx", "extra"):
        assert getattr(j, name) == getattr(p, name)
    assert j.to_sft()["judge_model"] == p.to_sft()["judge_model"] == "gpt-4"
