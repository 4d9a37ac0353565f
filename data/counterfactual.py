"""Counterfactual length pairs: a graded response against a copy of itself that differs in
length only, ordered by a fixed rule, so a ranking loss on them rewards content and not length.

Two edits of one absolute record (its response split into paragraphs, else sentences):
- `pad`: the response followed by its own first half again. It says nothing new, so by rule it is worth
  less than the original (repetition is a flaw every rubric of helpfulness penalizes; GPT-4's score is
  "lowered"): the original, the SHORTER response, is preferred.
- `truncate`: the response cut after its first half. Of a response GPT-4 scored in the top half of its
  scale the cut loses content it was scored for, so the original, the LONGER one, is preferred; of a
  response scored lower nothing is known (the score is "kept"), and no pair is made.
- `offtopic`: the response followed by the first half of another item's response (a different
  instruction, the next in the seeded draw). Off-topic text is a flaw every rubric penalizes, so the
  original, the SHORTER response, is preferred. Unlike `pad` it has no repeated half to spot: the judge
  must read whether the added text answers the instruction.
So the pad pairs teach that length bought by saying more of nothing loses, and the truncate pairs that
content lost loses; neither is learnable from length alone. The target is `target` (default 1.0).
A response of fewer than two units (paragraphs or sentences) gets no pair: it cannot be halved.

Pure logic: no torch, no vLLM.
"""

from __future__ import annotations

import random
import re
from typing import Sequence

from judgeforge.data.pairwise import Pair, graded_on

PAD, TRUNCATE, OFFTOPIC = "pad", "truncate", "offtopic"
KINDS = (PAD, TRUNCATE, OFFTOPIC)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def units(response: str) -> tuple[list[str], str]:
    """The response's paragraphs (joined back with a blank line), else its sentences (with a space)."""
    paras = [p for p in re.split(r"\n\s*\n", response.strip()) if p.strip()]
    if len(paras) >= 2:
        return paras, "\n\n"
    return [s for s in _SENTENCE.split(response.strip()) if s], " "


def padded(response: str) -> str | None:
    parts, sep = units(response)
    if len(parts) < 2:
        return None
    return sep.join(parts + parts[:(len(parts) + 1) // 2])


def truncated(response: str) -> str | None:
    parts, sep = units(response)
    if len(parts) < 2:
        return None
    return sep.join(parts[:len(parts) // 2])


def length_counterfactuals(records: Sequence[dict], scale: Sequence[int], k: int, seed: int,
                           target: float = 1.0, kinds: Sequence[str] = (PAD, TRUNCATE)) -> tuple[list[Pair], dict]:
    """Up to `k` pairs of each of `kinds` from the absolute records graded on `scale`, drawn (seeded) over
    the distinct responses; a response's score is the mean of its records' (GPT-4's samples). Returns
    (pairs, counts): `responses` (distinct, on the scale), the pairs made of each kind, `unsplittable`
    (fewer than two units), `truncate_low` (scored in the lower half: no truncate pair)."""
    if not 0.5 < target <= 1.0:
        raise ValueError(f"target must be in (0.5, 1], got {target}")
    if not kinds or set(kinds) - set(KINDS):
        raise ValueError(f"kinds must be a non-empty subset of {list(KINDS)}, got {list(kinds)}")
    lo, hi = scale
    by_response: dict[str, list[dict]] = {}
    for rec in records:
        if graded_on(rec, scale):
            by_response.setdefault(rec["response"], []).append(rec)
    responses = sorted(by_response)
    random.Random(f"{seed}:counterfactual").shuffle(responses)
    counts = {"responses": len(responses), **{kind: 0 for kind in kinds}, "unsplittable": 0, "truncate_low": 0}
    pairs: list[Pair] = []
    for i, response in enumerate(responses):
        same = by_response[response]  # GPT-4's samples of one response: their mean is its score
        rec = min(same, key=lambda r: r["id"])
        score = sum(r["score"] for r in same) / len(same)
        if all(counts[kind] >= k for kind in kinds):
            break
        longer, shorter = padded(response), truncated(response)
        if longer is None:
            counts["unsplittable"] += 1
            continue
        if PAD in kinds and counts[PAD] < k:
            pairs.append(_pair(rec, response, longer, target, PAD))
            counts[PAD] += 1
        if TRUNCATE in kinds and counts[TRUNCATE] < k:
            if score > (lo + hi) / 2:
                pairs.append(_pair(rec, response, shorter, target, TRUNCATE))
                counts[TRUNCATE] += 1
            else:
                counts["truncate_low"] += 1
        if OFFTOPIC in kinds and counts[OFFTOPIC] < k:
            digressed = offtopic(response, rec["instruction"], responses[i + 1:] + responses[:i], by_response)
            if digressed is not None:
                pairs.append(_pair(rec, response, digressed, target, OFFTOPIC))
                counts[OFFTOPIC] += 1
    return pairs, counts


def offtopic(response: str, instruction: str, others: Sequence[str], by_response: dict[str, list[dict]]) -> str | None:
    """The response followed by the first half (at least one unit) of the first of `others` written for
    another instruction; None when every other response answers the same instruction."""
    parts, sep = units(response)
    for other in others:
        if all(r["instruction"] != instruction for r in by_response[other]):
            donor = units(other)[0]
            return sep.join(parts + donor[:max(1, len(donor) // 2)])
    return None


def _pair(rec: dict, first: str, second: str, target: float, kind: str) -> Pair:
    return Pair(instruction=rec["instruction"], first=first, second=second, rubric=rec.get("rubric") or {},
                reference_answer=rec.get("reference_answer"), target=target, judgments=0, ids=[rec["id"]],
                origin=f"counterfactual_{kind}")
