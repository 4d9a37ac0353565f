"""Core plumbing: atomic output, CLI dispatch, model name resolution."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from judgeforge import cli, io, models
from judgeforge.judge.weights import ensure_default_judge, resolve_model


def test_atomic_dir_replaces_only_on_success(tmp_path):
    final = tmp_path / "out"
    with io.atomic_dir(final) as d:
        (d / "a.txt").write_text("one")
    assert (final / "a.txt").read_text() == "one"
    with pytest.raises(RuntimeError):
        with io.atomic_dir(final) as d:
            (d / "a.txt").write_text("half")
            raise RuntimeError("killed mid-write")
    assert (final / "a.txt").read_text() == "one"  # the old output survives a failed write
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temp debris


def test_atomic_write_and_jsonl(tmp_path):
    p = tmp_path / "x" / "r.jsonl"
    n = io.atomic_write_jsonl(p, [{"a": "é"}, {"b": 2}])
    assert n == 2 and io.read_jsonl(p) == [{"a": "é"}, {"b": 2}]
    assert "é" in p.read_text(encoding="utf-8")  # no ASCII escaping
    assert io.sha256_file(p) == io.sha256_text(p.read_text(encoding="utf-8"))


def test_cli_help_and_unknown(capsys):
    assert cli.main([]) == 0
    assert "data build" in capsys.readouterr().out
    assert cli.main(["nonsense"]) == 2
    assert "unknown command" in capsys.readouterr().err


def test_cli_targets_exist():
    """Every command's module is installed and defines its function (found without importing it)."""
    import ast
    import importlib.util

    for words, target in cli.COMMANDS.items():
        module, func = target.split(":")
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, (words, f"no module {module}")
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        assert func in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, (words, target)


def test_resolve_model_paths(tmp_path, monkeypatch):
    assert resolve_model(str(tmp_path)) == str(tmp_path.resolve())
    assert resolve_model("org/some-model") == "org/some-model"  # hub ids pass through
    monkeypatch.setenv("JUDGEFORGE_HOME", str(tmp_path / "home"))
    assert models.default_model_dir() == tmp_path / "home" / "models" / models.DEFAULT_DIRNAME


@pytest.mark.slow
def test_default_model_is_a_plain_transformers_checkpoint(default_model_dir):
    """The embedded judge converted from GGUF loads without gguf and generates text."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert (default_model_dir / "model.safetensors").is_file()
    cfg = json.loads((default_model_dir / "config.json").read_text())
    assert cfg["model_type"] == "llama" and "quantization_config" not in cfg
    tok = AutoTokenizer.from_pretrained(default_model_dir)
    model = AutoModelForCausalLM.from_pretrained(default_model_dir)
    batch = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                    add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**batch, max_new_tokens=12, do_sample=False)
    text = tok.decode(out[0, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in text
    assert resolve_model("default") == str(default_model_dir)


def test_default_judge_is_the_shipped_adapter_named_by_its_content(tmp_path, monkeypatch):
    """`default-judge` = base + the committed adapter (<= 20 MB), cached under its content hash;
    its judgeforge.json says what trained it; engines use it when no model is named."""
    from judgeforge.judge.config import EngineConfig

    ship = models.SHIPPED_ADAPTER
    weights = ship / "adapter_model.safetensors"
    assert weights.is_file() and weights.stat().st_size <= 20 * 2**20
    meta = json.loads((ship / "judgeforge.json").read_text())
    assert meta["template_version"] == "prometheus2-v1" and meta["base_model"] == "default"
    assert "judgeforge train" in meta["command"]  # the command that trained it, recorded by `model ship`
    assert all(d["manifest_sha256"] for d in meta["data"])
    monkeypatch.setenv("JUDGEFORGE_HOME", str(tmp_path))
    assert models.default_judge_dir().name.endswith(models.shipped_adapter_sha()[:12])
    assert EngineConfig().model == models.DEFAULT_JUDGE


@pytest.mark.slow
def test_default_judge_merges_into_the_base_and_differs_from_it(default_model_dir):
    from safetensors.torch import load_file

    judge = ensure_default_judge()
    assert resolve_model("default-judge") == str(judge)
    meta = json.loads((judge / "judgeforge.json").read_text())
    assert meta["merged_from"] and meta["command"]
    a, b = load_file(default_model_dir / "model.safetensors"), load_file(judge / "model.safetensors")
    name = "model.layers.0.self_attn.q_proj.weight"
    assert a[name].shape == b[name].shape and not (a[name] == b[name]).all()
    assert (a["model.embed_tokens.weight"] == b["model.embed_tokens.weight"]).all()  # not adapted
