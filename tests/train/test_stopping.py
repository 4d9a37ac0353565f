"""The stopping rule for epochs over all records (train/stopping.py): the validation carve and the
metric as pure logic with their properties, and a real TRL run of a tiny random Llama that stops on
the rule and saves its best evaluation's adapter (slow)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judgeforge.config import ConfigError
from judgeforge.train.data import carve_validation
from judgeforge.train.stopping import fraction, item_targets, pearson


def _records(spec: list[tuple[int, int]]) -> list[dict]:
    """Records from (item, samples) pairs; every third item's records are relative (never validation)."""
    out = []
    for item, samples in spec:
        for k in range(samples):
            rel = item % 3 == 2
            out.append({"id": f"{item}-{k}", "item_id": f"i{item}", "mode": "relative" if rel else "absolute",
                        "score": None if rel else 1 + (item + k) % 5, "scale": None if rel else [1, 5]})
    return out


@settings(deadline=None)
@given(st.lists(st.integers(1, 4), min_size=4, max_size=30), st.integers(0, 10_000), st.data())
def test_carve_keeps_every_record_once_and_every_item_whole(samples, seed, data):
    records = _records(list(enumerate(samples)))
    scored = {r["item_id"] for r in records if r["mode"] == "absolute"}
    if len(scored) < 2:
        return
    n = data.draw(st.integers(1, len(scored) - 1))
    train, val = carve_validation(records, n, seed)
    assert sorted(r["id"] for r in train + val) == sorted(r["id"] for r in records)  # counts add up
    assert len({r["item_id"] for r in val}) == n
    assert all(r["mode"] == "absolute" for r in val)
    assert not {r["item_id"] for r in val} & {r["item_id"] for r in train}  # no item on both sides
    assert (train, val) == carve_validation(list(records), n, seed)  # a function of (records, n, seed)


def test_carve_refuses_a_validation_as_large_as_the_mix():
    records = _records([(0, 2), (1, 1), (3, 1)])  # 3 scored items
    with pytest.raises(ConfigError, match="stopping.validation=3"):
        carve_validation(records, 3, 0)


def test_item_targets_average_an_items_samples_and_fraction_maps_the_scale():
    recs = [{"id": "a", "item_id": "x", "score": 2}, {"id": "b", "item_id": "x", "score": 5},
            {"id": "c", "item_id": "y", "score": 3}]
    assert [(r["id"], s) for r, s in item_targets(recs)] == [("a", 3.5), ("c", 3.0)]
    assert fraction(1, (1, 5)) == 0.0 and fraction(10, (1, 10)) == 1.0 and fraction(3, (1, 5)) == 0.5


@settings(deadline=None)
@given(st.lists(st.tuples(st.floats(-5, 5), st.floats(-5, 5)), min_size=3, max_size=40))
def test_pearson_matches_numpy_where_defined(xy):
    xs, ys = [x for x, _ in xy], [y for _, y in xy]
    got = pearson(xs, ys)
    if min(xs) == max(xs) or min(ys) == max(ys):
        assert got is None
    elif np.std(xs) > 1e-6 and np.std(ys) > 1e-6:
        assert got == pytest.approx(float(np.corrcoef(xs, ys)[0, 1]), abs=1e-6)


def test_pearson_is_undefined_on_too_few_or_constant_items():
    assert pearson([1.0, 2.0], [1.0, 2.0]) is None
    assert pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None
    assert pearson([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == pytest.approx(1.0)


def test_stopping_config_is_checked_and_part_of_the_runs_identity(tmp_path):
    from judgeforge.config import load_config, save_resolved
    from judgeforge.train.config import TrainConfig
    from judgeforge.train.run import _check_run_dir, _stopping_args

    with pytest.raises((ConfigError, ValueError)):
        load_config(TrainConfig, None, ["stopping.validation=2"])
    with pytest.raises((ConfigError, ValueError)):
        load_config(TrainConfig, None, ["stopping.patience=0"])
    cfg = load_config(TrainConfig, None, [f"out={tmp_path}", "stopping.enabled=true", "stopping.every=5"])
    args = _stopping_args(cfg)
    assert (args["eval_strategy"], args["save_strategy"], args["eval_steps"], args["save_steps"]) == \
        ("steps", "steps", 5, 5)
    assert args["load_best_model_at_end"] and args["metric_for_best_model"] == "val_pearson"
    assert _stopping_args(load_config(TrainConfig, None, ["stopping.enabled=true"]))["eval_strategy"] == "epoch"
    assert _stopping_args(load_config(TrainConfig, None, [])) == {}
    save_resolved(cfg, tmp_path)
    with pytest.raises(ConfigError, match="stopping"):
        _check_run_dir(cfg.model_copy(update={"stopping": cfg.stopping.model_copy(update={"patience": 3})}),
                       tmp_path)


@pytest.mark.slow
def test_epochs_stop_on_the_rule_and_keep_the_best_evaluation(tiny_llama, build_dir, tmp_path, helpers):
    """A real `train()` of 6 planned epochs: the validation items never train, each epoch is evaluated
    on them, the rule stops training once an epoch brings no gain (a threshold no gain can pass: it
    stops after the second), and the saved adapter is the best evaluation's checkpoint."""
    from safetensors.torch import load_file

    from judgeforge.train.run import read_samples, train

    data = helpers.short_build(build_dir, tmp_path / "data", 12, n_test=2)
    out = tmp_path / "run"
    cfg = helpers.tiny_config(tiny_llama, data, out, "lora.target_modules=[q_proj,v_proj]", "optim.epochs=6",
                              "stopping.enabled=true", "stopping.validation=3", "stopping.patience=1",
                              "stopping.min_delta=2.0", "checkpoint.keep=null")
    adapter = train(cfg)

    report = json.loads((out / "data.json").read_text())
    val = report["validation"]
    assert val["items"] == val["read"] == 3 and val["records"] >= 3
    assert report["train"] + val["records"] == 12 and report["eval"] == val["records"]
    trained = {i for s in read_samples(out) for i in s["ids"]}
    held = {r["id"] for r in _validation_records(cfg)}
    assert len(held) == val["records"] and trained and not trained & held  # validation never trained on

    meta = json.loads((adapter / "judgeforge.json").read_text())["stopping"]
    steps_per_epoch = -(-report["train"] // 2)  # the last batch of an epoch may be short
    assert [e["step"] for e in meta["evaluations"]] == [steps_per_epoch, 2 * steps_per_epoch]  # stopped early
    assert meta["stopped_at"] == 2 * steps_per_epoch < meta["planned_steps"] == 6 * steps_per_epoch
    values = [e["val_pearson"] for e in meta["evaluations"]]
    assert all(-1.0 <= v <= 1.0 for v in values) and meta["best"] == max(values)
    best = load_file(f"{meta['best_checkpoint']}/adapter_model.safetensors")
    saved = load_file(adapter / "adapter_model.safetensors")
    assert best.keys() == saved.keys()
    assert all(np.allclose(best[k].numpy(), saved[k].numpy()) for k in best)

    # Killed after the first epoch's checkpoint: the rerun resumes, with the rule's state, and ends the same.
    import shutil

    shutil.rmtree(out / f"checkpoints/checkpoint-{2 * steps_per_epoch}")
    shutil.rmtree(adapter)
    again = train(cfg)
    assert json.loads((again / "judgeforge.json").read_text())["stopping"]["evaluations"] == meta["evaluations"]
    resumed = load_file(again / "adapter_model.safetensors")
    assert all(np.allclose(saved[k].numpy(), resumed[k].numpy(), atol=1e-6) for k in saved)


def _validation_records(cfg) -> list[dict]:
    from judgeforge.train.run import load_datasets

    return load_datasets(cfg)[0].validation


@pytest.mark.slow
def test_a_continued_adapter_is_a_contender_and_kept_when_no_evaluation_beats_it(tiny_llama, build_dir, tmp_path,
                                                                                  helpers, monkeypatch):
    """Continuing an adapter with the rule (`stopping.start`): the start is read before the first step,
    an epoch that reads lower does not replace it, training stops by patience, and the saved adapter is
    the start's weights, not the trained checkpoint's. The rule's figure is the real read, lowered after
    the start so the outcome is fixed; training, checkpoints and the restore are real."""
    from safetensors.torch import load_file

    import judgeforge.train.stopping as stopping
    from judgeforge.train.run import train

    data = helpers.short_build(build_dir, tmp_path / "data", 12, n_test=2)
    targets = "lora.target_modules=[q_proj,v_proj]"
    start = train(helpers.tiny_config(tiny_llama, data, tmp_path / "start", targets, "optim.epochs=1"))

    real, reads = stopping.validation_metrics, []

    def lowered(model, v, context=None):
        got = real(model, v, context)
        reads.append(got[stopping.METRIC])
        return {**got, stopping.METRIC: 0.5 if len(reads) == 1 else 0.5 - 0.1 * len(reads)}

    monkeypatch.setattr(stopping, "validation_metrics", lowered)
    out = tmp_path / "continued"
    cfg = helpers.tiny_config(tiny_llama, data, out, targets, f"model.adapter={start}", "optim.epochs=4",
                              "stopping.enabled=true", "stopping.validation=3", "stopping.patience=1",
                              "checkpoint.keep=null")
    adapter = train(cfg)

    meta = json.loads((adapter / "judgeforge.json").read_text())["stopping"]
    steps_per_epoch = -(-json.loads((out / "data.json").read_text())["train"] // 2)
    assert [e["step"] for e in meta["evaluations"]] == [0, steps_per_epoch] and len(reads) == 2
    assert all(-1.0 <= r <= 1.0 for r in reads)
    assert meta["kept"] == "start" and meta["best_step"] == 0 and meta["best"] == 0.5
    assert meta["stopped_at"] == steps_per_epoch < meta["planned_steps"]
    began = load_file(start / "adapter_model.safetensors")
    saved = load_file(adapter / "adapter_model.safetensors")
    trained = load_file(out / f"checkpoints/checkpoint-{steps_per_epoch}/adapter_model.safetensors")
    assert began.keys() == saved.keys() == trained.keys()
    assert all(np.allclose(began[k].numpy(), saved[k].numpy()) for k in began)
    assert not all(np.allclose(began[k].numpy(), trained[k].numpy()) for k in began)  # the epoch did train
