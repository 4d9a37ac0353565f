"""`judgeforge grade`: JSONL of grading requests in, JSONL of results out.

    judgeforge grade --input reqs.jsonl --output results.jsonl --url http://127.0.0.1:8000 -j 8
    judgeforge grade --input reqs.jsonl --output results.jsonl --local --config configs/serve/default.yaml

Each input line is a /v1/grade body (or a /v1/compare body when it has
`response_a`), plus an optional `id` echoed back. Each output line, in input
order, is `{"index", "id", "result"}` or `{"index", "id", "error": {status, detail}}`:
no line is dropped. HTTP mode sends the key from JUDGEFORGE_API_KEY and retries
429 answers after their Retry-After (bounded). `--local` grades through an
engine in this process (no server), with the same request validation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path

from judgeforge.io import atomic_write_jsonl

MAX_429_RETRIES = 8
log = logging.getLogger(__name__)


def read_requests(path: str) -> list[tuple[object, dict | None, str | None]]:
    """(id, body, error) per non-blank line; unreadable lines become errors, not skips."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                body = json.loads(line)
                if not isinstance(body, dict):
                    raise ValueError("not a JSON object")
            except ValueError as e:
                out.append((None, None, f"line {lineno}: {e}"))
                continue
            out.append((body.pop("id", None), body, None))
    return out


def _route(body: dict) -> str:
    return "/v1/compare" if "response_a" in body else "/v1/grade"


async def _grade_http(rows, url: str, concurrency: int, progress) -> list[dict]:
    import httpx

    key = os.environ.get("JUDGEFORGE_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    sem = asyncio.Semaphore(concurrency)

    async def one(client, body):
        async with sem:
            for _ in range(MAX_429_RETRIES):
                r = await client.post(_route(body), json=body)
                if r.status_code != 429:
                    break
                await asyncio.sleep(float(r.headers.get("retry-after", "1")))
        progress.update(1)
        try:
            payload = r.json()
        except ValueError:
            payload = {"detail": r.text}
        return {"result": payload} if r.status_code == 200 else {
            "error": {"status": r.status_code, "detail": payload.get("detail", payload)}}

    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=None) as client:
        tasks = [one(client, body) if body is not None else _err(err, progress)
                 for _, body, err in rows]
        return list(await asyncio.gather(*tasks))


async def _err(err, progress):
    progress.update(1)
    return {"error": {"status": 400, "detail": err}}


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


def _grade_local(rows, config: str | None, overrides: list[str], progress) -> list[dict]:
    from judgeforge.config import load_config
    from judgeforge.serve.config import ServeConfig
    from judgeforge.judge.engines import build_engine
    from judgeforge.judge.judge import Judge
    from judgeforge.serve.schemas import CompareRequest, GradeRequest, validate_limits

    cfg = load_config(ServeConfig, config, overrides)
    results: list[dict | None] = [None] * len(rows)
    grade_ix, compare_ix, reqs = [], [], {}
    for i, (_, body, err) in enumerate(rows):
        if err is not None:
            results[i] = {"error": {"status": 400, "detail": err}}
            continue
        try:
            req = (CompareRequest if "response_a" in body else GradeRequest).model_validate(body)
            validate_limits(req, cfg)
            reqs[i] = (req, req.item())
        except ValueError as e:  # pydantic ValidationError and FieldError are ValueErrors
            results[i] = {"error": {"status": 422, "detail": str(e)}}
            continue
        (compare_ix if "response_a" in body else grade_ix).append(i)
    with build_engine(cfg) as engine:
        judge = Judge(engine, cfg.sampling)
        for ix, fn in ((grade_ix, _grade_chunk), (compare_ix, _compare_chunk)):
            for k in range(0, len(ix), 16):  # chunks: progress moves, engine still batches
                chunk = ix[k:k + 16]
                for i, out in zip(chunk, _run_chunk(judge, fn, [reqs[i][1] for i in chunk])):
                    results[i] = out
                progress.update(len(chunk))
    progress.update(sum(1 for _, _, e in rows if e is not None))
    return results  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    p = argparse.ArgumentParser(prog="judgeforge grade", description=__doc__.split("\n\n")[0])
    p.add_argument("--input", "-i", required=True, help="JSONL of grading requests")
    p.add_argument("--output", "-o", required=True, help="JSONL of results (written atomically)")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL")
    p.add_argument("--concurrency", "-j", type=int, default=8, help="requests in flight")
    p.add_argument("--local", action="store_true", help="grade in-process through an engine, no server")
    p.add_argument("--config", "-c", help="serve config for --local")
    p.add_argument("overrides", nargs="*", help="key=value config overrides for --local")
    args = p.parse_args(argv)
    rows = read_requests(args.input)
    with logging_redirect_tqdm(), tqdm(total=len(rows), desc="grading", unit="req", file=sys.stderr,
                                       disable=None) as progress:  # disable=None: off when not a TTY
        if args.local:
            results = _grade_local(rows, args.config, args.overrides, progress)
        else:
            results = asyncio.run(_grade_http(rows, args.url, args.concurrency, progress))
    out = [{"index": i, "id": rid, **res} for i, ((rid, _, _), res) in enumerate(zip(rows, results))]
    atomic_write_jsonl(Path(args.output), out)
    n_err = sum("error" in r for r in out)
    log.info("%d results -> %s (%d errors)", len(out), args.output, n_err)
    return 1 if n_err == len(out) and out else 0
