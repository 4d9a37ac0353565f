"""The layer order, read from the import graph: a cycle between stages fails here, not in review.

judgeforge core (judgeforge/*.py) < judge < scale < data < train < eval < cascade < serve < the package's
public face (judgeforge/__init__.py, api.py, cli.py). A module imports only from its own layer or
lower ones; every import counts, function-level (lazy) ones included, except those under
`if TYPE_CHECKING:`, which never run.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("core", "judge", "scale", "data", "train", "eval", "cascade", "serve", "top")
# The package's public face sits above every stage: it dispatches to them or re-exports them.
TOP_MODULES = {"judgeforge", "judgeforge.cli", "judgeforge.api"}


def layer_of(module: str) -> str | None:
    """The layer of a `judgeforge...` module name (None outside the package)."""
    parts = module.split(".")
    if parts[0] != "judgeforge":
        return None
    if module in TOP_MODULES or any(module.startswith(m + ".") for m in TOP_MODULES - {"judgeforge"}):
        return "top"
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "core"


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(source: str, module: str, modules: frozenset[str], is_package: bool = False) -> set[str]:
    """Every module `source` imports, skipping `if TYPE_CHECKING:` blocks: `from X import y` is X.y
    when that is one of `modules`, else X; relative imports are resolved against `module`."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join(pkg + ([base] if base else []))
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def violations(sources: dict[str, str], packages: frozenset[str] = frozenset()) -> list[str]:
    """`importer -> imported (layer < layer)` for every upward import among `sources`
    (module name -> source text)."""
    out, modules = [], frozenset(sources)
    for module, source in sorted(sources.items()):
        mine = LAYERS.index(layer_of(module))
        for target in sorted(imports(source, module, modules, module in packages)):
            theirs = layer_of(target)
            if theirs is not None and LAYERS.index(theirs) > mine:
                out.append(f"{module} -> {target} ({layer_of(module)} imports {theirs})")
    return out


def package_sources() -> tuple[dict[str, str], frozenset[str]]:
    """The installed package's modules, found through pyproject's package-dir (the stages are
    top-level folders installed as `judgeforge.<stage>`)."""
    dirs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    sources, packages = {}, set()
    for package, folder in dirs.items():
        for path in sorted((REPO / folder).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            if path.stem == "__init__":
                packages.add(name)
            sources[name] = path.read_text(encoding="utf-8")
    return sources, frozenset(packages)


def test_the_package_imports_only_downward():
    sources, packages = package_sources()
    assert {"judgeforge.cli", "judgeforge.judge.judge", "judgeforge.serve.app"} <= set(sources)
    assert violations(sources, packages) == []


def test_core_imports_no_stage():
    sources, packages = package_sources()
    stages = set(LAYERS) - {"core", "top"}
    for module, source in sources.items():
        if layer_of(module) == "core":
            hit = {t for t in imports(source, module, frozenset(sources), module in packages)
                   if layer_of(t) in stages}
            assert not hit, f"{module} imports {sorted(hit)}"


def test_the_package_imports_no_test_double():
    """The test doubles (the repo's testing/ package, which the wheel does not ship) and the tests are
    never imported by the package, lazily or not; none is left inside it either."""
    sources, packages = package_sources()
    for module, source in sources.items():
        hit = {t for t in imports(source, module, frozenset(sources), module in packages)
               if t.split(".")[0] in {"testing", "tests"}}
        assert not hit, f"{module} imports {sorted(hit)}"
    assert not {m for m in sources if m.rsplit(".", 1)[-1] in {"testing", "fake_teacher"}}


def test_the_checker_finds_an_upward_import_even_a_lazy_one():
    sources = {
        "judgeforge": "",
        "judgeforge.cli": "",
        "judgeforge.io": "import os\n",
        "judgeforge.judge.x": "from judgeforge import io\nfrom judgeforge.io import atomic_dir\n",
        "judgeforge.data.y": "def f():\n    from judgeforge.eval import run\n",
        "judgeforge.eval.run": "from judgeforge.data import y\n",
        "judgeforge.serve.z": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from judgeforge.cli import main\nelse:\n    import judgeforge.cli\n",
        "judgeforge.cascade.w": "from . import store\nfrom ..serve import app\n",
        "judgeforge.models": "class M:\n    def f(self):\n        import judgeforge.train.merge\n",
    }
    assert violations(sources, frozenset()) == [
        "judgeforge.cascade.w -> judgeforge.serve (cascade imports serve)",
        "judgeforge.data.y -> judgeforge.eval.run (data imports eval)",
        "judgeforge.models -> judgeforge.train.merge (core imports train)",
        "judgeforge.serve.z -> judgeforge.cli (serve imports top)",
    ]


def test_layer_names():
    assert layer_of("judgeforge.models") == "core"
    assert layer_of("judgeforge.judge.engines.vllm") == "judge"
    assert layer_of("judgeforge.scale.ray_runner") == "scale"
    assert layer_of("judgeforge.cli") == layer_of("judgeforge") == "top"
    assert layer_of("numpy") is None
