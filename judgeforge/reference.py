"""The CLI/config reference, generated from the typed configs (their field docstrings are its text).

The docs site builds it at build time (docs/hooks/cli_reference.py), so it cannot drift from the
configs: one Markdown page per command group (`judgeforge data`, `judgeforge eval`, ...), each
command with its `--help` and a table of every config field, nested sections included. A field
without a docstring is an error here, not a blank cell.
"""

from __future__ import annotations

import collections.abc as abc
import contextlib
import importlib
import io
import json
import os
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

from pydantic import BaseModel
from pydantic_core import PydanticUndefined, to_jsonable_python

# A command's configs: (key prefix, "module:Class"); "" for the command's own config.
Sections = Sequence[tuple[str, str]]
HELP_WIDTH = 100  # argparse wraps at $COLUMNS: fixed, so the pages do not depend on who builds them


class UndocumentedField(ValueError):
    """A config field has no docstring: the reference would have nothing to say about it."""


@dataclass(frozen=True)
class Row:
    """One config field in the reference: its dotted key as written in YAML or a key=value override."""

    key: str
    type: str
    default: str
    doc: str


def resolve(target: str) -> Any:
    """`"package.module:attr"` -> the attribute (the CLI names its targets this way, lazily)."""
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def type_name(tp: Any) -> str:
    """A field annotation as a reader writes it: `int | None`, `"auto" | "never"`, `list[str]`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is type(None):
        return "None"
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(a) for a in args)}]"
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


_BOUNDS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "multiple_of": "multiple of",
           "min_length": "min length", "max_length": "max length"}


def constraints(field) -> list[str]:
    """`Field(gt=0, le=1)` -> ["> 0", "<= 1"] (annotated-types metadata pydantic keeps)."""
    out = []
    for meta in field.metadata:
        for attr, sign in _BOUNDS.items():
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
    return out


def _default(field, instance: BaseModel | None, name: str) -> Any:
    """The effective default: the enclosing default section's value where there is one (a parent may
    override its section's defaults, e.g. `EngineConfig(max_model_len=4096)`), else the field's own."""
    if instance is not None:
        return getattr(instance, name)
    if field.default is PydanticUndefined and field.default_factory is None:
        return PydanticUndefined
    return field.get_default(call_default_factory=True)


def format_default(value: Any) -> str:
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "(section)"  # its rows follow, each with its effective default
    return json.dumps(to_jsonable_python(value), ensure_ascii=False)


def nested_configs(tp: Any, suffix: str = "") -> Iterator[tuple[str, type[BaseModel]]]:
    """The config sections inside an annotation, with how their keys continue: `X | None` -> ("", X),
    `list[X]` -> ("[]", X), `dict[str, X]` -> (".<name>", X)."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        yield suffix, tp
        return
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (list, tuple, set, frozenset, abc.Sequence):
        suffix += "[]"
    elif origin in (dict, abc.Mapping):
        args, suffix = args[1:], suffix + ".<name>"
    elif origin is typing.Annotated:
        args = args[:1]
    for arg in args:
        if arg is not Ellipsis:
            yield from nested_configs(arg, suffix)


def _doc(cls: type[BaseModel], name: str, key: str) -> str:
    doc = (cls.model_fields[name].description or "").strip()
    if not doc:
        raise UndocumentedField(f"{cls.__module__}.{cls.__qualname__}.{name} (key `{key}`) has no "
                                f"docstring: document it with a string literal under the field")
    return " ".join(doc.split())


def config_rows(cls: type[BaseModel], prefix: str = "", instance: BaseModel | None = None,
                _seen: tuple[type, ...] = ()) -> list[Row]:
    """Every field of `cls`, depth first: a section's row, then its fields' rows under `section.`."""
    if cls in _seen:
        path = " > ".join(c.__name__ for c in _seen)
        raise ValueError(f"config {cls.__qualname__} contains itself ({path})")
    rows = []
    for name, field in cls.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        value = _default(field, instance, name)
        kind = ", ".join([type_name(field.annotation), *constraints(field)])
        rows.append(Row(key, kind, format_default(value), _doc(cls, name, key)))
        for suffix, sub in nested_configs(field.annotation):
            inner = value if isinstance(value, sub) and not suffix else None
            rows += config_rows(sub, key + suffix, inner, (*_seen, cls))
    return rows


_CODE = re.compile(r"(`[^`]*`)")


def cell(text: str) -> str:
    """Text for one Markdown table cell: outside code spans, what Markdown would read as markup
    (a pipe ends the cell, `<key>` would be an HTML tag) is escaped; code spans stay as they are."""
    parts = _CODE.split(" ".join(text.split()))
    for i in range(0, len(parts), 2):
        part = parts[i].replace("\\", "\\\\").replace("|", "\\|").replace("*", "\\*").replace("_", "\\_")
        parts[i] = part.replace("<", "&lt;")
    return "".join(parts)


def _value(default: str) -> str:
    return default if default in ("required", "(section)") else f"`{default}`"


def rows_table(rows: Sequence[Row]) -> str:
    lines = ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
    lines += [f"| `{r.key}` | `{r.type}` | {_value(r.default)} | {cell(r.doc)} |" for r in rows]
    return "\n".join(lines)


def help_text(main: Callable[[list[str]], Any]) -> str:
    """A command's `--help`, as argparse prints it (its `main(["--help"])`, which exits)."""
    out, old = io.StringIO(), os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_WIDTH)
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main(["--help"])
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return out.getvalue().rstrip()


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def config_section(prefix: str, cls: type[BaseModel]) -> str:
    """One config class's table, headed by its name and (where it has one) its docstring's summary."""
    where = f"keys under `{prefix}.`" if prefix else "the command's config"
    head = f"Config `{cls.__name__}` ({cls.__module__}), {where}."
    summary = _first_paragraph(cls.__doc__)
    text = [head] + ([cell(summary)] if summary else [])
    return "\n\n".join([*text, rows_table(config_rows(cls, prefix))])


def command_section(words: Sequence[str], main: Callable, sections: Sequence[tuple[str, type]]) -> str:
    name = "judgeforge " + " ".join(words)
    parts = [f"## `{name}`", f"```text\n{help_text(main)}\n```"]
    if sections:
        parts.append("Settings resolve as defaults < the YAML of `--config FILE` (or a built-in config's "
                     "NAME: `judgeforge config ls`) < named flags < "
                     "`key=value` overrides (dotted keys reach nested sections; `[]` marks a list's items).")
    else:
        parts.append("Flags only: this command takes no config file.")
    parts += [config_section(prefix, cls) for prefix, cls in sections]
    return "\n\n".join(parts)


def pages(commands: Mapping[tuple[str, ...], str], configs: Mapping[tuple[str, ...], Sections],
          load: Callable[[str], Any] = resolve) -> dict[str, str]:
    """{"reference/<group>.md": Markdown} for every command group, plus reference/index.md listing them.
    `commands`: words -> "module:main"; `configs`: words -> its config sections (judgeforge.cli's)."""
    unknown = set(configs) - set(commands)
    if unknown:
        raise ValueError(f"configs for unknown commands: {sorted(unknown)}")
    groups: dict[str, list[str]] = {}
    for words in sorted(commands):
        sections = [(prefix, load(target)) for prefix, target in configs.get(words, ())]
        groups.setdefault(words[0], []).append(command_section(words, load(commands[words]), sections))
    out = {f"reference/{g}.md": f"# `judgeforge {g}`\n\n" + "\n\n".join(s) + "\n" for g, s in groups.items()}
    links = [f"- [`judgeforge {g}`]({g}.md)" for g in groups]
    out["reference/index.md"] = ("# CLI reference\n\nGenerated from the commands' argument parsers "
                                 "and their typed configs (each field's docstring).\n\n"
                                 + "\n".join(links) + "\n")
    return out
