"""Pairwise (relative-grading) records: FastChat pair logs, AlpacaEval annotations, generic jsonl pairs."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from judgeforge.data import pairwise as P
from judgeforge.data.parsers import make_context, parse_fastchat
from judgeforge.data.templates import REL_SYSTEM_PROMPT, relative_prompt

from .conftest import REPO, build, read_lines

FIX = REPO / "tests/data/fixtures"
FC_PAIR = FIX / "fastchat_pair.jsonl"
ALPACA = FIX / "alpaca_eval_annotations.json"


def _src(fmt, path, **kw):
    return [{"format": fmt, "path": str(path), **kw}]


def _adds_up(m):
    c = m["counts"]
    assert m["counts"]["adds_up"] and c["read"] == c["kept"] + c["rejected"]
    assert c["kept"] == sum(c[b] for b in ("train", "test", "dropped_by_policy", "dropped_by_split",
                                          "decontaminated"))


def test_fastchat_pair_and_single_lines_told_apart():
    ctx = make_context("fastchat", "fc")
    single = json.loads((REPO / "data/vendor/fastchat-mt-bench/gpt-4_single.jsonl").open().readline())
    assert not P.is_fastchat_pair(single) and parse_fastchat(single, ctx)[0][1].score is not None
    pair = json.loads(FC_PAIR.open().readline())
    (i1, g1), (i2, g2) = parse_fastchat(pair, ctx)
    assert (i1, i2) == (0, 1) and g1.verdict == "A" and g2.verdict == "B"  # g2 is the swapped order
    assert (g1.response_model_a, g2.response_model_a) == ("vicuna-13b-v1.2", "llama-13b")
    assert g1.response_a == g2.response_b and g1.item_id == g2.item_id == "" and g1.item_hash() == g2.item_hash()
    assert not g1.feedback.endswith("[[A]]") and g1.judge_model == "gpt-4"


def test_fastchat_pair_build_counts_and_reasons(tmp_path):
    m = build(None, tmp_path / "b", sources=_src("fastchat", FC_PAIR))
    _adds_up(m)
    c = m["counts"]
    # 5 lines x 2 games: 1 error game, 2 tie games, 2 inconsistent games; 5 kept (the error line's g2 too).
    assert c["read"] == 10 and c["kept"] == 5
    assert c["by_reason"] == {"upstream_parse_failure": 1, "tie": 2, "pair_inconsistent": 2}
    recs = read_lines(tmp_path / "b" / "train.jsonl")
    assert all(r["mode"] == "relative" and r["verdict"] in "AB" for r in recs)
    math = next(r for r in recs if r["extra"]["judge_prompt"] == "pair-math-v1")
    assert math["reference_answer"] == "3x = 15, so x = 5."
    msgs = math["messages"]
    assert msgs[0]["content"] == REL_SYSTEM_PROMPT
    assert msgs[1]["content"] == relative_prompt(math["instruction"], math["response_a"], math["response_b"],
                                                 math["rubric"]["criteria"], math["reference_answer"])
    assert msgs[2]["content"] == f"{math['feedback']} [RESULT] {math['verdict']}"
    rejects = read_lines(tmp_path / "b" / "rejects.jsonl")
    lines = FC_PAIR.read_text().splitlines()
    assert all(r["original"] == lines[r["line"] - 1] for r in rejects)


@pytest.mark.parametrize("policy,kept,inconsistent", [("reject", 5, 2), ("keep_first", 6, 1), ("keep", 7, 0)])
def test_pair_inconsistent_policy(tmp_path, policy, kept, inconsistent):
    m = build(None, tmp_path / "b", sources=_src("fastchat", FC_PAIR, pair_inconsistent=policy))
    _adds_up(m)
    assert m["counts"]["kept"] == kept and m["counts"]["by_reason"].get("pair_inconsistent", 0) == inconsistent


def test_alpaca_eval_build_ties_unknown_and_verdict_only(tmp_path):
    m = build(None, tmp_path / "b", sources=_src("alpaca_eval", ALPACA))
    _adds_up(m)
    assert m["counts"]["read"] == 4 and m["counts"]["kept"] == 2
    assert m["counts"]["by_reason"] == {"tie": 1, "upstream_parse_failure": 1}
    recs = {r["instruction"]: r for r in read_lines(tmp_path / "b" / "train.jsonl")}
    cap = recs["What is the capital of Australia?"]
    assert cap["verdict"] == "A" and not cap["verdict_only"] and cap["judge_model"] == "alpaca_eval_gpt4"
    haiku = recs["Write a haiku about autumn."]  # weighted preference 1.93 -> B; raw completion "m" is no rationale
    assert haiku["verdict"] == "B" and haiku["verdict_only"] and haiku["messages"][-1]["content"] == "[RESULT] B"


def test_swap_augmentation(tmp_path):
    m = build(None, tmp_path / "b", sources=_src("alpaca_eval", ALPACA, swap=True))
    _adds_up(m)
    assert m["counts"]["kept"] == 4  # both decisive pairs, each in both orders
    recs = read_lines(tmp_path / "b" / "train.jsonl")
    orig, sw = [r for r in recs if r["instruction"] == "What is the capital of Australia?"]
    assert sw["extra"]["swapped"] and sw["verdict"] == "B" and sw["response_a"] == orig["response_b"]
    assert (sw["response_model_a"], sw["response_model_b"]) == (orig["response_model_b"], orig["response_model_a"])
    assert sw["feedback"].startswith("Output (b) correctly names Canberra; Output (a) wrongly")
    assert orig["item_id"] == sw["item_id"]


def test_swap_labels():
    assert P.swap_labels("Assistant A beats Response B; model_1 > model_2 [[A]]") == \
        "Assistant B beats Response A; model_2 > model_1 [[A]]"


def test_generic_jsonl_pairs_and_split_by_model(tmp_path):
    rows = [{"q": f"question {i}", "a": f"answer a{i}", "b": f"answer b{i}", "v": v, "ma": ma, "mb": mb,
             **({"fb": f"Response {v} is better because it is complete."} if i % 2 else {})}
            for i, (v, ma, mb) in enumerate([("A", "m1", "m2"), ("B", "m3", "m4"), ("A", "m1", "m3"),
                                             ("tie", "m1", "m2"), ("B", "m4", "m3")])]
    p = tmp_path / "pairs.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cols = {"instruction": "q", "response_a": "a", "response_b": "b", "verdict": "v", "feedback": "fb",
            "response_model_a": "ma", "response_model_b": "mb"}
    m = build(None, tmp_path / "b", "split.test_models=[m3,m4]", sources=_src("jsonl", p, columns=cols))
    _adds_up(m)
    c = m["counts"]
    # tie rejected; m3+m4 pairs -> test; m1 vs m3 (one held-out model) -> dropped; m1 vs m2 -> train
    assert c["by_reason"] == {"tie": 1} and (c["train"], c["test"], c["dropped_by_split"]) == (1, 2, 1)
    assert m["splits"]["disjoint"] and m["splits"]["test"]["response_models"] == ["m3", "m4"]
    train = read_lines(tmp_path / "b" / "train.jsonl")
    assert train[0]["verdict_only"] and train[0]["messages"][-1]["content"] == "[RESULT] A"


def test_jsonl_pair_columns_are_checked():
    from judgeforge.data.config import SourceConfig

    with pytest.raises(ValueError, match="verdict"):
        SourceConfig(format="jsonl", path="x.jsonl", columns={"instruction": "q", "response_a": "a", "response_b": "b"})


def test_verdicts():
    assert [P.norm_verdict(v) for v in ("A", "b", 1, "2", "tie", "[[C]]", 1.5, None, "x")] == \
        ["A", "B", "A", "B", "tie", "tie", "tie", None, None]
    assert Counter(P._alpaca_preference(v) for v in (1, 2, 1.5, 0, 1.2, "n/a")) == \
        {"A": 2, "B": 1, "tie": 1, None: 2}


def test_mixed_build_and_heldout_loader_skips_pairs(tmp_path):
    from judgeforge.eval.sets import load_heldout

    src = _src("fastchat", REPO / "data/vendor/fastchat-mt-bench/gpt-4_single.jsonl", name="single") + \
        _src("fastchat", FC_PAIR, name="pair")
    m = build(None, tmp_path / "b", "split.test_models=[vicuna-13b-v1.2,llama-13b,mistral-orpo-trl]", sources=src)
    _adds_up(m)
    assert m["splits"]["disjoint"] and m["counts"]["per_source"]["pair"]["test"] == 2
    test = read_lines(tmp_path / "b" / "test.jsonl")
    assert Counter(r.get("mode", "absolute") for r in test)["relative"] == 2
    items, n = load_heldout(str(tmp_path / "b"))
    assert items and n == len(items) and all(i.response_model == "mistral-orpo-trl" for i in items)


def test_pair_records_are_training_examples(tmp_path):
    from judgeforge.train.data import to_prompt_completion

    build(None, tmp_path / "b", sources=_src("alpaca_eval", ALPACA))
    ex = to_prompt_completion(read_lines(tmp_path / "b" / "train.jsonl")[0])
    assert [m["role"] for m in ex["prompt"]] == ["system", "user"] and ex["completion"][0]["content"].endswith("[RESULT] A")
