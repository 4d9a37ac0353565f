"""Pairwise-to-pointwise distillation: the math, without torch.

Instruction Distillation (Sun et al. 2023, arXiv 2311.01555) trains a pointwise ranker on a pairwise
teacher's preferences with RankNet. Here the teacher is GPT-4's pairwise judgments (relative records
of a data build) and the pointwise student is the absolute judge itself: each response of a pair is
graded on its own with the score-only absolute prompt (the chat-templated prompt, then the assistant
turn `[RESULT] `, exactly what a score-only read continues from), the judge's distribution over the
scale's values gives an expected score E, and RankNet (Bradley-Terry on sigma * (E_first - E_second))
pulls the preferred response's E above the other's:

    loss = t * softplus(-sigma * d) + (1 - t) * softplus(sigma * d),   d = E_first - E_second

with t the teacher's probability that `first` is better (1 for a decisive pair, the share of its
judgments for a pair judged several times, 0.5 for a kept tie).

Reading E in one forward pass: judge.completion plans where each value's token path starts; the
read nodes of a scale (1-5: one node; 1-10: the node before the first digit and the node after "1",
where "10" continues) lie on one chain of tokens, so the sequence prompt + shared `[RESULT]` tokens
+ that chain gives every needed next-token distribution at its last positions. `Readout` holds that
plan; `choice_logprobs` is the reference implementation the torch version (train.readout) is tested
against.

The pairs themselves (a build's relative records grouped per unordered pair, with the teacher's share)
are data.pairwise.build_pairs: evaluation reads held-out pairs with the same rule.

Pure: numpy only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

MIN_REST = 1e-6
"""Floor of 1 - P(a value's path continues into another), so a value is never read as impossible (log 0)."""


# --- reading the score distribution -----------------------------------------------------------

@dataclass(frozen=True)
class Readout:
    """Where a score-only prompt's value distribution is read: append `suffix` to the prompt ids and
    take the next-token log-probabilities at the last `rows` positions (row k: after the prompt, the
    shared continuation and chain[:k])."""

    base: tuple[int, ...]
    """The continuation every value shares (`[RESULT]`'s tokens)."""
    chain: tuple[int, ...]
    """The deepest read node; every read node is a prefix of it."""
    values: tuple[int, ...]
    """The scale's values, in the order of `paths`."""
    paths: tuple[tuple[int, ...], ...]
    """Each value's token ids after `base` (row i reads its i-th token)."""
    breakers: tuple[tuple[int, ...], ...]
    """Per value: tokens that would extend it into another value or number ("1" -> "10"); empty if none."""

    @property
    def suffix(self) -> list[int]:
        return [*self.base, *self.chain]

    @property
    def rows(self) -> int:
        return len(self.chain) + 1


def readout_from_plan(plan, prompt_len: int, values: Sequence[int]) -> Readout:
    """A Readout from a judge.completion plan of a score-only read (`plan.prefix` = prompt + base)."""
    nodes = [node for node, _ in plan.reads()]
    chain = max(nodes, key=len)
    if any(tuple(chain[:len(n)]) != tuple(n) for n in nodes):
        raise ValueError("the scale's values branch into several token paths; one forward pass cannot "
                         "read them (use a scale whose values share their first tokens)")
    keys = [str(v) for v in values]
    return Readout(base=tuple(plan.prefix[prompt_len:]), chain=tuple(chain), values=tuple(values),
                   paths=tuple(tuple(plan.paths[k]) for k in keys),
                   breakers=tuple(tuple(plan.breakers.get(k, ())) for k in keys))


def choice_logprobs(rows: np.ndarray, r: Readout) -> np.ndarray:
    """Exact log-probability of each value from the `r.rows` next-token log-prob rows [rows, vocab]
    (judge.completion.CompletionPlan.combine, on arrays)."""
    out = []
    for path, brk in zip(r.paths, r.breakers):
        lp = sum(float(rows[i, t]) for i, t in enumerate(path))
        if brk:
            p_more = float(np.exp(rows[len(path), list(brk)]).sum())
            lp += float(np.log(max(1.0 - p_more, MIN_REST)))
        out.append(lp)
    return np.asarray(out)


def distribution(choice_lps: np.ndarray) -> np.ndarray:
    """The values' probabilities, renormalised over exactly the scale."""
    z = choice_lps - choice_lps.max(axis=-1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=-1, keepdims=True)


def expected_score(choice_lps: np.ndarray, values: Sequence[int]) -> np.ndarray:
    """E[score] under the renormalised distribution (last axis: the values)."""
    return distribution(choice_lps) @ np.asarray(values, dtype=float)


# --- RankNet ------------------------------------------------------------------------------------

def ranknet_loss(diff, target, sigma: float = 1.0) -> np.ndarray:
    """RankNet cross-entropy of P(first > second) = sigmoid(sigma * diff) against `target`, per pair."""
    d = sigma * np.asarray(diff, dtype=float)
    t = np.asarray(target, dtype=float)
    return t * np.logaddexp(0.0, -d) + (1.0 - t) * np.logaddexp(0.0, d)


def pair_metrics(e_first, e_second, target, sigma: float = 1.0) -> dict:
    """Mean RankNet loss; over decisive pairs (target != 0.5): the share ordered as the teacher
    prefers and the mean margin E_preferred - E_other."""
    e1, e2, t = (np.asarray(x, dtype=float) for x in (e_first, e_second, target))
    d = e1 - e2
    decisive = t != 0.5
    signed = np.where(t > 0.5, d, -d)[decisive]
    return {"pairs": int(len(t)), "loss": float(ranknet_loss(d, t, sigma).mean()) if len(t) else 0.0,
            "accuracy": float((signed > 0).mean()) if signed.size else 0.0,
            "margin": float(signed.mean()) if signed.size else 0.0}


def batch_positions(index: int, size: int, n: int, seed: int) -> list[int]:
    """Pair positions of batch `index` (`size` pairs each) in an endless sequence of seeded
    permutations of the `n` pairs, one per epoch: a function of the index alone, so a resumed run
    (which restores the step) draws the same pairs as an uninterrupted one."""
    return [_epoch_order(n, seed, g // n)[g % n] for g in range(index * size, index * size + size)]


@lru_cache(maxsize=4)
def _epoch_order(n: int, seed: int, epoch: int) -> tuple[int, ...]:
    order = list(range(n))
    random.Random(f"{seed}:distill:{epoch}").shuffle(order)
    return tuple(order)


def length_balance(lengths: Sequence[tuple[int, int]], targets: Sequence[float], seed: int) -> list[int]:
    """Indices of the pairs to train on: each pair once, plus seeded repeats (drawn with replacement) of
    the pairs on the rarer side until as many pairs prefer the shorter response as the longer one.
    `lengths`: per pair (preferred, other) in tokens, `targets`: P(first better). GPT-4 prefers the
    longer response in most pairs, so a ranking loss on them alone is lowered by preferring length;
    balanced, length no longer predicts the preferred side. Kept ties (target 0.5) and pairs
    of equal length are never repeated."""
    if len(lengths) != len(targets):
        raise ValueError("lengths and targets differ in length")
    decided = [(i, a, b) for i, ((a, b), t) in enumerate(zip(lengths, targets)) if t > 0.5 and a != b]
    shorter = [i for i, a, b in decided if a < b]
    longer = [i for i, a, b in decided if a > b]
    few, many = sorted((shorter, longer), key=len)
    extra = random.Random(f"{seed}:length").choices(few, k=len(many) - len(few)) if few else []
    return list(range(len(lengths))) + sorted(extra)
