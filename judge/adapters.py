"""The one owner of `judgeforge.json`: how a trained adapter (or a merged model) says what it is.

`judgeforge train` writes it next to the adapter weights, `judgeforge train merge` copies it into the
merged model, and everything that loads a judge checks it here with one rule: a directory trained on
another prompt template than the one this judgeforge renders (`judge.prompts.TEMPLATE_VERSION`) is
refused, since its scores would not be trustworthy. A directory that records no version is refused
where a version is required (adapters, unless explicitly allowed) and accepted elsewhere (plain
models). Pure logic: json and pathlib only.
"""

from __future__ import annotations

import json
from pathlib import Path

from judgeforge.judge.prompts import TEMPLATE_VERSION

META_FILE = "judgeforge.json"
LEGACY_META_FILES = ("judgeforge_adapter.json",)


class TemplateVersionMismatch(ValueError):
    """A judge directory was trained on another prompt template (or records none where required)."""


def meta_path(path: str | Path) -> Path | None:
    for name in (META_FILE, *LEGACY_META_FILES):
        f = Path(path) / name
        if f.is_file():
            return f
    return None


def read_meta(path: str | Path) -> dict:
    """The metadata a judge dir records ({} when it records none)."""
    f = meta_path(path)
    if f is None:
        return {}
    try:
        meta = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise TemplateVersionMismatch(f"{f} is not valid JSON: {e}") from None
    if not isinstance(meta, dict):
        raise TemplateVersionMismatch(f"{f} is not a JSON object")
    return meta


def new_meta(**fields) -> dict:
    """Metadata for a freshly trained adapter: the current template version plus `fields`."""
    return {"template_version": TEMPLATE_VERSION, **fields}


def check_template_version(path: str | Path, required: bool = True) -> dict:
    """Refuse a dir trained on another template (or recording none, if `required`); its metadata."""
    meta = read_meta(path)
    found = meta.get("template_version")
    if found is None:
        if required:
            raise TemplateVersionMismatch(
                f"{path} records no template_version (expected a {META_FILE} with "
                f"template_version={TEMPLATE_VERSION!r}); set engine.allow_unversioned_adapters=true "
                "to serve it anyway")
        return meta
    if found != TEMPLATE_VERSION:
        raise TemplateVersionMismatch(
            f"{path} was trained with prompt template {found!r} but this judgeforge renders "
            f"{TEMPLATE_VERSION!r}: its scores would not be trustworthy")
    return meta
