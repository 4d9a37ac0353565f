"""The public Python API (judgeforge/api.py): the README's snippets run as written, in process and
against a real server (uvicorn on 127.0.0.1 in a thread, serving `create_app` over a ScriptedEngine
with an API key), plus the pure parts: rubric handling, result conversion, argument checks."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import judgeforge
from judgeforge import api, hardware
from judgeforge.judge.prompts import RUBRIC_PRESETS, Rubric
from judgeforge.judge.config import SamplingConfig
from judgeforge.judge.voting import Comparison, Grade
from judgeforge.serve.process import free_port
from testing.engines import ScriptedEngine
from testing.servers import scripted_server

KEY = "api-test-key"
SNIPPET = re.compile(r"<!-- readme-snippet: (\w+) -->\n```python\n(.*?)```", re.S)
Q, RUBRIC = "What is 2+2?", "factual_validity"


def readme_snippets(repo) -> dict[str, str]:
    return dict(SNIPPET.findall((repo / "README.md").read_text()))


def run_snippet(repo, name: str, replace: dict | None = None) -> dict:
    code = readme_snippets(repo)[name]
    for old, new in (replace or {}).items():
        assert old in code, f"the README's {name} snippet no longer names {old}"
        code = code.replace(old, new)
    ns: dict = {}
    exec(compile(code, f"README.md ({name} snippet)", "exec"), ns)
    return ns


class CountingEngine(ScriptedEngine):
    """A ScriptedEngine that counts its batch calls (grade many must be one batch, not one per item)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.generate_calls = 0

    def generate(self, requests):
        self.generate_calls += 1
        return super().generate(requests)


@pytest.fixture(scope="module")
def server():
    with scripted_server(ScriptedEngine(), KEY) as srv:
        yield srv


@pytest.fixture
def remote(server):
    with judgeforge.connect(server.url, api_key=KEY) as judge:
        yield judge


def local(**kw) -> api.LocalJudge:
    return api.LocalJudge(CountingEngine(**kw), SamplingConfig())


def same_result(a, b) -> None:
    """Equal as results; the sample texts do not travel over HTTP (no `judged` to rebuild them from)."""
    assert type(a) is type(b)
    assert {k: v for k, v in a.to_dict().items() if k != "samples"} == \
           {k: v for k, v in b.to_dict().items() if k != "samples"}


# -- the README -----------------------------------------------------------------------------------


def test_readme_marks_its_three_snippets(repo):
    assert set(readme_snippets(repo)) == {"local", "remote", "prometheus"}


def test_readme_remote_snippet_against_a_real_server(repo, server, monkeypatch):
    monkeypatch.setenv("JUDGEFORGE_API_KEY", KEY)  # the snippet's key comes from the environment
    ns = run_snippet(repo, "remote", {api.DEFAULT_URL: server.url})
    grade, pair = ns["grade"], ns["pair"]
    assert isinstance(grade, Grade) and grade.score == 4 and len(grade.votes) == 3
    assert 0 < grade.confidence <= 1 and grade.feedback == "Good."
    # The scripted judge always prefers the first response: both orders disagree, so no winner.
    assert isinstance(pair, Comparison) and pair.winner is None and pair.consistent is False
    assert "position inconsistent" in pair.reason and len(pair.swapped_votes) == 5


@pytest.mark.slow
def test_readme_local_snippets_on_the_shipped_judge(repo, capsys):
    ns = run_snippet(repo, "local")
    assert ns["grade"].score in range(1, 6) and len(ns["grade"].votes) == 5
    assert [type(g) for g in ns["grades"]] == [Grade, Grade] and all(g.score in range(1, 6) for g in ns["grades"])
    assert isinstance(ns["pair"], Comparison) and len(ns["pair"].votes) == 5
    assert capsys.readouterr().out.split()[0] == str(ns["grade"].score)
    ns = run_snippet(repo, "prometheus")
    assert len(ns["feedbacks"]) == 1 and ns["scores"][0] in range(1, 6)
    assert ns["winners"][0] in ("A", "B", None)


# -- local and remote give the same results ---------------------------------------------------------


def test_remote_results_are_the_local_ones(remote):
    judge = local()
    same_result(judge.grade(Q, "4", RUBRIC, seed=3), remote.grade(Q, "4", RUBRIC, seed=3))
    same_result(judge.compare(Q, "4", "5", RUBRIC, both_orders=True),
                remote.compare(Q, "4", "5", RUBRIC, both_orders=True))
    many = dict(instructions=[Q, "Name a prime."], responses=["4", "9"], rubric={"criteria": "Is it correct?"})
    for a, b in zip(judge.grade_many(**many, n=2), remote.grade_many(**many, n=2), strict=True):
        same_result(a, b)
    assert remote.model == "fake-judge" and judge.model == "fake-judge"


def test_grade_many_is_one_engine_batch():
    judge = local()
    grades = judge.grade_many([Q] * 5, ["4"] * 5, RUBRIC, [None, "4", None, "4", None])
    assert len(grades) == 5 and judge.engine.generate_calls == 1
    assert sum("###Reference Answer" in r.messages[1]["content"] for r in judge.engine.calls) == 2
    judge.compare_many([Q] * 3, ["4"] * 3, ["5"] * 3, RUBRIC, both_orders=True)
    assert judge.engine.generate_calls == 2 and len(judge.engine.calls) == 5 + 6


def test_remote_grade_many_goes_through_the_batch_routes(server):
    with judgeforge.connect(server.url, api_key=KEY, batch_size=2) as judge:
        start = len(server.app.posts)
        assert len(judge.grade_many([Q] * 3, ["4"] * 3, RUBRIC)) == 3
        assert len(judge.compare_many([Q] * 2, ["4"] * 2, ["5"] * 2, RUBRIC)) == 2
        judge.grade(Q, "4", RUBRIC)
    assert server.app.posts[start:] == ["/v1/grade/batch"] * 2 + ["/v1/compare/batch", "/v1/grade"]


def test_prometheus_calls_return_feedbacks_and_scores(remote):
    for judge in (local(), remote):
        feedbacks, scores = judge.absolute_grade(instructions=[Q, Q], responses=["4", "5"], rubric=RUBRIC,
                                                 reference_answers=["4", "4"], params={"n": 2})
        assert feedbacks == ["Good.", "Good."] and scores == [4, 4]
        feedbacks, winners = judge.relative_grade(instructions=[Q], responses_A=["4"], responses_B=["5"],
                                                  rubric="Is the answer correct?")
        assert winners == ["A"] and feedbacks == ["Good."]  # its verdict completed, its feedback written
        assert judge.single_absolute_grade(Q, "4", RUBRIC) == ("Good.", 4)
        assert judge.single_relative_grade(Q, "4", "5", RUBRIC) == ("Good.", "A")


def test_params_reach_the_engine_and_unknown_ones_are_refused():
    judge = local()
    judge.absolute_grade(instructions=[Q], responses=["4"], rubric=RUBRIC,
                         params={"temperature": 0.5, "n": 2, "max_tokens": 64, "seed": 7})
    req = judge.engine.calls[-1]
    assert (req.temperature, req.n, req.max_tokens, req.seed) == (0.5, 2, 64, 7)
    with pytest.raises(ValueError, match="repetition_penalty"):
        judge.absolute_grade(instructions=[Q], responses=["4"], rubric=RUBRIC,
                             params={"repetition_penalty": 1.03})
    with pytest.raises(ValueError, match="temperature"):
        judge.grade(Q, "4", RUBRIC, temperature=5)


# -- rubrics ------------------------------------------------------------------------------------------


def test_rubric_forms():
    reasoning = RUBRIC_PRESETS["reasoning"]
    assert api.rubric_field("helpfulness") == "helpfulness"
    assert api.rubric_field(reasoning) == reasoning.to_dict()
    assert api.rubric_field({"criteria": "c"}) == {"criteria": "c"}
    # prometheus-eval's rubric string (SCORE_RUBRIC_TEMPLATE filled in) is read back into its parts
    assert api.rubric_field(reasoning.render()) == reasoning.to_dict()
    assert api.rubric_field("Is the answer correct?") == {"criteria": "Is the answer correct?"}
    with pytest.raises(ValueError, match="unknown rubric preset 'helpfulnes'.*helpfulness"):
        api.rubric_field("helpfulnes")
    with pytest.raises(TypeError, match="rubric must be"):
        api.rubric_field(42)


def test_a_rendered_rubric_gives_the_same_prompt_as_its_dict():
    judge = local()
    rubric = RUBRIC_PRESETS["honesty"]
    judge.grade(Q, "4", rubric.render())
    judge.grade(Q, "4", rubric.to_dict())
    judge.grade(Q, "4", "honesty")
    prompts = [r.messages[1]["content"] for r in judge.engine.calls]
    assert prompts[0] == prompts[1] == prompts[2] and rubric.render() in prompts[0]


def test_bad_rubric_dicts_are_refused_naming_the_key():
    with pytest.raises(ValueError, match="unknown rubric key 'score_1'"):
        api.grade_request(Q, "4", {"criteria": "c", "score_1": "x"})
    with pytest.raises(ValueError, match="criteria"):
        api.grade_request(Q, "4", {"score1_description": "x"})


# -- result conversion ---------------------------------------------------------------------------------


def test_results_round_trip_through_their_dict_form():
    judge = local()
    g = judge.grade(Q, "4", RUBRIC, scale=(1, 10))
    back = Grade.from_dict(g.to_dict())
    same_result(g, back)
    assert back.score_probs == g.score_probs and back.distribution == g.distribution  # int keys again
    assert back.distribution[4] == 5 and back.samples == []
    c = judge.compare(Q, "4", "5", RUBRIC, both_orders=True)
    same_result(c, Comparison.from_dict(c.to_dict()))


def test_a_grade_without_a_score_round_trips():
    judge = api.LocalJudge(ScriptedEngine(texts=("no verdict",), complete=False), SamplingConfig(n=2))
    g = judge.grade(Q, "4", RUBRIC)
    assert g.score is None and "no vote" in g.reason
    same_result(g, Grade.from_dict({**g.to_dict(), "model": "m", "latency_s": 0.1}))  # answer extras ignored


def test_from_dict_names_missing_fields():
    with pytest.raises(ValueError, match="not a Grade: missing .*votes"):
        Grade.from_dict({"score": 3})
    with pytest.raises(ValueError, match="not a Comparison: missing winner"):
        Comparison.from_dict({k: v for k, v in local().compare(Q, "a", "b", RUBRIC).to_dict().items()
                              if k != "winner"})


# -- argument checks and errors -------------------------------------------------------------------------


def test_lists_are_checked_before_grading():
    judge = local()
    with pytest.raises(TypeError, match="instructions must be a list"):
        judge.grade_many(Q, ["4"], RUBRIC)
    with pytest.raises(ValueError, match="responses has 1 entries for 2 items"):
        judge.grade_many([Q, Q], ["4"], RUBRIC)
    with pytest.raises(ValueError, match="rubric has 1 entries for 2 items"):
        judge.grade_many([Q, Q], ["4", "4"], [RUBRIC])
    with pytest.raises(ValueError, match="reference_answers has 3 entries"):
        judge.compare_many([Q], ["a"], ["b"], RUBRIC, ["r"] * 3)
    with pytest.raises(ValueError, match="instruction"):  # empty: the API refuses it (min_length)
        judge.grade_many([Q, ""], ["4", "4"], RUBRIC)
    assert judge.engine.generate_calls == 0
    assert judge.grade_many([], [], RUBRIC) == []


def test_a_prompt_too_long_names_its_item():
    from judgeforge.judge.engines import PromptTooLong

    judge = api.LocalJudge(ScriptedEngine(max_model_len=1024), SamplingConfig(max_tokens=64))
    with pytest.raises(PromptTooLong) as e:
        judge.grade_many([Q, Q], ["4", "x" * 8000], RUBRIC)
    assert "(item 1 of 2)" in e.value.__notes__


def test_remote_errors_say_what_went_wrong(server):
    with pytest.raises(PermissionError, match="refused the API key"):
        judgeforge.connect(server.url, api_key="wrong")
    with pytest.raises(ConnectionError, match="is `judgeforge serve` running"):
        judgeforge.connect(f"http://127.0.0.1:{free_port()}", api_key=KEY)
    with pytest.raises(ValueError, match="http:// or https://"):
        judgeforge.connect("127.0.0.1:8000")
    with judgeforge.connect(server.url, api_key=KEY) as judge:
        with pytest.raises(api.ServerError, match="max_n") as e:
            judge.grade(Q, "4", RUBRIC, n=100)
    assert e.value.status == 422


def test_load_judge_refuses_bad_settings_before_starting_an_engine(tmp_path, monkeypatch):
    from judgeforge.config import ConfigError
    from judgeforge.judge import engines

    monkeypatch.setattr(engines, "build_engine", lambda cfg: pytest.fail("an engine was started"))
    with pytest.raises(FileNotFoundError, match="no such directory"):
        judgeforge.load_judge(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="max_model_lenn: unknown key"):
        judgeforge.load_judge("default", max_model_lenn=512)
    with pytest.raises(ConfigError, match="temperature"):
        judgeforge.load_judge("default", sampling={"temperature": 9})


def test_an_unknown_engine_kind_is_refused():
    with pytest.raises(ValueError, match="nope"):
        judgeforge.load_judge("default", engine="nope")


def test_load_judge_builds_the_named_engine(monkeypatch):
    from judgeforge.judge import engines

    seen = []
    monkeypatch.setattr(engines, "build_engine", lambda cfg: seen.append(cfg) or ScriptedEngine())
    monkeypatch.setattr(hardware, "cuda_available", lambda: False)
    with judgeforge.load_judge("default", engine="hf", sampling={"n": 2}, dtype="float32") as judge:
        assert judge.grade(Q, "4", RUBRIC).votes == [4, 4]
    with judgeforge.load_judge("default-judge"):
        pass
    assert [(c.kind, c.model, c.dtype) for c in seen] == [("transformers", "default", "float32"),
                                                         ("transformers", "default-judge", "auto")]


def test_import_judgeforge_stays_light():
    code = ("import sys, judgeforge; judgeforge.load_judge, judgeforge.connect, judgeforge.Grade; "
            "print(sorted(m for m in ('torch', 'vllm', 'transformers', 'httpx', 'fastapi') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert {"load_judge", "connect", "Grade", "Comparison"} <= set(dir(judgeforge))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        judgeforge.nope  # noqa: B018
