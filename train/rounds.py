"""Continual rounds: continue a trained adapter on the next window of the data build it trained on.

A round trains on a window of a build: positions [offset, offset + limit) of one shuffle of its
train split fixed by `data.seed` (train.data.window), so consecutive rounds never see a record twice.
The adapter's judgeforge.json records each window it took (`data[].window`); `continue_from`
(`judgeforge train --continue ADAPTER`) reads them and starts each source of the same build where
the adapter's window ended. Adapters trained before judgeforge recorded windows have them in the
`config.yaml` saved beside their weights.

Pure logic on dicts and configs, except `check_build` (reads the build's train.jsonl).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from judgeforge.config import ConfigError
from judgeforge.train.config import TrainConfig


@dataclass(frozen=True)
class Window:
    """One window of a build that an adapter trained on."""

    path: str
    offset: int
    limit: int | None
    seed: int
    train_sha256: str | None = None

    @property
    def end(self) -> int | None:
        """The first position after the window (None: it ran to the end of the build)."""
        return None if self.limit is None else self.offset + self.limit


def window_record(offset: int | None, limit: int | None, seed: int) -> dict | None:
    """What judgeforge.json says of a source's window (None: a seeded draw, not a window)."""
    return None if offset is None else {"offset": offset, "limit": limit, "seed": seed}


def windows_of(meta: dict, saved: dict | None = None) -> list[Window]:
    """The windows an adapter trained on, from its judgeforge.json `meta`; where that records none,
    from the windowed sources of its saved config (`saved`), with judgeforge.json's hashes."""
    data = [d for d in meta.get("data") or [] if isinstance(d, dict) and "path" in d]
    recorded = [Window(d["path"], **d["window"], train_sha256=d.get("train_sha256"))
                for d in data if d.get("window")]
    if recorded or not saved or any("window" in d for d in data):
        return recorded
    shas = {_norm(d["path"]): d.get("train_sha256") for d in data}
    section = saved.get("data") or {}
    seed = int(section.get("seed", 42))
    return [Window(s["path"], int(s["offset"]), s.get("limit"), seed, shas.get(_norm(s["path"])))
            for s in section.get("sources") or [] if s.get("offset") is not None]


def last_windows(windows: list[Window], adapter: str) -> dict[str, Window]:
    """Per build (normalised path), the window that ended furthest: where the next one starts."""
    if not windows:
        raise ConfigError(f"{adapter} records no window of a data build (data.sources[].offset): it trained "
                          "on seeded draws, so there is no next window; set model.adapter and the data instead")
    last: dict[str, Window] = {}
    for w in windows:
        if w.end is None:
            raise ConfigError(f"{adapter} trained on all of {w.path} from offset {w.offset} (no limit): "
                              "that build has no next window")
        key = _norm(w.path)
        if key not in last or w.end > last[key].end:
            last[key] = w
    return last


def continue_round(cfg: TrainConfig, adapter: str, windows: list[Window], meta: dict
                   ) -> tuple[TrainConfig, list[Window]]:
    """`cfg` continued from `adapter`, and the adapter's windows it continues.

    model.adapter becomes `adapter`; every data source of a build the adapter took a window of starts
    where that window ended (its `limit` kept, unset: the window's size). Idempotent, so a resolved
    config resolves to itself (a rerun resumes the same round)."""
    _check_base(cfg, adapter, meta)
    last = last_windows(windows, adapter)
    sources, used = [], []
    for s in cfg.data.sources:
        w = last.get(_norm(s.path))
        if w is None:
            sources.append(s)
            continue
        if w.seed != cfg.data.seed:
            raise ConfigError(f"{adapter} took its window of {w.path} from the shuffle of data.seed={w.seed}; "
                              f"this config has data.seed={cfg.data.seed}, whose windows would overlap it")
        sources.append(s.model_copy(update={"offset": w.end, "limit": w.limit if s.limit is None else s.limit}))
        used.append(w)
    if not used:
        raise ConfigError(f"{adapter} took windows of {sorted({w.path for w in last.values()})}, but data.sources "
                          f"lists none of them ({[s.path for s in cfg.data.sources]}): list that build, or "
                          "continue without --config to reuse the adapter's own recipe")
    model = cfg.model.model_copy(update={"adapter": adapter})
    return cfg.model_copy(update={"model": model,
                                  "data": cfg.data.model_copy(update={"sources": sources})}), used


def check_out(out: str, adapter_dir: Path) -> None:
    """The new round needs its own run directory, not the continued adapter's."""
    if Path(out).resolve() in (adapter_dir.resolve(), adapter_dir.resolve().parent):
        raise ConfigError(f"out {out} is the run of the adapter being continued: give the new round its "
                          "own --out")


def check_build(w: Window, adapter: str) -> None:
    """The build still holds the records the window was a shuffle of, and some after it."""
    from judgeforge.io import read_jsonl, sha256_file

    train = Path(w.path) / "train.jsonl"
    if not train.is_file():
        raise ConfigError(f"{w.path}, the data build {adapter} trained on, has no train.jsonl: rebuild it with "
                          "the same `judgeforge data build` command (builds are byte-identical)")
    if w.train_sha256 and sha256_file(train) != w.train_sha256:
        raise ConfigError(f"{train} changed since {adapter} trained on it (sha256 {w.train_sha256[:12]}...): "
                          "its windows no longer name the same records; continue on a new build instead")
    n = len(read_jsonl(train))
    if w.end >= n:
        raise ConfigError(f"{adapter}'s windows took positions up to {w.end} of the {n} training records of "
                          f"{w.path}: none are left for a next round")


def _check_base(cfg: TrainConfig, adapter: str, meta: dict) -> None:
    names = {meta.get("base_model"), meta.get("base_model_resolved")} - {None}
    if names and cfg.model.name not in names:
        raise ConfigError(f"{adapter} was trained on base model {meta.get('base_model')!r}, but model.name is "
                          f"{cfg.model.name!r}: set model.name={meta.get('base_model')}")


def _norm(path: str) -> str:
    return os.path.abspath(path)  # sources name builds relative to the cwd, as training reads them
