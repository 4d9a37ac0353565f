"""The built-in configs: `--config NAME` reads configs/<stage>/NAME.yaml for the command's stage,
`extends:` reaches them as `stage/name`, and `judgeforge config ls|cp` lists and copies them."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from judgeforge import cli
from judgeforge.config import ConfigError, builtin_configs, load_config, read_yaml, resolve_config

REPO = Path(__file__).resolve().parents[1]

# command words -> (its modules whose `load_config` it calls, its stage, a built-in of that stage, class)
COMMANDS = {
    ("data", "build"): ("judgeforge.data.build", "data", "fastchat", "judgeforge.data.config:BuildConfig"),
    ("train",): ("judgeforge.train.run", "train", "embedded-judge", "judgeforge.train.config:TrainConfig"),
    ("eval",): ("judgeforge.eval.run", "eval", "trained", "judgeforge.eval.config:EvalConfig"),
    ("serve",): ("judgeforge.config", "serve", "default", "judgeforge.serve.config:ServeConfig"),
    ("cascade", "calibrate"): ("judgeforge.cascade.calibrate", "cascade", "default",
                               "judgeforge.cascade.config:CalibrateConfig"),
}


class Loaded(Exception):
    """Raised by the recording load_config: the command stops right after resolving its config."""


def _recording(cls, path=None, overrides=(), extra=None):
    """load_config, then stop the command with what it resolved."""
    raise Loaded(path, load_config(cls, path, overrides, extra))


def _cls(target: str) -> type:
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("words", list(COMMANDS), ids=" ".join)
def test_each_command_loads_a_builtin_by_name(words, monkeypatch):
    module, stage, name, target = COMMANDS[words]

    monkeypatch.setattr(importlib.import_module(module), "load_config", _recording)
    with pytest.raises(Loaded) as hit:
        cli.main([*words, "--config", name])
    path, cfg = hit.value.args
    assert Path(path) == REPO / "configs" / stage / f"{name}.yaml"
    assert cfg == load_config(_cls(target), REPO / "configs" / stage / f"{name}.yaml")


def test_grade_local_reads_a_serve_builtin_by_name(tmp_path, monkeypatch):
    from judgeforge import config

    monkeypatch.setattr(config, "load_config", _recording)
    (tmp_path / "in.jsonl").write_text('{"instruction": "q", "response": "a"}\n')
    with pytest.raises(Loaded) as hit:
        cli.main(["grade", "-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"), "--local",
                  "--config", "openai"])
    path, cfg = hit.value.args
    assert path == REPO / "configs" / "serve" / "openai.yaml"
    assert cfg == load_config(_cls("judgeforge.serve.config:ServeConfig"), path)


def test_a_path_wins_and_configs_paths_still_work(tmp_path, monkeypatch):
    mine = tmp_path / "default.yaml"  # named like a built-in: the file is what is meant
    mine.write_text("out: mine\n")
    monkeypatch.chdir(tmp_path)
    assert resolve_config("default.yaml", "train") == Path("default.yaml")
    assert resolve_config(str(mine), "train") == mine
    # The shipped tree's relative paths work from any directory, as before.
    assert resolve_config("configs/train/demo.yaml", "train") == REPO / "configs/train/demo.yaml"
    assert resolve_config("demo.yaml", "eval") == REPO / "configs/eval/demo.yaml"
    assert resolve_config("eval/demo", "train") == REPO / "configs/eval/demo.yaml"  # stage/name: any stage


def test_an_unknown_name_lists_the_stage_builtins(capsys):
    with pytest.raises(ConfigError) as err:
        resolve_config("embeded-judge", "train")
    listed = str(err.value).split("built-in train configs: ", 1)[1].split(", ")
    assert listed == [p.stem for p in sorted((REPO / "configs/train").glob("*.yaml"))]
    # Through the CLI: a config error (exit 2) naming the built-ins, before anything runs.
    assert cli.main(["data", "build", "--config", "nope"]) == 2
    assert "built-in data configs: alpaca-eval, biggen, default" in capsys.readouterr().err


def test_extends_a_builtin_by_stage_and_name(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("extends: train/embedded-judge\nout: runs/train/mine\n")
    base = read_yaml(REPO / "configs/train/embedded-judge.yaml")
    assert read_yaml(mine) == {**base, "out": "runs/train/mine"}
    # A relative path that exists still wins over a built-in of the same name.
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "embedded-judge").write_text("lr: 0.5\n")
    assert read_yaml(mine) == {"lr": 0.5, "out": "runs/train/mine"}
    mine.write_text("extends: embedded-judge\n")  # bare: a path only, and there is none
    with pytest.raises(ConfigError, match="not found"):
        read_yaml(mine)


def test_config_ls_lists_every_builtin_with_its_description(capsys):
    assert cli.main(["config", "ls"]) == 0
    lines = capsys.readouterr().out.splitlines()
    shipped = sorted(REPO.glob("configs/*/*.yaml"))
    assert len(shipped) >= 30 and len(lines) == len(shipped)
    got = {line.split()[0]: line.split(None, 1)[1] for line in lines}
    for path in shipped:
        first = path.read_text().splitlines()[0]
        assert got[f"{path.parent.name}/{path.stem}"] == first.lstrip("# ").strip()
    assert cli.main(["config", "ls", "serve"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == list(builtin_configs("serve"))


def test_config_cp_copies_exactly_and_keeps_an_existing_file(tmp_path, capsys):
    dest = tmp_path / "recipe.yaml"
    assert cli.main(["config", "cp", "train/embedded-judge", str(dest)]) == 0
    assert dest.read_bytes() == (REPO / "configs/train/embedded-judge.yaml").read_bytes()
    dest.write_text("mine\n")
    assert cli.main(["config", "cp", "serve/default", str(dest)]) == 2
    assert "--overwrite" in capsys.readouterr().err and dest.read_text() == "mine\n"
    assert cli.main(["config", "cp", "cascade/default", str(dest), "--overwrite"]) == 0
    assert dest.read_bytes() == (REPO / "configs/cascade/default.yaml").read_bytes()
    # A name one stage alone has needs no stage; one several have must be named with its stage.
    assert cli.main(["config", "cp", "fastchat", str(tmp_path)]) == 0
    assert (tmp_path / "fastchat.yaml").read_bytes() == (REPO / "configs/data/fastchat.yaml").read_bytes()
    assert cli.main(["config", "cp", "embedded-judge", str(tmp_path / "x.yaml")]) == 2
    assert "data/embedded-judge, train/embedded-judge" in capsys.readouterr().err
    assert not (tmp_path / "x.yaml").exists()
