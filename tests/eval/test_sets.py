"""Loaders on the vendored files and on small files in the published layouts."""

from __future__ import annotations

import json

import pytest

from judgeforge.data.templates import absolute_prompt, rubric_preset
from judgeforge.eval import sets as S

P1 = '"Feedback: (write a feedback for criteria) [RESULT]'
P2 = '"(write a feedback for criteria) [RESULT]'


@pytest.mark.parametrize("fname", ["vicuna_eval.json", "mt_bench_eval.json"])
def test_prometheus_sets_rerender_exactly(vendor, fname):
    path = vendor / "prometheus-eval" / fname
    items, n = S.load_prometheus_absolute(str(path), fname)
    raw = json.loads(path.read_text())
    assert n == len(items) == 320
    for it, r in zip(items[:40], raw[:40]):
        assert it.ref_samples == [float(x) for x in r["gpt4_score"]]
        assert it.ref_score == pytest.approx(sum(r["gpt4_score"]) / 3)
        assert it.reference_answer and it.category == r["category"]
        prompt = absolute_prompt(it.instruction, it.response, it.rubric, it.reference_answer, it.scale)
        assert prompt == r["instruction"].replace(P1, P2)
        assert it.messages()[1]["content"] == prompt


def test_prometheus_filter_by_response_model(vendor):
    items, _ = S.load_prometheus_absolute(str(vendor / "prometheus-eval" / "mt_bench_eval.json"), "mt",
                                          response_models=["wizardlm_13b"])
    assert len(items) == 80 and {i.response_model for i in items} == {"wizardlm_13b"}


def test_hhh_pairs_with_seeded_positions(vendor):
    path = str(vendor / "prometheus-eval" / "hhh_alignment_eval.json")
    items, n = S.load_hhh(path, seed=1)
    raw = json.loads((vendor / "prometheus-eval" / "hhh_alignment_eval.json").read_text())
    assert n == len(items) == 221
    assert 60 < sum(i.human == "a" for i in items) < 160  # positions are mixed
    assert [i.human for i in S.load_hhh(path, seed=1)[0]] == [i.human for i in items]
    it, r = items[0], raw[0]
    chosen = it.side(it.human)
    prompt = absolute_prompt(chosen.instruction, chosen.response, chosen.rubric, None, chosen.scale)
    assert prompt == r["chosen_instruction"].replace(P1, P2)
    assert it.reference_answer is None and it.category == r["source"]
    assert "Response A" in it.messages()[1]["content"]


def test_subset_is_seeded_and_ordered():
    items = list(range(100))
    a, b = S.subset(items, 10, seed=3), S.subset(items, 10, seed=3)
    assert a == b == sorted(a) and len(a) == 10 and S.subset(items, 10, seed=4) != a
    assert S.subset(items, None, 0) == items and S.subset(items, 500, 0) == items


def test_heldout_groups_samples(tmp_path):
    base = {"instruction": "Q", "response": "R", "reference_answer": None,
            "rubric": {"criteria": "c", "score1_description": "bad"}, "scale": [1, 5],
            "response_model": "m", "category": "cat", "feedback": "f"}
    recs = [dict(base, item_id="x", sample_idx=1, score=2), dict(base, item_id="x", sample_idx=0, score=4),
            dict(base, item_id="y", sample_idx=0, score=5, response="R2")]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    items, n = S.load_heldout(str(tmp_path))
    assert n == 2
    x = next(i for i in items if i.id == "x")
    assert x.ref_samples == [4.0, 2.0] and x.ref_score == 3.0 and x.rubric.descriptions == {1: "bad"}


def test_heldout_missing_is_unavailable(tmp_path):
    with pytest.raises(S.SetUnavailable, match="data build"):
        S.load_heldout(str(tmp_path / "nope"))


def test_mt_bench_human_layout(tmp_path):
    conv = lambda a1, a2: [{"role": "user", "content": "q1"}, {"role": "assistant", "content": a1},
                           {"role": "user", "content": "q2"}, {"role": "assistant", "content": a2}]
    recs = [{"question_id": 81, "model_a": "gpt-4", "model_b": "alpaca-13b", "winner": "model_a",
             "judge": "author_0", "conversation_a": conv("A1", "A2"), "conversation_b": conv("B1", "B2"),
             "turn": 2},
            {"question_id": 82, "model_a": "x", "model_b": "y", "winner": "tie (bothbad)", "judge": "j",
             "conversation_a": conv("A1", "A2"), "conversation_b": conv("B1", "B2"), "turn": 1}]
    p = tmp_path / "mtbh.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    items, n = S.load_mt_bench_human(str(p))
    assert n == 2 and [i.human for i in items] == ["a", "tie"]
    t2 = items[0]
    assert t2.response_a == "A2" and t2.response_b == "B2" and "Assistant: A1" in t2.instruction
    assert "Assistant: B1" in t2.side("b").instruction and t2.rubric == rubric_preset("helpfulness")
    assert items[1].instruction == "q1" and items[1].response_b == "B1"


def test_autoj_layout(tmp_path):
    recs = [{"scenario": "writing", "label": 1, "prompt": "p", "response 1": "r1", "response 2": "r2"},
            {"scenario": "code", "label": 2, "prompt": "p", "response 1": "r1", "response 2": "r2"}]
    p = tmp_path / "autoj.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    items, _ = S.load_autoj(str(p))
    assert [i.human for i in items] == ["b", "tie"] and items[0].category == "writing"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(dict(recs[0], label=5)) + "\n")
    with pytest.raises(ValueError, match="label"):
        S.load_autoj(str(bad))


def test_feedback_bench_layout(tmp_path):
    rec = {"orig_instruction": "I", "orig_response": "R", "orig_reference_answer": "ref",
           "orig_criteria": "Is it good?", "orig_score": "4",
           **{f"orig_score{k}_description": f"d{k}" for k in range(1, 6)}}
    p = tmp_path / "fb.json"
    p.write_text(json.dumps([rec]))
    items, _ = S.load_prometheus_absolute(str(p), "feedback_bench")
    assert items[0].ref_score == 4.0 and items[0].rubric.descriptions[5] == "d5"


def test_absent_hub_set_is_unavailable():
    with pytest.raises(S.SetUnavailable, match="hub"):
        S.read_records("nobody/does-not-exist-flask")
