"""A local OpenAI-compatible chat endpoint that replays GPT-4's cached Prometheus judgments (tests, bench).

`FakeTeacher(judgments)` serves POST /v1/chat/completions on 127.0.0.1 (uvicorn in a thread): a request
whose messages contain a judgment's tag (e.g. "[item 83]") is answered with that judgment's text
(GPT-4's feedback followed by `[RESULT] N`). `mode` switches its behaviour at run time: "ok",
"timeout" (answers after `delay_s`), "error" (500), "garbage" (text without a score), and two careless
endpoints for the credential tests: "unauthorized" (401 whose message echoes the Authorization header,
as a real API's "Incorrect API key provided: ..." may) and "leaky_error" (500 whose body echoes the
request URL and every header). `calls` counts every request received.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

MODES = ("ok", "timeout", "error", "garbage", "unauthorized", "leaky_error")


def prometheus_judgments(path: str | Path, k: int) -> dict[str, tuple[str, int]]:
    """k items of a Prometheus eval file: tag -> (GPT-4's first feedback + result, its score). Items are
    tagged by their position (the file's `idx` repeats across response models)."""
    items = json.loads(Path(path).read_text())[:k]
    out = {}
    for i, it in enumerate(items):
        feedback, score = it["gpt4_feedback"][0], int(it["gpt4_score"][0])
        out[f"[item {i}]"] = (f"{feedback} [RESULT] {score}", score)
    return out


class FakeTeacher:
    def __init__(self, judgments: dict[str, tuple[str, int]], model: str = "gpt-4-replay",
                 delay_s: float = 30.0):
        self.judgments, self.model, self.delay_s = judgments, model, delay_s
        self.mode = "ok"
        self.calls = 0
        self._lock = threading.Lock()
        self.server = self.thread = None
        self.url = ""

    def _text(self, messages: list[dict]) -> str:
        content = " ".join(str(m.get("content", "")) for m in messages)
        if self.mode == "garbage":
            return "I would rather not grade this one."
        return next((text for tag, (text, _) in self.judgments.items() if tag in content),
                    "No cached judgment for this item.")  # unparseable: never a made-up score

    def app(self):
        app = FastAPI()  # Request is imported at module level: FastAPI resolves the annotation there

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            with self._lock:
                self.calls += 1
            if self.mode == "timeout":
                await asyncio.sleep(self.delay_s)
            if self.mode == "error":
                return JSONResponse({"error": {"message": "teacher overloaded"}}, status_code=500)
            if self.mode in ("unauthorized", "leaky_error"):
                return self._leak(request)
            text = self._text(body["messages"])
            choices = [{"index": i, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": text}} for i in range(body.get("n", 1))]
            return {"id": "cmpl-1", "object": "chat.completion", "created": int(time.time()),
                    "model": body["model"], "choices": choices,
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

        return app

    def _leak(self, request: Request) -> JSONResponse:
        """An error body quoting the caller's credentials back (what the server must never relay)."""
        auth = request.headers.get("authorization", "")
        if self.mode == "unauthorized":
            error = {"message": f"Incorrect API key provided: {auth}", "type": "invalid_request_error",
                     "code": "invalid_api_key"}
            return JSONResponse({"error": error}, status_code=401)
        error = {"message": f"internal error serving {request.url}: headers {dict(request.headers)}"}
        return JSONResponse({"error": error}, status_code=500)

    def start(self) -> "FakeTeacher":
        import uvicorn

        from judgeforge.serve.process import free_port

        port = free_port()
        config = uvicorn.Config(self.app(), host="127.0.0.1", port=port, log_level="warning",
                                timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True, name="fake-teacher")
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("fake teacher did not start")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
            self.thread.join(10)
