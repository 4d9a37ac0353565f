"""`--input fastchat:...`: the real FastChat MT-Bench GPT-4 log (800 lines, 1-10 scale)."""

from __future__ import annotations

import json
import re
from collections import Counter

from judgeforge.data.parsers import FASTCHAT_CRITERIA, MULTI_TURN_PREAMBLE, parse_fastchat_prompt
from judgeforge.data.schema import Judgment
from judgeforge.judge.prompts import absolute_prompt

from .conftest import REPO, read_lines

LOG = REPO / "data/vendor/fastchat-mt-bench/gpt-4_single.jsonl"


def test_exact_counts_and_reasons(fastchat_build):
    out, m = fastchat_build
    c = m["counts"]
    assert c["read"] == 800
    assert c["by_reason"] == {"upstream_parse_failure": 1, "non_integer_score": 6}
    assert c["rejected"] == 7 and c["kept"] == 793  # every other record kept
    rejects = read_lines(out / "rejects.jsonl")
    assert Counter(r["detail"] for r in rejects) == {"score 8.5": 5, "score 9.5": 1, "score -1": 1}
    lines = LOG.read_text(encoding="utf-8").splitlines()
    for r in rejects:  # the original line, untouched, with its position
        assert r["original"] == lines[r["line"] - 1]
        assert json.loads(r["original"])["score"] in (-1, 8.5, 9.5)


def test_records_keep_the_1_to_10_scale(fastchat_build):
    out, m = fastchat_build
    records = read_lines(out / "train.jsonl") + read_lines(out / "test.jsonl")
    assert len(records) == m["counts"]["train"] + m["counts"]["test"] > 700
    for r in records:
        assert r["scale"] == [1, 10] and 1 <= r["score"] <= 10
        assert r["judge_model"] == "gpt-4" and "[[" not in r["feedback"]
        user, target = r["messages"][1]["content"], r["messages"][2]["content"]
        assert "an integer between 1 and 10" in user and target.endswith(f"[RESULT] {r['score']}")
        j = Judgment.from_sft(r)
        assert user == absolute_prompt(j.instruction, j.response, j.rubric, j.reference_answer, j.scale)
        assert r["rubric"]["criteria"] == FASTCHAT_CRITERIA[r["extra"]["judge_prompt"]]
    kinds = Counter((r["extra"]["judge_prompt"], r["reference_answer"] is not None) for r in records)
    assert set(kinds) == {("single-v1", False), ("single-v1-multi-turn", False),
                          ("single-math-v1", True), ("single-math-v1-multi-turn", True)}


def test_all_four_prompt_layouts_parse_back_to_the_log():
    """Question, answer and reference recovered exactly (checked against the log's own text)."""
    for line in LOG.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        name = rec["judge"][1]
        instruction, response, ref = parse_fastchat_prompt(rec["user_prompt"], name)
        assert response in rec["user_prompt"]
        assert response.strip() or rec["score"] == -1  # the one -1: GPT-4 saw an empty answer
        if name.endswith("multi-turn"):
            assert instruction.startswith(MULTI_TURN_PREAMBLE) and instruction.endswith("\n\nAssistant: ")
            assert instruction.count("User: ") >= 2
            assert rec["user_prompt"].rstrip().endswith(
                response + "\n\n<|The End of Assistant A's Conversation with User|>")
        else:
            assert f"[Question]\n{instruction}\n\n" in rec["user_prompt"]
            assert f"[The Start of Assistant's Answer]\n{response}\n[The End" in rec["user_prompt"]
        assert (ref is not None) == ("math" in name)


def test_feedback_is_the_judgment_without_its_rating(fastchat_build):
    out, _ = fastchat_build
    by_key: dict[tuple, list[dict]] = {}  # mistral-orpo was judged in two runs: keys repeat
    for line in LOG.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        by_key.setdefault((rec["question_id"], rec["model"], rec["turn"]), []).append(rec)
    for r in read_lines(out / "train.jsonl"):
        candidates = by_key[(r["extra"]["question_id"], r["response_model"], r["extra"]["turn"])]
        assert any(rec["score"] == r["score"] and r["feedback"] == re.sub(
            r'\s*"?(?:Rating:\s*)?\[\[\d+\]\]"?\.?\s*$', "", rec["judgment"]).strip() for rec in candidates)


def test_rescale_maps_onto_1_to_5_and_keeps_the_teacher_score(fastchat_build, tmp_path):
    """`rescale: [1, 5]`: the same records, each graded on 1-5 (prompt, score, target), the teacher's own
    1-10 score beside it; the counts are those of the build on the log's own scale."""
    from .conftest import build

    kept_out, kept_m = fastchat_build
    out = tmp_path / "rescaled"
    src = [{"format": "fastchat", "path": "data/vendor/fastchat-mt-bench/gpt-4_single.jsonl", "rescale": [1, 5]}]
    m = build("configs/data/default.yaml", out, "split.test_models=[]", sources=src)
    assert {k: m["counts"][k] for k in ("read", "kept", "rejected", "train")} == \
        {k: kept_m["counts"][k] for k in ("read", "kept", "rejected", "train")}
    assert m["inputs"][0]["scale"] == [1, 10] and m["inputs"][0]["rescaled_to"] == [1, 5]
    own, records = read_lines(kept_out / "train.jsonl"), read_lines(out / "train.jsonl")
    assert len(records) == len(own)
    for r, o in zip(records, own):  # both in the log's order
        assert (r["extra"]["question_id"], r["response_model"]) == (o["extra"]["question_id"], o["response_model"])
        assert r["scale"] == [1, 5] and r["extra"]["original_scale"] == [1, 10]
        assert r["extra"]["original_score"] == o["score"] and r["score"] == (o["score"] + 1) // 2
        user, target = r["messages"][1]["content"], r["messages"][2]["content"]
        assert "an integer between 1 and 5" in user and target.endswith(f"[RESULT] {r['score']}")
        assert r["feedback"] == o["feedback"] and r["instruction"] == o["instruction"]
    assert Counter(r["score"] for r in records).keys() == {1, 2, 3, 4, 5}


def test_rescale_rejects_a_rubric_that_describes_the_old_levels(tmp_path):
    """Prometheus rubrics describe each of their five levels: they cannot be carried onto 1-3."""
    from .conftest import build

    src = [{"format": "prometheus", "path": "data/vendor/prometheus-eval/mt_bench_eval.json", "rescale": [1, 3]}]
    m = build(None, tmp_path / "b", "allow_empty=true", sources=src)
    c = m["counts"]
    assert c["kept"] == 0 and c["by_reason"]["rescale_rubric_levels"] == c["rejected"] > 0
