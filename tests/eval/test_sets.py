"""Loaders on the vendored files and on small files in the published layouts."""

from __future__ import annotations

import json

import pytest

from judgeforge.config import ConfigError
from judgeforge.judge.prompts import absolute_prompt, rubric_preset
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


# --- clumsy use: files whose extension lies, files in another set's layout ----------------------

AUTOJ = [{"scenario": "writing", "label": 1, "prompt": "p", "response 1": "r1", "response 2": "r2"},
         {"scenario": "code", "label": 0, "prompt": "q", "response 1": "s1", "response 2": "s2"}]


def test_autoj_jsonl_saved_as_json_loads(tmp_path):
    """It crashed `judgeforge eval` with `JSONDecodeError: Extra data` (the extension chose the parser)."""
    p = tmp_path / "autoj.json"
    p.write_text("".join(json.dumps(r) + "\n" for r in AUTOJ))
    items, n = S.load_autoj(str(p))
    assert n == 2 and [i.human for i in items] == ["b", "a"]
    q = tmp_path / "autoj_list.jsonl"  # and the reverse: a pretty JSON list named .jsonl
    q.write_text(json.dumps(AUTOJ, indent=2))
    assert [i.human for i in S.load_autoj(str(q))[0]] == ["b", "a"]


def test_one_shared_sniffer():
    from judgeforge.data import readers

    assert S.read_objects is readers.read_objects


def test_unreadable_line_names_file_line_and_column(tmp_path):
    p = tmp_path / "autoj.jsonl"
    p.write_text(json.dumps(AUTOJ[0]) + "\n" + '{"label": 1, "prompt" "p"}\n')
    records = S.Records()  # a bad line is the builder's unreadable_line reject, not the end of the set
    assert len(S.load_autoj(str(p), records=records)[0]) == 1
    assert records.rejects == [{"place": "line 2", "reason": "unreadable_line",
                                "detail": "bad JSON at column 23: Expecting ':' delimiter (read as JSONL)"}]
    garbage = tmp_path / "set.json"
    garbage.write_text("label,prompt\n1,p\n")
    with pytest.raises(ConfigError, match=r"set.json is neither JSON Lines .* line 1 column 1"):
        S.read_records(str(garbage))


def test_hhh_file_given_as_autoj_names_the_layouts(vendor):
    path = str(vendor / "prometheus-eval" / "hhh_alignment_eval.json")
    with pytest.raises(S.SetLayoutError) as e:
        S.load_autoj(path)
    msg = str(e.value)
    assert path in msg and "record 1" in msg and "missing 'label', 'prompt', 'response 1', 'response 2'" in msg
    assert "expected the 'autoj' layout" in msg and "those of the 'hhh' layout" in msg
    assert isinstance(e.value, ValueError) and isinstance(e.value, ConfigError)


def test_record_missing_label_names_its_line(tmp_path):
    p = tmp_path / "autoj.jsonl"
    p.write_text(json.dumps(AUTOJ[0]) + "\n\n" + json.dumps({k: v for k, v in AUTOJ[1].items() if k != "label"}) + "\n")
    records = S.Records()
    assert len(S.load_autoj(str(p), records=records)[0]) == 1
    assert records.rejects == [{"place": "line 3", "reason": "missing_field", "detail": "missing 'label'"}]
    p.write_text(json.dumps({k: v for k, v in AUTOJ[1].items() if k != "label"}) + "\n")
    with pytest.raises(S.SetLayoutError, match=r"autoj.jsonl line 1: missing 'label'; expected the 'autoj'"):
        S.load_autoj(str(p))
    p.write_text(json.dumps(dict(AUTOJ[0], label="first")) + "\n")
    with pytest.raises(S.SetLayoutError, match=r"line 1: label: .*'first' is not a number"):
        S.load_autoj(str(p))


@pytest.mark.parametrize("loader,layout", [
    (lambda p: S.load_mt_bench_human(p), "mt_bench_human"),
    (lambda p: S.load_hhh(p), "hhh"),
    (lambda p: S.load_prometheus_absolute(p, "x"), "prometheus"),
])
def test_autoj_file_given_to_other_loaders(tmp_path, loader, layout):
    p = tmp_path / "autoj.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in AUTOJ))
    with pytest.raises(S.SetLayoutError, match=rf"line 1: missing .*expected the '{layout}' layout.*'autoj' layout"):
        loader(str(p))


def test_unparseable_prompt_names_its_record(tmp_path, vendor):
    rec = json.loads((vendor / "prometheus-eval" / "vicuna_eval.json").read_text())[0]
    p = tmp_path / "v.json"
    p.write_text(json.dumps([rec, dict(rec, instruction="not a grading prompt")]))
    records = S.Records()
    assert len(S.load_prometheus_absolute(str(p), "v", records=records)[0]) == 1
    [rej] = records.rejects
    assert rej["place"] == "record 2" and rej["reason"] == "unparseable_prompt"
    assert rej["detail"].startswith("instruction is no readable Prometheus prompt")
    p.write_text(json.dumps([dict(rec, instruction="not a grading prompt")]))
    with pytest.raises(S.SetLayoutError, match=r"v.json record 1: instruction is no readable Prometheus prompt"):
        S.load_prometheus_absolute(str(p), "v")


def test_heldout_with_wrong_records_names_them(tmp_path):
    (tmp_path / "test.jsonl").write_text(json.dumps(AUTOJ[0]) + "\n")
    with pytest.raises(S.SetLayoutError, match=r"test.jsonl line 1: missing 'item_id'.*'heldout' layout"):
        S.load_heldout(str(tmp_path))


def test_eval_cli_prints_one_line_for_a_wrong_layout(tmp_path, vendor, capsys):
    from judgeforge.cli import main

    path = vendor / "prometheus-eval" / "hhh_alignment_eval.json"
    rc = main(["eval", f"sets=[{{name: aj, kind: autoj, path: {path}}}]", f"out={tmp_path / 'r'}", "plots=false"])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "Traceback" not in err and len(err.splitlines()) == 1
    assert str(path) in err and "'label'" in err and "record 1" in err


def _rel(rid: str, a: str, b: str, verdict: str, q: str = "Q", **extra) -> dict:
    return {"id": rid, "mode": "relative", "instruction": q, "response_a": a, "response_b": b, "verdict": verdict,
            "rubric": {"criteria": "c"}, "reference_answer": None, "extra": extra}


def test_heldout_pairs_group_orders_and_ties(tmp_path):
    recs = [_rel("1", "good", "bad", "A"), _rel("2", "bad", "good", "B", swapped=True),  # one pair, 2 orders
            _rel("3", "x", "y", "A", q="Q2", tie=True), _rel("4", "x", "y", "B", q="Q2", tie=True),  # split tie
            _rel("5", "p", "q", "A", q="Q3"), _rel("6", "q", "p", "A", q="Q3", swapped=True),  # orders disagree
            {"mode": "absolute", "item_id": "z", "instruction": "Q", "response": "R", "score": 3}]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    items, n = S.load_heldout_pairs(str(tmp_path), seed=0)
    assert n == len(items) == 3
    by_q = {i.instruction: i for i in items}
    good = by_q["Q"]
    assert good.human in ("a", "b") and good.side(good.human).response == "good"
    assert by_q["Q2"].human == by_q["Q3"].human == "tie"
    assert [i.human for i in S.load_heldout_pairs(str(tmp_path), seed=0)[0]] == [i.human for i in items]
    with pytest.raises(S.SetUnavailable, match="data build"):
        S.load_heldout_pairs(str(tmp_path / "nope"))
