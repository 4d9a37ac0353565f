"""Continual rounds (train/rounds.py, `judgeforge train --continue`): the next window of the build
an adapter trained on, as its judgeforge.json (or, for older adapters, its saved config) records it.
No model is loaded: the adapters here are directories with the files judgeforge reads."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import yaml

from judgeforge.config import ConfigError, load_config, save_resolved
from judgeforge.data.schema import Judgment
from judgeforge.judge.prompts import Rubric
from judgeforge.io import sha256_file
from judgeforge.train import rounds, run
from judgeforge.train.config import TrainConfig
from judgeforge.train.data import load_build, mix_builds, window
from judgeforge.train.rounds import Window, continue_round, last_windows, windows_of

RUBRIC = Rubric("Is it correct?", {k: f"level {k}" for k in range(1, 6)})


def write_build(path: Path, n: int) -> Path:
    path.mkdir(parents=True)
    recs = [Judgment(instruction=f"question {i}", response=f"answer {i}", rubric=RUBRIC, feedback="fine",
                     score=1 + i % 5, response_model="m").to_sft() for i in range(n)]
    (path / "manifest.json").write_text(json.dumps({"n": n}))
    (path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def config(build: Path, *overrides: str) -> TrainConfig:
    return load_config(TrainConfig, None, [f"data.sources=[{{path: {build}, limit: 10}}]", "model.name=base",
                                           "tracking.wandb=false", *overrides])


def save_adapter(cfg: TrainConfig, adapter: Path, meta_window: bool = True) -> Path:
    """What `_save_final` leaves: adapter_config.json, config.yaml and judgeforge.json with the mix's
    sources; `meta_window=False`: judgeforge.json as written before windows were recorded."""
    from judgeforge.train.run import _save_final

    builds = [load_build(s.path) for s in cfg.data.sources]
    mix = mix_builds(builds, [s.fraction for s in cfg.data.sources], [s.limit for s in cfg.data.sources],
                     cfg.data.seed, 0, [s.offset for s in cfg.data.sources])
    trainer = types.SimpleNamespace(
        save_model=lambda d: (Path(d).mkdir(parents=True), (Path(d) / "adapter_config.json").write_text("{}")),
        is_world_process_zero=lambda: True, model=None, state=types.SimpleNamespace(global_step=3))
    _save_final(cfg, trainer, adapter, mix)
    if not meta_window:
        meta = json.loads((adapter / "judgeforge.json").read_text())
        for d in meta["data"]:
            del d["window"]
        (adapter / "judgeforge.json").write_text(json.dumps(meta))
    return adapter


@pytest.fixture(autouse=True)
def _no_lora_summary(monkeypatch):
    import judgeforge.train.lora as lora

    monkeypatch.setattr(lora, "lora_summary", lambda model: {"modules": [], "parameters": [],
                                                             "trainable_params": 0})


def test_windows_come_from_judgeforge_json_else_the_saved_config():
    meta = {"data": [{"path": "b", "train_sha256": "abc", "window": {"offset": 0, "limit": 5, "seed": 42}},
                     {"path": "replay", "window": None}]}
    assert windows_of(meta) == [Window("b", 0, 5, 42, "abc")]
    old = {"data": [{"path": "b", "train_sha256": "abc"}]}  # written before windows were recorded
    saved = {"data": {"seed": 7, "sources": [{"path": "b", "offset": 300, "limit": 150}, {"path": "c"}]}}
    assert windows_of(old, saved) == [Window("b", 300, 150, 7, "abc")]
    assert windows_of(old) == [] and windows_of({"data": [{"path": "b", "window": None}]}, saved) == []


def test_next_window_starts_where_the_adapters_ended_and_never_overlaps(tmp_path):
    build = write_build(tmp_path / "b", 40)
    cfg = config(build, "data.sources=[{path: %s, offset: 0}, {path: other, fraction: 0.5}]" % build)
    ws = [Window(str(build), 0, 10, 42), Window(str(build), 10, 15, 42)]
    nxt, used = continue_round(cfg, "r2", ws, {"base_model": "base"})
    s = nxt.data.sources
    assert (s[0].offset, s[0].limit) == (25, 15) and used == [ws[1]]  # no limit given: the window's size
    assert s[1] == cfg.data.sources[1] and nxt.model.adapter == "r2"  # other builds are left alone
    assert continue_round(nxt, "r2", ws, {})[0] == nxt  # idempotent: a rerun resolves to the same round
    recs = load_build(build).train
    seen = {r["id"] for w in ws for r in window(recs, w.offset, w.limit, 42)}
    assert not seen & {r["id"] for r in window(recs, 25, 15, 42)}
    limited = continue_round(config(build), "r2", ws, {})[0].data.sources[0]
    assert (limited.offset, limited.limit) == (25, 10)  # the config's limit is the round's size


@pytest.mark.parametrize("ws, meta, overrides, match", [
    ([], {}, [], "no window"),
    ([Window("b", 0, None, 42)], {}, [], "no next window"),
    ([Window("elsewhere", 0, 5, 42)], {}, [], "lists none of them"),
    ([Window("b", 0, 5, 7)], {}, [], "data.seed=7"),
    ([Window("b", 0, 5, 42)], {"base_model": "other"}, [], "model.name=other"),
])
def test_continuing_what_cannot_be_continued_says_why(tmp_path, ws, meta, overrides, match):
    cfg = config(tmp_path / "b", *overrides)
    ws = [Window(str(tmp_path / w.path), w.offset, w.limit, w.seed) for w in ws]
    with pytest.raises(ConfigError, match=match):
        continue_round(cfg, "r1", ws, meta)


def test_last_windows_keeps_the_furthest_per_build():
    ws = [Window("b", 10, 5, 42), Window("./b", 0, 10, 42)]
    assert last_windows(ws, "r")[rounds._norm("b")] == ws[0]


def test_a_trained_adapter_continues_on_its_next_window(tmp_path, monkeypatch):
    """judgeforge.json records the window; `--continue` takes the next one, with the adapter's recipe."""
    monkeypatch.chdir(tmp_path)
    build = write_build(tmp_path / "b", 40)
    r1 = config(build, "data.sources=[{path: b, offset: 0, limit: 12}]", "out=r1")
    adapter = save_adapter(r1, tmp_path / "r1" / "adapter")
    meta = json.loads((adapter / "judgeforge.json").read_text())
    assert meta["data"][0]["window"] == {"offset": 0, "limit": 12, "seed": 42}
    assert meta["data"][0]["train_sha256"] == sha256_file(build / "train.jsonl")

    got = []
    monkeypatch.setattr(run, "train", lambda cfg, overwrite=False: got.append(run.resolve_continue(cfg)) or "done")
    assert run.main(["--continue", "r1", "--out", "r2"]) == 0
    r2 = got[0]
    assert r2.continue_from == "r1" and r2.model.adapter == "r1" and r2.out == "r2"
    assert (r2.data.sources[0].offset, r2.data.sources[0].limit) == (12, 12)
    assert r2.optim == r1.optim and r2.lora == r1.lora  # the adapter's own recipe

    save_resolved(r1, tmp_path, "recipe.yaml")
    assert run.main(["--config", "recipe.yaml", "--continue", "r1/adapter", "--out", "r2"]) == 0
    assert got[1].data.sources[0].offset == 12 and got[1].model.adapter == "r1/adapter"

    with pytest.raises(ConfigError, match="own --out"):  # the recipe's out is round 1's run
        run.main(["--continue", "r1"])


def test_an_adapter_from_before_windows_were_recorded_continues_from_its_saved_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    build = write_build(tmp_path / "b", 40)
    r3 = config(build, "data.sources=[{path: b, offset: 20, limit: 10}]", "out=r3")
    save_adapter(r3, tmp_path / "shipped", meta_window=False)
    assert yaml.safe_load((tmp_path / "shipped" / "config.yaml").read_text())["data"]["sources"][0]["offset"] == 20
    cfg = run.resolve_continue(config(build, "data.sources=[{path: b, offset: 0, limit: 10}]",
                                      "continue_from=shipped", "out=r4"))
    assert cfg.data.sources[0].offset == 30 and cfg.model.adapter == "shipped"


def test_a_changed_or_used_up_build_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    build = write_build(tmp_path / "b", 20)
    save_adapter(config(build, "data.sources=[{path: b, offset: 0, limit: 20}]", "out=r1"), tmp_path / "r1/adapter")
    nxt = config(build, "data.sources=[{path: b}]", "continue_from=r1", "out=r2")
    with pytest.raises(ConfigError, match="none are left"):
        run.resolve_continue(nxt)
    with open(build / "train.jsonl", "a") as f:
        f.write((build / "train.jsonl").read_text().splitlines()[0] + "\n")
    with pytest.raises(ConfigError, match="changed since"):
        run.resolve_continue(nxt)
    (build / "train.jsonl").unlink()
    with pytest.raises(ConfigError, match="no train.jsonl"):
        run.resolve_continue(nxt)
