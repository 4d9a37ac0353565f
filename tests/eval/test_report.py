"""Report pipeline on a fake engine: units -> predictions -> metrics.json -> report.md/plots, compare."""

from __future__ import annotations

import json
import random
import re

import pytest

from judgeforge.config import load_config
from judgeforge.eval import compare as C
from judgeforge.eval import run as R
from judgeforge.eval.config import EvalConfig
from judgeforge.eval.report import render_markdown
from judgeforge.judge.engines import JudgeEngine, Sample
from testing.engines import shipped_tokenizer
from testing.records import all_floats


class FakeEngine(JudgeEngine):
    """Deterministic stand-in for a serve engine: scores near the reference, some garbage. Prompts are
    rendered, counted and bounded (4096 tokens) on the shipped tokenizer, as by a real engine."""

    kind = "fake"
    max_model_len = 4096

    def __init__(self, cfg):
        self.model_name = cfg.model
        self.tokenizer = shipped_tokenizer()
        self.noise = 0 if "good" in cfg.model else 2
        self.rng = random.Random(cfg.model)

    def generate(self, requests):
        return [[self._sample(req) for _ in range(req.n)] for req in requests]

    def _sample(self, req):
        """A sample with its completed choice log-probabilities; 10% write no `[RESULT]`."""
        prompt = req.messages[-1]["content"]
        if "###Response A" in prompt:
            v = self.rng.choice("AB")
            return Sample(text=f"ok [RESULT] {v}", finish_reason="stop",
                          choice_logprobs={v: -0.3, "AB"[v == "A"]: -1.4})
        s = self.rng.randint(1, 5) if self.noise else _hidden_score(prompt)
        lps = {c: -3.0 for c in req.choices} | {str(s): -0.2, str(max(1, s - 1)): -1.8}
        if not req.feedback:
            return Sample(text="", finish_reason="score_only", choice_logprobs=lps)
        if self.rng.random() < 0.1:
            return Sample(text="I think it is fine.", finish_reason="length", choice_logprobs=lps)
        return Sample(text=f"Feedback: fine. [RESULT] {s}", finish_reason="stop", choice_logprobs=lps)


def _hidden_score(prompt: str) -> int:
    # The "good" judge reads the response length as a proxy that correlates with nothing;
    # use a stable hash so the score is deterministic per prompt.
    return 1 + sum(map(ord, prompt[-400:])) % 5


@pytest.fixture
def fake_engine(monkeypatch):
    import judgeforge.judge.engines as E

    monkeypatch.setattr(E, "build_engine", lambda cfg: FakeEngine(cfg))
    monkeypatch.setattr(R, "_length_tokenizer", lambda cfg: shipped_tokenizer())


def _cfg(tmp_path, vendor, judges=("base", "good")):
    pv = vendor / "prometheus-eval"
    return load_config(EvalConfig, None, [
        f"out={tmp_path / 'report'}", "n_values=[1, 3]", "bootstrap.n_resamples=200",
        "sampling.score_only=true",
        "judges=[" + ", ".join(f"{{name: {j}, engine: {{model: {j}-model}}}}" for j in judges) + "]",
        "sets=[{name: vicuna, kind: prometheus, path: " + str(pv / "vicuna_eval.json") + ", max_items: 24,"
        " external_ranking: {chat_gpt: 4, wizard: 3, vicuna: 2, llama-2-chat: 1}},"
        " {name: hhh, kind: hhh, path: " + str(pv / "hhh_alignment_eval.json") + ", max_items: 12,"
        " modes: [absolute, relative]},"
        " {name: flask, kind: flask, path: nobody/flask-offline}]"])


def _numbers(text: str) -> set[str]:
    return set(re.findall(r"-?\d+\.\d+", text))


def test_run_writes_report_from_metrics(tmp_path, vendor, fake_engine):
    cfg = _cfg(tmp_path, vendor)
    m = R.run_eval(cfg, command="judgeforge eval test")
    out = tmp_path / "report"
    for name in ("report.md", "metrics.json", "predictions.jsonl", "config.yaml", "plots/n_ablation.png",
                 "plots/scatter__base__vicuna__n3.png", "plots/confusion__good__vicuna__n3.png",
                 "plots/scatter__base__vicuna__expected.png",
                 "plots/categories__vicuna.png"):
        assert (out / name).is_file(), name
    metrics = json.loads((out / "metrics.json").read_text())
    report = (out / "report.md").read_text()
    assert report == render_markdown(metrics)
    # Every decimal number in report.md is a (rounded) number from metrics.json.
    have = {f"{x:.3f}" for x in all_floats(metrics)} | {f"{x:.1f}" for x in all_floats(metrics)} | \
        {f"{x:.2f}" for x in all_floats(metrics)}
    missing = _numbers(report) - have
    assert not missing, missing
    # Real content: every item scored (completed), written shares counted, sets and skipped sets
    # named, N variants present.
    vic = metrics["results"]["base"]["vicuna"]
    assert set(vic) == {"n1", "n3", "expected", "score_only"}
    assert all(vic[v]["parse_failures"] == 0 and vic[v]["n"] == 24 for v in vic)
    assert vic["expected"]["correlation"]["pearson"]["lo"] is not None
    assert metrics["reference"]["vicuna"]["ceiling"]["k"] == 3
    st = metrics["samples"]["base"]["vicuna"]
    assert st["n"] == 24 * 3 and st["completed"] == st["n"]
    assert st["reasons"]["no [RESULT] marker"] == st["n"] - st["written"] > 0
    assert st["written_agrees"] == st["written_and_completed"] == st["written"]
    assert vic["n3"]["ranking"]["n_models"] == 4 and "Ranking of response models" in report
    assert metrics["skipped"][0]["name"] == "flask" and "skipped `flask`" in report
    hhh = metrics["results"]["good"]["hhh"]
    assert set(hhh) == {"absolute", "relative"} and hhh["absolute"]["n3"]["n"] == 12
    assert "Table 13" in report and "Table 12" in report and "Table 3" in report
    d = metrics["comparisons"]["good"]["vicuna"]["n3"]
    assert d["n"] > 0 and d["lo"] is not None
    # the length floor, paired on the same items: judge minus length alone, both against the reference
    vl, length_r = vic["score_only"]["vs_length"], metrics["reference"]["vicuna"]["length_only"]["r"]
    assert vl["a"] == pytest.approx(length_r) and vl["b"] == pytest.approx(vic["score_only"]["correlation"]["pearson"]["value"])
    assert vl["lo"] <= vl["diff"] <= vl["hi"] and "vs length alone" in report
    assert m == metrics


def test_recompute_reproduces_metrics(tmp_path, vendor, fake_engine):
    cfg = _cfg(tmp_path, vendor)
    cfg.plots = False
    m1 = R.run_eval(cfg)
    m2 = R.recompute(tmp_path / "report", plots=False)
    assert json.dumps(m1["results"], sort_keys=True) == json.dumps(m2["results"], sort_keys=True)


def test_prompt_too_long_is_a_counted_failure(tmp_path, vendor, fake_engine, monkeypatch):
    from judgeforge.eval import judges as J
    from judgeforge.eval.sets import AbsItem
    from judgeforge.judge.prompts import Rubric

    units = J.build_units([R.S.EvalSet("s", "absolute", "gpt-4", [
        AbsItem(id="x", instruction="too long " * 3000, response="r", rubric=Rubric("c"), ref_score=3.0),
        AbsItem(id="y", instruction="fine", response="r", rubric=Rubric("c"), ref_score=3.0)], "mem", 2)], {})
    cfg = _cfg(tmp_path, vendor)
    recs, timing = J.grade_units(FakeEngine(cfg.judges[0].engine), units, n=2, sampling=cfg.sampling)
    assert recs[0]["samples"][0]["reason"].startswith("prompt too long") and timing["prompts"] == 1
    assert len(recs[1]["samples"]) == 2


def test_compare_two_reports(tmp_path, vendor, fake_engine):
    a = _cfg(tmp_path / "a", vendor, judges=("base",))
    b = _cfg(tmp_path / "b", vendor, judges=("good",))
    a.plots = b.plots = False
    R.run_eval(a)
    R.run_eval(b)
    text = C.compare(tmp_path / "a" / "report", tmp_path / "b" / "report", n_boot=100)
    assert "base → good" in text and "| vicuna |" in text and "| hhh |" in text
    rows = C.compare_rows(tmp_path / "a" / "report", tmp_path / "b" / "report", n_boot=100)
    hhh = next(r for r in rows if r["set"] == "hhh" and r["variant"] == "n3")
    # Pairwise sets graded absolutely get a paired interval on accuracy, as in the single-report comparison.
    assert hhh["paired"]["method"] == "accuracy" and hhh["paired"]["lo"] <= hhh["diff"] <= hhh["paired"]["hi"]
    assert hhh["paired"]["diff"] == pytest.approx(hhh["diff"])
    # ...and on the pairs where the reference prefers the shorter response, the same paired figure on fewer
    short = hhh["paired"]["shorter_preferred"]
    assert short["method"] == "accuracy" and 0 < short["n"] < hhh["paired"]["n"]
    assert "where the reference prefers the shorter" in text
    out = tmp_path / "cmp.md"
    assert C.main([str(tmp_path / "a" / "report"), str(tmp_path / "b" / "report"), "--out", str(out),
                   "--n-boot", "50"]) == 0
    assert out.read_text().startswith("# Comparison")


def test_compare_names_the_judges_of_a_multi_judge_report(tmp_path, vendor, fake_engine):
    """A candidate graded alone against one judge of a report that holds two (names differ)."""
    a = _cfg(tmp_path / "a", vendor, judges=("base", "good"))
    b = _cfg(tmp_path / "b", vendor, judges=("base",))
    a.plots = b.plots = False
    R.run_eval(a)
    R.run_eval(b)
    ra, rb = tmp_path / "a" / "report", tmp_path / "b" / "report"
    assert {(r["judge_a"], r["judge_b"]) for r in C.compare_rows(ra, rb, n_boot=50)} == {("base", "base")}
    rows = C.compare_rows(ra, rb, n_boot=50, judges=("good", "base"))
    vic = next(r for r in rows if r["set"] == "vicuna" and r["variant"] == "n3")
    assert (vic["judge_a"], vic["judge_b"]) == ("good", "base") and vic["paired"]["lo"] <= vic["diff"]
    with pytest.raises(ValueError, match="no judge 'nobody'"):
        C.compare_rows(ra, rb, judges=("nobody", "base"))
    with pytest.raises(SystemExit):
        C.main([str(ra), str(rb), "--judges", "good"])


def test_shorter_preferred_picks_decisive_pairs_whose_preferred_side_is_shorter():
    from judgeforge.eval.report import shorter_preferred

    def pair(i, human, la, lb):
        return [{"item_id": i, "unit": u, "human": human, "length": n} for u, n in (("a", la), ("b", lb))]

    recs = (pair("short-a", "a", 10, 20) + pair("long-a", "a", 30, 20) + pair("short-b", "b", 40, 5)
            + pair("long-b", "b", 5, 40) + pair("tie", "tie", 1, 9) + pair("equal", "a", 7, 7)
            + pair("unknown", "b", None, 3) + [{"item_id": "lone", "unit": "a", "human": "a", "length": 1}])
    assert shorter_preferred(recs) == {"short-a", "short-b"}


def test_unavailable_required_set_fails(tmp_path, vendor):
    from judgeforge.config import ConfigError

    cfg = load_config(EvalConfig, None, [f"out={tmp_path}/r",
                                         "sets=[{name: fb, kind: feedback_bench, path: nobody/x, required: true}]"])
    with pytest.raises(ConfigError, match="required"):
        R.run_eval(cfg)
