"""Sample policy and leak-free splits. Pure logic on canonical judgments.

Hold-outs are decided per response model / per instruction, never per row, so
no response model (and, optionally, no instruction) is on both sides.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter, defaultdict

from judgeforge.data.schema import Judgment


def apply_policy(records: list[Judgment], policy: str) -> tuple[list[Judgment], list[Judgment]]:
    """(kept, dropped) under the sample policy; order of `records` is preserved.

    all: every sample. majority: of each item, the first sample with the strict majority score (items
    without one are dropped). consistent: every sample of items whose scores span at most 1.
    distribution: of each item, the first sample, its `extra.score_samples` set to every sample's score
    in sample order (the soft target: train.soft reads the teacher's distribution from it); the other
    samples are dropped, so an item costs one prefill however many samples it has.
    """
    if policy == "all":
        return list(records), []
    groups: dict[str, list[Judgment]] = defaultdict(list)
    keep: set[int] = set()
    for j in records:
        if hasattr(j, "verdict"):  # pairwise: the score policies do not apply, every judgment is kept
            keep.add(id(j))
        else:
            groups[j.item_id].append(j)
    for samples in groups.values():
        scores = [j.score for j in samples]
        if policy == "majority":
            score, count = Counter(scores).most_common(1)[0]
            if count * 2 > len(scores):
                keep.add(id(next(j for j in samples if j.score == score)))
        elif policy == "distribution":
            ordered = sorted(samples, key=lambda j: j.sample_idx)
            ordered[0].extra = {**ordered[0].extra, "score_samples": [j.score for j in ordered]}
            keep.add(id(ordered[0]))
        elif policy == "consistent":
            if max(scores) - min(scores) <= 1:
                keep.update(id(j) for j in samples)
        else:
            raise ValueError(f"unknown sample policy {policy!r}")
    return [j for j in records if id(j) in keep], [j for j in records if id(j) not in keep]


def seeded_rank(key: str, seed: int) -> int:
    """A key's seeded 64-bit hash: its place in a seeded order that depends on no other key."""
    digest = hashlib.sha256(f"{seed}\x00{key}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def seeded_fraction(key: str, seed: int, fraction: float) -> bool:
    """Stable membership in a seeded fraction, independent of order and of the other keys."""
    return seeded_rank(key, seed) < fraction * 2**64


def choose_test_models(models: list[str], explicit: list[str], fraction: float, seed: int) -> list[str]:
    if explicit:
        return sorted(set(explicit))
    if fraction <= 0:
        return []
    pool = sorted(set(models))
    k = min(len(pool) - 1, max(1, round(fraction * len(pool))))
    return sorted(random.Random(seed).sample(pool, k)) if k > 0 else []


def models_of(j) -> tuple[str, ...]:
    """The response models a record shows: one for an absolute judgment, two for a pair."""
    return j.models if hasattr(j, "models") else (j.response_model,)


def split_records(records: list[Judgment], test_models: list[str], instruction_fraction: float, seed: int):
    """(train, test, dropped): test = held-out models; with an instruction fraction, train keeps only
    non-held-out instructions and train-model records on held-out instructions are dropped. With no
    held-out model (e.g. every pair shows the same two models), the held-out instructions' records are
    the test split instead: an instruction-only split.

    A pair goes to test only when both its models are held out; a pair of a held-out and a train model
    is dropped, so neither split shows a model of the other (train never sees a held-out model's
    response, and test never re-uses a train model's response to the same instruction)."""
    held = set(test_models)
    train, test, dropped = [], [], []
    memo: dict[str, bool] = {}
    for j in records:
        shown = models_of(j)
        n_held = sum(m in held for m in shown)
        if n_held == len(shown):
            test.append(j)
            continue
        if n_held:
            dropped.append(j)
            continue
        if instruction_fraction > 0:
            out = memo.get(j.instruction)
            if out is None:
                out = memo[j.instruction] = seeded_fraction(j.instruction, seed, instruction_fraction)
            if out:
                (dropped if held else test).append(j)
                continue
        train.append(j)
    return train, test, dropped
