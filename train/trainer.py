"""TRL's SFTTrainer, able to train the recipe's LoRA on `lm_head`.

TRL 1.16 computes the loss with a fused LM head that multiplies the hidden
states by `lm_head.weight` directly, which would bypass a LoRA on `lm_head`,
so it refuses such a model. The BiGGen-Bench recipe adapts `lm_head`; for
those models this trainer takes the loss from the model's own forward (the
plain `Trainer` loss, full logits) instead, and is TRL's trainer unchanged
otherwise.

On CPU, TRL's fused head scores every position of the sequence: it gathers only the
positions that carry a label where Triton runs, because elsewhere (Neuron, XLA) a
varying row count recompiles. Eager CPU has no such cost, and a judge's completion-only
target is a handful of tokens out of ~1,400, so `compact_cpu_head` makes TRL gather
them on CPU too: the same loss and gradients, without the head's matmul over every
position (~29% of SmolLM2's training FLOPs, ~72% of Gemma 3's with its 262k vocabulary).
"""

from __future__ import annotations

import contextlib
import logging

from transformers import Trainer
from trl import SFTTrainer

log = logging.getLogger(__name__)


def adapted_head(model):
    """The LoRA layer on the output embeddings of a PEFT model, or None."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    head = model.get_base_model().get_output_embeddings() if hasattr(model, "get_base_model") else None
    return head if isinstance(head, BaseTunerLayer) else None


class JudgeSFTTrainer(SFTTrainer):
    def __init__(self, model, *args, **kwargs):
        head = adapted_head(model)
        self.unfused_loss = head is not None
        if head is None:
            super().__init__(model, *args, **kwargs)
            return
        # Show TRL the plain head while it sets up, then put the adapted one back.
        base = model.get_base_model()
        base.set_output_embeddings(head.get_base_layer())
        try:
            super().__init__(model, *args, **kwargs)
        finally:
            base.set_output_embeddings(head)
        head.to(head.get_base_layer().weight.device)  # the Trainer may have moved the model

    validation = None
    """A train.stopping.ValidationSet (with `stopping.enabled`): every evaluation also reads it."""

    def evaluation_loop(self, dataloader, description, prediction_loss_only=None, ignore_keys=None,
                        metric_key_prefix="eval"):
        # Here, not in evaluate(): the metrics must be in place before HF's callbacks (early stopping)
        # and its best-checkpoint tracking read them.
        out = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        if self.validation is not None:
            from judgeforge.train.stopping import validation_metrics

            got = validation_metrics(self.model, self.validation, self.compute_loss_context_manager())
            out.metrics.update({f"{metric_key_prefix}_{k}": v for k, v in got.items()})
        return out

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if not self.unfused_loss:
            with compact_cpu_head():
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        inputs["use_cache"] = False
        return Trainer.compute_loss(self, model, inputs, return_outputs, num_items_in_batch)

    def _loss_scaled_for_ga(self, num_items_in_batch) -> bool:
        """Whether the Trainer leaves the gradient-accumulation division to the loss (transformers'
        own rule in `Trainer.training_step`): a loss term of our own must then divide itself."""
        if getattr(self, "loss_is_scaled_for_ga", None) is not None:
            return bool(self.loss_is_scaled_for_ga)
        return bool((self.model_accepts_loss_kwargs and num_items_in_batch is not None)
                    or self.compute_loss_func is not None)


class ScoreLossTrainer(JudgeSFTTrainer):
    """JudgeSFTTrainer with a training loss term of its own, read from the model's score (train/readout):
    SFT + `term_weight` x term (distill), or the term alone (`replaces_sft`: soft targets). The eval
    loss stays TRL's SFT loss, comparable across runs. A subclass gives `score_term` and may name a
    `batch_key`: a collator's per-batch data for the term, taken out before TRL sees the batch (a
    batch without it trains on the SFT loss alone)."""

    metric_prefix = ""
    replaces_sft = False
    batch_key: str | None = None

    @property
    def term_weight(self) -> float:
        return 1.0

    def score_term(self, model, inputs, extra):
        """This micro-step's term (a scalar tensor) and its metrics; `extra` is the batch's `batch_key`."""
        raise NotImplementedError

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        extra = inputs.pop(self.batch_key, None) if self.batch_key else None
        if not self.model.training or (self.batch_key and extra is None):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        sft = None if self.replaces_sft else super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        term, metrics = self.score_term(model, inputs, extra)
        if self._loss_scaled_for_ga(num_items_in_batch):
            # The SFT loss, when there is one, is already divided over the accumulation steps; the
            # Trainer won't divide a term of our own.
            term = term / self.current_gradient_accumulation_steps
        for name, value in metrics.items():
            self._metrics["train"][f"{self.metric_prefix}_{name}"].append(value)
        if sft is None:
            return (term, None) if return_outputs else term
        loss, outputs = sft if return_outputs else (sft, None)
        loss = loss + self.term_weight * term
        return (loss, outputs) if return_outputs else loss


@contextlib.contextmanager
def compact_cpu_head():
    """While open, TRL's fused head scores only the labelled positions on CPU as well (see the module
    docstring). Only the gather decision changes: the kernel choice is bound separately in
    trl.kernels.chunked_logprob, so CPU keeps its tile path, forward and backward."""
    from trl.trainer import utils as trl_utils

    original = getattr(trl_utils, "_use_triton", None)
    if original is None:  # a TRL that moved it: train as TRL does, scoring every position
        log.debug("trl.trainer.utils._use_triton not found; the fused head scores every position")
        yield
        return
    trl_utils._use_triton = lambda device: device.type == "cpu" or original(device)
    try:
        yield
    finally:
        trl_utils._use_triton = original
