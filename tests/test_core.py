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
    with io.atomic_dir(final, "data") as d:
        (d / "a.txt").write_text("one")
    assert (final / "a.txt").read_text() == "one"
    assert io.output_kind(final) == "data"  # the marker says whose it is
    with pytest.raises(RuntimeError):
        with io.atomic_dir(final, "data", overwrite=True) as d:
            (d / "a.txt").write_text("half")
            raise RuntimeError("killed mid-write")
    assert (final / "a.txt").read_text() == "one"  # the old output survives a failed write
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temp debris


def _tree(root: Path) -> dict:
    """Every file and directory under `root` with its bytes (None for a directory)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def test_atomic_dir_writes_only_where_nothing_or_its_own_kind_is(tmp_path):
    user = tmp_path / "mine"
    (user / "keep").mkdir(parents=True)
    (user / "keep" / "notes.txt").write_text("my notes")
    (user / "log.jsonl").write_text('{"a": 1}\n')
    before = _tree(tmp_path)
    for overwrite in (False, True):  # --overwrite never reaches a directory that is not an output
        with pytest.raises(io.OutputError, match="not a judgeforge output.*keep, log.jsonl.*--overwrite"):
            with io.atomic_dir(user, "data", overwrite=overwrite):
                pytest.fail("a refused output must not be staged")
    (tmp_path / "file").write_text("a file")
    with pytest.raises(io.OutputError, match="is an existing file"):
        with io.atomic_dir(tmp_path / "file", "data", overwrite=True):
            pass
    assert _tree(tmp_path) == {**before, "file": b"a file"}  # nothing touched, nothing beside them

    ours = tmp_path / "ours"
    with io.atomic_dir(ours, "eval") as d:
        (d / "metrics.json").write_text("{}")
    with pytest.raises(io.OutputError, match="already holds a `judgeforge eval` report: pass --overwrite"):
        with io.atomic_dir(ours, "eval"):
            pass
    with pytest.raises(io.OutputError, match="is a `judgeforge eval` report.*replaces only a `judgeforge data"):
        with io.atomic_dir(ours, "data", overwrite=True):
            pass
    with io.atomic_dir(ours, "eval", overwrite=True) as d:
        (d / "metrics.json").write_text('{"new": 1}')
    assert (ours / "metrics.json").read_text() == '{"new": 1}'
    empty = tmp_path / "empty"
    empty.mkdir()
    with io.atomic_dir(empty, "data") as d:  # an empty directory is as good as none
        (d / "x").write_text("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "file", "mine", "ours"]


def test_outputs_from_before_the_marker_are_recognised(tmp_path):
    for name in ("manifest.json", "train.jsonl", "test.jsonl"):
        (tmp_path / name).write_text("")
    assert io.output_kind(tmp_path) == "data" and io.check_out(tmp_path, "data", overwrite=True) == "replace"
    assert io.output_kind(models.SHIPPED_ADAPTER) == "adapter"  # what `model ship` replaces


def _dead_pid() -> int:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_killed_writers_siblings_are_cleared_by_the_next_write(tmp_path):
    final, dead = tmp_path / "out", _dead_pid()
    with io.atomic_dir(final, "data") as d:
        (d / "v").write_text("1")
    (tmp_path / f".out.{dead}-abc.tmp").mkdir()  # killed while staging
    (tmp_path / f".out.{os.getpid()}-live.tmp").mkdir()  # a live writer's: left alone
    with io.atomic_dir(final, "data", overwrite=True) as d:
        (d / "v").write_text("2")
    assert (final / "v").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".out.{os.getpid()}-live.tmp", "out"]
    # Killed between the two renames of a swap without RENAME_EXCHANGE: the old output comes back.
    os.rename(final, tmp_path / f".out.old-{dead}")
    with pytest.raises(io.OutputError, match="already holds"):
        with io.atomic_dir(final, "data"):
            pass
    assert (final / "v").read_text() == "2" and not (tmp_path / f".out.old-{dead}").exists()


def test_atomic_dir_swaps_without_rename_exchange_and_keeps_a_held_lock(tmp_path, monkeypatch):
    final = tmp_path / "out"
    with io.atomic_dir(final, "eval") as d:
        (d / "v").write_text("1")
    monkeypatch.setattr(io, "_exchange", lambda a, b: False)  # a file system without it
    with io.run_lock(final):
        with io.atomic_dir(final, "eval", overwrite=True) as d:
            (d / "v").write_text("2")
        assert (final / "v").read_text() == "2"
        assert _lock_from_another_process(final) != "got it"  # the same lock file, still held
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert _lock_from_another_process(final) == "got it"


def _lock_from_another_process(out: Path) -> str:
    import subprocess
    import sys

    code = ("import sys\nfrom judgeforge import io\ntry:\n    with io.run_lock(sys.argv[1]):\n"
            "        print('got it')\nexcept io.OutputError as e:\n    print(e)")
    return subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def test_run_lock_names_the_holder_and_dies_with_it(tmp_path):
    from testing.processes import lock_holder

    out = tmp_path / "run"
    with lock_holder(out) as holder:
        with pytest.raises(io.OutputError, match=rf"in use by another judgeforge process \(PID {holder.pid}\)"):
            with io.run_lock(out):
                pytest.fail("two writers")
    # lock_holder ends with kill -9: the holder runs no clean-up of its own
    with io.run_lock(out) as lock:
        assert lock.read_text() == f"{os.getpid()}\n"


def test_a_forked_child_does_not_keep_the_run_lock(tmp_path):
    """An engine worker forked by eval must not hold the lock after eval itself is gone."""
    import signal
    import time

    out = tmp_path / "run"
    with io.run_lock(out):
        child = os.fork()
        if child == 0:
            time.sleep(120)
            os._exit(0)
    try:
        assert _lock_from_another_process(out) == "got it"
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def test_claim_dir_leaves_nothing_when_the_run_wrote_nothing(tmp_path):
    out = tmp_path / "runs" / "run"
    with pytest.raises(RuntimeError):
        with io.claim_dir(out, "eval") as state:
            assert state == "new" and io.output_kind(out) == "eval"
            raise RuntimeError("no set could be loaded")
    assert list(tmp_path.iterdir()) == []  # runs/ too: it made both
    with io.claim_dir(out, "train") as state:
        (out / "checkpoints").mkdir()
    with io.claim_dir(out, "train", resume=True) as state:  # a rerun continues its own run
        assert state == "resume" and (out / "checkpoints").is_dir()
    with io.claim_dir(out, "train", overwrite=True, fresh=True) as state:  # --overwrite starts over
        assert state == "replace" and sorted(p.name for p in out.iterdir()) == [io.OUTPUT_MARKER, io.RUN_LOCK]


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
