"""Typed configs: defaults < YAML < CLI `key=value` overrides.

Every command has one pydantic config class (fields documented by their
docstrings, litgpt-style). `load_config` resolves it; `save_resolved` writes the
result beside the command's output so every artefact says how it was made. A YAML may
start from another (`extends: default.yaml`, relative to the file) and state only what it
changes; the resolved config saved beside the output is the whole, merged one.

A relative path in a config (an input, a vendored set, an accelerate config) is the current
directory's when it is there, else the shipped tree's (`shipped_path`, under `PACKAGE_ROOT`), so the
shipped configs work from any directory.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any, Sequence, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from judgeforge.io import atomic_write_text
from judgeforge.redact import scrub


# The folder the stage packages (data/, judge/, ...) are in: the checkout, or the installed
# `judgeforge` package, whose sub-packages they are in a wheel (data/vendor ships as package data).
# Found through the import system: this module's own place differs between the two layouts.
PACKAGE_ROOT = Path(importlib.util.find_spec("judgeforge.data").origin).resolve().parents[1]


def shipped_path(path: str | Path) -> Path:
    """`path` (~ expanded) when absolute or present in the current directory, else under
    PACKAGE_ROOT when it is there (configs/..., data/vendor/...), else `path` as given."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists() or not (PACKAGE_ROOT / p).exists():
        return p
    return PACKAGE_ROOT / p


class ConfigError(ValueError):
    """A config file, key or value is wrong; the message names it."""


class Config(BaseModel):
    """Base for every command config: unknown keys are errors, fields are documented."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)


C = TypeVar("C", bound=Config)


def parse_override(item: str) -> tuple[list[str], Any]:
    """`a.b=3` -> (["a", "b"], 3). Values are parsed as YAML so lists/bools/numbers work."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not of the form key=value")
    key, raw = item.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {item!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def _set_dotted(tree: dict, path: list[str], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {'.'.join(path)}: {part!r} is not a section")
        node = child
    node[path[-1]] = value


EXTENDS = "extends"
"""The top-level key naming the YAML a config file starts from (its path relative to that file)."""


def merge_trees(base: dict, over: dict) -> dict:
    """`over` on top of `base`, as new dicts: mappings merge key by key, anything else in `over`
    (a scalar, a list, null) replaces what `base` has, so a list of sets is restated whole."""
    merged = dict(base)
    for key, value in over.items():
        below = merged.get(key)
        both = isinstance(below, dict) and isinstance(value, dict)
        merged[key] = merge_trees(below, value) if both else value
    return merged


def _load_mapping(p: Path) -> dict:
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {p} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a mapping at the top level")
    return data


def read_yaml(path: str | Path, _chain: tuple[Path, ...] = ()) -> dict:
    """The file's mapping; when it names a file under `extends`, that file's (read the same way)
    with this one's keys merged on top (`merge_trees`), so a variant states only what it changes."""
    p = Path(path)
    data = _load_mapping(p)
    parent = data.pop(EXTENDS, None)
    if parent is None:
        return data
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"config file {p}: `{EXTENDS}` must be a YAML file's path, got {parent!r}")
    chain = _chain + (p.resolve(),)
    base = (p.parent / parent).resolve()
    if base in chain:
        raise ConfigError("config files extend each other in a cycle: "
                          + " -> ".join(str(c) for c in chain + (base,)))
    return merge_trees(read_yaml(base, chain), data)


def _format_validation(cls: type, err: ValidationError, source: str) -> str:
    lines = [f"invalid {cls.__name__} ({source}):"]
    for e in err.errors():
        key = ".".join(str(x) for x in e["loc"]) or "<root>"
        msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
        # A rejected value may be a URL with a password in it: the message shows it redacted.
        lines.append(f"  {key}: {msg} (got {scrub(repr(e.get('input')))})"[:400])
    return "\n".join(lines)


def load_config(cls: type[C], path: str | Path | None = None, overrides: Sequence[str] = (),
                extra: dict[str, Any] | None = None) -> C:
    """Resolve `cls` from defaults, then the YAML at `path`, then `extra`
    (named CLI flags), then `key=value` overrides (highest precedence)."""
    tree: dict = read_yaml(path) if path else {}
    for key, value in (extra or {}).items():
        if value is not None:
            _set_dotted(tree, key.split("."), value)
    for item in overrides:
        keys, value = parse_override(item)
        _set_dotted(tree, keys, value)
    try:
        return cls.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(_format_validation(cls, e, str(path or "defaults"))) from None


def dump_config(cfg: Config) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def save_resolved(cfg: Config, out_dir: str | Path, name: str = "config.yaml") -> Path:
    """Write the fully resolved config beside an output (atomically)."""
    path = Path(out_dir) / name
    atomic_write_text(path, dump_config(cfg))
    return path


def command_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An argparse parser with the shared `--config` flag and trailing key=value overrides."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", "-c", help="YAML config file (defaults when omitted)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, dotted keys for nested fields")
    return parser
