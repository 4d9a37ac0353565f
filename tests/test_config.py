"""The config system: precedence, errors that name the key, every shipped YAML loads."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

from hypothesis import given
from hypothesis import strategies as st

from judgeforge.config import Config, ConfigError, load_config, merge_trees, read_yaml, save_resolved

REPO = Path(__file__).resolve().parents[1]

# configs/<stage>/*.yaml -> the config class of that stage's command.
STAGE_CONFIGS = {
    "data": "judgeforge.data.config:BuildConfig",
    "train": "judgeforge.train.config:TrainConfig",
    "eval": "judgeforge.eval.config:EvalConfig",
    "serve": "judgeforge.serve.config:ServeConfig",
    "cascade": "judgeforge.cascade.config:CalibrateConfig",
}


class Inner(Config):
    rank: int = 8
    """LoRA rank."""
    targets: list[str] = ["q_proj"]


class Outer(Config):
    name: str = "x"
    """A name."""
    lr: float = 1e-5
    inner: Inner = Inner()


def test_precedence_cli_over_yaml_over_defaults(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("name: from-yaml\ninner:\n  rank: 16\n")
    cfg = load_config(Outer, y, ["inner.rank=32", "inner.targets=[a, b]"])
    assert cfg.name == "from-yaml"  # YAML over default
    assert cfg.inner.rank == 32  # CLI over YAML
    assert cfg.inner.targets == ["a", "b"]
    assert cfg.lr == 1e-5  # default kept


def test_unknown_key_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"inner\.rnak: unknown key"):
        load_config(Outer, None, ["inner.rnak=3"])


def test_bad_value_is_named():
    with pytest.raises(ConfigError, match=r"inner\.rank"):
        load_config(Outer, None, ["inner.rank=lots"])


def test_malformed_override():
    with pytest.raises(ConfigError, match="key=value"):
        load_config(Outer, None, ["justakey"])


def test_missing_file():
    with pytest.raises(ConfigError, match="not found"):
        load_config(Outer, "/nonexistent/c.yaml")


def test_field_docstrings_become_descriptions():
    assert Outer.model_fields["name"].description == "A name."


def test_save_resolved_roundtrips(tmp_path):
    cfg = load_config(Outer, None, ["inner.rank=4"])
    path = save_resolved(cfg, tmp_path)
    assert load_config(Outer, path) == cfg


def test_extends_merges_mappings_and_replaces_the_rest(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "b.yaml").write_text("name: b\nlr: 0.5\ninner:\n  rank: 16\n  targets: [q, k, v]\n")
    (tmp_path / "base" / "v.yaml").write_text("extends: b.yaml\ninner:\n  targets: [o]\n")
    child = tmp_path / "c.yaml"
    child.write_text("extends: base/v.yaml  # relative to this file\nlr: 0.25\n")
    cfg = load_config(Outer, child, ["name=cli"])
    assert (cfg.name, cfg.lr, cfg.inner.rank, cfg.inner.targets) == ("cli", 0.25, 16, ["o"])
    saved = yaml.safe_load(save_resolved(cfg, tmp_path / "out").read_text())
    assert "extends" not in saved and saved["inner"] == {"rank": 16, "targets": ["o"]}


def test_extends_in_a_cycle_is_named(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\nname: b\n")
    with pytest.raises(ConfigError, match=r"cycle: .*a\.yaml -> .*b\.yaml -> .*a\.yaml"):
        read_yaml(tmp_path / "a.yaml")


@pytest.mark.parametrize("text, message", [("extends: gone.yaml\n", "not found: .*gone.yaml"),
                                           ("extends: [a.yaml]\n", "`extends` must be a YAML file's path"),
                                           ("extends: ''\n", "`extends` must be a YAML file's path")])
def test_a_bad_extends_is_named(tmp_path, text, message):
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_yaml(tmp_path / "c.yaml")


_keys = st.sampled_from("abcd")
_trees = st.recursive(st.integers() | st.lists(st.integers(), max_size=2),
                      lambda inner: st.dictionaries(_keys, inner, max_size=3), max_leaves=8)


@given(st.dictionaries(_keys, _trees, max_size=4), st.dictionaries(_keys, _trees, max_size=4))
def test_merge_trees_keeps_both_sides_and_the_override_wins(base, over):
    before = (repr(base), repr(over))
    merged = merge_trees(base, over)
    assert (repr(base), repr(over)) == before  # neither input is changed
    assert merged.keys() == base.keys() | over.keys()
    for key, value in merged.items():
        if key not in over:
            assert value == base[key]
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            assert value == merge_trees(base[key], over[key])
        else:
            assert value == over[key]
    assert merge_trees(base, {}) == base and merge_trees({}, over) == over and merge_trees(merged, over) == merged


def test_the_trained_eval_is_the_default_eval_on_another_judge():
    from judgeforge.eval.config import EvalConfig

    default, trained = (load_config(EvalConfig, REPO / f"configs/eval/{n}.yaml") for n in ("default", "trained"))
    assert [j.name for j in trained.judges] == ["trained"] and trained.out != default.out
    same = default.model_dump(exclude={"judges", "out"})
    assert trained.model_dump(exclude={"judges", "out"}) == same


def _config_class(stage: str):
    module, name = STAGE_CONFIGS[stage].split(":")
    return getattr(importlib.import_module(module), name)


SHIPPED = sorted(p for p in (REPO / "configs").glob("*/*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[f"{p.parent.name}/{p.name}" for p in SHIPPED])
def test_every_shipped_yaml_loads(path):
    stage = path.parent.name
    if stage not in STAGE_CONFIGS:
        # Non-command configs (e.g. accelerate/DeepSpeed launch files) are checked by their stage's tests.
        assert isinstance(yaml.safe_load(path.read_text()), dict)
        return
    cfg = load_config(_config_class(stage), path)
    assert isinstance(cfg, Config)


def test_some_yaml_is_shipped():
    assert any(p.parent.name == "data" for p in SHIPPED)
