"""Pairwise (relative-grading) records: FastChat pair logs, AlpacaEval annotations, generic jsonl pairs."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from judgeforge.data import pairwise as P
from judgeforge.data.parsers import make_context, parse_fastchat
from judgeforge.judge.prompts import REL_SYSTEM_PROMPT, relative_prompt

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


# --- tie policy (source option `ties`) -----------------------------------------------------------

@pytest.mark.parametrize("ties,swap,read,kept,reasons", [
    ("reject", False, 4, 2, {"tie": 1, "upstream_parse_failure": 1}),
    ("split", False, 5, 4, {"upstream_parse_failure": 1}),   # the tie read as two records, both kept
    ("reject", True, 6, 4, {"tie": 1, "upstream_parse_failure": 1}),
    ("split", True, 9, 8, {"upstream_parse_failure": 1}),    # 2 decisive x 2 orders + the tie's 2 halves x 2
])
def test_tie_policy_counts_add_up(tmp_path, ties, swap, read, kept, reasons):
    m = build(None, tmp_path / "b", sources=_src("alpaca_eval", ALPACA, ties=ties, swap=swap))
    _adds_up(m)
    c = m["counts"]
    assert (c["read"], c["kept"], c["rejected"], c["by_reason"]) == (read, kept, read - kept, reasons)
    assert c["per_source"]["alpaca_eval:alpaca_eval_annotations"]["read"] == read


def test_split_tie_is_both_verdicts_in_the_same_order(tmp_path):
    build(None, tmp_path / "b", sources=_src("alpaca_eval", ALPACA, ties="split"))
    recs = read_lines(tmp_path / "b" / "train.jsonl")
    tied = [r for r in recs if r["extra"].get("tie")]
    assert [r["verdict"] for r in tied] == ["A", "B"]
    a, b = tied
    # Same prompt, opposite targets: the judge learns P(A) = P(B) for this pair and no position preference.
    assert a["messages"][:2] == b["messages"][:2] and a["response_a"] == b["response_a"] == "Red."
    assert a["messages"][-1]["content"].endswith("[RESULT] A") and b["messages"][-1]["content"].endswith("[RESULT] B")
    assert a["item_id"] == b["item_id"] and a["id"] != b["id"] and {a["sample_idx"], b["sample_idx"]} == {0, 1}
    assert not any(r["extra"].get("tie") for r in recs if r["instruction"] != "Name a primary color.")


def test_fastchat_split_ties_and_inconsistent_orders(tmp_path):
    m = build(None, tmp_path / "b", sources=_src("fastchat", FC_PAIR, ties="split"))
    _adds_up(m)
    c = m["counts"]
    # The two tie games (one line) become four records; the other reasons are untouched.
    assert (c["read"], c["kept"]) == (12, 9)
    assert c["by_reason"] == {"upstream_parse_failure": 1, "pair_inconsistent": 2}
    tied = [r for r in read_lines(tmp_path / "b" / "train.jsonl") if r["extra"].get("tie")]
    assert [r["verdict"] for r in tied] == ["A", "B", "A", "B"] and len({r["item_id"] for r in tied}) == 1
    assert [r["extra"]["game"] for r in tied] == [1, 1, 2, 2]


def test_generic_jsonl_split_tie_goes_to_one_side_of_the_split(tmp_path):
    rows = [{"q": "q0", "a": "x", "b": "y", "v": "tie", "ma": "m3", "mb": "m4"},
            {"q": "q1", "a": "x", "b": "y", "v": "C", "ma": "m1", "mb": "m2"}]
    p = tmp_path / "pairs.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cols = {"instruction": "q", "response_a": "a", "response_b": "b", "verdict": "v",
            "response_model_a": "ma", "response_model_b": "mb"}
    m = build(None, tmp_path / "b", "split.test_models=[m3,m4]",
              sources=_src("jsonl", p, columns=cols, ties="split"))
    _adds_up(m)
    assert (m["counts"]["read"], m["counts"]["train"], m["counts"]["test"]) == (4, 2, 2)


def test_split_ties_leaves_tieless_entries_alone():
    j = P.PairJudgment("q", "a", "b", P.rubric_preset("helpfulness"), "", "A")
    entries = [(0, j)]
    assert P.split_ties(entries) is entries
    halves = P.split_ties([(0, P.replace(j, verdict="tie")), (1, j)])
    assert [(i, r.verdict, r.sample_idx, r.extra.get("tie")) for i, r in halves] == \
        [(0, "A", 0, True), (1, "B", 1, True), (2, "A", 2, None)]


def test_ties_is_a_pairwise_option():
    from judgeforge.data.config import SourceConfig

    with pytest.raises(ValueError, match="ties is a pairwise option"):
        SourceConfig(format="prometheus", path="x.json", ties="split")
    with pytest.raises(ValueError, match="ties"):
        SourceConfig(format="alpaca_eval", path="x.json", ties="keep")
    assert SourceConfig(format="fastchat", path="x.jsonl", ties="split").ties == "split"


def test_vendored_alpaca_eval_sample_builds_and_adds_up(tmp_path):
    """The real GPT-4 sample (data/vendor/alpaca-eval) through its shipped config."""
    m = build("configs/data/alpaca-eval.yaml", tmp_path / "b")
    _adds_up(m)
    c = m["counts"]
    # 197 decisive x 2 orders + 2 ties x (2 halves x 2 orders) + 1 null = 403 read; the ties are identical
    # outputs, so their swapped halves repeat the unswapped ones (duplicate).
    assert (c["read"], c["kept"], c["train"], c["test"]) == (403, 398, 300, 98)  # a quarter of instructions
    assert c["by_reason"] == {"upstream_parse_failure": 1, "duplicate": 4}
    train, test = (read_lines(tmp_path / "b" / f) for f in ("train.jsonl", "test.jsonl"))
    recs = train + test
    assert all(r["mode"] == "relative" and r["verdict_only"] and r["judge_model"] == "alpaca_eval_gpt4"
               for r in recs)
    assert Counter(r["verdict"] for r in recs) == {"A": 199, "B": 199}  # swap balances GPT-4's 174:23
    assert sum(bool(r["extra"].get("tie")) for r in recs) == 4
    assert m["inputs"][0]["sha256"] and m["splits"]["instructions_disjoint"]
    assert not {r["instruction"] for r in train} & {r["instruction"] for r in test}
    # The held-out pairs as the evaluation reads them: one per instruction, GPT-4's verdict on each.
    from judgeforge.eval.sets import load_heldout_pairs
    pairs, n = load_heldout_pairs(str(tmp_path / "b"))
    assert n == len({r["instruction"] for r in test}) == 49
    verdicts = {(r["instruction"], r["response_a"]): r["verdict"] for r in test}
    for p in pairs:
        won = p.response_a if p.human == "a" else p.response_b
        assert verdicts[(p.instruction, won)] == "A"  # the preferred response wins when shown first
