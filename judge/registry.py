"""A registry of named entries (lm-evaluation-harness's `Registry.register` / `get` style).

    SET_KINDS = Registry("set kind")

    @SET_KINDS.register("pandalm")
    def load_pandalm(...): ...

    SET_KINDS.get("pandalm")     # the entry; an unknown name is an UnknownName listing the registered

One small generic class, so every open list of kinds (eval set kinds, engine kinds) registers, looks
up and reports unknown names the same way. Pure logic: no imports beyond the core config error.
"""

from __future__ import annotations

from typing import Generic, Iterator, TypeVar

from judgeforge.config import ConfigError

T = TypeVar("T")


class UnknownName(ConfigError):
    """A name no entry is registered under; the message lists the registered ones. A ConfigError
    (a ValueError), so a pydantic validator turns it into a field error and the CLI prints one line."""


class Registry(Generic[T]):
    """Entries by name. `register` works as a call or as a decorator; registering a taken name is an
    error unless `replace=True` (a typo'd duplicate would otherwise silently shadow a kind)."""

    def __init__(self, what: str):
        self.what = what
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T | None = None, *, replace: bool = False):
        """Register `entry` under `name`; without `entry`, a decorator registering what it decorates."""
        if entry is None:
            def decorate(obj: T) -> T:
                self.register(name, obj, replace=replace)
                return obj
            return decorate
        if not name or not isinstance(name, str):
            raise ValueError(f"a {self.what} needs a non-empty name, got {name!r}")
        if name in self._entries and self._entries[name] is not entry and not replace:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except (KeyError, TypeError):  # TypeError: an unhashable value from a config
            raise UnknownName(f"unknown {self.what} {name!r}; registered: {', '.join(self.names())}") from None

    def remove(self, name: str) -> None:
        """Drop a registration (tests that register a kind of their own undo it)."""
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

