"""The wheel ships the package and none of the test doubles (the repo's testing/ package: not in
pyproject's `packages`). That no module of the package imports them is tests/test_layers.py's."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOUBLES = REPO / "testing"
# Top-level entries of a checkout that a build does not read (VCS, virtualenv, run outputs, caches).
NOT_SOURCES = {"runs", "build", "site", "wandb", "dist"}


def _ignored(folder: str, names: list[str]) -> set[str]:
    top = Path(folder) == REPO
    return {n for n in names if n == "__pycache__" or n.endswith(".egg-info")
            or (top and (n.startswith(".") or n in NOT_SOURCES))}


def _public_defs(source: str) -> set[str]:
    """The public classes and functions a module defines at its top level."""
    return {n.name for n in ast.parse(source).body if isinstance(n, (ast.ClassDef, ast.FunctionDef))
            and not n.name.startswith("_")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel built from a copy of this checkout (testing/ included), as `pip wheel --no-deps
    --no-build-isolation .` builds it: setuptools' own backend, nothing downloaded."""
    tmp = tmp_path_factory.mktemp("wheel")
    src, out = tmp / "src", tmp / "dist"
    shutil.copytree(REPO, src, ignore=_ignored)  # a copy: a build writes build/ and egg-info in place
    out.mkdir()
    assert (src / "testing" / "engines.py").exists()
    code = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    subprocess.run([sys.executable, "-c", code, str(out)], cwd=src, check=True, capture_output=True,
                   timeout=600)
    (path,) = out.glob("judgeforge-*.whl")
    with zipfile.ZipFile(path) as zf:
        yield zf


def test_the_wheel_ships_no_test_double(wheel):
    files = wheel.namelist()
    assert {"judgeforge/serve/app.py", "judgeforge/serve/process.py", "judgeforge/serve/client_fleet.py",
            "judgeforge/default_judge/adapter_config.json"} <= set(files)
    tops = {f.split("/")[0] for f in files} - {"judgeforge"}
    assert len(tops) == 1 and tops.pop().endswith(".dist-info")  # the package and its metadata only
    test_only = {"testing", "tests", "fake_teacher"}
    assert not [f for f in files if test_only & set(Path(f).with_suffix("").parts)]
    # Nor under another name: no shipped module defines what a double module defines.
    doubles = set().union(*(_public_defs(p.read_text()) for p in DOUBLES.glob("*.py")))
    assert {"ScriptedEngine", "FakeTeacher", "make_lora_adapter", "VLLMServe"} <= doubles
    shipped = {f: _public_defs(wheel.read(f).decode()) & doubles for f in files if f.endswith(".py")}
    assert {f: names for f, names in shipped.items() if names} == {}


def test_the_wheel_ships_the_builtin_configs(wheel):
    """configs/ is package data (judgeforge/configs/...), byte for byte, and no module rides along."""
    files = set(wheel.namelist())
    shipped = {p.relative_to(REPO).as_posix(): p for p in (REPO / "configs").rglob("*") if p.is_file()}
    assert {"configs/train/embedded-judge.yaml", "configs/train/accelerate/zero3.json"} <= set(shipped)
    for rel, path in shipped.items():
        assert wheel.read(f"judgeforge/{rel}") == path.read_bytes(), rel
    assert not [f for f in files if f.startswith("judgeforge/configs/") and not f.endswith((".yaml", ".json"))]


def test_an_installed_wheel_finds_its_builtins_by_name(wheel, tmp_path):
    """Unpacked (what installing a pure wheel amounts to) and run from elsewhere than a checkout:
    `--config NAME` and `judgeforge config ls` read the wheel's own configs."""
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    wheel.extractall(site)
    elsewhere.mkdir()
    code = ("import judgeforge.config as c; from judgeforge.cli import main; "
            "print(c.resolve_config('embedded-judge', 'train')); main(['config', 'ls', 'cascade'])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, capture_output=True, text=True,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    resolved, listed = proc.stdout.splitlines()
    assert resolved == str(site / "judgeforge/configs/train/embedded-judge.yaml")
    assert listed.startswith("cascade/default  Calibrate the escalation threshold")
