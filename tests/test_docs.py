"""The docs site builds strictly, and its CLI reference is complete: generated from the commands'
typed configs (judgeforge.reference, through docs/hooks/cli_reference.py), every field with its
docstring."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from judgeforge import cli, reference
from judgeforge.config import Config

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return reference.pages(cli.COMMANDS, cli.CONFIGS)


def test_site_builds_strictly(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "reference" / "train" / "index.html").is_file()
    assert (tmp_path / "results" / "index.html").is_file()  # bench/RESULTS.md, added by the hook


def _expected(cls: type[Config], prefix: str = ""):
    """(dotted key, docstring) of every field, read straight from model_fields, sections recursed."""
    for name, field in cls.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        yield key, " ".join((field.description or "").split())
        for suffix, sub in reference.nested_configs(field.annotation):
            yield from _expected(sub, key + suffix)


def _row(page: str, key: str) -> str:
    hits = [line for line in page.splitlines() if line.startswith(f"| `{key}` |")]
    assert len(hits) == 1, f"{key}: {len(hits)} rows"
    return hits[0]


def test_reference_lists_every_field_with_its_docstring(pages):
    for words, sections in cli.CONFIGS.items():
        page = pages[f"reference/{words[0]}.md"]
        section = page.split(f"## `judgeforge {' '.join(words)}`\n", 1)[1].split("\n## ", 1)[0]
        for prefix, target in sections:
            for key, doc in _expected(reference.resolve(target), prefix):
                assert doc, f"{' '.join(words)}: {key} has no docstring"
                assert reference.cell(doc) in _row(section, key), key


def test_every_command_has_a_section_with_its_help(pages):
    for words in cli.COMMANDS:
        name = "judgeforge " + " ".join(words)
        page = pages[f"reference/{words[0]}.md"]
        assert f"## `{name}`" in page and f"usage: {name}" in page, name
    assert set(pages) == {f"reference/{w[0]}.md" for w in cli.COMMANDS} | {"reference/index.md"}


def test_configs_table_names_what_each_command_loads():
    """cli.CONFIGS is hand-kept: it must name exactly the classes each command's module passes to
    load_config, or the reference would miss (or invent) a command's settings."""
    for words, target in cli.COMMANDS.items():
        origin = importlib.util.find_spec(target.split(":")[0]).origin
        loaded = set(re.findall(r"load_config\(\s*(\w+)", Path(origin).read_text()))
        listed = {t.split(":")[1] for _, t in cli.CONFIGS.get(words, ())}
        assert loaded == listed, " ".join(words)


def test_defaults_follow_the_enclosing_section(pages):
    """eval's judges default to EngineConfig(max_model_len=4096); serve's engine to the class default
    (None: the judge's trained length)."""
    assert "| `4096` |" in _row(pages["reference/eval.md"], "judges[].engine.max_model_len")
    assert "| `null` |" in _row(pages["reference/serve.md"].split("## `judgeforge serve`")[1],
                                "engine.max_model_len")
    assert "| required |" in _row(pages["reference/train.md"], "data.sources[].path")


class _Inner(Config):
    documented: int = 1
    """Has one."""
    bare: int = 2


class _Outer(Config):
    section: _Inner = _Inner()
    """A section whose field lacks a docstring."""


def test_a_field_without_a_docstring_fails_loudly():
    with pytest.raises(reference.UndocumentedField, match=r"_Inner\.bare \(key `section\.bare`\)"):
        reference.config_rows(_Outer)


def test_cells_escape_markup_outside_code():
    assert reference.cell("a | b <key> `x | <y>`\n  c") == "a \\| b &lt;key> `x | <y>` c"
    assert reference.type_name(int | None) == "int | None"
    assert reference.format_default(None) == "null"
