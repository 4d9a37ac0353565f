"""`judgeforge grade`: JSONL of grading requests in, JSONL of results out.

    judgeforge grade --input reqs.jsonl --output results.jsonl --url http://127.0.0.1:8000 -j 8
    judgeforge grade --input reqs.jsonl --output results.jsonl --url http://a:8000 --url http://b:8000 -j 16
    judgeforge grade --input reqs.jsonl --output results.jsonl --local --config configs/serve/default.yaml
    judgeforge grade --input reqs.jsonl --output results.jsonl --ray --replicas 2 --config configs/serve/default.yaml

Each input line is a /v1/grade body (or a /v1/compare body when it has
`response_a`), plus an optional `id` echoed back. HTTP mode sends the key from
JUDGEFORGE_API_KEY and retries 429 answers after their Retry-After, stretched by a random
share of up to as much again so that clients refused together do not come back together
(bounded).
`--local` grades through an engine in this process (no server), with the same
request validation. `--ray --replicas N` does what --local does on N engine
replicas through Ray Data (judgeforge.scale; a local Ray is started, or
$RAY_ADDRESS / runtime.address=... names a cluster; runtime.num_cpus=...,
runtime.num_gpus=..., runtime.batch_size=... set the rest): the same records,
appended as batches finish, resumed the same way.

Several --url: a fleet of servers (serve/client_fleet.py). `-j` is the requests in
flight in all, not per server: each goes to the server with the fewest in
flight (ties round-robin), so a slow server takes fewer lines; give about 8 per
server. At start every /health is checked (5 s each): a server that cannot
grade is skipped with a warning while another can. A line whose server dies
(nothing listens, or the answer is lost), hangs (no answer within the
deadlines below) or answers 503 is sent on to another server, at most 3
servers per line; it fails only when no server left is new to it. Nothing
listening or a hang takes a server out of rotation at once, 3 failed answers in
a row take it out while another remains; its /health is re-probed every 10 s
and it comes back when that answers. 429 waits out Retry-After on the same
server; a refused key (401/403) stops the run. The records are the same as
with one server, so a run resumes with any set of --url; the final line adds
`retried=R servers: URL=lines ...` (and who went down). One --url behaves as
it always did: its 503s and lost answers fail their lines; a hang stops the run
(exit 5, rerun to resume).

Deadlines, per request sent (each 429 retry is a new request): --connect-timeout
(10 s) to open a connection; --read-timeout (330 s) for the next byte of an
answer, which for a grading is the whole grading, since the server sends nothing
until it is done: longer than the server's own server.request_timeout_s (300 s),
so a slow grading gets the server's 504 rather than a client timeout (lower it to
fail over sooner when gradings are known to be quick); --request-timeout (600 s)
for the request end to end, however its bytes trickle. A stopped or wedged server
(its kernel still accepts connections) is noticed after the read timeout.

Output: one line per non-blank input line, `{"line", "index", "id", "hash", "result"}`
or `{..., "error": {"status", "detail"}}` (`line`: 1-based line number in the
input; `index`: position among non-blank lines; `hash`: sha256 of the line's
JSON object, keys sorted; `status` is null when no HTTP answer came). Each
result is appended and flushed as it completes, so an interrupted run keeps
everything finished, in completion order (sort by `line`); a run that reaches
the end rewrites the file in input order. Rerunning with the same --output
resumes: lines whose hash already has a result are skipped, failed lines are
retried, a torn last line (killed mid-write) is dropped, and results for
requests no longer in the input are dropped (with a warning).

Exit codes:
  0    every line graded
  1    a bug (the traceback is printed)
  2    usage or input error: bad flag, unreadable --input, --output same file as
       --input, bad --config, API key refused (401/403)
  3    some lines failed, the others graded: rerun to retry the failed ones
  4    no line graded: every line failed
  5    the server cannot be reached or does not answer in time, or with several
       --url none of them (or the --local engine cannot start)
  130  interrupted (Ctrl-C): finished results are kept; rerun to resume
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from judgeforge.io import atomic_write_jsonl, dumps_record, read_complete_jsonl
from judgeforge.retry import Refused, RetryPolicy
from judgeforge.serve.client_fleet import MAX_STRIKES, Fleet, Server

RETRY = RetryPolicy()  # 429s: Retry-After waited out (with jitter), 8 requests at most
MAX_LINE_ATTEMPTS = 3  # servers a line is sent to at most: one failing on 3 may be what kills them
REPROBE_S = 10.0  # how often a server out of rotation has its /health polled to bring it back
RETRYABLE = (None, 503)  # no answer, or "cannot grade now": another server may well grade the line
HEALTH_TIMEOUT_S = 5.0  # a /health probe: answered by the event loop alone, so a live server needs far less
KEEPALIVE_S = 2.5  # idle connections dropped before the server drops them (uvicorn: 5 s), or a request sent
# on one as the server closes it loses its answer (seen: a probe's connection reused after 5 s on another's)
EXIT_OK, EXIT_BUG, EXIT_USAGE, EXIT_SOME_FAILED, EXIT_ALL_FAILED, EXIT_UNREACHABLE = 0, 1, 2, 3, 4, 5
EXIT_INTERRUPTED = 130
log = logging.getLogger(__name__)


class GradeError(Exception):
    """An expected failure: one message (a traceback only with --debug) and its exit code."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Deadlines:
    """How long the client waits on a server, per request (the module doc says why these defaults)."""

    connect_s: float = 10.0
    read_s: float = 330.0
    request_s: float = 600.0

    def httpx_timeout(self):
        import httpx

        # Writing waits on the server reading; no pool wait: the pool has a connection per request.
        return httpx.Timeout(connect=self.connect_s, read=self.read_s, write=self.read_s, pool=None)


@dataclass
class Row:
    """One non-blank input line: its body, or why it could not be read."""

    line: int
    index: int
    id: object
    body: dict | None
    error: str | None
    hash: str


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _parse(line: int, index: int, raw: bytes) -> Row:
    try:
        obj = json.loads(raw.decode("utf-8"))
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        why = f"line {line}: {e}"
        return Row(line, index, None, None, why, hashlib.sha256(raw.strip()).hexdigest())
    h = _hash(obj)
    return Row(line, index, obj.pop("id", None), obj, None, h)


def read_requests(path: str | Path) -> list[Row]:
    """A Row per non-blank line; unreadable lines become error rows, not skips."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise GradeError(f"cannot read --input {path}: {e.strerror or e}", EXIT_USAGE) from e
    lines = [(n, raw) for n, raw in enumerate(data.splitlines(), 1) if raw.strip()]
    return [_parse(n, i, raw) for i, (n, raw) in enumerate(lines)]


# -- the output file: resume, append, sort --------------------------------------------


def load_output(path: Path) -> list[dict]:
    """The records of an earlier run; a torn last line (killed mid-write) or a foreign line is dropped."""
    recs, dropped = read_complete_jsonl(path, lambda rec: isinstance(rec.get("hash"), str)
                                        and isinstance(rec.get("line"), int) and ("result" in rec or "error" in rec))
    if dropped:
        log.warning("%s: dropped %d line(s) that are no complete result (a run killed mid-write?)",
                    path, dropped)
    return recs


def plan(rows: list[Row], earlier: list[dict]) -> tuple[list[Row], list[dict]]:
    """(rows still to grade, earlier results kept): a row is skipped when a result with its hash
    exists (the one on its own line first); failed results are dropped, so they are retried."""
    by_hash: dict[str, list[dict]] = {}
    for rec in earlier:
        if "result" in rec:
            by_hash.setdefault(rec["hash"], []).append(rec)
    kept: dict[int, dict] = {}
    for exact in (True, False):
        for row in rows:
            recs = by_hash.get(row.hash) or []
            match = next((r for r in recs if r.get("line") == row.line or not exact), None)
            if row.line not in kept and match is not None:
                recs.remove(match)
                kept[row.line] = {**match, "line": row.line, "index": row.index}
    todo = [row for row in rows if row.line not in kept]
    stale = sum(len(v) for v in by_hash.values())
    if stale:
        log.warning("dropping %d earlier result(s) whose request is no longer in the input", stale)
    return todo, list(kept.values())


class Sink:
    """The output file: one whole line appended and flushed per result; the summary's counts."""

    def __init__(self, path: Path, progress, skipped: int):
        self.path, self.progress = path, progress
        self.graded = self.failed = 0
        self.skipped = skipped
        self.f = None  # opened on the first result: a run that sends nothing leaves no file
        self.notes: Callable[[], str] | None = None  # more counts for the summary (a fleet's)

    def write(self, row: Row, res: dict) -> None:
        rec = {"line": row.line, "index": row.index, "id": row.id, "hash": row.hash, **res}
        if self.f is None:
            self.f = open(self.path, "a", encoding="utf-8")
        self.f.write(dumps_record(rec) + "\n")
        self.f.flush()
        if "error" in res:
            self.failed += 1
        else:
            self.graded += 1
        self.progress.update(1)

    def close(self) -> None:
        if self.f is not None:
            self.f.close()

    def exit_code(self) -> int:
        if not self.failed:
            return EXIT_OK
        return EXIT_ALL_FAILED if self.graded + self.skipped == 0 else EXIT_SOME_FAILED

    def summary(self) -> str:
        notes = f" {self.notes()}" if self.notes else ""
        return f"graded={self.graded} failed={self.failed} skipped={self.skipped}{notes} -> {self.path}"


def _bad_line(row: Row) -> dict:
    return {"error": {"status": 400, "detail": row.error}}


# -- HTTP mode ------------------------------------------------------------------------


def _route(body: dict) -> str:
    return "/v1/compare" if "response_a" in body else "/v1/grade"


def _cannot_reach(url: str, e: Exception) -> str:
    return f"cannot reach the server at {url} ({type(e).__name__}: {e})"


def _no_server(fleet: Fleet) -> GradeError:
    """Every server out of rotation: one message naming each and why (one server: just its reason)."""
    whys = [s.why or "" for s in fleet.servers]
    text = whys[0] if len(whys) == 1 else f"none of the {len(whys)} servers can grade: " + "; ".join(whys)
    if any(s.unreachable for s in fleet.servers):
        text += (f": start {'it' if len(whys) == 1 else 'them'} with `judgeforge serve`, or pass --url "
                 f"(or --local to grade without a server)")
    return GradeError(text, EXIT_UNREACHABLE)


def _hung(url: str, e: Exception, what: str, limit_s: float) -> str:
    return f"the server at {url} did not answer in time ({what} of {limit_s:g}s: {type(e).__name__})"


class _NoAnswer(Exception):
    """Nothing listens at a server's address (connection refused or timed out), or it did not answer
    within the deadlines (a hung server): its reason."""


async def _check_server(client, url: str) -> tuple[str, bool] | None:
    """None when the server at `url` can grade; else why not, and whether nothing answered at all."""
    import httpx

    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):  # httpx's timeouts bound each read, not the whole
            r = await client.get("/health", timeout=HEALTH_TIMEOUT_S)
    except (httpx.TimeoutException, TimeoutError) as e:
        return _hung(url, e, "/health probe", HEALTH_TIMEOUT_S), True
    except httpx.TransportError as e:
        return _cannot_reach(url, e), True
    if r.status_code == 503:
        return f"the server at {url} is up but its engine is not (/health: 503 {r.text[:200]})", False
    return None


async def _post(client, url: str, body: dict, deadlines: Deadlines):
    """One request sent and answered within `deadlines` (the client's httpx timeouts are theirs);
    _NoAnswer when nothing listens or the server does not answer in time."""
    import httpx

    try:
        async with asyncio.timeout(deadlines.request_s):
            return await client.post(_route(body), json=body)
    except (httpx.ConnectError, httpx.ConnectTimeout) as e:
        raise _NoAnswer(_cannot_reach(url, e)) from e
    except TimeoutError as e:
        raise _NoAnswer(_hung(url, e, "request deadline", deadlines.request_s)) from e
    except httpx.TimeoutException as e:  # read (or write): the server went silent
        raise _NoAnswer(_hung(url, e, "read timeout", deadlines.read_s)) from e


async def _send(client, url: str, body: dict, deadlines: Deadlines = Deadlines()) -> dict:
    """One request, 429s retried as RETRY says: {"result"} or {"error"} (status None: the answer
    was lost); _NoAnswer when nothing listens or it hangs, GradeError when the key is refused."""
    import httpx

    for attempt in range(1, RETRY.attempts + 1):
        try:
            r = await _post(client, url, body, deadlines)
        except httpx.TransportError as e:  # answer lost (server died mid-request?)
            return {"error": {"status": None, "detail": f"no answer: {type(e).__name__}: {e}"}}
        step = RETRY.decide(attempt, r.status_code, r.headers.get("retry-after"), url)
        if isinstance(step, Refused):
            raise GradeError(step.message, EXIT_USAGE)
        if step is None:
            break
        await asyncio.sleep(step.after_s)
    try:
        payload = r.json()
    except ValueError:
        payload = {"detail": r.text}
    if r.status_code == 200:
        return {"result": payload}
    detail = payload.get("detail", payload) if isinstance(payload, dict) else payload
    return {"error": {"status": r.status_code, "detail": detail}}


def _strikes_why(url: str, err: dict) -> str:
    last = f"{err['status']} {err['detail']}" if err["status"] else str(err["detail"])
    return f"the server at {url} failed {MAX_STRIKES} answers in a row (last: {last[:200]})"


async def _grade_line(fleet: Fleet, clients: dict, body: dict, deadlines: Deadlines) -> dict:
    """A line's record: sent to the least-loaded server it has not failed on, and on to another when
    that one dies, hangs or answers 503 (MAX_LINE_ATTEMPTS servers at most); its last failure when no
    server left in rotation would be new to it; GradeError when none is left at all."""
    tried: set[str] = set()
    res = None
    while len(tried) < MAX_LINE_ATTEMPTS and (server := fleet.take(tried)) is not None:
        tried.add(server.url)
        try:
            res = await _send(clients[server.url], server.url, body, deadlines)
        except _NoAnswer as e:
            fleet.unreachable(server, str(e))
            res = {"error": {"status": None, "detail": str(e)}}
            continue
        err = res.get("error")
        if err is None or err["status"] not in RETRYABLE:
            fleet.answered(server)
            return res
        fleet.failed(server, _strikes_why(server.url, err))
    if res is None or not fleet.up():
        raise _no_server(fleet)
    return res


async def _check_fleet(fleet: Fleet, clients: dict) -> None:
    """Every server's /health at once: those that cannot grade are skipped, and reported, while one can."""
    found = await asyncio.gather(*(_check_server(clients[s.url], s.url) for s in fleet.servers))
    for server, bad in zip(fleet.servers, found):
        if bad:
            fleet.skip(server, *bad)
    if not fleet.up():
        raise _no_server(fleet)
    for server in fleet.servers:
        if server.why:
            log.warning("skipping %s for now: %s (its /health re-probed every %gs)", server.url, server.why,
                        REPROBE_S)


async def _reprobe(fleet: Fleet, server: Server, client) -> None:
    """Polls the /health of a server out of rotation until it can grade again."""
    while server.why is not None:
        await asyncio.sleep(REPROBE_S)
        if await _check_server(client, server.url) is None:
            fleet.back(server)
            log.info("%s is back in rotation", server.url)


async def _run_workers(todo: list[Row], concurrency: int, grade, sink: Sink) -> None:
    rows = iter(todo)

    async def worker():
        for row in rows:  # one shared iterator: requests go out in input order
            sink.write(row, _bad_line(row) if row.body is None else await grade(row.body))

    try:
        async with asyncio.TaskGroup() as tg:  # the first fatal error cancels the other workers
            for _ in range(min(concurrency, len(todo))):
                tg.create_task(worker())
    except ExceptionGroup as eg:
        fatal = [e for e in eg.exceptions if isinstance(e, GradeError)]
        if not fatal:
            raise
        raise fatal[0] from None


async def _grade_http(todo: list[Row], urls: list[str], concurrency: int, sink: Sink,
                      deadlines: Deadlines = Deadlines()) -> None:
    """The lines over the servers at `urls`, `concurrency` requests in flight in all (not per server)."""
    import httpx

    key = os.environ.get("JUDGEFORGE_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    probes: set[asyncio.Task] = set()

    def reprobe(server: Server) -> None:
        probes.add(asyncio.create_task(_reprobe(fleet, server, clients[server.url])))

    def taken_out(server: Server) -> None:
        if fleet.up():  # with none left the run stops at once, saying why
            log.warning("%s out of rotation: %s (its lines go to the other servers; /health re-probed "
                        "every %gs)", server.url, server.why, REPROBE_S)
            reprobe(server)

    # A connection per request in flight, plus one for a /health re-probe: no request waits on the pool,
    # so its deadlines measure the server alone.
    limits = httpx.Limits(max_connections=concurrency + 1, max_keepalive_connections=concurrency + 1,
                          keepalive_expiry=KEEPALIVE_S)
    async with contextlib.AsyncExitStack() as stack:
        clients = {url: await stack.enter_async_context(httpx.AsyncClient(
            base_url=url, headers=headers, timeout=deadlines.httpx_timeout(), limits=limits)) for url in urls}
        fleet = Fleet(urls, on_out=taken_out)
        await _check_fleet(fleet, clients)
        for server in fleet.servers:
            if server.why:
                reprobe(server)
        if len(urls) > 1:
            sink.notes = fleet.summary
            log.info("grading over %d of %d servers, %d requests in flight in all", len(fleet.up()), len(urls),
                     concurrency)
        try:
            await _run_workers(todo, concurrency, lambda body: _grade_line(fleet, clients, body, deadlines),
                               sink)
        finally:
            for task in probes:
                task.cancel()
            await asyncio.gather(*probes, return_exceptions=True)


# -- local mode -----------------------------------------------------------------------


def _grade_chunk(judge, items, prepared):
    return judge.grade(items, [p[0] for p in prepared])


def _compare_chunk(judge, items, prepared):
    return judge.compare(items, prepared)


def _run_chunk(judge, fn, items) -> list[dict]:
    """Each item prepared once (a too-long or unknown-adapter item fails alone), the rest graded."""
    from judgeforge.judge.engines import EngineError, PromptTooLong, UnknownAdapter

    out: list[dict | None] = [None] * len(items)
    ok, prepared = [], []
    for k, item in enumerate(items):
        try:
            prepared.append(judge.requests(item))
            ok.append(k)
        except (PromptTooLong, UnknownAdapter) as e:
            out[k] = {"error": {"status": 413 if isinstance(e, PromptTooLong) else 422, "detail": str(e)}}
    if ok:
        try:
            for k, res in zip(ok, fn(judge, [items[k] for k in ok], prepared)):
                out[k] = {"result": res.to_dict()}
        except EngineError as e:
            for k in ok:
                out[k] = {"error": {"status": 500, "detail": str(e)}}
    return out  # type: ignore[return-value]


def _validate_local(todo: list[Row], cfg, sink: Sink) -> list[tuple[Row, object]]:
    """(row, item) per valid request; invalid ones are written as failures at once."""
    from judgeforge.serve.schemas import CompareRequest, GradeRequest, validate_limits

    valid = []
    for row in todo:
        if row.body is None:
            sink.write(row, _bad_line(row))
            continue
        try:
            req = (CompareRequest if "response_a" in row.body else GradeRequest).model_validate(row.body)
            validate_limits(req, cfg)
            valid.append((row, req.item()))
        except ValueError as e:  # pydantic ValidationError and FieldError are ValueErrors
            sink.write(row, {"error": {"status": 422, "detail": str(e)}})
    return valid


def _build_engine(cfg):
    from judgeforge.judge import engines

    try:
        return engines.build_engine(cfg.engine.for_batches())
    except (engines.EngineError, ImportError, OSError, ValueError) as e:
        raise GradeError(f"cannot start the --local engine ({cfg.engine.kind}): {e}", EXIT_UNREACHABLE) from e


def _serve_config(config: str | None, overrides: list[str]):
    """The ServeConfig of --local and --ray: `--config` a file or a built-in serve config's name."""
    from judgeforge.config import load_config, resolve_config
    from judgeforge.serve.config import ServeConfig

    return load_config(ServeConfig, resolve_config(config, "serve") if config else None, overrides)


def _grade_local(todo: list[Row], config: str | None, overrides: list[str], sink: Sink) -> None:
    from judgeforge.judge.judge import Judge

    cfg = _serve_config(config, overrides)
    valid = _validate_local(todo, cfg, sink)
    if not valid:
        return
    with _build_engine(cfg) as engine:
        judge = Judge(engine, cfg.sampling)
        for fn, is_cmp in ((_grade_chunk, False), (_compare_chunk, True)):
            part = [(row, item) for row, item in valid if ("response_a" in row.body) == is_cmp]
            for k in range(0, len(part), 16):  # chunks: results land as they go, engine still batches
                chunk = part[k:k + 16]
                for (row, _), res in zip(chunk, _run_chunk(judge, fn, [item for _, item in chunk])):
                    sink.write(row, res)


# -- Ray mode: the local path's chunks on engine replicas (judgeforge.scale) ---------------


def ray_chunk(engine, items: list, *, sampling) -> list[dict]:
    """One Ray batch, inside a replica: the local path's chunk logic, gradings and comparisons apart."""
    from judgeforge.judge.items import CompareItem
    from judgeforge.judge.judge import Judge

    judge, out = Judge(engine, sampling), [None] * len(items)
    for fn, is_cmp in ((_grade_chunk, False), (_compare_chunk, True)):
        idx = [k for k, item in enumerate(items) if isinstance(item, CompareItem) == is_cmp]
        if idx:
            for k, res in zip(idx, _run_chunk(judge, fn, [items[k] for k in idx])):
                out[k] = res
    return out


def _split_runtime(overrides: list[str]) -> tuple[list[str], list[str]]:
    """(serve config overrides, `runtime.key=value` ones without the prefix: the RuntimeConfig's)."""
    ours = [o for o in overrides if o.startswith("runtime.")]
    return [o for o in overrides if o not in ours], [o[len("runtime."):] for o in ours]


def _grade_ray(todo: list[Row], args: argparse.Namespace, sink: Sink) -> None:
    from functools import partial

    from judgeforge.config import load_config
    from judgeforge.scale.config import RuntimeConfig
    from judgeforge.scale.ray_runner import ScaleError, run_batches

    serve_overrides, runtime_overrides = _split_runtime(args.overrides)
    cfg = _serve_config(args.config, serve_overrides)
    flags = ["kind=ray", *([f"replicas={args.replicas}"] if args.replicas else [])]
    runtime = load_config(RuntimeConfig, None, [*runtime_overrides, *flags])
    valid = _validate_local(todo, cfg, sink)
    if not valid:
        return
    rows = {str(row.line): row for row, _ in valid}
    # Gradings first, then comparisons, as the local path sends them: batches of one kind.
    payloads = sorted(((str(row.line), item) for row, item in valid), key=lambda p: "response_a" in rows[p[0]].body)
    try:
        run_batches(payloads, partial(ray_chunk, sampling=cfg.sampling), engine_cfg=cfg.engine, runtime=runtime,
                    on_result=lambda key, res: sink.write(rows[key], res), desc=None)
    except ScaleError as e:
        raise GradeError(f"cannot grade on Ray: {e}", EXIT_UNREACHABLE) from e


# -- the command ----------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return n


def _seconds(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        s = 0.0
    if not (0 < s < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return s


def _http_url(text: str) -> str:
    if not text.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"must start with http:// or https://, got {text!r}")
    return text.rstrip("/")


DEFAULT_URL = "http://127.0.0.1:8000"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="judgeforge grade", description=__doc__.split("\n\n")[0],
                                epilog=__doc__[__doc__.index("Exit codes:"):],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", "-i", required=True, help="JSONL of grading requests")
    p.add_argument("--output", "-o", required=True,
                   help="JSONL of results, appended as they finish; an existing one is resumed")
    p.add_argument("--url", type=_http_url, action="append",
                   help=f"server base URL (default {DEFAULT_URL}); repeat it to grade over several servers")
    p.add_argument("--concurrency", "-j", type=_positive_int, default=8,
                   help="requests in flight (>= 1), in all: spread over the --url servers")
    d = Deadlines()
    p.add_argument("--connect-timeout", type=_seconds, default=d.connect_s, metavar="S",
                   help=f"seconds to open a connection to a server (default {d.connect_s:g})")
    p.add_argument("--read-timeout", type=_seconds, default=d.read_s, metavar="S",
                   help=f"seconds a server may stay silent, i.e. a grading's longest (default {d.read_s:g}); "
                        f"past it the line goes to another server and this one out of rotation")
    p.add_argument("--request-timeout", type=_seconds, default=d.request_s, metavar="S",
                   help=f"seconds one request may take end to end (default {d.request_s:g}); past it as "
                        f"--read-timeout")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_true", help="grade in-process through an engine, no server")
    where.add_argument("--ray", action="store_true",
                       help="grade as --local does, on engine replicas through Ray (no server)")
    p.add_argument("--replicas", type=_positive_int,
                   help="--ray: engine replicas (default 1; runtime.KEY=VALUE overrides set the rest)")
    # Resolved when used (`_serve_config`): an HTTP run reads no config, and a bad one is a GradeError.
    p.add_argument("--config", "-c", metavar="FILE|NAME",
                   help="serve config for --local and --ray: a file, or a built-in serve config's name "
                        "(`judgeforge config ls serve`)")
    p.add_argument("--debug", action="store_true", help="show tracebacks for expected errors too")
    p.add_argument("overrides", nargs="*", help="key=value config overrides for --local and --ray")
    args = p.parse_args(argv)
    if args.replicas and not args.ray:
        p.error("--replicas needs --ray")
    args.url = _urls(p, args.url)
    return args


def _urls(p: argparse.ArgumentParser, given: list[str] | None) -> list[str]:
    urls = given or [DEFAULT_URL]
    if dup := next((u for u in urls if urls.count(u) > 1), None):
        p.error(f"--url {dup} is given twice: name each server once (-j sets the requests in flight)")
    return urls


def check_paths(inp: Path, out: Path) -> None:
    """Refuse an --output that is the --input (same path or same file) or cannot be written."""
    if not inp.is_file():
        what = "is a directory" if inp.is_dir() else "does not exist"
        raise GradeError(f"--input {inp} {what}: pass a JSONL file of grading requests", EXIT_USAGE)
    if out.resolve() == inp.resolve() or (out.exists() and os.path.samefile(inp, out)):
        raise GradeError(f"--output {out} is the same file as --input {inp}: the results would replace "
                         f"the requests; choose another --output path", EXIT_USAGE)
    if out.is_dir():
        raise GradeError(f"--output {out} is a directory: pass a file path", EXIT_USAGE)


def prepare_output(rows: list[Row], out: Path) -> tuple[list[Row], list[dict]]:
    """Resume from an existing --output: compacted (atomically) to the results kept."""
    todo, kept = plan(rows, load_output(out))
    try:
        if out.exists():
            atomic_write_jsonl(out, kept)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise GradeError(f"cannot write --output {out}: {e.strerror or e}", EXIT_USAGE) from e
    if kept:
        log.info("resuming %s: %d line(s) already graded, %d to go", out, len(kept), len(todo))
    return todo, kept


def sort_output(out: Path) -> None:
    """Every line done: the file rewritten in input order."""
    atomic_write_jsonl(out, sorted(load_output(out), key=lambda r: r["line"]))


def grade_rows(args: argparse.Namespace, todo: list[Row], sink: Sink) -> None:
    from judgeforge.config import ConfigError

    try:
        if args.ray:
            _grade_ray(todo, args, sink)
        elif args.local:
            _grade_local(todo, args.config, args.overrides, sink)
        elif todo:
            deadlines = Deadlines(args.connect_timeout, args.read_timeout, args.request_timeout)
            asyncio.run(_grade_http(todo, args.url, args.concurrency, sink, deadlines))
    except ConfigError as e:
        raise GradeError(f"config error: {e}", EXIT_USAGE) from e


def run(args: argparse.Namespace) -> int:
    from judgeforge.progress import keep_logs_above, progress

    inp, out = Path(args.input), Path(args.output)
    check_paths(inp, out)
    rows = read_requests(inp)
    todo, kept = prepare_output(rows, out)
    # A bar on a terminal; log lines when stderr is a file (nohup, CI, a scheduler).
    bar = progress(total=len(rows), initial=len(kept), desc="grading", unit="req")
    with keep_logs_above(bar), bar:
        sink = Sink(out, bar, skipped=len(kept))
        try:
            grade_rows(args, todo, sink)
        except KeyboardInterrupt:
            log.warning("interrupted: %s (finished results kept; rerun to resume)", sink.summary())
            return EXIT_INTERRUPTED
        except GradeError:
            if sink.graded or sink.failed:
                log.warning("stopped: %s (finished results kept; rerun to resume)", sink.summary())
            raise
        finally:
            sink.close()
    sort_output(out)
    log.info("done: %s", sink.summary())
    return sink.exit_code()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except GradeError as e:
        log.error("%s", e, exc_info=args.debug)
        return e.code
    except KeyboardInterrupt:  # before or after grading (while grading, run() reports the counts)
        log.warning("interrupted")
        return EXIT_INTERRUPTED
