"""Raw record readers: files (JSON list/dict, JSONL, Parquet) and Hugging Face datasets.

Every record comes with its original text and position, so a rejected record is
written to rejects.jsonl exactly as it was read. A line that is not JSON is not
an error here: it is a record with `obj=None` that the builder rejects as
`unreadable_line`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from judgeforge.config import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(slots=True)
class Raw:
    line: int
    """1-based line number (JSONL) or element number (JSON list, Parquet, HF rows)."""
    text: str
    """The original line, or the element re-serialised for JSON lists and tables."""
    obj: Any = None
    """The parsed object (None when unreadable)."""
    error: str | None = None
    span: tuple[int, int] | None = None
    """Byte range of the line in its file, when `text` was not carried back from a worker."""


def resolve_path(path: str) -> Path | None:
    """A relative path is tried against the CWD, then the judgeforge checkout root; None if neither exists."""
    p = Path(path).expanduser()
    if p.exists():
        return p
    if not p.is_absolute() and (REPO_ROOT / p).exists():
        return REPO_ROOT / p
    return None


def looks_like_hub_id(path: str) -> bool:
    parts = path.split("/")
    return len(parts) == 2 and all(parts) and not path.startswith((".", "~")) and "." not in parts[1][-8:]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)


def _as_record(obj: Any) -> tuple[Any, str | None]:
    return (obj, None) if isinstance(obj, dict) else (None, f"not a JSON object ({type(obj).__name__})")


def line_raw(n: int, line: bytes) -> Raw | None:
    """A JSONL line (split on \\n only, as the parallel reader splits) -> Raw; None for a blank line."""
    text = line.decode("utf-8", errors="replace").rstrip("\r\n")
    if not text.strip():
        return None  # blank lines are not records
    try:
        obj, err = _as_record(json.loads(text))
    except ValueError as e:
        obj, err = None, f"bad JSON: {e}"
    return Raw(n, text, obj, err)


def iter_jsonl(path: Path) -> Iterator[Raw]:
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            raw = line_raw(n, line)
            if raw is not None:
                yield raw


def iter_json(path: Path) -> Iterator[Raw]:
    """A JSON list, or a dict keyed by id (BiGGen layout); falls back to JSONL if the file is not one document."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except ValueError:
        yield from iter_jsonl(path)
        return
    if isinstance(data, dict):
        items = []
        for key, value in data.items():
            if isinstance(value, dict) and "id" not in value:
                value = {"id": key, **value}
            items.append(value)
    elif isinstance(data, list):
        items = data
    else:
        raise ConfigError(f"{path}: expected a JSON list or object, got {type(data).__name__}")
    for n, obj in enumerate(items, 1):
        rec, err = _as_record(obj)
        yield Raw(n, _dumps(obj), rec, err)


def iter_parquet(path: Path) -> Iterator[Raw]:
    import pyarrow.parquet as pq

    n = 0
    for batch in pq.ParquetFile(path).iter_batches():
        for row in batch.to_pylist():
            n += 1
            yield Raw(n, _dumps(row), row)


def iter_hub(path: str, split: str | None, config: str | None) -> Iterator[Raw]:
    import datasets

    try:
        ds = datasets.load_dataset(path, config, split=split)
    except Exception as e:  # noqa: BLE001 - any hub/network failure becomes one clear message
        raise ConfigError(f"cannot load Hugging Face dataset {path!r} (split={split}): {e}") from e
    splits = [ds] if split else [ds[name] for name in sorted(ds)]
    n = 0
    for part in splits:
        for row in part:
            n += 1
            yield Raw(n, _dumps(row), row)


def open_source(path: str, hf_split: str | None = None,
                hf_config: str | None = None) -> tuple[Iterator[Raw], Path | None]:
    """(records, resolved local path; None for a hub dataset). A directory is loaded with
    `datasets.load_dataset(dir)` like a hub id (e.g. a downloaded BiGGen-Bench-Results snapshot)."""
    local = resolve_path(path)
    if local is None:
        if looks_like_hub_id(path):
            return iter_hub(path, hf_split, hf_config), None
        raise ConfigError(f"input not found: {path} (tried the current directory and {REPO_ROOT})")
    if local.is_dir():  # a local copy of a hub dataset (data files or a snapshot): the same loader
        return iter_hub(str(local), hf_split, hf_config), local
    suffix = local.suffix.lower()
    if suffix == ".parquet":
        return iter_parquet(local), local
    if suffix == ".json":
        return iter_json(local), local
    return iter_jsonl(local), local
