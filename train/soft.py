"""Soft targets: a score-only judge trained on the teacher's sample distribution, one example per item.

With `data.target: distribution`, an item GPT-4 graded three times is one training example whose
target is the three samples' distribution over the scale's values, not three examples with one score
each. The cross-entropy to that distribution is the mean of the three hard cross-entropies at the value
position, so the gradient is the one the three examples give, for one prefill instead of three.

The loss is over the scale's values only, read exactly as serving reads a score-only judgment: the
prompt, then `[RESULT]`'s tokens (the readout's suffix), then the exact log-probability of each value
(multi-token values and their breakers included, train/readout.choice_logprobs). The example's own
completion tokens are not trained: serving forces `[RESULT]` and reads the values there.

The records' ids reach the loss through the collator (`SoftTargets.collate`, outermost, so the sample
log still sees every batch); the eval loss stays TRL's SFT loss on the first sample's verdict.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from judgeforge.config import ConfigError
from judgeforge.train import ranking
from judgeforge.train.data import score_distribution
from judgeforge.train.readout import score_readout, value_logprobs
from judgeforge.train.trainer import ScoreLossTrainer

log = logging.getLogger(__name__)

IDS_KEY = "soft_record_ids"


@dataclass
class SoftTargets:
    """Each training record's teacher distribution, and where each scale's values are read."""

    targets: dict[str, tuple[tuple[int, int], list[float]]]
    """Record id -> (scale, probability of each value lo..hi)."""
    readouts: dict[tuple[int, int], ranking.Readout]
    pad_id: int

    def collate(self, inner):
        """A collator that puts each batch's record ids beside what `inner` returns."""
        def collate(features: list[dict]):
            ids = [f["id"] for f in features] if features and "id" in features[0] else None
            batch = inner(features)
            if ids is not None:
                batch[IDS_KEY] = ids
            return batch
        return collate


def prepare_soft_targets(tokenizer, records: list[dict]) -> SoftTargets:
    """The distributions of `records` (train.data.score_distribution) and a readout per scale."""
    targets = {r["id"]: score_distribution(r) for r in records}
    readouts = {}
    for scale in sorted({s for s, _ in targets.values()}):
        readouts[scale] = score_readout(tokenizer, scale)
    multi = sum(1 for r in records if len((r.get("extra") or {}).get("score_samples") or ()) > 1)
    log.info("soft targets: %d records (%d with several teacher samples), scales %s",
             len(targets), multi, sorted(readouts))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return SoftTargets(targets, readouts, pad)


def prompt_ids(input_ids: list[int], labels: list[int]) -> list[int]:
    """The prompt of a collated prompt-completion example: the tokens before the first labelled one."""
    start = next((i for i, lab in enumerate(labels) if lab != -100), None)
    if start is None:
        raise ConfigError("a training example has no completion tokens: nothing marks where its prompt ends")
    return input_ids[:start]


def soft_loss(model, soft: SoftTargets, ids: list[str], prompts: list[list[int]]) -> tuple[torch.Tensor, dict]:
    """Mean over the examples of the cross-entropy between the teacher's distribution and the model's
    exact probability of each value, one forward pass per scale; and E[score] error metrics."""
    losses, errors = [], []
    by_scale: dict[tuple[int, int], list[int]] = {}
    for i, rid in enumerate(ids):
        by_scale.setdefault(soft.targets[rid][0], []).append(i)
    for scale, rows in by_scale.items():
        r = soft.readouts[scale]
        lps = value_logprobs(model, [prompts[i] + r.suffix for i in rows], r, soft.pad_id)
        target = torch.tensor([soft.targets[ids[i]][1] for i in rows], dtype=lps.dtype, device=lps.device)
        losses.append(-(target * lps).sum(-1))
        values = torch.tensor(r.values, dtype=lps.dtype, device=lps.device)
        errors.append(((lps.detach().softmax(-1) - target) @ values).abs())
    loss = torch.cat(losses).mean()
    return loss, {"expected_score_abs_error": float(torch.cat(errors).mean())}


class SoftScoreTrainer(ScoreLossTrainer):
    """JudgeSFTTrainer whose training loss is the soft-target cross-entropy (module docstring)."""

    metric_prefix, replaces_sft, batch_key = "soft", True, IDS_KEY

    def __init__(self, model, *args, soft: SoftTargets, **kwargs):
        self.soft = soft
        super().__init__(model, *args, **kwargs)

    def score_term(self, model, inputs, ids):
        prompts = [prompt_ids(row, lab) for row, lab in zip(inputs["input_ids"].tolist(), inputs["labels"].tolist())]
        return soft_loss(model, self.soft, ids, prompts)
