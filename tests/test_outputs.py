"""Where the commands write: an existing `--out` that is not judgeforge's output of the same kind is
refused untouched, `--overwrite` replaces only such an output, and a run directory has one writer
(a second `train` / `eval` on it stops at once, naming the first one's PID)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from judgeforge import cli, io, models

REPO = Path(__file__).resolve().parents[1]
FASTCHAT = REPO / "data/vendor/fastchat-mt-bench/gpt-4_single.jsonl"


def _tree(root: Path) -> dict:
    """Every path under `root` with its bytes (None for a directory): what "untouched" compares."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def _log(path: Path) -> Path:
    """A small real FastChat judgment log: 30 judgments each of two response models."""
    kept, seen = [], {}
    for line in FASTCHAT.read_text(encoding="utf-8").splitlines():
        model = json.loads(line)["model"]
        if model in ("mistral-orpo-mix", "mistral-orpo-trl") and seen.get(model, 0) < 30:
            seen[model] = seen.get(model, 0) + 1
            kept.append(line)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return path


def _run(capsys, *argv: str) -> tuple[int, str]:
    rc = cli.main(list(argv))
    return rc, capsys.readouterr().err


def _build(capsys, log: Path, out: Path, *extra: str) -> tuple[int, str]:
    return _run(capsys, "data", "build", "--input", f"fastchat:{log}", "--out", str(out),
                "split.test_models=[mistral-orpo-trl]", "decontamination.eval_sets=[]", "progress=false", *extra)


@pytest.fixture
def users_dir(tmp_path) -> Path:
    """A directory of the user's: the judgment log itself and unrelated notes."""
    mine = tmp_path / "mine"
    _log(mine / "log.jsonl")
    (mine / "keep").mkdir()
    (mine / "keep" / "notes.txt").write_text("do not lose these\n")
    return mine


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_data_build_refuses_a_directory_of_the_users_files(users_dir, tmp_path, capsys, overwrite):
    before = _tree(tmp_path)
    rc, err = _build(capsys, users_dir / "log.jsonl", users_dir, *overwrite)
    assert rc == 2
    assert f"output directory {users_dir} exists and is not a judgeforge output" in err
    assert "keep, log.jsonl" in err and "--overwrite replaces only a `judgeforge data build` output" in err
    assert _tree(tmp_path) == before  # every byte as it was, nothing hidden beside it


def test_data_build_replaces_its_own_output_only_with_overwrite(tmp_path, capsys):
    log, out = _log(tmp_path / "in" / "log.jsonl"), tmp_path / "build"
    assert _build(capsys, log, out)[0] == 0
    first = _tree(tmp_path)
    assert json.loads((out / io.OUTPUT_MARKER).read_text()) == {"kind": "data"}

    rc, err = _build(capsys, log, out, "sample_policy=majority")
    assert rc == 2 and "already holds a `judgeforge data build` output: pass --overwrite to replace it" in err
    assert _tree(tmp_path) == first

    rc, err = _build(capsys, log, out, "sample_policy=majority", "--overwrite")
    assert rc == 0, err
    assert json.loads((out / "manifest.json").read_text())["sample_policy"] == "majority"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build", "in"]  # no .old or staging sibling left


def test_data_build_refuses_an_existing_file(tmp_path, capsys):
    log = _log(tmp_path / "log.jsonl")
    target = tmp_path / "results.txt"
    target.write_text("precious\n")
    before = _tree(tmp_path)
    for extra in ([], ["--overwrite"]):
        rc, err = _build(capsys, log, target, *extra)
        assert rc == 2 and f"output directory {target} is an existing file" in err
    assert _tree(tmp_path) == before


def test_every_writer_refuses_a_foreign_directory_untouched(users_dir, tmp_path, capsys):
    """eval, train, train merge, cascade calibrate and model ship check their output before any work."""
    from judgeforge.train.ship import ship_adapter

    before = _tree(tmp_path)
    for argv in (["eval", "--out", str(users_dir), "plots=false", "--overwrite"],
                 ["train", "--out", str(users_dir), "--overwrite"],
                 ["train", "--out", str(users_dir)],  # not a run to continue either
                 ["train", "merge", "--adapter", str(models.SHIPPED_ADAPTER), "--out", str(users_dir), "--overwrite"],
                 ["cascade", "calibrate", "predictions=nowhere", "--out", str(users_dir), "--overwrite"]):
        rc, err = _run(capsys, *argv)
        assert rc == 2 and "is not a judgeforge output" in err, argv
    with pytest.raises(io.OutputError, match="not a judgeforge output"):
        ship_adapter(models.SHIPPED_ADAPTER, "cmd", dest=users_dir)
    assert _tree(tmp_path) == before


def test_train_refuses_another_commands_output(tmp_path, capsys):
    log, build = _log(tmp_path / "log.jsonl"), tmp_path / "build"
    assert _build(capsys, log, build)[0] == 0
    before = _tree(tmp_path)
    rc, err = _run(capsys, "train", "--out", str(build), "--overwrite")
    assert rc == 2 and "is a `judgeforge data build` output" in err and "replaces only a `judgeforge train` run" in err
    assert _tree(tmp_path) == before


def test_eval_compare_replaces_only_an_earlier_comparison(tmp_path, capsys):
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\n")
    earlier = tmp_path / "compare.md"
    earlier.write_text("# Comparison: `a` (A) vs `b` (B)\n")
    before = _tree(tmp_path)
    rc, err = _run(capsys, "eval", "compare", "a", "b", "--out", str(notes), "--overwrite")
    assert rc == 2 and f"{notes} exists and is not a comparison table" in err
    rc, err = _run(capsys, "eval", "compare", "a", "b", "--out", str(earlier))
    assert rc == 2 and "already holds a comparison table: pass --overwrite" in err
    rc, err = _run(capsys, "eval", "compare", "a", "b", "--json", str(tmp_path), "--overwrite")
    assert rc == 2 and "exists and is not a file" in err
    assert _tree(tmp_path) == before


@pytest.fixture
def held(tmp_path):
    """Another live process holding the run lock of tmp_path/run through the same helper."""
    from testing.processes import lock_holder

    out = tmp_path / "run"
    with lock_holder(out) as holder:
        yield out, holder


def test_a_second_writer_of_a_run_directory_stops_at_once(held, capsys):
    out, holder = held
    for argv in (["eval", "--out", str(out), "plots=false"], ["train", "--out", str(out)]):
        rc, err = _run(capsys, *argv)
        assert rc == 2 and f"{out} is in use by another judgeforge process (PID {holder.pid})" in err, argv
    assert sorted(p.name for p in out.iterdir()) == [io.RUN_LOCK]  # the refused runs wrote nothing
    holder.send_signal(signal.SIGKILL)  # kill -9: the kernel drops the lock with the process
    holder.wait(timeout=30)
    with io.run_lock(out):
        pass
