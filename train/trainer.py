"""TRL's SFTTrainer, able to train the recipe's LoRA on `lm_head`.

TRL 1.16 computes the loss with a fused LM head that multiplies the hidden
states by `lm_head.weight` directly, which would bypass a LoRA on `lm_head`,
so it refuses such a model. The BiGGen-Bench recipe adapts `lm_head`; for
those models this trainer takes the loss from the model's own forward (the
plain `Trainer` loss, full logits) instead, and is TRL's trainer unchanged
otherwise.
"""

from __future__ import annotations

from transformers import Trainer
from trl import SFTTrainer


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

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if not self.unfused_loss:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        inputs["use_cache"] = False
        return Trainer.compute_loss(self, model, inputs, return_outputs, num_items_in_batch)
