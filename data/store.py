"""The judgment store: every grading the server answered, its local grade and (when escalated) the
teacher's judgment, kept durably for the cache, the audit trail and the next training round.

One embedded SQLite file per replica (stdlib sqlite3). WAL journal with `synchronous=FULL`: a `put` has
reached the disk before it returns, and a store left by a killed process opens again (SQLite recovers
from its WAL). One row per grading: an item graded again (cache off, or its teacher failed) is another
row, so the store holds what every client was told. Rows are found by the sha256 of the request's
content and the template version (`key`): the same item again is a cache hit, a template change a miss.

`seq` is a monotonically increasing row number: a data build records the largest one it read and the
next build reads only the rows after it (`iter_teacher(since_seq)`). An escalated grading is written
before the teacher is asked; the teacher's judgment then rewrites that row under a new `seq`
(`add_teacher`), so a builder that already read past it still gets the judgment next time.

Faults and copies:
- a store is `PRAGMA quick_check`ed when opened and refused when damaged (`StoreCorrupt`); an SQLite
  error of any operation is a `StoreError` naming the file, whose `reason` is SQLite's own words;
- files are created 0600 (they hold every request text; SQLite gives -wal and -shm the main file's mode);
- readers (`readonly=True`: the data builder, backups) never write the store: `mode=ro` on a store with
  a -wal (a reader cannot checkpoint or delete it; SQLite may only use, or create, the -shm index
  beside it), `immutable=1` on one without (`mode=ro` would leave an empty -wal and -shm beside it),
  then `check_unchanged` proves no writer touched the main file meanwhile;
- a copy of the main file made without its -wal is named when opened (`MissingWal`). Every writer lists
  itself in `sessions` and checkpoints that row into the main file before it writes anything, and
  removes it when it closes; so a main file with no -wal beside it that lists a session was copied (or
  its -wal deleted) while a writer had it open, and its newest rows were in that -wal. A row count or a
  last seq kept in the file cannot tell: the copy holds a stale but consistent one;
- `backup` copies a store in use with SQLite's online backup API (rows in its -wal included);
- a teacher judgment whose write fails is kept in a spool beside the store (`spool`), put back at the
  next open for writing (`replay_spool`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sqlite3
import threading
import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Literal

from judgeforge.judge.prompts import TEMPLATE_VERSION
from judgeforge.judge.items import request_hash
from judgeforge.judge.voting import Comparison, Grade, probs_of, value_of

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
"""PRAGMA user_version of the stores this code writes; bump with a migration when the schema changes.
1: one row per item (`key` UNIQUE); 2: one row per grading, and the writers' sessions."""
READABLE_VERSIONS = (1, 2)
"""What a reader reads as is (the rows have the same columns); a writer migrates version 1 first."""
Mode = Literal["absolute", "relative"]
_BATCH = 512  # rows fetched per query by iter_teacher: no read transaction stays open while yielding
_DAMAGE = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB: primary result codes of a damaged file


class StoreError(RuntimeError):
    """A store that cannot be opened or used. The message names the file; `reason` says what went wrong
    without it (what an API answer or /health may carry)."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = reason or message


class StoreVersionError(StoreError):
    """A store written with a schema version this code does not know."""


class StoreCorrupt(StoreError):
    """A damaged store: quick_check failed at open, or SQLite found damage during an operation."""


class MissingWal(StoreError):
    """The main file of a store copied (or left) without its -wal while a writer had it open: the rows
    in that -wal are missing from it."""


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
        """`judge.items.request_hash`: a new template is a new request, since the judge would see (and the
        teacher's judgment would train) a different prompt."""
        return request_hash(self.mode, self.to_dict(), TEMPLATE_VERSION)


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
    def from_grade(cls, grade: "dict | Grade | Comparison", model: str, adapter: str | None = None) -> "LocalResult":
        """From a `Grade` or `Comparison`, or its `to_dict()` (what the API answers)."""
        d = grade if isinstance(grade, dict) else grade.to_dict()
        return cls(model, value_of(d), d.get("confidence"), probs_of(d), d.get("distribution"),
                   d.get("feedback"), adapter)


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


# Every statement of schema version 2. JSON columns are checked with json_valid, so a row can never hold
# half a document; the teacher columns are all NULL until the teacher's judgment is added.
_JUDGMENTS = """CREATE TABLE judgments (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        key TEXT NOT NULL,
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
    )"""
_KEY_INDEX = "CREATE INDEX judgments_key ON judgments (key, seq)"  # an item's gradings, newest last
# The writers that have the store open (see `JudgmentStore._register`): killed ones linger until the
# next writer to close last removes them.
_SESSIONS = """CREATE TABLE sessions (
        id INTEGER PRIMARY KEY AUTOINCREMENT, opened TEXT NOT NULL, pid INTEGER NOT NULL, host TEXT NOT NULL)"""
_META = "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)"
_SCHEMA = (_META, _JUDGMENTS, _KEY_INDEX, _SESSIONS)
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


def _record_dict(rec: Record) -> dict:
    """A record as JSON (a spool line)."""
    return {"mode": rec.request.mode, "request": rec.request.to_dict(), "local": asdict(rec.local),
            "escalated": rec.escalated, "teacher": None if rec.teacher is None else asdict(rec.teacher),
            "replica": rec.replica, "meta": rec.meta}


def _record_from_dict(d: dict) -> Record:
    teacher = d.get("teacher")
    return Record(Request.from_dict(d["mode"], d["request"]), LocalResult(**d["local"]), bool(d["escalated"]),
                  None if teacher is None else TeacherResult(**teacher), d["replica"], d["meta"])


# --- files --------------------------------------------------------------------------------------------

def _wal(path: Path) -> Path:
    """The -wal beside the file SQLite opens (through symlinks, as it is opened: see `_connect`)."""
    real = path.resolve()
    return real.with_name(real.name + "-wal")


def _shm(path: Path) -> Path:
    real = path.resolve()
    return real.with_name(real.name + "-shm")


def _stamp(path: Path) -> tuple:
    """What changes when the file is written (only a checkpoint writes a WAL store's main file)."""
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _new_private(path: Path) -> Path:
    """An empty file beside `path` under a temporary name, 0600 from its first byte (a store holds every
    request text; SQLite gives the -wal and -shm the main file's mode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    return tmp


def _link(tmp: Path, path: Path) -> bool:
    """Give the finished file `tmp` the name `path`, unless that exists (a link, unlike a rename, never
    replaces a file another process put there meanwhile); False when it does."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    _fsync_dir(path.parent)
    return True


def _discard(tmp: Path) -> None:
    for p in (tmp, _wal(tmp), _shm(tmp)):
        p.unlink(missing_ok=True)


def _warn_if_shared(path: Path) -> None:
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        log.warning("%s is readable by other users (mode %o) and holds every request and judgment: chmod 600 "
                    "it (its -wal and -shm take the main file's mode)", path, mode)


# --- connections --------------------------------------------------------------------------------------

def _code(e: sqlite3.Error) -> int | None:
    code = getattr(e, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF  # the primary code of an extended one


def _connect(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """A writer's connection in autocommit mode (transactions are explicit), WAL, fsync on every commit.
    `mode=rw`: it never creates a file (a store is created by `_create_file`)."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=busy_timeout_s,
                           isolation_level=None, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        # FULL: the WAL is synced at every commit, so an acknowledged put survives a power cut too
        # (NORMAL, WAL's usual pairing, only survives a killed process).
        conn.execute("PRAGMA synchronous=FULL")
    except sqlite3.DatabaseError as e:
        conn.close()
        raise StoreError(f"{path} is not a usable judgment store: {e}", str(e)) from None
    if mode.lower() != "wal":
        conn.close()
        raise StoreError(f"{path}: SQLite refused WAL mode ({mode}); the store needs a local file system")
    return conn


def _connect_ro(path: Path, busy_timeout_s: float, immutable: bool) -> sqlite3.Connection:
    """A reader's connection, which never writes the store: `mode=ro` reads a store with a -wal (a live or
    a killed writer's: its newest rows are there) and cannot checkpoint it; `immutable=1` reads the main
    file of a store without one, creating no -wal or -shm (`check_unchanged` then proves no writer
    checkpointed into it meanwhile: immutable takes no locks, and ignores any WAL)."""
    query = "immutable=1" if immutable else "mode=ro"
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?{query}", uri=True, timeout=busy_timeout_s,
                           isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    return conn


def _quick_check(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse a damaged store before it is used: SQLite would otherwise fail in the middle of a grading
    or a build. Reads the whole file once (cheap next to serving it or building from it)."""
    try:
        found = [row[0] for row in conn.execute("PRAGMA quick_check(3)")]
    except sqlite3.DatabaseError as e:
        if _code(e) == 26:  # SQLITE_NOTADB: no SQLite file at all
            raise StoreError(f"{path} is not a usable judgment store: {e}", str(e)) from None
        found = [str(e)]
    if found != ["ok"]:
        what = " ".join(" ".join(found).split())[:300]  # quick_check's report spans lines: one line here
        raise StoreCorrupt(f"{path} is corrupt (quick_check: {what}); restore it from a backup "
                           "(`judgeforge cascade store backup` copies a store safely)", f"corrupt ({what})")


def _wal_mode(path: Path) -> bool:
    """Whether the file's header says WAL (read/write format versions 2, bytes 18-19)."""
    with open(path, "rb") as f:
        header = f.read(20)
    return len(header) == 20 and header[18] == 2


def _missing_wal(conn: sqlite3.Connection, path: Path) -> str | None:
    """Why the main file at `path` (no -wal beside it, read by `conn`) lacks rows; None: it is whole.
    A listed session is a writer that had the store open (see `JudgmentStore._register`); a file in
    WAL mode without any table is a store whose schema was still in its WAL."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return "holds no tables while its header says WAL mode" if _wal_mode(path) else None
    if "sessions" not in tables:
        return None  # schema version 1 listed no sessions
    s = conn.execute("SELECT opened, pid, host FROM sessions ORDER BY id DESC LIMIT 1").fetchone()
    return None if s is None else (f"lists a writer that had it open (pid {s['pid']} on {s['host']}, "
                                   f"since {s['opened']})")


def _missing_wal_error(path: Path, why: str) -> MissingWal:
    return MissingWal(f"{path} has no {_wal(path).name}, but it {why}: a copy of a store in use made without "
                      "its -wal, whose newest rows are in that -wal (or a store whose -wal was deleted). Copy "
                      "stores with `judgeforge cascade store backup SRC DST`; `judgeforge cascade store backup "
                      "--accept-missing-wal` makes a store of what this file holds")


def _refuse_missing_wal(path: Path) -> None:
    """Before a writer connects (which creates a -wal): raise MissingWal for a copy made without it."""
    if _wal(path).exists():
        return
    stamp = _stamp(path)
    try:
        conn = _connect_ro(path, 1.0, immutable=True)
        try:
            why = _missing_wal(conn, path)
        finally:
            conn.close()
    except sqlite3.Error:
        return  # no readable SQLite file: the open that follows names it
    # A writer that came along meanwhile made a -wal or wrote the file: the store is live, not a copy.
    if why and not _wal(path).exists() and _stamp(path) == stamp:
        raise _missing_wal_error(path, why)


def _create_schema(conn: sqlite3.Connection, path: Path) -> str:
    """The schema and the store's identity, in the caller's transaction; the new store's id."""
    if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
        raise StoreError(f"{path} is an SQLite database with other tables, not a judgment store")
    for statement in _SCHEMA:
        conn.execute(statement)
    meta = {"store_id": uuid.uuid4().hex, "created": _now(), "template_version": TEMPLATE_VERSION}
    conn.executemany("INSERT INTO meta (name, value) VALUES (?, ?)", meta.items())
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return meta["store_id"]


def _create_file(path: Path, busy_timeout_s: float) -> None:
    """A new store at `path`, built under a temporary name and linked into place: no process ever opens
    a half-made store, and its schema is in the main file (a copy shows it), not only in a -wal."""
    tmp = _new_private(path)
    try:
        conn = _connect(tmp, busy_timeout_s)
        try:
            conn.execute("BEGIN IMMEDIATE")
            ident = _create_schema(conn, path)
            conn.execute("COMMIT")
        finally:
            conn.close()  # the only connection: SQLite checkpoints into the file and deletes the -wal
        if _link(tmp, path):
            log.info("created judgment store %s (id %s)", path, ident)
    finally:
        _discard(tmp)


def _migrate_v1(conn: sqlite3.Connection) -> None:
    """Schema 1 -> 2, in the caller's transaction: `key` no longer unique (a table rebuild: SQLite cannot
    drop a constraint) and the sessions table. Every seq is kept; version 1 deleted a row only to insert
    it again under a larger seq, so the largest seq stored is the largest ever used, where AUTOINCREMENT
    goes on."""
    conn.execute("ALTER TABLE judgments RENAME TO judgments_v1")
    conn.execute(_JUDGMENTS)
    conn.execute("INSERT INTO judgments SELECT * FROM judgments_v1")
    conn.execute("DROP TABLE judgments_v1")
    conn.execute(_KEY_INDEX)
    conn.execute(_SESSIONS)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


class JudgmentStore:
    """One replica's judgments in one SQLite file. Thread-safe (one connection behind a lock); several
    processes may also write one file: each write transaction waits up to `busy_timeout_s` for the others.

    `create=False` refuses a path that holds no store yet instead of creating one. `readonly=True` (the
    data builder, backups) never writes the store (see the module doc). `accept_missing_wal=True` opens a
    copy made without its -wal as it is (for `backup --accept-missing-wal`)."""

    def __init__(self, path: str | Path, *, create: bool = True, readonly: bool = False,
                 busy_timeout_s: float = 30.0, accept_missing_wal: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        self.session: int | None = None
        self._closed = False
        self._snapshot: tuple | None = None  # a reader of a store without a -wal: the main file's stamp
        self._lock = threading.RLock()
        self._conn = (self._open_ro(busy_timeout_s) if readonly
                      else self._open_rw(create, busy_timeout_s, accept_missing_wal))
        try:
            self.id = self._open(create and not readonly, accept_missing_wal)
        except sqlite3.Error as e:
            self._conn.close()
            raise StoreError(f"{self.path} is not a usable judgment store: {e}", str(e)) from None
        except BaseException:
            self._conn.close()
            raise

    def _open_rw(self, create: bool, busy_timeout_s: float, accept_missing_wal: bool) -> sqlite3.Connection:
        if not self.path.is_file():
            if not create or self.path.exists():
                raise StoreError(f"no judgment store at {self.path}")
            _create_file(self.path, busy_timeout_s)
        elif not accept_missing_wal:
            _refuse_missing_wal(self.path)
        _warn_if_shared(self.path)
        return _connect(self.path, busy_timeout_s)

    def _open_ro(self, busy_timeout_s: float) -> sqlite3.Connection:
        if not self.path.is_file():
            raise StoreError(f"no judgment store at {self.path}")
        if self.path.stat().st_size == 0:
            raise StoreError(f"{self.path} is empty (0 bytes): not a judgment store")
        if not _wal(self.path).exists():
            self._snapshot = _stamp(self.path)
        return _connect_ro(self.path, busy_timeout_s, immutable=self._snapshot is not None)

    def _open(self, create: bool, accept_missing_wal: bool) -> str:
        """Checks, schema and (writers) the session; the store's id."""
        _quick_check(self._conn, self.path)
        if self._snapshot is not None and not accept_missing_wal:
            why = _missing_wal(self._conn, self.path)
            if why:
                raise _missing_wal_error(self.path, why)
        ident = self._open_schema(create)
        if not self.readonly:
            self._register()
        return ident

    @contextlib.contextmanager
    def _transaction(self):
        """A write transaction: IMMEDIATE takes the write lock up front, so a read-then-write (add_teacher,
        schema creation) cannot interleave with another process's."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:  # a failed COMMIT too; a ROLLBACK error hides nothing
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.execute("ROLLBACK")
                raise

    @contextlib.contextmanager
    def _fault(self, doing: str):
        """Any SQLite error of an operation as a StoreError naming the file (StoreCorrupt for damage)."""
        try:
            yield
        except sqlite3.Error as e:
            cls = StoreCorrupt if _code(e) in _DAMAGE else StoreError
            raise cls(f"{self.path}: {doing} failed: {e}", str(e)) from None

    def _stored(self, row: sqlite3.Row) -> Stored:
        try:
            return _from_row(row)
        except (ValueError, KeyError, TypeError) as e:  # whole pages, damaged content
            raise StoreCorrupt(f"{self.path}: row seq {row['seq']} does not read back as a grading "
                               f"({type(e).__name__}: {e})", "a row does not read back") from None

    def _user_version(self) -> int:
        return self._conn.execute("PRAGMA user_version").fetchone()[0]

    def _open_schema(self, create: bool) -> str:
        """The store's identity, creating the schema in an empty file and migrating version 1 (writers);
        refuses unknown schema versions."""
        version = self._user_version()
        if version == 0 and create:
            with self._transaction():
                if self._user_version() == 0:  # another process may have created it meanwhile
                    ident = _create_schema(self._conn, self.path)
                    log.info("created judgment store %s (id %s)", self.path, ident)
            version = self._user_version()
        if version == 1 and not self.readonly:
            with self._transaction():
                if self._user_version() == 1:  # another process may have migrated it meanwhile
                    _migrate_v1(self._conn)
                    log.info("migrated judgment store %s to schema version %d", self.path, SCHEMA_VERSION)
            version = SCHEMA_VERSION
        if version not in (READABLE_VERSIONS if self.readonly else (SCHEMA_VERSION,)):
            what = "is not a judgment store" if version == 0 else f"has judgment store schema version {version}"
            raise StoreVersionError(f"{self.path} {what}; this judgeforge reads schema version {SCHEMA_VERSION}"
                                    + (" (written by a newer judgeforge?)" if version > SCHEMA_VERSION else ""))
        return self._conn.execute("SELECT value FROM meta WHERE name = 'store_id'").fetchone()[0]

    # -- sessions: what tells a copy made without the -wal ---------------------------------------------

    def _register(self) -> None:
        """List this writer in the main file before it writes a row: a session row, then a checkpoint
        that copies it from the WAL into the main file (see `_missing_wal`)."""
        with self._transaction():
            self.session = self._conn.execute(
                "INSERT INTO sessions (opened, pid, host) VALUES (?, ?, ?)",
                (_now(), os.getpid(), socket.gethostname())).lastrowid
        busy = self._conn.execute("PRAGMA wal_checkpoint(FULL)").fetchone()[0]
        if busy:
            log.warning("%s: busy, this writer's session did not reach the main file: a copy made without "
                        "the -wal now would not be recognised as one", self.path)

    def _unregister(self) -> int | None:
        """Remove this writer's session row; the newest session id still listed (None: none, or failed)."""
        try:
            with self._transaction():
                self._conn.execute("DELETE FROM sessions WHERE id = ?", (self.session,))
                return self._conn.execute("SELECT max(id) FROM sessions").fetchone()[0]
        except sqlite3.Error as e:
            log.warning("%s: could not remove this writer's session (%s)", self.path, e)
            return None

    def _prune(self, upto: int) -> None:
        """Remove the sessions of killed writers (ids up to `upto`), once this writer closed last."""
        try:
            conn = _connect(self.path, 5.0)
            try:
                conn.execute("DELETE FROM sessions WHERE id <= ?", (upto,))
            finally:
                conn.close()
        except (sqlite3.Error, StoreError) as e:
            log.warning("%s: could not remove the sessions of killed writers (%s)", self.path, e)

    # -- gradings ----------------------------------------------------------------------------------------

    def put(self, record: Record) -> int:
        """Store one grading durably (one transaction), always as a new row: every answer a client was
        given is kept, a re-grade of the same item included. Returns its seq."""
        with self._fault("put"), self._transaction():
            return self._insert(record.request.key(), record, _now())

    def add_teacher(self, seq: int, teacher: TeacherResult) -> int:
        """Add the teacher's judgment to the grading stored at `seq` (written before the teacher was
        asked): the row is rewritten under a new seq, so incremental builds see it. A grading has one
        teacher judgment: a later one is ignored. Returns the row's seq."""
        with self._fault("add_teacher"), self._transaction():
            row = self._conn.execute("SELECT * FROM judgments WHERE seq = ?", (seq,)).fetchone()
            if row is None:
                raise StoreError(f"{self.path}: no grading with seq {seq}")
            old = self._stored(row)
            if old.record.teacher is not None:
                return seq
            self._conn.execute("DELETE FROM judgments WHERE seq = ?", (seq,))
            return self._insert(old.key, replace(old.record, teacher=teacher, escalated=True), old.created)

    def _insert(self, key: str, record: Record, created: str) -> int:
        # AUTOINCREMENT: a new seq is larger than any ever used, deleted (rewritten) rows included.
        return self._conn.execute(_INSERT, _row_values(key, record, created, _now())).lastrowid

    def get(self, key: str) -> Stored | None:
        """The newest grading of the item with this key (`Request.key()`), or None."""
        found = self.history(key, limit=1)
        return found[0] if found else None

    def history(self, key: str, limit: int | None = None) -> list[Stored]:
        """Every grading of the item with this key, newest first (at most `limit`): the cache's candidates."""
        with self._fault("reading an item's gradings"), self._lock:
            rows = self._conn.execute("SELECT * FROM judgments WHERE key = ? ORDER BY seq DESC LIMIT ?",
                                      (key, -1 if limit is None else limit)).fetchall()
        return [self._stored(row) for row in rows]

    def iter_teacher(self, since_seq: int = 0, upto: int | None = None) -> Iterator[Stored]:
        """Rows holding a teacher judgment with since_seq < seq <= upto (default: all), in seq order.
        Read in batches, so no read transaction stays open (and blocks WAL checkpoints) while yielding."""
        last, upto = since_seq, (1 << 63) - 1 if upto is None else upto
        while True:
            with self._fault(f"reading the rows after seq {last}"), self._lock:
                rows = self._conn.execute(
                    "SELECT * FROM judgments WHERE seq > ? AND seq <= ? AND teacher_model IS NOT NULL "
                    "ORDER BY seq LIMIT ?", (last, upto, _BATCH)).fetchall()
            if not rows:
                return
            for row in rows:
                yield self._stored(row)
            last = rows[-1]["seq"]

    def max_seq(self) -> int:
        """The largest seq stored (0 when empty): how far a reader that read everything got."""
        with self._fault("max_seq"), self._lock:
            return self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM judgments").fetchone()[0]

    def count(self) -> int:
        with self._fault("count"), self._lock:
            return self._conn.execute("SELECT count(*) FROM judgments").fetchone()[0]

    def check_unchanged(self) -> None:
        """A reader of a store without a -wal (immutable: no locks) raises unless the main file is as it
        was at open; only a checkpoint writes it, so an unchanged file means every row read is consistent."""
        if self._snapshot is not None and _stamp(self.path) != self._snapshot:
            raise StoreError(f"{self.path} was written while it was read (a writer opened it): read it again")

    def _copy_to(self, tmp: Path) -> int:
        """The backup itself, into the empty file `tmp`: its row count."""
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            with self._fault("backup"), self._lock:
                self._conn.backup(conn)
            self.check_unchanged()
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sessions'").fetchone():
                conn.execute("DELETE FROM sessions")  # the copy's writers: none (theirs are the source's)
            _quick_check(conn, tmp)
            rows = conn.execute("SELECT count(*) FROM judgments").fetchone()[0]
        finally:
            conn.close()  # the only connection: the copy is checkpointed whole and its -wal deleted
        return rows

    # -- the spool: teacher judgments whose write failed -------------------------------------------------

    @property
    def spool_path(self) -> Path:
        return self.path.with_name(self.path.name + "-spool.jsonl")

    def spool(self, seq: int, record: Record) -> None:
        """Keep a grading whose teacher judgment could not be written (`add_teacher` failed) outside SQLite:
        one fsynced JSON line, 0600, put back by `replay_spool`. Raises OSError when even that fails."""
        line = json.dumps({"seq": seq, "record": _record_dict(record)}, ensure_ascii=False, sort_keys=True)
        data = (line + "\n").encode("utf-8")
        fd = os.open(self.spool_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def replay_spool(self) -> int:
        """Put the spooled teacher judgments back (each once: a replay cut short and run again adds
        nothing twice), then remove the spool; how many it held."""
        if not self.spool_path.exists():
            return 0
        entries = self._read_spool()
        for seq, record in entries:
            self._restore(seq, record)
        self.spool_path.unlink()
        _fsync_dir(self.path.parent)
        return len(entries)

    def _read_spool(self) -> list[tuple[int, Record]]:
        entries = []
        for n, line in enumerate(self.spool_path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                d = json.loads(line)
                entries.append((int(d["seq"]), _record_from_dict(d["record"])))
            except (ValueError, KeyError, TypeError) as e:  # a write cut short by a kill: never acknowledged
                log.warning("%s line %d: not a spooled judgment, skipped (%s)", self.spool_path, n, e)
        return entries

    def _restore(self, seq: int, record: Record) -> None:
        with self._fault("reading a spooled grading's row"), self._lock:
            row = self._conn.execute("SELECT * FROM judgments WHERE seq = ?", (seq,)).fetchone()
        key = record.request.key()
        if row is not None and row["key"] == key and row["teacher_model"] is None:
            self.add_teacher(seq, record.teacher)
        elif all(h.record.teacher != record.teacher for h in self.history(key)):
            self.put(record)  # the grading's row is gone (a store restored from a backup): all of it

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            newest = self._unregister() if self.session is not None else None
            self._conn.close()
        # Closing last, SQLite checkpointed everything and deleted the -wal: no other writer had the store
        # open, so the sessions still listed (up to the newest at our close) are writers that were killed.
        if newest is not None and not _wal(self.path).exists():
            self._prune(newest)

    def __enter__(self) -> "JudgmentStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def backup(src: str | Path, dst: str | Path, *, accept_missing_wal: bool = False) -> int:
    """Copy the store at `src` to the new file `dst` with SQLite's online backup API: one consistent
    snapshot, the rows still in src's -wal included, taken while servers keep writing (the copy is one
    read). The copy lists no writer, is 0600 and quick_checked. Returns its row count."""
    dst = Path(dst)
    if dst.exists() or _wal(dst).exists():
        raise StoreError(f"{dst} exists: a backup never replaces a file")
    with JudgmentStore(src, readonly=True, accept_missing_wal=accept_missing_wal) as store:
        tmp = _new_private(dst)
        try:
            rows = store._copy_to(tmp)
            if not _link(tmp, dst):
                raise StoreError(f"{dst} exists: a backup never replaces a file")
        finally:
            _discard(tmp)
    return rows


__all__ = ["JudgmentStore", "Record", "Request", "LocalResult", "TeacherResult", "Stored", "StoreError",
           "StoreVersionError", "StoreCorrupt", "MissingWal", "SCHEMA_VERSION", "backup"]
