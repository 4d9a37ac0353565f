"""Parse + validate + hash raw records, in this process or in worker processes.

`process(raw, parse, ctx)` is the per-record hot path: it also encodes each
kept judgment's output line. Large JSONL inputs are cut into byte ranges that
worker processes read and process themselves (no raw text crosses a pipe); the
encoded lines go to spool files (records.SpoolWriter), and the judgments come
back in input order, so a parallel build is byte-identical to a serial one.
Deduplication and every later decision stay in the parent.
"""

from __future__ import annotations

import contextlib
import copyreg
import dataclasses
import gc
import hashlib
import multiprocessing
import operator
import os
import re
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Iterator

from judgeforge.data.jsontext import BOM, decode_utf8
from judgeforge.data.length import length_guard
from judgeforge.data.pairwise import PairJudgment
from judgeforge.data.parsers import PARSERS, Context
from judgeforge.data.readers import Raw, line_raw, sniff_format
from judgeforge.data.records import ItemCache, Parts, Ref, Spool, SpoolWriter, encode
from judgeforge.data.schema import Judgment
from judgeforge.data.validate import UNREADABLE_LINE, Reject

# (sample_idx, judgment or reject, content hash or None, encoded line parts or None)
Entry = tuple[int, "Judgment | Reject", "str | None", "Parts | None"]
# The same, with the parts spooled: their place in a spool file
Spooled = tuple[int, "Judgment | Reject", "str | None", "Ref | None"]
CHUNK_BYTES = 4 << 20
MIN_PARALLEL_BYTES = 8 << 20


def process(raw: Raw, parse, ctx: Context) -> list[Entry]:
    """One raw record -> one entry per judgment it holds (rejects included), kept ones already encoded:
    in a parallel build the workers, not the parent, pay for the output encoding."""
    if raw.obj is None:
        return [(0, Reject(raw.reason or UNREADABLE_LINE, raw.error or ""), None, None)]
    out: list[Entry] = []
    cache = None
    guard = length_guard(ctx.max_tokens, ctx.tokenizer)
    for sample_idx, res in parse(raw.obj, ctx):
        if not isinstance(res, Reject) and guard is not None:
            res = guard.check(res) or res  # before encoding: a 10M-character record is never encoded
        if isinstance(res, Reject):
            res.__traceback__ = None  # no frame cycles to keep alive while the GC is paused
            out.append((sample_idx, res, None, None))
            continue
        if isinstance(res, PairJudgment):  # few and small: encoded by the writer, not spooled
            res.item_id = res.item_id or res.item_hash()[:16]
            out.append((sample_idx, res, res.content_hash(), None))
            continue
        if cache is None or not cache.matches(res):
            cache = ItemCache(res)
        if not res.item_id:
            res.item_id = cache.item_hash[:16]
        out.append((sample_idx, res, *encode(res, cache)))
    return out


def spooled(entries: list[Entry], spool: SpoolWriter) -> list[Spooled]:
    """The entries with their encoded parts written to `spool` and replaced by their place there."""
    return [(i, res, chash, parts and spool.add(parts)) for i, res, chash, parts in entries]


def _chunk_job(job: tuple[str, int, int, str, Context, str]) -> tuple[int, list]:
    """Worker: one byte range of a JSONL file -> (lines in range, [(local line, text or byte span, entries)]).

    The original text travels back only for lines with a reject; kept lines send their byte span, so
    the parent can still quote a line it later rejects as a duplicate."""
    path, start, end, fmt, ctx, spool_path = job
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    parse = PARSERS[fmt]
    results = []
    pos = start
    lines = data.split(b"\n")
    spool = SpoolWriter(spool_path)
    for n, line in enumerate(lines, 1):
        span = (pos, pos + len(line))
        pos += len(line) + 1
        raw = line_raw(n, line)
        if raw is None:
            continue
        entries = spooled(process(raw, parse, ctx), spool)
        rejected = any(isinstance(e[1], Reject) for e in entries)
        results.append((n, raw.text if rejected else span, entries))
    spool.close()
    return len(lines) - (1 if data.endswith(b"\n") or not data else 0), results


def read_span(path: Path, span: tuple[int, int]) -> str:
    with open(path, "rb") as f:
        f.seek(span[0])
        text = decode_utf8(f.read(span[1] - span[0]))[0].rstrip("\r\n")
    return text.removeprefix(BOM)  # as line_raw read it


ORIGINAL_MAX_BYTES = 16 << 10
"""rejects.jsonl quotes a rejected record whole up to this size; a larger one (a 10 MB response) by
its first ORIGINAL_MAX_BYTES, its size and its sha256, so rejects.jsonl stays small."""
DETAIL_MAX_CHARS = 1000  # a detail may quote a field (a score given as a 10 MB string)
# Surrogates that surrogateescape did not make: the readers show none (poisoned values are shown escaped),
# but quoting a reject must never fail.
_OTHER_SURROGATE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def reject_quote(text: str, detail: str) -> dict:
    """A reject's `detail` and `original` as rejects.jsonl holds them: the record as read, or, when it is
    larger than ORIGINAL_MAX_BYTES or not UTF-8, its first bytes (not-UTF-8 bytes shown as \\xNN) with
    `original_bytes` and `original_sha256`, the size and sha256 of the whole quote's bytes (a JSON Lines
    line: its bytes as read, without the newline)."""
    if len(detail) > DETAIL_MAX_CHARS:
        detail = detail[:DETAIL_MAX_CHARS] + "..."
    detail = detail.encode("utf-8", "backslashreplace").decode("utf-8")
    try:
        data = text.encode("utf-8")
        if len(data) <= ORIGINAL_MAX_BYTES:
            return {"detail": detail, "original": text}
    except UnicodeEncodeError:  # not-UTF-8 bytes, held as surrogateescape decodes them (readers.Raw.text)
        data = text.encode("utf-8", "backslashreplace" if _OTHER_SURROGATE.search(text) else "surrogateescape")
    cut = min(len(data), ORIGINAL_MAX_BYTES)
    while 0 < cut < len(data) and data[cut] & 0xC0 == 0x80:  # not inside a character
        cut -= 1
    return {"detail": detail, "original": data[:cut].decode("utf-8", "backslashreplace"),
            "original_bytes": len(data), "original_sha256": hashlib.sha256(data).hexdigest()}


def plan_chunks(path: Path, chunk_bytes: int | None = None) -> list[tuple[int, int]]:
    """Byte ranges that start at line starts and cover the file."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    size = path.stat().st_size
    bounds = [0]
    with open(path, "rb") as f:
        while bounds[-1] < size:
            f.seek(min(size, bounds[-1] + chunk_bytes))
            f.readline()
            bounds.append(min(size, f.tell()))
    return list(zip(bounds[:-1], bounds[1:]))


@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic GC while building many long-lived objects: its full collections would re-scan
    every record already kept (quadratic on large builds); records hold no reference cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _worker_init() -> None:
    gc.freeze()  # objects inherited through fork are never collected here: do not scan them
    gc.disable()
    # Results travel as pickles: a Judgment as its field tuple pickles ~40% faster than field by field.
    copyreg.pickle(Judgment, _reduce_judgment)


_judgment_fields = operator.attrgetter(*(f.name for f in dataclasses.fields(Judgment) if not f.kw_only))
_provenance_fields = [f.name for f in dataclasses.fields(Judgment) if f.kw_only]


def _reduce_judgment(j: Judgment):
    # the keyword-only provenance fields travel as slot state (pickle sets them after construction)
    return Judgment, _judgment_fields(j), (None, {k: getattr(j, k) for k in _provenance_fields})


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class Pool:
    """A lazily started process pool (fork where available: workers inherit the imported modules)."""

    def __init__(self, workers: int):
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def usable_for(self, path: Path | None) -> bool:
        return (self.workers > 1 and path is not None and path.is_file()
                and path.stat().st_size >= MIN_PARALLEL_BYTES and sniff_format(path) == "jsonl")

    def jsonl(self, path: Path, fmt: str, ctx: Context, spool: Spool) -> Iterator[tuple[Raw, list[Spooled]]]:
        """(raw with global line number, entries) in file order."""
        if self._pool is None:
            methods = multiprocessing.get_all_start_methods()
            mp = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            self._pool = ProcessPoolExecutor(self.workers, mp_context=mp, initializer=_worker_init)
        jobs = [(str(path), a, b, fmt, ctx, spool.new_file()) for a, b in plan_chunks(path)]
        offset = 0
        for n_lines, results in self._pool.map(_chunk_job, jobs):
            for line, text, entries in results:
                raw = Raw(offset + line, text) if isinstance(text, str) else Raw(offset + line, "", span=text)
                yield raw, entries
            offset += n_lines

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
