"""Hash-keyed results appended as batches finish: what a rerun of a killed Ray run skips.

One JSON line per result, `{"key": ..., "result": ...}`, written whole and flushed. Reading drops
a torn last line (a run killed mid-write) and keeps the first result of a key seen twice.
"""

from __future__ import annotations

import logging
from pathlib import Path

from judgeforge.io import dumps_record, read_complete_jsonl

log = logging.getLogger(__name__)


class Journal:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._f = None  # opened on the first append: a run that finishes nothing leaves no file

    def load(self) -> dict[str, object]:
        """key -> result of every complete line."""
        recs, dropped = read_complete_jsonl(self.path, lambda rec: isinstance(rec.get("key"), str) and "result" in rec)
        out: dict[str, object] = {}
        for rec in recs:
            out.setdefault(rec["key"], rec["result"])
        if dropped:
            log.warning("%s: dropped %d incomplete line(s) (a run killed mid-write?)", self.path, dropped)
        return out

    def append(self, key: str, result) -> None:
        if self._f is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "a", encoding="utf-8")
        self._f.write(dumps_record({"key": key, "result": result}) + "\n")
        self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def remove(self) -> None:
        """The run is complete and its results are written where they belong."""
        self.close()
        self.path.unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
