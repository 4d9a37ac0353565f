"""The engine contract: "give me N judge samples for each of these prompts, each with its score
completed".

    engine = build_engine(cfg.engine)            # judgeforge.judge.engines registry
    req = engine.prepare(SampleRequest(messages=item.messages(), n=5, choices=scale_choices(scale)))
    samples = engine.generate([req])             # batch (eval): list[list[Sample]], one list per request
    samples = await engine.agenerate(req)        # one request (server); cancelling it aborts the work
    engine.close()                               # or `with build_engine(...) as engine:`

- `SampleRequest.messages` are chat messages from an item (judge.items), without the assistant turn.
  `prepare` renders them ONCE with the tokenizer's chat template (the same text TRL trains on),
  tokenizes once, checks adapter and context length, and stores the ids on the request:
  everything downstream reuses them.
- A `Sample` holds the generated `text`, its `finish_reason`, the number of generated tokens and
  `choice_logprobs`: the exact log-probability of every choice (scale value, or A/B) read by
  continuing that same sample with `[RESULT] ` (judge.completion). With `feedback=False` nothing is
  generated and the choices are read straight after the prompt. Engines that cannot continue a
  sequence (a chat endpoint) leave it None and say so in `Sample.completion`.
- The N samples of one request are one engine request (`n=N`): the prompt is prefilled once; the
  completions reuse the cached prefix.
- Errors: `PromptTooLong` (raised by `prepare`, before any work), `UnknownAdapter`, `InvalidRequest`,
  `EngineDead` (the engine can no longer serve; `engine.alive` is then False), and
  `judge.adapters.TemplateVersionMismatch` at start.
"""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Coroutine, Sequence

from judgeforge.judge.adapters import TemplateVersionMismatch, check_template_version
from judgeforge.judge.completion import CompletionPlan, plan_completion

if TYPE_CHECKING:
    from judgeforge.judge.config import EngineConfig


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


class EngineTimeout(EngineError):
    """The engine (a remote endpoint) did not answer in time."""


COMPLETION_TOKENS = 8
"""Context reserved for the score completion (marker + a multi-token value) beyond max_tokens."""


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
    choices: tuple[str, ...] = ("1", "2", "3", "4", "5")
    """What the completion reads after `[RESULT] `: the scale's values, or ("A", "B")."""
    feedback: bool = True
    """False: write no feedback; read the choices straight after the prompt (score-only)."""
    complete: bool = True
    """Read the completed distribution (False: text only, as a plain sampler)."""
    prompt_ids: list[int] | None = None
    """The rendered prompt's token ids, set once by `JudgeEngine.prepare`."""


@dataclass
class Sample:
    text: str
    finish_reason: str | None = None
    n_tokens: int = 0
    choice_logprobs: dict[str, float] | None = None
    """Exact log-probability of each choice at the completed `[RESULT] ` (None: not read)."""
    completion: str | None = None
    """Why `choice_logprobs` is None when it is (e.g. the endpoint offers no prompt continuation)."""
    extra: dict[str, Any] = field(default_factory=dict)


def render_prompt(tokenizer, messages: list[dict]) -> str:
    """The exact prompt text: the tokenizer's chat template plus the generation prompt (a system turn
    folded into the user turn where the template takes none: judge/chat.py)."""
    from judgeforge.judge.chat import fit_messages

    return tokenizer.apply_chat_template(fit_messages(tokenizer, messages), tokenize=False,
                                         add_generation_prompt=True)


def prompt_token_ids(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of `render_prompt` (the chat template adds any special tokens itself)."""
    return list(tokenizer(render_prompt(tokenizer, messages), add_special_tokens=False)["input_ids"])


def load_tokenizer(name_or_path: str):
    from transformers import AutoTokenizer

    from judgeforge.judge.weights import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model(name_or_path))


class TokenizerView:
    """`encode`/`decode` without special tokens: what judge.completion plans with."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


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
    can_complete: bool = True
    """Whether this engine continues sequences to read the choices' probabilities."""
    kv_capacity_tokens: int | None = None
    """Tokens the engine's KV cache holds (None: unknown or unbounded); batch grading plans its
    batches to fit (judge.judge.plan_batches)."""

    def adapters(self) -> list[str]:
        return []

    @property
    def alive(self) -> bool:
        return True

    def num_unfinished(self) -> int | None:
        """Engine requests still running (None when the engine cannot tell)."""
        return None

    def stats(self) -> dict | None:
        """The engine's own work counts (tokens prefilled and generated), where it keeps them."""
        return None

    def prepare(self, req: SampleRequest) -> SampleRequest:
        """Validate adapter and length before any work; tokenizes once (idempotent)."""
        if req.adapter is not None and req.adapter not in self.adapters():
            raise UnknownAdapter(req.adapter, self.adapters())
        if self.tokenizer is None:
            return req
        if req.prompt_ids is None:
            req.prompt_ids = prompt_token_ids(self.tokenizer, req.messages)
        budget = (req.max_tokens if req.feedback else 0) + (COMPLETION_TOKENS if req.complete else 0)
        if self.max_model_len and len(req.prompt_ids) + budget > self.max_model_len:
            raise PromptTooLong(len(req.prompt_ids), req.max_tokens, self.max_model_len)
        return req

    def count_tokens(self, messages: list[dict]) -> int | None:
        """Prompt length in tokens (None when the engine has no local tokenizer)."""
        return len(prompt_token_ids(self.tokenizer, messages)) if self.tokenizer is not None else None

    def plan(self, req: SampleRequest, gen_ids: Sequence[int], text: str) -> CompletionPlan:
        return plan_completion(TokenizerView(self.tokenizer), req.prompt_ids or [], gen_ids, text,
                               req.choices)

    def generate(self, requests: Sequence[SampleRequest]) -> list[list[Sample]]:
        raise NotImplementedError

    async def agenerate(self, request: SampleRequest) -> list[Sample]:
        raise NotImplementedError

    def info(self) -> dict:
        return {"kind": self.kind, "model": self.model_name, "max_model_len": self.max_model_len,
                "adapters": self.adapters(), "completion": self.can_complete}

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
        requests = [self.prepare(r) for r in requests]
        return self._submit(self._gather(requests)).result()

    async def agenerate(self, request: SampleRequest) -> list[Sample]:
        request = self.prepare(request)
        return await asyncio.wrap_future(self._submit(self._agen(request)))

    def _stop_loop(self) -> None:
        loop = getattr(self, "_loop", None)
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(timeout=5)


__all__ = ["COMPLETION_TOKENS", "EngineDead", "EngineError", "EngineTimeout", "InvalidRequest",
           "JudgeEngine", "LoopThreadEngine", "PromptTooLong", "Sample", "SampleRequest", "TemplateVersionMismatch",
           "TokenizerView", "UnknownAdapter", "check_adapters", "check_template_version",
           "load_tokenizer", "prompt_token_ids", "render_prompt"]
