"""`judgeforge config ls|cp`: the built-in configs (configs/<stage>/*.yaml, shipped in the wheel).

`ls` lists them, one line each: `stage/name` and the YAML's first comment line. `cp` copies one
to a file of the user's to start a recipe from. `--config NAME` reads one in place (judgeforge.config
`resolve_config`, which owns the lookup).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from judgeforge.config import STAGES, ConfigError, builtin_config, builtin_configs


def description(path: Path) -> str:
    """The first comment line of a YAML, without its `#` ("" when it has none)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("#"):
            return line.lstrip().lstrip("#").strip()
    return ""


def listing(stage: str | None = None) -> list[str]:
    """One line per built-in config: `stage/name  description`, names padded to one column."""
    found = builtin_configs(stage)
    width = max(map(len, found), default=0)
    return [f"{key:<{width}}  {description(path)}".rstrip() for key, path in found.items()]


def ls_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="judgeforge config ls",
                                description="List the built-in configs (`--config NAME` reads one).")
    p.add_argument("stage", nargs="?", choices=STAGES, help="only this stage's configs")
    args = p.parse_args(argv)
    print("\n".join(listing(args.stage)))  # the command's output, not a log line
    return 0


def copy(name: str, dest: str | Path, overwrite: bool = False) -> Path:
    """Copy the built-in `name` (`stage/name`, or a name only one stage has) to `dest`, byte for byte;
    an existing `dest` only with `overwrite`. A directory `dest` receives `<name>.yaml`."""
    src = builtin_config(name)
    if src is None:
        stem = name.removesuffix(".yaml")
        several = [key for key in builtin_configs() if key.split("/", 1)[1] == stem]
        if len(several) > 1:
            raise ConfigError(f"{name!r} is a built-in of several stages: name one of {', '.join(several)}")
        raise ConfigError(f"no built-in config {name!r}; built-ins: {', '.join(builtin_configs())}")
    out = Path(dest).expanduser()
    if out.is_dir():
        out = out / src.name
    if out.exists() and not overwrite:
        raise ConfigError(f"{out} exists: pass --overwrite to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, out)
    return out


def cp_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="judgeforge config cp",
                                description="Copy a built-in config to a file to start a recipe from.")
    p.add_argument("name", help="the built-in: stage/name (`judgeforge config ls`), or a name one stage "
                                "alone has")
    p.add_argument("path", help="the file to write (a directory: NAME.yaml in it)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing file at PATH")
    args = p.parse_args(argv)
    print(copy(args.name, args.path, args.overwrite))  # where it went: the command's output
    return 0
