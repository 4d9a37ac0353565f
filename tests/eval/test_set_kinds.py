"""Open set kinds (eval.sets.SET_KINDS) and the loaders' accounting (read = kept + rejected, by the data
builder's reasons), on small files in the published layouts and on the published PandaLM test set."""

from __future__ import annotations

import json

import pytest

from judgeforge.config import ConfigError, load_config
from judgeforge.eval import run as R
from judgeforge.eval import sets as S
from judgeforge.eval.config import EvalConfig

# The published file's six records whose response is the JSON literal `true` (idx 157..164).
TRUE_RESPONSES = [("record 158", "response1 is bool, not text"), ("record 159", "response1 is bool, not text"),
                  ("record 160", "response1 is bool, not text"), ("record 162", "response2 is bool, not text"),
                  ("record 163", "response2 is bool, not text"), ("record 165", "response1 is bool, not text")]


@pytest.fixture
def pandalm(vendor):
    return vendor / "pandalm" / "testset-v1.json"


@pytest.fixture
def qa_kind():
    """A set kind of this test file: JSON Lines of {q, a, b, winner}, counted like the built-in ones."""
    @S.set_kind("qa_pairs", pairwise=True, preset=True)
    def load_qa(sc, seed, records):
        from judgeforge.judge.prompts import rubric_preset
        from judgeforge.data.validate import Reject, TIE

        def item(n, place, r):
            S.require(r, "qa", ("q", "a", "b", "winner"))
            if r["winner"] not in ("a", "b"):
                raise Reject(TIE, f"winner {r['winner']!r}")
            return S.PairItem(id=f"qa:{n}", instruction=r["q"], response_a=r["a"], response_b=r["b"],
                              human=r["winner"], rubric=rubric_preset(sc.rubric_preset))

        items = S.accounted(sc.path, "qa", S.read_numbered(sc.path), records, item)
        return items, len(items)

    yield load_qa
    S.SET_KINDS.remove("qa_pairs")


def _eval_config(tmp_path, *sets: str, extra=()) -> EvalConfig:
    return load_config(EvalConfig, None, [f"out={tmp_path / 'report'}", "n_values=[1]", "plots=false",
                                          "bootstrap.n_resamples=50", "judges=[{name: base, engine: {model: m}}]",
                                          "sets=[" + ", ".join(sets) + "]", *extra])


def test_a_kind_registered_in_a_test_file_loads_through_eval(tmp_path, qa_kind):
    p = tmp_path / "qa.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in [{"q": "2+2?", "a": "4", "b": "5", "winner": "a"},
                                                   {"q": "Sky?", "a": "green", "b": "blue", "winner": "b"},
                                                   {"q": "Hm?", "a": "x", "b": "y", "winner": "tie"}]) + "\n")
    cfg = _eval_config(tmp_path, f"{{name: mine, kind: qa_pairs, path: {p}, modes: [absolute, relative]}}")
    assert cfg.sets[0].role == "human"  # the kind's defaults, as for the built-in pairwise kinds
    [es], skipped = R.load_sets(cfg)  # what `judgeforge eval` (run_eval) loads its sets with
    assert not skipped and es.kind == "pairwise" and es.reference == "human"
    assert [i.human for i in es.items] == ["a", "b"] and es.rubric_preset == "helpfulness"
    assert es.summary()["records"] | {"rejects": None} == {
        "read": 3, "kept": 2, "rejected": 1, "filtered": 0, "by_reason": {"tie": 1}, "rejects": None}
    assert es.records.rejects == [{"place": "line 3", "reason": "tie", "detail": "winner 'tie'"}]


def test_unknown_set_kind_errors_listing_the_kinds(tmp_path):
    with pytest.raises(ConfigError) as e:
        _eval_config(tmp_path, "{name: x, kind: pandalam, path: p.json}")
    assert ("unknown set kind 'pandalam'; registered: autoj, feedback_bench, flask, heldout, heldout_pairs, "
            "hhh, mt_bench_human, pandalm, prometheus") in str(e.value)


def test_unknown_set_kind_is_one_line_from_the_cli(tmp_path, capsys):
    from judgeforge.cli import main

    rc = main(["eval", "sets=[{name: x, kind: nope, path: p.json}]", f"out={tmp_path / 'r'}"])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "Traceback" not in err and "unknown set kind 'nope'; registered: autoj" in err


def test_published_pandalm_file_rejects_its_six_true_responses(pandalm):
    records = S.Records()
    items, n = S.load_pandalm(str(pandalm), records=records)
    assert (records.read, records.kept, records.rejected) == (999, 993, 6) and n == len(items) == 993
    assert records.to_dict()["by_reason"] == {"missing_field": 6}
    assert [(r["place"], r["detail"]) for r in records.rejects] == TRUE_RESPONSES
    assert {r["reason"] for r in records.rejects} == {"missing_field"}
    assert all(isinstance(t, str) for i in items for t in (i.instruction, i.response_a, i.response_b))
    assert "pandalm:157" not in {i.id for i in items} and "pandalm:156" in {i.id for i in items}
    assert sum(not i.response_a or not i.response_b for i in items) == 54  # empty answers are gradeable


def test_published_pandalm_file_evaluates_with_its_rejects_reported(tmp_path, pandalm, biased_engine):
    cfg = _eval_config(tmp_path, f"{{name: pandalm, kind: pandalm, path: {pandalm}, max_items: 6, "
                                 "modes: [relative]}")
    R.run_eval(cfg)
    out = tmp_path / "report"
    [s] = json.loads((out / "metrics.json").read_text())["sets"]
    rec = s["records"]
    assert (rec["read"], rec["kept"], rec["rejected"], rec["by_reason"]) == (999, 993, 6, {"missing_field": 6})
    assert s["n_items"] == 6 and s["n_available"] == 993
    report = (out / "report.md").read_text()
    assert "### Records read" in report and "| pandalm | 999 | 993 | 6 | 0 | missing_field 6 |" in report
    for place, detail in TRUE_RESPONSES:
        assert f"- `pandalm` {place}: missing_field: {detail}" in report
    R.recompute(out, plots=False)  # a recomputed report keeps the accounting
    assert "| pandalm | 999 | 993 | 6 | 0 | missing_field 6 |" in (out / "report.md").read_text()


# --- every loader keeps or rejects each record with a reason, never a traceback ----------------------

def _mtbh(turn=1, **kw):
    conv = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}]
    return {"question_id": 1, "model_a": "x", "model_b": "y", "winner": "model_a", "judge": "j",
            "conversation_a": conv, "conversation_b": conv, "turn": turn, **kw}


AUTOJ = {"scenario": "s", "label": 0, "prompt": "p", "response 1": "r1", "response 2": "r2"}


@pytest.mark.parametrize("loader,good,bad,reason,detail", [
    (S.load_autoj, AUTOJ, dict(AUTOJ, label="first"), "non_integer_score", "label: score 'first' is not a number"),
    (S.load_autoj, AUTOJ, dict(AUTOJ, label=7), "score_out_of_scale", "label must be 0, 1 or 2, got 7"),
    (S.load_autoj, AUTOJ, dict(AUTOJ, prompt=["p"]), "missing_field", "prompt is list, not text"),
    (S.load_mt_bench_human, _mtbh(), _mtbh(turn=2), "unparseable_prompt", "conversation_a has no turn 2"),
    (S.load_mt_bench_human, _mtbh(), _mtbh(winner="error"), "upstream_parse_failure", "unknown winner 'error'"),
    (S.load_mt_bench_human, _mtbh(), _mtbh(conversation_b="text"), "missing_field", "conversation_b is str"),
])
def test_a_bad_record_is_one_counted_reject(tmp_path, loader, good, bad, reason, detail):
    p = tmp_path / "set.jsonl"
    p.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    records = S.Records()
    items, n = loader(str(p), records=records)
    assert len(items) == n == 1 and (records.read, records.kept, records.rejected) == (2, 1, 1)
    [rej] = records.rejects
    assert rej["place"] == "line 2" and rej["reason"] == reason and rej["detail"].startswith(detail)


def test_prometheus_scores_off_the_scale_and_response_model_filter(tmp_path, vendor):
    recs = json.loads((vendor / "prometheus-eval" / "vicuna_eval.json").read_text())[:3]
    recs[1] = dict(recs[1], gpt4_score=[7, 7, 7])
    recs[2] = dict(recs[2], gpt4_score="many")
    p = tmp_path / "v.json"
    p.write_text(json.dumps(recs))
    records = S.Records()
    items, _ = S.load_prometheus_absolute(str(p), "v", records=records)
    assert len(items) == 1 and [r["reason"] for r in records.rejects] == ["score_out_of_scale", "non_integer_score"]
    filtered = S.Records()
    items, n = S.load_prometheus_absolute(str(p), "v", response_models=["nobody"], records=filtered)
    assert items == [] and n == filtered.kept == filtered.filtered == 1 and filtered.rejected == 2


def test_unreadable_and_repeated_key_lines_are_the_builders_rejects(tmp_path):
    p = tmp_path / "autoj.jsonl"
    p.write_text(json.dumps(AUTOJ) + "\n" + '{"label": 1, "prompt" "p"}\n'
                 + '{"label": 1, "label": 0, "prompt": "p", "response 1": "a", "response 2": "b"}\n')
    records = S.Records()
    items, _ = S.load_autoj(str(p), records=records)
    assert len(items) == 1 and records.to_dict()["by_reason"] == {"unreadable_line": 1, "duplicate_key": 1}
    assert records.rejects[0]["place"] == "line 2" and "bad JSON at column 23" in records.rejects[0]["detail"]


def test_heldout_rejects_a_bad_sample_and_keeps_the_item(tmp_path):
    base = {"instruction": "Q", "response": "R", "rubric": {"criteria": "c"}, "scale": [1, 5], "item_id": "x",
            "response_model": "m"}
    recs = [dict(base, sample_idx=0, score=4), dict(base, sample_idx=1, score="four"),
            dict(base, sample_idx=2, score=2), {"mode": "relative", "id": "p"}]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    records = S.Records()
    [x], n = S.load_heldout(str(tmp_path), records=records)
    assert n == 1 and x.ref_samples == [4.0, 2.0] and x.ref_score == 3.0
    assert records.read == 3 and records.rejects[0]["reason"] == "non_integer_score"  # the pair is heldout_pairs'


def test_a_file_of_only_bad_records_names_the_first(tmp_path):
    p = tmp_path / "pl.json"
    p.write_text(json.dumps([{"instruction": "i", "input": "", "response1": True, "response2": "b",
                              "annotator1": 1, "annotator2": 1, "annotator3": 1}] * 2))
    with pytest.raises(S.SetLayoutError, match=r"pl.json record 1: response1 is bool, not text; expected the "
                                                r"'pandalm' layout .*\(0 of 2 records kept\)"):
        S.load_pandalm(str(p))
