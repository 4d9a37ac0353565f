"""Batch planning of the judge core: batches fit the engine's KV cache (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from judgeforge.judge.engines import COMPLETION_TOKENS, SampleRequest
from judgeforge.judge.judge import Judge, plan_batches, request_cost


def test_request_cost_counts_the_prompt_once():
    req = SampleRequest(messages=[], n=3, max_tokens=160, prompt_ids=list(range(1000)))
    assert request_cost(req) == 1000 + 3 * (160 + COMPLETION_TOKENS)
    assert request_cost(SampleRequest(messages=[], n=1, feedback=False, prompt_ids=[1] * 10)) == 10 + COMPLETION_TOKENS


def test_plan_batches_by_budget_and_size():
    assert plan_batches([5, 5, 5, 5], budget=10) == [range(0, 2), range(2, 4)]
    assert plan_batches([5] * 5, budget=None, max_size=2) == [range(0, 2), range(2, 4), range(4, 5)]
    assert plan_batches([30, 5], budget=10) == [range(0, 1), range(1, 2)]  # too big alone: its own batch
    assert plan_batches([], budget=10) == []


@given(st.lists(st.integers(1, 100), max_size=60), st.one_of(st.none(), st.integers(1, 300)), st.integers(1, 40))
def test_plan_batches_cover_in_order_and_fit(costs, budget, size):
    batches = plan_batches(costs, budget, size)
    assert [i for b in batches for i in b] == list(range(len(costs)))
    for b in batches:
        assert 1 <= len(b) <= size
        assert budget is None or len(b) == 1 or sum(costs[i] for i in b) <= budget


class _Engine:
    kv_capacity_tokens = 10_000


def test_judge_batches_use_the_engines_kv_capacity():
    reqs = [SampleRequest(messages=[], n=1, max_tokens=100, prompt_ids=[0] * 2000) for _ in range(10)]
    batches = Judge(_Engine(), sampling=None).batches(reqs)
    assert [len(b) for b in batches] == [4, 4, 2]  # 0.9 x 10,000 tokens / 2,108 per request
    pairs = [[r, r] for r in reqs[:4]]  # an item's requests (both orders) stay together
    assert [len(b) for b in Judge(_Engine(), sampling=None).batches(pairs)] == [2, 2]
