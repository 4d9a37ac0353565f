"""The judgment store: every graded item, its local grade and (when escalated) the teacher's judgment,
kept durably for the cache and for the next training round.

One embedded SQLite file per replica (stdlib sqlite3). WAL journal with `synchronous=FULL`: a `put`
has reached the disk before it returns, and a store left by a killed process opens again (SQLite
recovers from its WAL). One row per graded item, keyed by the sha256 of the request's content and the
template version, so the same item graded again is a cache hit and a template change is a miss.

`seq` is a monotonically increasing row number: a data build records the largest one it read and the
next build reads only the rows after it (`iter_teacher(since_seq)`). When the teacher's judgment
arrives for an item stored earlier, the row is rewritten under a new `seq`, so a builder that already
read past the local-only row still gets the teacher's judgment next time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import sqlite3
import threading
import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Literal

from judgeforge.data.templates import TEMPLATE_VERSION

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""PRAGMA user_version of the stores this code writes; bump with a migration when the schema changes."""
Mode = Literal["absolute", "relative"]
_BATCH = 512  # rows fetched per query by iter_teacher: no read transaction stays open while yielding


class StoreError(RuntimeError):
    """A store that cannot be opened or used; the message names the file."""


class StoreVersionError(StoreError):
    """A store written with a schema version this code does not know."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _dumps(obj: Any) -> str | None:
    # allow_nan=False: NaN is not JSON (json_valid would refuse the row); fail with a clear error first.
    return None if obj is None else json.dumps(obj, ensure_ascii=False, sort_keys=True, allow_nan=False)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@dataclass(frozen=True)
class Request:
    """What the judge was asked: the content that identifies a graded item (sampling options are not
    part of it: they change how the item is graded, not what is graded)."""

    mode: Mode
    instruction: str
    responses: tuple[str, ...]
    """One response (absolute) or two, A then B (relative)."""
    rubric: dict | str
    """A rubric as `Rubric.to_dict()`, or (relative) the criteria text."""
    reference_answer: str | None = None
    scale: tuple[int, int] | None = None
    """Absolute only: the score range (default 1-5); always None for relative requests."""

    def __post_init__(self) -> None:
        n = {"absolute": 1, "relative": 2}.get(self.mode)
        if n is None:
            raise ValueError(f"mode must be 'absolute' or 'relative', got {self.mode!r}")
        if len(self.responses) != n:
            raise ValueError(f"a {self.mode} request needs {n} response(s), got {len(self.responses)}")
        scale = (tuple(self.scale or (1, 5)) if self.mode == "absolute" else None)
        object.__setattr__(self, "responses", tuple(self.responses))
        object.__setattr__(self, "scale", scale)

    def to_dict(self) -> dict:
        """The request as the API names its fields (stored as the row's `request` JSON)."""
        if self.mode == "absolute":
            out = {"instruction": self.instruction, "response": self.responses[0]}
        else:
            out = {"instruction": self.instruction, "response_a": self.responses[0],
                   "response_b": self.responses[1]}
        out.update(rubric=self.rubric, reference_answer=self.reference_answer)
        if self.scale is not None:
            out["scale"] = list(self.scale)
        return out

    @classmethod
    def from_dict(cls, mode: Mode, d: dict) -> "Request":
        responses = (d["response"],) if mode == "absolute" else (d["response_a"], d["response_b"])
        scale = tuple(d["scale"]) if d.get("scale") is not None else None
        return cls(mode, d["instruction"], responses, d["rubric"], d.get("reference_answer"), scale)

    @classmethod
    def from_item(cls, item) -> "Request":
        """From a `judge.items.GradeItem` or `CompareItem`."""
        rubric = item.rubric if isinstance(item.rubric, str) else item.rubric.to_dict()
        if hasattr(item, "response_a"):
            return cls("relative", item.instruction, (item.response_a, item.response_b), rubric,
                       item.reference_answer)
        return cls("absolute", item.instruction, (item.response,), rubric, item.reference_answer,
                   (item.scale.lo, item.scale.hi))

    def key(self) -> str:
        """sha256 over the mode, the content and the template version: a new template is a new item,
        since the judge would see (and the teacher's judgment would train) a different prompt."""
        blob = json.dumps({"mode": self.mode, "request": self.to_dict(), "template_version": TEMPLATE_VERSION},
                          ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class LocalResult:
    """The local judge's grade: an int score (absolute) or 'A'/'B' (relative); None on engine failure."""

    model: str
    score: int | str | None
    confidence: float | None = None
    probs: dict | None = None
    """The judge's probability of each score (or verdict)."""
    distribution: dict | None = None
    """Vote counts over the samples."""
    feedback: str | None = None
    adapter: str | None = None

    @classmethod
    def from_grade(cls, grade: dict, model: str, adapter: str | None = None) -> "LocalResult":
        """From `Grade.to_dict()` or `Comparison.to_dict()` (what the API answers)."""
        score = grade["score"] if "score" in grade else grade.get("winner")
        probs = grade["score_probs"] if "score_probs" in grade else grade.get("probs")
        return cls(model, score, grade.get("confidence"), probs, grade.get("distribution"),
                   grade.get("feedback"), adapter)


@dataclass(frozen=True)
class TeacherResult:
    """The teacher's judgment as it came back: stored unvalidated (the data builder validates it and
    gives every rejected one a reason, rather than the server silently dropping it)."""

    model: str
    feedback: str | None
    score: int | str | None
    latency_s: float | None = None


@dataclass(frozen=True)
class Record:
    """What `put` stores: one graded item."""

    request: Request
    local: LocalResult
    escalated: bool = False
    teacher: TeacherResult | None = None
    replica: str = "local"
    meta: dict = field(default_factory=dict)
    """Optional provenance not part of the key (e.g. response_model, category), read by the data builder."""


@dataclass(frozen=True)
class Stored:
    """A row read back: the record, its key and where it stands in the store."""

    seq: int
    key: str
    created: str
    record: Record
    teacher_at: str | None = None

    def to_dict(self) -> dict:
        """One JSON object (the data builder's raw record, quoted as is in rejects.jsonl)."""
        r = self.record
        return {"seq": self.seq, "key": self.key, "created": self.created, "mode": r.request.mode,
                "request": r.request.to_dict(), "meta": r.meta, "local": asdict(r.local),
                "escalated": r.escalated, "teacher": None if r.teacher is None else asdict(r.teacher),
                "teacher_at": self.teacher_at, "replica": r.replica}


# Every statement of schema version 1. JSON columns are checked with json_valid, so a row can never hold
# half a document; the teacher columns are all NULL until the teacher's judgment is added.
_SCHEMA = (
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE judgments (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        key TEXT NOT NULL UNIQUE,
        created TEXT NOT NULL,
        mode TEXT NOT NULL CHECK (mode IN ('absolute', 'relative')),
        template_version TEXT NOT NULL,
        request TEXT NOT NULL CHECK (json_valid(request)),
        meta TEXT NOT NULL CHECK (json_valid(meta)),
        local_model TEXT NOT NULL,
        local_adapter TEXT,
        local_score,  -- untyped on purpose: an integer (absolute) or 'A'/'B' (relative), as given
        local_confidence REAL,
        local_probs TEXT CHECK (local_probs IS NULL OR json_valid(local_probs)),
        local_distribution TEXT CHECK (local_distribution IS NULL OR json_valid(local_distribution)),
        local_feedback TEXT,
        escalated INTEGER NOT NULL CHECK (escalated IN (0, 1)),
        teacher_model TEXT,
        teacher_feedback TEXT,
        teacher_score,  -- as the teacher gave it: the data builder validates it
        teacher_latency_s REAL,
        teacher_at TEXT,
        replica TEXT NOT NULL,
        CHECK (teacher_model IS NOT NULL OR (teacher_feedback IS NULL AND teacher_score IS NULL
                                             AND teacher_latency_s IS NULL AND teacher_at IS NULL))
    )""",
)
_COLUMNS = ("key", "created", "mode", "template_version", "request", "meta", "local_model", "local_adapter",
            "local_score", "local_confidence", "local_probs", "local_distribution", "local_feedback",
            "escalated", "teacher_model", "teacher_feedback", "teacher_score", "teacher_latency_s",
            "teacher_at", "replica")
_INSERT = f"INSERT INTO judgments ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"


def _row_values(key: str, rec: Record, created: str, teacher_at: str | None) -> tuple:
    loc, t = rec.local, rec.teacher or TeacherResult(None, None, None)  # type: ignore[arg-type]
    return (key, created, rec.request.mode, TEMPLATE_VERSION, _dumps(rec.request.to_dict()), _dumps(rec.meta),
            loc.model, loc.adapter, loc.score, loc.confidence, _dumps(loc.probs), _dumps(loc.distribution),
            loc.feedback, int(bool(rec.escalated)), t.model, t.feedback, t.score, t.latency_s,
            teacher_at if rec.teacher else None, rec.replica)


def _from_row(row: sqlite3.Row) -> Stored:
    local = LocalResult(row["local_model"], row["local_score"], row["local_confidence"],
                        _loads(row["local_probs"]), _loads(row["local_distribution"]), row["local_feedback"],
                        row["local_adapter"])
    teacher = None
    if row["teacher_model"] is not None:
        teacher = TeacherResult(row["teacher_model"], row["teacher_feedback"], row["teacher_score"],
                                row["teacher_latency_s"])
    rec = Record(Request.from_dict(row["mode"], _loads(row["request"])), local, bool(row["escalated"]), teacher,
                 row["replica"], _loads(row["meta"]))
    return Stored(row["seq"], row["key"], row["created"], rec, row["teacher_at"])


def _connect(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, fsync on every commit."""
    conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        # FULL: the WAL is synced at every commit, so an acknowledged put survives a power cut too
        # (NORMAL, WAL's usual pairing, only survives a killed process).
        conn.execute("PRAGMA synchronous=FULL")
    except sqlite3.DatabaseError as e:
        conn.close()
        raise StoreError(f"{path} is not a usable judgment store: {e}") from None
    if mode.lower() != "wal":
        conn.close()
        raise StoreError(f"{path}: SQLite refused WAL mode ({mode}); the store needs a local file system")
    return conn


class JudgmentStore:
    """One replica's judgments in one SQLite file. Thread-safe (one connection behind a lock); several
    processes may also write one file: each write transaction waits up to `busy_timeout_s` for the others.

    `create=False` (readers such as the data builder) refuses a path that holds no store yet instead of
    creating an empty one."""

    def __init__(self, path: str | Path, *, create: bool = True, busy_timeout_s: float = 30.0):
        self.path = Path(path)
        if not create and not self.path.is_file():
            raise StoreError(f"no judgment store at {self.path}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = _connect(self.path, busy_timeout_s)
        try:
            self.id = self._open_schema(create)
        except BaseException:
            self._conn.close()
            raise

    @contextlib.contextmanager
    def _transaction(self):
        """A write transaction: IMMEDIATE takes the write lock up front, so a read-then-write (put's
        merge, schema creation) cannot interleave with another process's."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _user_version(self) -> int:
        return self._conn.execute("PRAGMA user_version").fetchone()[0]

    def _open_schema(self, create: bool) -> str:
        """The store's identity, creating the schema in a new file; refuses unknown schema versions."""
        version = self._user_version()
        if version == 0 and create:
            with self._transaction():
                version = self._user_version()  # another process may have created it meanwhile
                if version == 0:
                    self._create()
                    version = SCHEMA_VERSION
        if version != SCHEMA_VERSION:
            what = "is not a judgment store" if version == 0 else f"has judgment store schema version {version}"
            raise StoreVersionError(f"{self.path} {what}; this judgeforge reads schema version {SCHEMA_VERSION}"
                                    + (" (written by a newer judgeforge?)" if version > SCHEMA_VERSION else ""))
        return self._conn.execute("SELECT value FROM meta WHERE name = 'store_id'").fetchone()[0]

    def _create(self) -> None:
        if self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise StoreError(f"{self.path} is an SQLite database with other tables, not a judgment store")
        for statement in _SCHEMA:
            self._conn.execute(statement)
        meta = {"store_id": uuid.uuid4().hex, "created": _now(), "template_version": TEMPLATE_VERSION}
        self._conn.executemany("INSERT INTO meta (name, value) VALUES (?, ?)", meta.items())
        self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        log.info("created judgment store %s (id %s)", self.path, meta["store_id"])

    def put(self, record: Record) -> int:
        """Store a graded item durably (one transaction); returns its row's seq. The first local grade
        of an item is kept; a teacher judgment is added once (a later one is ignored), which rewrites
        the row under a new seq so incremental builds see it."""
        key = record.request.key()
        with self._transaction():
            row = self._conn.execute("SELECT * FROM judgments WHERE key = ?", (key,)).fetchone()
            if row is None:
                return self._insert(key, record, _now())
            old = _from_row(row)
            if record.teacher is None or old.record.teacher is not None:
                return old.seq
            merged = replace(old.record, teacher=record.teacher,
                             escalated=old.record.escalated or record.escalated)
            self._conn.execute("DELETE FROM judgments WHERE seq = ?", (old.seq,))
            return self._insert(key, merged, old.created)

    def _insert(self, key: str, record: Record, created: str) -> int:
        # AUTOINCREMENT: a new seq is larger than any ever used, deleted (rewritten) rows included.
        return self._conn.execute(_INSERT, _row_values(key, record, created, _now())).lastrowid

    def get(self, key: str) -> Stored | None:
        """The stored item with this key (`Request.key()`), or None: the cache lookup."""
        with self._lock:
            row = self._conn.execute("SELECT * FROM judgments WHERE key = ?", (key,)).fetchone()
        return None if row is None else _from_row(row)

    def iter_teacher(self, since_seq: int = 0, upto: int | None = None) -> Iterator[Stored]:
        """Rows holding a teacher judgment with since_seq < seq <= upto (default: all), in seq order.
        Read in batches, so no read transaction stays open (and blocks WAL checkpoints) while yielding."""
        last, upto = since_seq, (1 << 63) - 1 if upto is None else upto
        while True:
            with self._lock:
                rows = self._conn.execute(
                    "SELECT * FROM judgments WHERE seq > ? AND seq <= ? AND teacher_model IS NOT NULL "
                    "ORDER BY seq LIMIT ?", (last, upto, _BATCH)).fetchall()
            if not rows:
                return
            yield from map(_from_row, rows)
            last = rows[-1]["seq"]

    def max_seq(self) -> int:
        """The largest seq stored (0 when empty): how far a reader that read everything got."""
        with self._lock:
            return self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM judgments").fetchone()[0]

    def count(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT count(*) FROM judgments").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "JudgmentStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["JudgmentStore", "Record", "Request", "LocalResult", "TeacherResult", "Stored", "StoreError",
           "StoreVersionError", "SCHEMA_VERSION"]
