"""Typed configs: defaults < YAML < CLI `key=value` overrides.

Every command has one pydantic config class (fields documented by their
docstrings, litgpt-style). `load_config` resolves it; `save_resolved` writes the
result beside the command's output so every artefact says how it was made. A YAML may
start from another (`extends: default.yaml`, relative to the file, or a built-in as
`extends: train/embedded-judge`) and state only what it changes; the resolved config saved beside
the output is the whole, merged one.

The shipped configs (configs/<stage>/<name>.yaml, package data in a wheel) are built-ins: `--config`
takes a path or a built-in's name (`resolve_config`), `judgeforge config ls|cp` lists and copies them.

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


CONFIGS_DIR = PACKAGE_ROOT / "configs"
"""The built-in configs, one folder per stage (in a wheel: package data of `judgeforge.configs`)."""
STAGES = ("data", "train", "eval", "serve", "cascade")
"""The stages with built-in configs: each command reads the YAMLs of its own stage's folder."""


def builtin_configs(stage: str | None = None) -> dict[str, Path]:
    """{"stage/name": path} of the built-in configs (configs/<stage>/*.yaml; not the accelerate
    configs one folder down), all stages' or one's, sorted."""
    stages = STAGES if stage is None else (stage,)
    return {f"{s}/{p.stem}": p for s in stages for p in sorted((CONFIGS_DIR / s).glob("*.yaml"))}


def builtin_config(name: str, stage: str | None = None) -> Path | None:
    """The built-in `name` (".yaml" optional): `stage/name` names it in any stage; a bare name only
    in `stage`, or in any stage when `stage` is None and exactly one stage has it. None when none is."""
    name = name.removesuffix(".yaml")
    known = builtin_configs()
    if "/" in name:
        return known.get(name)
    if stage is not None:
        return known.get(f"{stage}/{name}")
    hits = [p for key, p in known.items() if key.split("/", 1)[1] == name]
    return hits[0] if len(hits) == 1 else None


def resolve_config(value: str | Path, stage: str | None) -> Path:
    """What `--config VALUE` names: a file when there is one (as given, or under the shipped tree:
    `configs/...` works from any directory), else the built-in config `VALUE` of `stage` (a bare
    name, or `stage/name`). Neither: a ConfigError listing the stage's built-ins."""
    path = shipped_path(value)
    if path.is_file():
        return path
    hit = builtin_config(str(value), stage) if stage in STAGES else None
    if hit is not None:
        return hit
    names = ", ".join(k.split("/", 1)[1] for k in builtin_configs(stage)) if stage in STAGES else ""
    offer = f"; built-in {stage} configs: {names}" if names else ""
    raise ConfigError(f"config file not found: {value} (neither a file nor a built-in config){offer}")


class ConfigFlag(argparse.Action):
    """`--config VALUE`, stored resolved (`resolve_config` for the command's stage) as a path string;
    a name that is no config raises ConfigError, which the CLI reports as a config error."""

    def __init__(self, *args, stage: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.stage = stage

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, str(resolve_config(values, self.stage)))


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
"""The top-level key naming the YAML a config file starts from: its path relative to that file when
that file exists, else a built-in named `stage/name` (a bare name is a path only: which stage a
user's file is for is not known here)."""


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
    if not base.is_file() and "/" in parent:
        base = (builtin_config(parent) or base).resolve()
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


def add_config_flag(parser: argparse.ArgumentParser, stage: str | None,
                    help: str = "YAML config file (defaults when omitted)") -> None:
    """The shared `--config/-c`: a path, or the name of one of `stage`'s built-in configs."""
    metavar = "FILE"
    if stage is not None:
        metavar = "FILE|NAME"
        help += f"; or a built-in {stage} config's name (`judgeforge config ls {stage}`)"
    parser.add_argument("--config", "-c", action=ConfigFlag, stage=stage, metavar=metavar, help=help)


def command_parser(prog: str, description: str, stage: str | None = None) -> argparse.ArgumentParser:
    """An argparse parser with the shared `--config` flag (built-in names looked up in `stage`'s
    configs) and trailing key=value overrides."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_config_flag(parser, stage)
    parser.add_argument("overrides", nargs="*", help="key=value overrides, dotted keys for nested fields")
    return parser
