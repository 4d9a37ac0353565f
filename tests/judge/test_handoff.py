"""The handoff engine (judge/engines/handoff.py): the warm-start engine answers until the configured one
has started, in-flight work finishes where it began, and every answer names the engine that drew it.

Pure logic over two minimal engines (the real servers with a transformers -> vLLM handoff:
tests/serve/test_real_vllm.py, its first test)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from judgeforge.judge.config import EngineConfig, SamplingConfig
from judgeforge.judge.engines import JudgeEngine, Sample, SampleRequest, build_engine
from judgeforge.judge.engines.handoff import HandoffEngine
from judgeforge.judge.items import GradeItem
from judgeforge.judge.judge import Judge
from judgeforge.judge.prompts import rubric_preset

LOGPROBS = {"1": -3.0, "2": -3.0, "3": -2.0, "4": -0.2, "5": -2.5}


class Minimal(JudgeEngine):
    """Answers score-only samples at once (or when `gate` is set), counting its calls."""

    def __init__(self, kind: str, gate: threading.Event | None = None):
        self.kind, self.gate, self.calls, self.closed = kind, gate, 0, False
        self.model_name, self.max_model_len = f"{kind}-model", 4096

    def generate(self, requests):
        self.calls += 1
        if self.gate is not None:
            self.gate.wait(10)
        return [[Sample(text="", finish_reason="score_only", choice_logprobs=dict(LOGPROBS))] * r.n
                for r in requests]

    async def agenerate(self, request):
        return (await asyncio.to_thread(self.generate, [request]))[0]

    def close(self):
        self.closed = True


def factory_for(built: dict, start_gate: threading.Event, fail: bool = False):
    """An engine factory: `warm` is built at once; the target waits for `start_gate` (its start)."""

    def factory(kind):
        def build(cfg):
            if kind == "openai":  # cfg()'s warm_start
                built["warm"] = Minimal("warm")
                return built["warm"]
            start_gate.wait(10)
            if fail:
                raise RuntimeError("no kernels for this CPU")
            built["target"] = Minimal("target")
            return built["target"]
        return build

    return factory


def cfg() -> EngineConfig:
    return EngineConfig(kind="transformers", warm_start="openai")


def req() -> SampleRequest:
    return SampleRequest(messages=[{"role": "user", "content": "q"}], feedback=False)


def test_the_warm_engine_answers_until_the_target_has_started_then_the_target_answers():
    built, gate = {}, threading.Event()
    engine = HandoffEngine(cfg(), factory_for(built, gate))
    try:
        assert engine.handoff() == {"answering": "warm", "target": "transformers", "state": "starting"}
        assert engine.kind == "warm" and engine.model_name == "warm-model"
        (first,) = engine.generate([req()])
        assert {s.extra["engine"] for s in first} == {"warm"}
        gate.set()
        assert engine.wait_ready(10)
        assert engine.handoff()["state"] == "ready" and engine.kind == "target"
        (second,) = engine.generate([req()])
        assert {s.extra["engine"] for s in second} == {"target"}
        assert built["warm"].closed and not built["target"].closed  # nothing in flight: closed at once
    finally:
        engine.close()
    assert built["target"].closed


def test_work_in_flight_on_the_warm_engine_finishes_there_and_closes_it_after():
    built, gate = {}, threading.Event()
    engine = HandoffEngine(cfg(), factory_for(built, gate))
    release = threading.Event()
    built["warm"].gate = release
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault("r", engine.generate([req()])))
    worker.start()
    try:
        while built["warm"].calls == 0:  # the request is running on the warm engine
            threading.Event().wait(0.01)
        gate.set()
        assert engine.wait_ready(10)
        assert not built["warm"].closed  # still running a request
        release.set()
        worker.join(10)
        assert {s.extra["engine"] for s in out["r"][0]} == {"warm"}
        assert built["warm"].closed
    finally:
        release.set()
        engine.close()


def test_a_target_that_fails_to_start_leaves_the_warm_engine_serving_and_says_why():
    built, gate = {}, threading.Event()
    gate.set()
    engine = HandoffEngine(cfg(), factory_for(built, gate, fail=True))
    try:
        assert not engine.wait_ready(10)
        h = engine.handoff()
        assert h["state"] == "failed" and "no kernels for this CPU" in h["reason"] and h["answering"] == "warm"
        assert engine.alive and engine.generate([req()])[0][0].extra["engine"] == "warm"
    finally:
        engine.close()


def test_closing_while_the_target_starts_closes_the_target_once_built():
    built, gate = {}, threading.Event()
    engine = HandoffEngine(cfg(), factory_for(built, gate))
    engine.close()
    gate.set()
    engine._starter.join(10)
    assert built["warm"].closed and built["target"].closed
    assert engine.handoff()["state"] == "closed"


def test_every_grade_names_the_engine_that_drew_its_samples():
    built, gate = {}, threading.Event()
    engine = HandoffEngine(cfg(), factory_for(built, gate))
    judge = Judge(engine, SamplingConfig(n=1, feedback=False))
    item = GradeItem(instruction="q", response="r", rubric=rubric_preset("factual_validity"))
    try:
        (g,) = judge.grade([item])
        assert g.engine == "warm" and g.to_dict()["engine"] == "warm" and g.score == 4
        gate.set()
        engine.wait_ready(10)
        assert asyncio.run(judge.agrade(item)).engine == "target"
        # A plain engine's results name its own kind
        assert Judge(Minimal("solo"), SamplingConfig(n=1, feedback=False)).grade([item])[0].engine == "solo"
    finally:
        engine.close()


def test_build_engine_hands_off_only_when_warm_start_names_another_kind(monkeypatch):
    with pytest.raises(Exception):
        EngineConfig(warm_start="no-such-engine")
    assert EngineConfig(kind="vllm", warm_start=None).warm_start is None
    seen = []
    monkeypatch.setattr(HandoffEngine, "__init__", lambda self, c: seen.append(c.warm_start))
    build_engine(EngineConfig(kind="vllm", warm_start="transformers"))
    assert seen == ["transformers"]


def test_batch_grading_never_warm_starts():
    """`grade --local` and a Ray replica grade batches: they build the configured engine alone."""
    from judgeforge.scale.config import RuntimeConfig
    from judgeforge.scale.placement import replica_engine_config

    cfg = EngineConfig(kind="vllm", warm_start="transformers")
    assert cfg.for_batches().warm_start is None and cfg.for_batches().kind == "vllm"
    assert cfg.warm_start == "transformers"  # the serve config keeps its own
    assert replica_engine_config(cfg, RuntimeConfig(), None, 2).warm_start is None
