"""The default commands chain: `judgeforge data build`, `train`, `eval`, `cascade calibrate` with no
flags each read what the one before wrote, through the paths judgeforge/paths.py owns. The class
defaults import them; the shipped default YAMLs restate them (YAML cannot import), so they are
checked against the owner here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from judgeforge import paths
from judgeforge.cascade.config import CalibrateConfig, StoreConfig
from judgeforge.config import builtin_config, load_config
from judgeforge.data.config import BuildConfig
from judgeforge.eval.config import EvalConfig
from judgeforge.train.config import TrainConfig
from judgeforge.train.data import load_build
from judgeforge.train.merge import MergeConfig

REPO = Path(__file__).resolve().parents[1]


def _default(cls, stage: str, name: str = "default"):
    return load_config(cls, builtin_config(name, stage))


def _heldout(cfg: EvalConfig) -> list[str]:
    return [s.path for s in cfg.sets if s.kind == "heldout"]


def test_class_defaults_chain():
    train = TrainConfig()
    assert BuildConfig().out == paths.DATA
    assert [s.path for s in train.data.sources] == [paths.DATA] and train.out == paths.TRAIN
    assert MergeConfig().adapter == paths.TRAIN
    assert EvalConfig().out == paths.EVAL
    assert CalibrateConfig.model_fields["data"].default == paths.DATA
    assert CalibrateConfig.model_fields["out"].default == paths.CASCADE
    assert StoreConfig().path == paths.STORE


def test_default_yamls_chain():
    assert _default(BuildConfig, "data").out == paths.DATA
    train = _default(TrainConfig, "train")
    assert [s.path for s in train.data.sources] == [paths.DATA] and train.out == paths.TRAIN
    base = _default(EvalConfig, "eval")
    assert _heldout(base) == [paths.DATA] and base.out == paths.EVAL
    trained = _default(EvalConfig, "eval", "trained")  # the default chain's trained judge, same items
    assert [j.adapter for j in trained.judges] == [paths.TRAIN] and trained.out == paths.EVAL_TRAINED
    assert _heldout(trained) == [paths.DATA]
    cascade = _default(CalibrateConfig, "cascade")
    assert cascade.predictions == f"{paths.EVAL}/predictions.jsonl" and cascade.out == paths.CASCADE
    from judgeforge.serve.config import ServeConfig

    assert _default(ServeConfig, "serve", "cascade").store.path == paths.STORE


def test_cli_data_build_with_no_flags_feeds_train(tmp_path, monkeypatch):
    """From a directory that is not the checkout: the built-in default config and the vendored data
    resolve from the package, the build lands in ./runs/data/default, and `train`'s defaults read it."""
    r = subprocess.run([sys.executable, "-m", "judgeforge.cli", "data", "build", "progress=false"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    built = tmp_path / paths.DATA
    assert (built / "manifest.json").is_file() and f"wrote {paths.DATA}/" in r.stdout
    monkeypatch.chdir(tmp_path)
    build = load_build(load_config(TrainConfig).data.sources[0].path)
    assert build.path.resolve() == built.resolve() and len(build.train) > 0 and len(build.test) == 240


def test_eval_with_no_flags_runs_the_default_evaluation(tmp_path, monkeypatch):
    """`judgeforge eval` names no sets by its class defaults: with no --config it runs the built-in
    default evaluation, of the default build's held-out split (resolved only here: no engine starts)."""
    from judgeforge.eval import run

    seen = []
    monkeypatch.setattr(run, "run_eval", lambda cfg, **kw: seen.append(cfg))
    monkeypatch.chdir(tmp_path)
    assert run.main([]) == 0
    assert seen[0] == _default(EvalConfig, "eval") and _heldout(seen[0]) == [paths.DATA]
