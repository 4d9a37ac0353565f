"""The fast line encoder (data/records.py) is byte-identical to Judgment.to_sft() + dumps_record."""

from __future__ import annotations

import json

import pytest

from judgeforge.data.schema import Judgment
from judgeforge.io import dumps_record

from .conftest import build


def reference_line(line: str) -> str:
    """Re-encode a written line through the canonical path: from_sft -> to_sft -> dumps_record."""
    rec = json.loads(line)
    j = Judgment.from_sft(rec)
    ref = j.to_sft()
    ref["rubric"] = {k: ref["rubric"].get(k) for k in rec["rubric"]}  # the builder's Arrow key normalisation
    assert ref["extra"] == rec["extra"]
    return dumps_record(ref)


def check_build(out) -> int:
    n = 0
    for name in ("train.jsonl", "test.jsonl"):
        for line in (out / name).read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            assert line == reference_line(line)
            j = Judgment.from_sft(rec)
            assert rec["item_id"] == j.item_hash()[:16]
            n += 1
    return n


def test_default_build_lines_are_canonical(default_build):
    out, m = default_build
    assert check_build(out) == m["counts"]["train"] + m["counts"]["test"]


def test_fastchat_build_lines_are_canonical(fastchat_build):
    out, m = fastchat_build
    assert check_build(out) == m["counts"]["train"] + m["counts"]["test"]


@pytest.mark.parametrize("policy", ["all", "majority"])
def test_mixed_sources_lines_are_canonical(tmp_path, policy):
    """Mixed sources: union-filled rubric/extra keys, flags, non-ASCII text, null fields."""
    rows = [{"q": "Wie heißt die Hauptstadt? \u2603 \"quoted\" \\ back", "a": "Berlin \U0001f600\n\ttab",
             "s": 3, "f": "Gut.", "m": "x"}]
    (tmp_path / "g.jsonl").write_text("".join(json.dumps(r, ensure_ascii=True) + "\n" for r in rows))
    m = build("configs/data/default.yaml", tmp_path / "o", f"sample_policy={policy}", "decontamination.mode=flag",
              sources=[{"path": "data/vendor/prometheus-eval/mt_bench_eval.json", "format": "prometheus"},
                       {"path": "data/vendor/fastchat-mt-bench/gpt-4_single.jsonl", "format": "fastchat"},
                       {"path": str(tmp_path / "g.jsonl"), "format": "jsonl", "rubric_preset": "honesty",
                        "columns": {"instruction": "q", "response": "a", "score": "s", "feedback": "f",
                                    "response_model": "m"}}])
    assert check_build(tmp_path / "o") == m["counts"]["train"] + m["counts"]["test"] > 1000
    import datasets

    ds = datasets.load_dataset("json", data_files=str(tmp_path / "o" / "train.jsonl"), split="train")
    assert set(ds.features["extra"]) == {"idx", "question_id", "turn", "judge_prompt", "contaminated"}


def test_edge_cases_match_the_reference(tmp_path):
    """A placeholder-like string in the rubric, a blank reference, typed extras (True vs 1), non-BMP text."""
    from judgeforge.data.build import Kept, encode_lines
    from judgeforge.data.records import ItemCache, Spool, SpoolWriter, content_hash, encode
    from judgeforge.judge.prompts import Rubric, Scale

    rubric = Rubric("Uses @@jf-instruction-4c1d@@ well?", {1: "bad", 2: "ok \U0001f600"})
    js = [Judgment("Q \u2028 line", "A \"x\"", rubric, "fb", 2, Scale(1, 2), reference_answer="  ",
                   extra={"flag": True}),
          Judgment("Q2", "A2", Rubric("c"), "fb2", 1, Scale(1, 2), reference_answer="ref", extra={"flag": 1}),
          Judgment("Q3", "A3", Rubric("c"), " fb3\n", 1, Scale(1, 2), extra={"flag": [1, 2]}),
          Judgment("Q4", "A4", Rubric("c"), "fb4", 1, Scale(1, 2), extra={"flag": 1.0})]
    kept = []
    spool = Spool(tmp_path)
    writer = SpoolWriter(spool.new_file())
    for j in js:
        cache = ItemCache(j)
        j.item_id = cache.item_hash[:16]
        assert content_hash(j, cache) == j.content_hash() and cache.item_hash == j.item_hash()
        chash, parts = encode(j, cache)
        assert chash == j.content_hash()
        kept.append(Kept(j, writer.add(parts), chash, (0, 0, 0)))
    writer.close()
    text = b"".join(encode_lines(kept, spool, ["criteria", "score1_description", "score2_description"], ["flag"]))
    lines = text.decode("utf-8").split("\n")
    assert lines.pop() == ""
    for line, j in zip(lines, js, strict=True):
        ref = j.to_sft()
        ref["rubric"] = {k: ref["rubric"].get(k) for k in ("criteria", "score1_description", "score2_description")}
        assert line == dumps_record(ref)


@pytest.mark.parametrize("levels", [[(1, 2), (1, 2)], [(1, 2), (1, 2, 3)], [(-2, -1), (1, 2)], [(-2, -1), (-2, -1)]])
def test_rubric_keys_are_normalised_or_reused(tmp_path, levels):
    """The spooled rubric is reused only when its keys are the build's keys, in their order (negative score
    levels sort differently in the key union); otherwise the writer normalises it."""
    from judgeforge.data.build import Kept, _key_union, encode_lines
    from judgeforge.data.records import ItemCache, Spool, SpoolWriter, encode
    from judgeforge.judge.prompts import Rubric, Scale

    spool = Spool(tmp_path)
    writer = SpoolWriter(spool.new_file())
    js, kept = [], []
    for i, lv in enumerate(levels):
        rubric = Rubric(f"c{i}", {n: f"d{n}" for n in lv})
        j = Judgment(f"Q{i}", f"A{i}", rubric, "fb", lv[0], Scale(min(lv), max(lv)))
        cache = ItemCache(j)
        j.item_id = cache.item_hash[:16]
        chash, parts = encode(j, cache)
        js.append(j)
        kept.append(Kept(j, writer.add(parts), chash, (0, i, 0)))
    writer.close()
    keys = _key_union(j.rubric.to_dict() for j in js)
    lines = b"".join(encode_lines(kept, spool, keys, [])).decode("utf-8").splitlines()
    for line, j in zip(lines, js, strict=True):
        ref = j.to_sft()
        ref["rubric"] = {k: ref["rubric"].get(k) for k in keys}
        assert line == dumps_record(ref)
