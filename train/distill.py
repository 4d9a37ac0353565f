"""Pairwise-to-pointwise distillation as a training objective: TRL's SFTTrainer plus a RankNet term.

`DistillSFTTrainer` is `JudgeSFTTrainer` (so TRL's SFT loss, collation, checkpoints and logging are
untouched) whose loss (train.trainer.ScoreLossTrainer) adds, on every training micro-step,
`weight x RankNet` over a few preference pairs (train/ranking.py has the math and its reference
implementation). Each pair's two responses are graded pointwise with the score-only absolute prompt,
both in one left-padded forward pass of the model being trained; E[score] is read from the last
positions' logits (train/readout.py, so the LM head runs on a handful of positions only).

Which pairs a micro-step uses is a function of (global step, micro-step, rank) alone
(`ranking.batch_positions`), so a run resumed from a checkpoint draws exactly the pairs an
uninterrupted run draws, and the existing checkpoint/resume machinery needs nothing more.
The eval loss stays the SFT loss; `score_pairs` measures the pairs' ordering (distill.json).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from collections import Counter

from judgeforge.data.counterfactual import length_counterfactuals
from judgeforge.data.pairwise import Pair, build_pairs, cross_item_pairs
from judgeforge.config import ConfigError
from judgeforge.train import ranking
from judgeforge.train.readout import absolute_prompt_ids, expected_scores, score_readout
from judgeforge.train.trainer import ScoreLossTrainer

log = logging.getLogger(__name__)


@dataclass
class PairFeed:
    """The tokenized distillation pairs and how they are used."""

    pairs: list[Pair]
    first_ids: list[list[int]]
    """Per pair: the preferred response's score-only prompt ids, readout suffix included."""
    second_ids: list[list[int]]
    readout: ranking.Readout
    weight: float
    sigma: float
    batch_pairs: int
    seed: int
    pad_id: int
    counts: dict

    @property
    def targets(self) -> list[float]:
        return [p.target for p in self.pairs]


def score_prompt_ids(tokenizer, pair: Pair, second: bool, scale: tuple[int, int],
                     readout: ranking.Readout) -> list[int]:
    """The score-only prompt ids of one of a pair's responses, with its own item (train.readout.absolute_prompt_ids)."""
    instruction, rubric, reference = pair.context(second)
    return absolute_prompt_ids(tokenizer, instruction, pair.second if second else pair.first, rubric, reference,
                               scale, readout)


def prepare_pairs(cfg, tokenizer, records: list[dict]) -> PairFeed:
    """Pairs from `records` (data.pairwise.build_pairs), tokenized; pairs longer than
    `data.max_length` are dropped and counted (`overlong`, in records like every bucket)."""
    d = cfg.distill
    pairs, counts = build_pairs(records, d.ties, d.max_pairs, cfg.seed, d.scale if d.score_pairs else None)
    if d.counterfactuals:
        made, counts["counterfactual"] = length_counterfactuals(records, d.scale, d.counterfactuals, cfg.seed,
                                                               kinds=d.counterfactual_kinds)
        pairs += made
    if d.cross_item:
        made, counts["cross_item"] = cross_item_pairs(records, d.scale, d.cross_item, cfg.seed, d.cross_item_gap)
        pairs += made
    readout = score_readout(tokenizer, d.scale)
    kept, firsts, seconds, over = [], [], [], Counter()
    for p in pairs:
        a, b = (score_prompt_ids(tokenizer, p, second, d.scale, readout) for second in (False, True))
        if max(len(a), len(b)) > cfg.data.max_length:
            over[p.origin] += p.judgments if p.origin == "relative" else 1  # relative: records; others: pairs
            continue
        kept.append(p)
        firsts.append(a)
        seconds.append(b)
    counts.update(overlong=over["relative"], paired=counts["paired"] - over["relative"], pairs=len(kept),
                  score_overlong=over["scores"], score_pairs=counts["score_pairs"] - over["scores"],
                  counterfactual_overlong=sum(n for o, n in over.items() if o.startswith("counterfactual")),
                  **({"cross_item_overlong": over["cross_item"]} if d.cross_item else {}))
    if not kept:
        raise ConfigError(f"distill: no preference pairs to train on ({counts}); distill.sources (or the "
                          "training mix) must hold relative records of decisive pairs (with distill.score_pairs, distill.cross_item or "
                          "distill.counterfactuals, absolute records on distill.scale)")
    if d.length_balance:  # repeats are draws of kept pairs, not records: outside the record buckets
        order = ranking.length_balance([(len(a), len(b)) for a, b in zip(firsts, seconds)],
                                       [p.target for p in kept], cfg.seed)
        kept, firsts, seconds = ([xs[i] for i in order] for xs in (kept, firsts, seconds))
        counts["length_repeats"] = len(order) - counts["pairs"]
    log.info("distill: %d pairs from %d records (%s)", len(kept), counts["records"], counts)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return PairFeed(kept, firsts, seconds, readout, d.weight, d.sigma, d.batch_pairs, cfg.seed, pad, counts)


# --- the torch side of the math (ranking.py is its reference) ----------------------------------

def ranknet_loss(diff: torch.Tensor, target: torch.Tensor, sigma: float = 1.0) -> torch.Tensor:
    """Per-pair RankNet cross-entropy (ranking.ranknet_loss)."""
    d = sigma * diff
    return target * F.softplus(-d) + (1.0 - target) * F.softplus(d)


def pair_loss(model, feed: PairFeed, positions: list[int]) -> tuple[torch.Tensor, dict]:
    """Mean RankNet loss of the pairs at `positions`, and their metrics."""
    k = len(positions)
    e = expected_scores(model, [feed.first_ids[p] for p in positions] + [feed.second_ids[p] for p in positions],
                        feed.readout, feed.pad_id, unpadded=True)
    t = torch.tensor([feed.pairs[p].target for p in positions], dtype=e.dtype, device=e.device)
    loss = ranknet_loss(e[:k] - e[k:], t, feed.sigma).mean()
    metrics = ranking.pair_metrics(e[:k].detach().cpu().numpy(), e[k:].detach().cpu().numpy(),
                                   t.cpu().numpy(), feed.sigma)
    return loss, metrics


@torch.no_grad()
def score_pairs(model, feed: PairFeed, batch: int = 8, context=None) -> dict:
    """Ordering metrics of every pair under `model` (eval mode): loss, accuracy, mean margin. Each pair
    once: the length-balancing repeats (after the pairs, `prepare_pairs`) would count their pairs twice."""
    import contextlib

    from tqdm.auto import tqdm

    was_training = model.training
    model.eval()
    unique = feed.counts.get("pairs", len(feed.pairs))
    # Batches of similar length: a left-padded batch costs its longest prompt times its rows.
    order = sorted(range(unique), key=lambda i: max(len(feed.first_ids[i]), len(feed.second_ids[i])))
    e1, e2 = [0.0] * unique, [0.0] * unique
    try:
        with context or contextlib.nullcontext():
            for i in tqdm(range(0, unique, batch), desc="distill pairs", unit="batch"):
                idx = order[i:i + batch]
                e = expected_scores(model, [feed.first_ids[j] for j in idx] + [feed.second_ids[j] for j in idx],
                                    feed.readout, feed.pad_id).tolist()
                for k, j in enumerate(idx):
                    e1[j], e2[j] = e[k], e[len(idx) + k]
    finally:
        model.train(was_training)
    return {**ranking.pair_metrics(e1, e2, feed.targets[:unique], feed.sigma),
            "mean_expected_first": sum(e1) / len(e1), "mean_expected_second": sum(e2) / len(e2)}


# --- the trainer ---------------------------------------------------------------------------------

class DistillSFTTrainer(ScoreLossTrainer):
    """JudgeSFTTrainer whose training loss is SFT + weight x RankNet on `feed`'s pairs."""

    metric_prefix = "distill"

    def __init__(self, model, *args, feed: PairFeed, **kwargs):
        self.feed = feed
        self._micro = (-1, -1)  # (global step, micro-step within it)
        super().__init__(model, *args, **kwargs)

    @property
    def term_weight(self) -> float:
        return self.feed.weight

    def score_term(self, model, inputs, extra):
        term, metrics = pair_loss(model, self.feed, self._positions())
        return term, {name: value for name, value in metrics.items() if name != "pairs"}

    def _positions(self) -> list[int]:
        step = self.state.global_step
        micro = self._micro[1] + 1 if self._micro[0] == step else 0
        self._micro = (step, micro)
        index = (step * self.args.gradient_accumulation_steps + micro) * self.args.world_size + \
            self.args.process_index
        return ranking.batch_positions(index, self.feed.batch_pairs, len(self.feed.pairs), self.feed.seed)
