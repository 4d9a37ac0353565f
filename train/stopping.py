"""The stopping rule for epochs over all records (`stopping`): a validation slice of the training mix,
read the way the judge is used, and HF's early stopping and best-checkpoint machinery on that figure.

The figure is the Pearson correlation of the judge's score-only E[score] with GPT-4's score on the
validation items (each as a fraction of its scale, so 1-5 and 1-10 items pool): what the reports
measure, on items the run never trains on (train.data.carve_validation). Why not the builds' test
split: the reports grade it, and a checkpoint chosen there would report a selected figure. Why not
the SFT eval loss: it is mostly feedback tokens, and a judge used score-only is served its score.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from judgeforge.train.data import item_key

log = logging.getLogger(__name__)

METRIC = "val_pearson"
"""The metric's name: the trainer logs it as `eval_val_pearson`, and HF's best-checkpoint tracking and
early stopping read it under this name."""


@dataclass
class ValidationSet:
    """The validation items, tokenized as served (score-only prompt + readout suffix)."""

    ids: list[list[int]]
    readouts: list
    """Per item: its scale's train.ranking.Readout."""
    targets: list[float]
    """Per item: GPT-4's mean score over the item's samples, as a fraction of its scale."""
    scales: list[tuple[int, int]]
    pad_id: int
    counts: dict


def item_targets(records: list[dict]) -> list[tuple[dict, float]]:
    """(first record, GPT-4's mean score) per item (`item_id`), in first-seen order. Pure logic."""
    items: dict[str, list[dict]] = {}
    for r in records:
        items.setdefault(item_key(r), []).append(r)
    return [(rs[0], sum(float(r["score"]) for r in rs) / len(rs)) for rs in items.values()]


def fraction(value: float, scale: tuple[int, int]) -> float:
    return (value - scale[0]) / (scale[1] - scale[0])


def pearson(xs: list[float], ys: list[float]) -> float | None:
    """Pearson's r (scipy), or None where it is undefined (fewer than 3 items, or either side constant)."""
    if len(xs) < 3 or min(xs) == max(xs) or min(ys) == max(ys):
        return None
    from scipy.stats import pearsonr

    return float(pearsonr(xs, ys).statistic)


def prepare_validation(tokenizer, records: list[dict], max_length: int) -> ValidationSet:
    """The validation items of `records`, each read on its own scale; items whose prompt is longer than
    `max_length` are dropped and counted."""
    from judgeforge.train.readout import absolute_prompt_ids, score_readout

    readouts, ids, targets, scales, over = {}, [], [], [], 0
    pairs = item_targets(records)
    for rec, score in pairs:
        scale = (int(rec["scale"][0]), int(rec["scale"][1]))
        r = readouts.setdefault(scale, score_readout(tokenizer, scale))
        seq = absolute_prompt_ids(tokenizer, rec["instruction"], rec["response"], rec["rubric"],
                                  rec.get("reference_answer"), scale, r)
        if len(seq) > max_length:
            over += 1
            continue
        ids.append(seq)
        targets.append(fraction(score, scale))
        scales.append(scale)
    counts = {"records": len(records), "items": len(pairs), "overlong": over, "read": len(ids)}
    if len(ids) < 3:
        from judgeforge.config import ConfigError

        raise ConfigError(f"stopping: {len(ids)} validation items fit data.max_length ({counts}); need >= 3")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return ValidationSet(ids, [readouts[s] for s in scales], targets, scales, pad, counts)


def validation_metrics(model, v: ValidationSet, context=None) -> dict:
    """{METRIC: Pearson of E[score] with GPT-4 on the validation items} under `model` (eval mode).
    An undefined correlation (a judge giving every item one E[score]) is reported as -1.0, below any
    defined one, so the best checkpoint is never one that does not rank; the log says so."""
    import contextlib

    import torch
    from tqdm.auto import tqdm

    from judgeforge.train.readout import expected_scores

    was_training = model.training
    model.eval()
    got = []
    try:
        with torch.no_grad(), context or contextlib.nullcontext():
            for seq, r, scale in tqdm(list(zip(v.ids, v.readouts, v.scales)), desc="validation", unit="item"):
                got.append(fraction(float(expected_scores(model, [seq], r, v.pad_id)[0]), scale))
    finally:
        model.train(was_training)
    r = pearson(got, v.targets)
    if r is None:
        log.warning("stopping: E[score] is constant on the %d validation items; %s reported as -1.0", len(got), METRIC)
    return {METRIC: -1.0 if r is None else r, "val_items": len(got)}


def start_contender():
    """An HF callback that makes the evaluation before the first step (`eval_on_start`) the best so far, so
    later evaluations must beat the start. Added after HF's early stopping, which must read that first
    evaluation as its reference and not as an evaluation without gain."""
    from transformers import TrainerCallback

    class StartContender(TrainerCallback):
        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            if state.global_step == 0 and metrics and f"eval_{METRIC}" in metrics:
                state.best_metric, state.best_global_step = metrics[f"eval_{METRIC}"], 0
                log.info("stopping: the start reads %s %.4f; an evaluation must beat it", METRIC, state.best_metric)

    return StartContender()


def start_kept(state) -> bool:
    """Whether no evaluation beat the start (start_contender): HF then loaded no checkpoint."""
    return state.best_global_step == 0 and state.best_model_checkpoint is None


def restore_start(model, adapter_dir) -> None:
    """Put the start adapter's weights back into the trained PEFT `model`, to be saved as the run's."""
    from pathlib import Path

    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    got = set_peft_model_state_dict(model, load_file(Path(adapter_dir) / "adapter_model.safetensors"))
    if getattr(got, "unexpected_keys", None):
        raise RuntimeError(f"the start adapter {adapter_dir} does not fit the model: {got.unexpected_keys[:3]}")
    log.info("stopping: no evaluation beat the start; the saved adapter is %s's weights", adapter_dir)
