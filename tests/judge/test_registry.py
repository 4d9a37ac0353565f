"""The generic registry, and engine kinds that are open: registered names and `module:Class`."""

from __future__ import annotations

import pytest

from judgeforge.config import ConfigError, load_config
from judgeforge.judge import engines as E
from judgeforge.judge.config import EngineConfig
from judgeforge.judge.engines import JudgeEngine, Sample
from judgeforge.judge.registry import Registry, UnknownName


class EchoEngine(JudgeEngine):
    """A user's own engine, named in a config as `<this module>:EchoEngine`: every sample votes the
    scale's top value."""

    kind = "echo"

    def __init__(self, cfg):
        self.model_name = cfg.model

    def prepare(self, req):
        return req

    def generate(self, requests):
        return [[Sample(text=f"Top. [RESULT] {req.choices[-1]}", finish_reason="stop",
                        choice_logprobs={c: -5.0 for c in req.choices} | {req.choices[-1]: -0.01})
                 for _ in range(req.n)] for req in requests]


class NotAnEngine:
    pass


def test_register_get_and_decorator():
    reg = Registry("widget")
    reg.register("a", 1)

    @reg.register("b")
    def b():
        return 2

    assert reg.get("a") == 1 and reg.get("b") is b and b() == 2
    assert reg.names() == ["a", "b"] == list(reg) and "a" in reg and "c" not in reg and len(reg) == 2
    reg.remove("a")
    assert "a" not in reg


def test_unknown_name_lists_the_registered_ones():
    reg = Registry("widget")
    reg.register("zeta", 1)
    reg.register("alpha", 2)
    with pytest.raises(UnknownName, match=r"unknown widget 'beta'; registered: alpha, zeta$") as e:
        reg.get("beta")
    assert isinstance(e.value, ConfigError)
    with pytest.raises(UnknownName):
        reg.get(["unhashable"])


def test_a_taken_name_is_refused_unless_replaced():
    reg = Registry("widget")
    reg.register("a", 1)
    reg.register("a", 1)  # the same entry again (a re-imported module) is no conflict
    with pytest.raises(ValueError, match="widget 'a' is already registered"):
        reg.register("a", 2)
    reg.register("a", 2, replace=True)
    assert reg.get("a") == 2
    with pytest.raises(ValueError, match="non-empty name"):
        reg.register("", 3)


def test_engine_given_as_module_class_is_built_by_build_engine():
    from judgeforge.judge.config import SamplingConfig
    from judgeforge.judge.judge import GradeItem, Judge
    from judgeforge.judge.prompts import rubric_preset

    cfg = EngineConfig(kind=f"{__name__}:EchoEngine", model="mine")
    engine = E.build_engine(cfg)
    assert type(engine).__name__ == "EchoEngine" and engine.model_name == "mine"
    [grade] = Judge(engine, SamplingConfig(n=2)).grade(
        [GradeItem(instruction="Q", response="R", rubric=rubric_preset("helpfulness"))])
    assert grade.score == 5


def test_a_registered_engine_kind_validates_and_builds(monkeypatch):
    monkeypatch.setattr(E, "ENGINES", Registry("engine kind"))
    E.register_engine("echo", EchoEngine)
    cfg = load_config(EngineConfig, None, ["kind=echo", "model=m"])
    assert isinstance(E.build_engine(cfg), EchoEngine)


def test_unknown_engine_kind_lists_the_registered_ones():
    with pytest.raises(ConfigError) as e:
        load_config(EngineConfig, None, ["kind=vlm"])
    msg = str(e.value)
    assert "unknown engine kind 'vlm'; registered: openai, transformers, vllm" in msg
    assert "module:Class" in msg and "Traceback" not in msg


def test_module_class_errors_are_one_clear_line():
    with pytest.raises(ConfigError, match="no module 'no_such_pkg.engines' to import"):
        load_config(EngineConfig, None, ["kind=no_such_pkg.engines:Mine"])
    with pytest.raises(ConfigError, match=r"has no 'Missing'"):
        E.build_engine(EngineConfig(kind=f"{__name__}:Missing"))
    with pytest.raises(ConfigError, match="NotAnEngine is not a judgeforge.judge.engines.JudgeEngine"):
        E.build_engine(EngineConfig(kind=f"{__name__}:NotAnEngine"))
