"""train.trainer.ScoreLossTrainer, the loss skeleton of the distill and soft-target trainers, on stubs:
no model, no TRL run; the SFT loss is a stub and the term a fixed tensor."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from judgeforge.train import trainer  # noqa: E402

SFT, TERM, GA = 2.0, 3.0, 4


class Added(trainer.ScoreLossTrainer):
    metric_prefix = "added"

    @property
    def term_weight(self):
        return 0.5

    def score_term(self, model, inputs, extra):
        self.seen = extra
        return torch.tensor(TERM), {"m": 1.0}


class Replacing(Added):
    metric_prefix, replaces_sft, batch_key = "replacing", True, "ids"


def loss_of(cls, monkeypatch, *, training=True, scaled=True, inputs=None, return_outputs=False):
    def sft(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        assert "ids" not in inputs  # TRL never sees the term's own batch data
        return (torch.tensor(SFT), "outputs") if return_outputs else torch.tensor(SFT)
    monkeypatch.setattr(trainer.JudgeSFTTrainer, "compute_loss", sft)
    t = object.__new__(cls)  # no TRL setup: compute_loss reads only what is set here
    t.model, t.current_gradient_accumulation_steps = SimpleNamespace(training=training), GA
    t._loss_scaled_for_ga = lambda n: scaled
    t._metrics = {"train": defaultdict(list)}
    if inputs is None:
        inputs = {"ids": ["r1"]} if cls.batch_key else {}
    res = t.compute_loss(None, inputs, return_outputs, 8)
    return res, t


def test_the_term_is_added_weighted_and_divided_over_accumulation_when_the_trainer_will_not(monkeypatch):
    assert float(loss_of(Added, monkeypatch)[0]) == SFT + 0.5 * TERM / GA
    assert float(loss_of(Added, monkeypatch, scaled=False)[0]) == SFT + 0.5 * TERM
    (loss, outputs), t = loss_of(Added, monkeypatch, return_outputs=True)
    assert float(loss) == SFT + 0.5 * TERM / GA and outputs == "outputs"
    assert t._metrics["train"] == {"added_m": [1.0]}


def test_a_replacing_term_is_the_whole_loss_and_gets_the_batch_data(monkeypatch):
    res, t = loss_of(Replacing, monkeypatch, return_outputs=True)
    assert float(res[0]) == TERM / GA and res[1] is None and t.seen == ["r1"]
    assert t._metrics["train"] == {"replacing_m": [1.0]}
    assert float(loss_of(Replacing, monkeypatch, scaled=False)[0]) == TERM


@pytest.mark.parametrize("cls", [Added, Replacing])
def test_eval_and_batches_without_the_data_train_on_the_sft_loss_alone(monkeypatch, cls):
    res, t = loss_of(cls, monkeypatch, training=False)
    assert float(res) == SFT and not t._metrics["train"]
    if cls.batch_key:
        res, t = loss_of(cls, monkeypatch, inputs={})
        assert float(res) == SFT and not t._metrics["train"]
