"""Judge engines: one contract, "give me N judge samples for each of these prompts".

    engine = build_engine(cfg.engine)            # EngineConfig (or a whole ServeConfig)
    reqs = [SampleRequest(messages=absolute_messages(...), n=5, max_tokens=256)]
    samples = engine.generate(reqs)              # batch (eval): list[list[Sample]], one list per request
    samples = await engine.agenerate(reqs[0])    # one request (server); cancelling it aborts the work
    engine.close()                               # or `with build_engine(...) as engine:`

- `SampleRequest.messages` are chat messages from `judgeforge.data.templates`
  (`absolute_messages` / `relative_messages`, without the assistant turn). Every
  engine renders them with `render_prompt` / `prompt_token_ids` below, i.e. the
  tokenizer's chat template with the generation prompt: the same text TRL
  trains on, so the served prompt is byte-identical to the trained one.
- A `Sample` holds the generated `text`, the `finish_reason` ("stop" |
  "length" | ...), the number of generated tokens and, when the engine has
  log-probabilities, `score_logprobs`: `{score: logprob}` at the score position
  (the token after the last `[RESULT]`, see parsing.score_logprobs_at).
- The N samples of one request are one engine request (`n=N`): the prompt is
  prefilled once. `SampleRequest.adapter` selects a LoRA adapter by name
  (`engine.adapters()`); None is the base (or merged) model.
- Errors: `PromptTooLong` (prompt + max_tokens exceed the context; raised
  before any work), `UnknownAdapter`, `EngineDead` (the engine process died;
  `engine.alive` is then False), `TemplateVersionMismatch` at start.
- Engines: `vllm` (serve/engine_vllm.py), `transformers` (serve/engine_hf.py),
  `openai` (serve/engine_openai.py). All import their framework lazily.

Adapters: an adapter dir must hold `judgeforge.json` (written by `judgeforge train`)
with `template_version`; serving refuses one that differs from
`data.templates.TEMPLATE_VERSION`. A merged model dir is checked the same way
when it holds that file.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Coroutine, Sequence

from judgeforge.data.templates import DEFAULT_SCALE, TEMPLATE_VERSION, Scale

if TYPE_CHECKING:
    from judgeforge.serve.config import EngineConfig, ServeConfig

ADAPTER_META_FILES = ("judgeforge.json", "judgeforge_adapter.json")
"""Files in an adapter/merged-model dir that record how it was trained (first found wins)."""


class EngineError(RuntimeError):
    """Base for engine errors the server maps to HTTP answers."""


class PromptTooLong(EngineError, ValueError):
    def __init__(self, n_prompt: int, max_tokens: int, limit: int):
        self.n_prompt, self.max_tokens, self.limit = n_prompt, max_tokens, limit
        super().__init__(f"prompt is {n_prompt} tokens; with max_tokens={max_tokens} it exceeds the "
                         f"model context of {limit} tokens (shorten the input or max_tokens)")


class UnknownAdapter(EngineError, KeyError):
    def __init__(self, name: str, known: Sequence[str]):
        self.name = name
        super().__init__(f"unknown adapter {name!r}; served: {sorted(known)}")

    def __str__(self) -> str:
        return self.args[0]


class InvalidRequest(EngineError, ValueError):
    """The engine rejected the request's parameters (served as 422)."""


class EngineDead(EngineError):
    """The engine can no longer serve (its process died or it failed)."""


class TemplateVersionMismatch(EngineError, ValueError):
    pass


@dataclass
class SampleRequest:
    messages: list[dict]
    """System + user chat messages (no assistant turn)."""
    n: int = 1
    temperature: float = 1.0
    top_p: float = 0.9
    max_tokens: int = 512
    seed: int | None = None
    adapter: str | None = None
    scale: Scale = DEFAULT_SCALE
    """Scale whose score-token log-probabilities to extract."""
    want_logprobs: bool = True


@dataclass
class Sample:
    text: str
    finish_reason: str | None = None
    n_tokens: int = 0
    score_logprobs: dict[int, float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def render_prompt(tokenizer, messages: list[dict]) -> str:
    """The exact prompt text: the tokenizer's chat template plus the generation prompt."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def prompt_token_ids(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of `render_prompt` (the chat template adds any special tokens itself)."""
    return list(tokenizer(render_prompt(tokenizer, messages), add_special_tokens=False)["input_ids"])


def load_tokenizer(name_or_path: str):
    from transformers import AutoTokenizer

    from judgeforge.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model(name_or_path))


def read_template_version(path: str | Path) -> str | None:
    """The `template_version` an adapter/model dir records, or None when it records none."""
    for name in ADAPTER_META_FILES:
        f = Path(path) / name
        if f.is_file():
            try:
                return json.loads(f.read_text()).get("template_version")
            except (json.JSONDecodeError, AttributeError) as e:
                raise TemplateVersionMismatch(f"{f} is not a JSON object: {e}") from None
    return None


def check_template_version(path: str | Path, required: bool = True) -> None:
    """Refuse a dir trained on another prompt template (or recording none, if `required`)."""
    found = read_template_version(path)
    if found is None:
        if required:
            raise TemplateVersionMismatch(
                f"{path} records no template_version (expected a {ADAPTER_META_FILES[0]} with "
                f"template_version={TEMPLATE_VERSION!r}); set engine.allow_unversioned_adapters=true "
                "to serve it anyway")
        return
    if found != TEMPLATE_VERSION:
        raise TemplateVersionMismatch(
            f"{path} was trained with prompt template {found!r} but this judgeforge renders "
            f"{TEMPLATE_VERSION!r}: its scores would not be trustworthy")


def check_adapters(cfg: "EngineConfig") -> dict[str, str]:
    """Validate configured adapters (existence + template version); name -> absolute path."""
    out = {}
    for name, path in cfg.adapters.items():
        p = Path(os.path.expanduser(path))
        if not (p / "adapter_config.json").is_file():
            raise EngineError(f"adapter {name!r}: {p} has no adapter_config.json")
        check_template_version(p, required=not cfg.allow_unversioned_adapters)
        out[name] = str(p.resolve())
    model = Path(os.path.expanduser(cfg.model))
    if model.is_dir():
        check_template_version(model, required=False)
    return out


class JudgeEngine:
    """Base class; see the module docstring for the contract."""

    kind = "base"
    model_name: str = ""
    max_model_len: int = 0
    tokenizer: Any = None

    def adapters(self) -> list[str]:
        return []

    @property
    def alive(self) -> bool:
        return True

    def num_unfinished(self) -> int | None:
        """Engine requests still running (None when the engine cannot tell)."""
        return None

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        return prompt_token_ids(self.tokenizer, messages)

    def count_tokens(self, messages: list[dict]) -> int | None:
        """Prompt length in tokens (None when the engine has no local tokenizer)."""
        return len(self.prompt_ids(messages)) if self.tokenizer is not None else None

    def check_request(self, req: SampleRequest) -> list[int] | None:
        """Validate adapter and length before any work; returns the prompt ids when known."""
        if req.adapter is not None and req.adapter not in self.adapters():
            raise UnknownAdapter(req.adapter, self.adapters())
        if self.tokenizer is None:
            return None
        ids = self.prompt_ids(req.messages)
        if self.max_model_len and len(ids) + req.max_tokens > self.max_model_len:
            raise PromptTooLong(len(ids), req.max_tokens, self.max_model_len)
        return ids

    def generate(self, requests: Sequence[SampleRequest]) -> list[list[Sample]]:
        raise NotImplementedError

    async def agenerate(self, request: SampleRequest) -> list[Sample]:
        raise NotImplementedError

    def info(self) -> dict:
        return {"kind": self.kind, "model": self.model_name, "max_model_len": self.max_model_len,
                "adapters": self.adapters()}

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LoopThreadEngine(JudgeEngine):
    """An engine whose async work runs on its own event loop in a daemon thread.

    Both entry points end up there: `generate` (sync, from eval) blocks on it;
    `agenerate` (from the server's loop) awaits a future chained to it, so
    cancelling the caller (client disconnect, timeout) cancels the engine-side
    task, which aborts the engine request.
    """

    def _start_loop(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"{self.kind}-engine-loop",
                                        daemon=True)
        self._thread.start()

    def _submit(self, coro: Coroutine):
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _agen(self, request: SampleRequest) -> list[Sample]:
        raise NotImplementedError

    async def _gather(self, requests: Sequence[SampleRequest]) -> list[list[Sample]]:
        return list(await asyncio.gather(*(self._agen(r) for r in requests)))

    def generate(self, requests: Sequence[SampleRequest]) -> list[list[Sample]]:
        for r in requests:
            self.check_request(r)
        return self._submit(self._gather(requests)).result()

    async def agenerate(self, request: SampleRequest) -> list[Sample]:
        self.check_request(request)
        return await asyncio.wrap_future(self._submit(self._agen(request)))

    def _stop_loop(self) -> None:
        loop = getattr(self, "_loop", None)
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(timeout=5)


def build_engine(cfg: "EngineConfig | ServeConfig") -> JudgeEngine:
    """The engine named by `cfg.kind` (a ServeConfig's `engine` section is used)."""
    cfg = getattr(cfg, "engine", cfg)
    if cfg.kind == "vllm":
        from judgeforge.serve.engine_vllm import VLLMEngine

        return VLLMEngine(cfg)
    if cfg.kind == "transformers":
        from judgeforge.serve.engine_hf import TransformersEngine

        return TransformersEngine(cfg)
    if cfg.kind == "openai":
        from judgeforge.serve.engine_openai import OpenAIEngine

        return OpenAIEngine(cfg)
    raise ValueError(f"unknown engine kind {cfg.kind!r}")
