"""EnginePool (pure logic, on a counting engine double): one engine per equal config while a pool is
entered, leases that never close it, a dead engine started again, and build_engine unchanged outside."""

from __future__ import annotations

import pytest

from judgeforge.judge.config import EngineConfig
from judgeforge.judge.engines import ENGINES, EnginePool, JudgeEngine, build_engine


class Counted(JudgeEngine):
    kind = "counted"
    started: list["Counted"] = []

    def __init__(self, cfg):
        self.cfg, self.closed, self.dead = cfg, 0, False
        Counted.started.append(self)

    @property
    def alive(self) -> bool:
        return not self.dead

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def counted():
    ENGINES.register("counted", Counted, replace=True)
    Counted.started = []
    try:
        yield lambda **kw: EngineConfig(kind="counted", **kw)
    finally:
        ENGINES.remove("counted")


def test_equal_configs_share_one_engine_and_leases_never_close_it(counted):
    pool = EnginePool()
    with pool:
        with build_engine(counted(seed=1)) as a:
            a.marker = "set through the lease"
        b = build_engine(counted(seed=1))
        b.close()
        c = build_engine(counted(seed=2))  # another config: its own engine
    assert len(Counted.started) == 2 and len(pool) == 2
    first = Counted.started[0]
    assert first.closed == 0 and first.marker == "set through the lease" and b.marker == first.marker
    assert b.cfg is first.cfg and c.cfg.seed == 2
    with pool:  # entered again: the same engines
        build_engine(counted(seed=1))
    assert len(Counted.started) == 2
    pool.close()
    assert [e.closed for e in Counted.started] == [1, 1] and len(pool) == 0


def test_a_dead_pooled_engine_is_closed_and_started_again(counted):
    pool = EnginePool()
    with pool:
        build_engine(counted())
        Counted.started[0].dead = True
        build_engine(counted())
    assert len(Counted.started) == 2 and Counted.started[0].closed == 1
    pool.close()


def test_outside_a_pool_every_build_starts_an_engine(counted):
    build_engine(counted()).close()
    with EnginePool():
        pass
    e = build_engine(counted())
    assert len(Counted.started) == 2 and isinstance(e, Counted)
    e.close()
    assert e.closed == 1
