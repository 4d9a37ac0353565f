"""The OpenAI-compatible engine, on the official `openai` SDK: `vllm serve` replicas behind a
balancer, or a hosted judge.

`api: completions` (a `vllm serve` of the judge): the prompt is rendered and tokenized HERE once
(`prepare`, the local tokenizer = `tokenizer` or `model`: byte-identical to training) and sent as
token ids; the N samples are one call (`n=N`, the replica prefills once), answered with their
generated token ids (vLLM: `logprobs: 0` + `return_tokens_as_token_ids`, tokens come back as
"token_id:123"). Each sample's score is then completed as in the in-process vLLM engine
(judge.completion): one 1-token call per read, prompt = the sample's own ids + `[RESULT] `,
`logprob_token_ids` = the choice tokens, whose raw log-probabilities come back in
`logprobs.top_logprobs[0]` under "token_id:N" (the replica's prefix cache covers the sample).

Where the endpoint offers no prompt continuation (`api: chat`, e.g. a hosted GPT; `completion: off`;
or, with `completion: auto`, an endpoint that rejects or ignores those parameters) samples carry no
distribution and say why in `Sample.completion`: the Judge parses the written score and re-samples
unparseable texts in bounded rounds. A score-only request (`feedback=False`) then writes feedback.

Greedy requests decode once and copy (vLLM refuses n > 1 at temperature 0). A LoRA adapter served by
the endpoint (`vllm serve --lora-modules name=path`) is chosen by the `model` field. Calls are
limited to `max_concurrency` at once.

Errors: context overflow (a 400 whose code is `context_length_exceeded` (OpenAI), whose param is
vLLM's `input_tokens`/`input_text`, or, as a fallback, whose message speaks of the maximum context
length, as both do) -> `PromptTooLong`; another 400/422 -> `InvalidRequest`; unreachable endpoint ->
`EngineDead` (503; `alive` stays True: the endpoint may come back); timeout (`timeout_s`, after the
SDK's retries) -> `EngineTimeout`; any other status -> `EngineError` naming it (its `status` attribute
holds the code). Error messages name the endpoint by its redacted URL and carry the upstream body only
as a scrubbed, bounded summary (judgeforge.redact): an endpoint that echoes the Authorization header
must not put the key into an answer or a log, and the raw SDK exception is not chained for the same
reason.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re

from judgeforge.judge.engines.base import (EngineDead, EngineError, EngineTimeout, InvalidRequest,
                                           LoopThreadEngine, PromptTooLong, Sample, SampleRequest,
                                           load_tokenizer)
from judgeforge.judge.chat import fit_messages
from judgeforge.judge.fit import DEFAULT_MODEL_LEN
from judgeforge.redact import guard_loggers, redact_url, summary

log = logging.getLogger(__name__)

MAX_RETRIES = 2
"""SDK retries (connection errors, 408/409/429/5xx, with backoff) before an error is raised."""
CONTINUATION_PARAMS = ("logprob_token_ids", "return_tokens_as_token_ids", "logprobs")
"""Request fields prompt continuation relies on: a 400 naming one means the endpoint lacks it."""
TEXT_ONLY = "score parsed from the text"
_TOKEN_ID = re.compile(r"^token_id:(-?\d+)$")
_CONTEXT_MSG = re.compile(r"maximum context length|context length|context window", re.IGNORECASE)
_LIMIT = re.compile(r"maximum context length (?:is )?\(?(\d+)", re.IGNORECASE)


class NoContinuation(Exception):
    """The endpoint cannot continue a prompt for the completion (reason in args[0])."""


def is_context_overflow(e) -> bool:
    """Whether an `openai.BadRequestError` says the prompt does not fit the model's context.

    OpenAI sets `code="context_length_exceeded"`; vLLM answers 400 with `param` `input_tokens` or
    `input_text` and "This model's maximum context length is N tokens..." (older vLLM: "Input
    length (X) exceeds model's maximum context length (Y)", no param): the message is the fallback.
    """
    if getattr(e, "code", None) == "context_length_exceeded":
        return True
    if getattr(e, "param", None) in ("input_tokens", "input_text"):
        return True
    return bool(_CONTEXT_MSG.search(_message(e)))


def _message(e) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return str(getattr(e, "message", "") or e)


def _status_error(msg: str, status: int) -> EngineError:
    err = EngineError(msg)
    err.status = status  # callers that retry (the cascade's teacher) decide on the code
    return err


def _token_id(key: str) -> int | None:
    m = _TOKEN_ID.match(key)
    return int(m.group(1)) if m else None


class OpenAIEngine(LoopThreadEngine):
    kind = "openai"

    def __init__(self, cfg, http_client=None, max_retries: int = MAX_RETRIES):
        """`http_client`: an `httpx.AsyncClient` handed to the SDK (tests inject a MockTransport)."""
        self.cfg = cfg
        self.model_name = cfg.model
        # The endpoint's judge is not here to read its trained length from (judge/fit.py).
        self.max_model_len = cfg.max_model_len or DEFAULT_MODEL_LEN
        self.tokenizer = None
        tok = cfg.tokenizer or (cfg.model if cfg.api == "completions" else None)
        if tok:
            self.tokenizer = load_tokenizer(tok)
        self._adapter_names = sorted(cfg.adapters)  # served by the endpoint under these model names
        self._why: str | None = None
        """Why prompt continuation is off (None: on)."""
        if cfg.api == "chat":
            if cfg.completion == "on":
                raise EngineError("completion: on needs api: completions (a chat endpoint cannot "
                                  "continue a prompt)")
            self._why = "chat endpoint offers no prompt continuation"
        elif cfg.completion == "off":
            self._why = "prompt continuation off (completion: off)"
        self._stop: set[int] = set()
        """Special tokens (end of turn) a `stop` sample's ids may end with."""
        if self.tokenizer is not None:
            self._stop = {*self.tokenizer.all_special_ids, self.tokenizer.eos_token_id} - {None}
        self._http_client, self._max_retries = http_client, max_retries
        self._client = None
        self._where = redact_url(cfg.base_url)
        """The endpoint as errors name it."""
        self._secrets = (os.environ.get(cfg.api_key_env),)
        """Masked wherever an upstream text is relayed (an endpoint may echo the key)."""
        guard_loggers()  # the HTTP stack below logs request URLs
        self._start_loop()
        self._submit(self._open()).result(timeout=60)

    async def _open(self) -> None:
        """The SDK client and the concurrency limit, made on the engine loop that uses them."""
        from openai import AsyncOpenAI

        self._sem = asyncio.Semaphore(self.cfg.max_concurrency)
        self._client = AsyncOpenAI(base_url=self.cfg.base_url,
                                   api_key=os.environ.get(self.cfg.api_key_env) or "EMPTY",
                                   timeout=self.cfg.timeout_s, max_retries=self._max_retries,
                                   http_client=self._http_client)

    @property
    def can_complete(self) -> bool:  # type: ignore[override]
        return self._why is None

    def adapters(self) -> list[str]:
        return self._adapter_names

    def _fall_back(self, why: str) -> None:
        """`completion: auto` meets an endpoint without continuation: text-only from now on."""
        if self.cfg.completion == "on":
            raise EngineError(f"completion: on, but the endpoint {self._where} offers no prompt "
                              f"continuation: {self._summary(why)}")
        if self._why is None:
            self._why = "endpoint offers no prompt continuation"
            log.warning("%s (%s): scores are parsed from the samples' text from now on "
                        "(set completion: off to skip the attempt)", self._why, why)

    def _summary(self, text: str) -> str:
        return summary(text, self._secrets)

    # --- calls --------------------------------------------------------------------------
    async def _call(self, create, req: SampleRequest, n_prompt: int | None, continuation: bool, **kw):
        """One SDK call under the concurrency limit, its errors as engine errors."""
        import openai

        async with self._sem:
            try:
                return await create(**kw)
            except openai.APITimeoutError:
                raise EngineTimeout(f"endpoint {self._where} did not answer within "
                                    f"{self.cfg.timeout_s}s") from None
            except openai.APIConnectionError as e:
                why = self._summary(repr(e.__cause__ or e))
                raise EngineDead(f"endpoint {self._where} unreachable: {why}") from None
            except openai.BadRequestError as e:
                msg = _message(e)
                if is_context_overflow(e):
                    m = _LIMIT.search(msg)
                    raise PromptTooLong(n_prompt if n_prompt is not None else -1, req.max_tokens,
                                        int(m.group(1)) if m else self.max_model_len) from None
                named = [p for p in CONTINUATION_PARAMS if p == e.param or p in msg]
                if continuation and named:
                    raise NoContinuation(f"400 on {named[0]}: {self._summary(msg)}") from None
                raise InvalidRequest(f"endpoint answered 400: {self._summary(msg)}") from None
            except openai.UnprocessableEntityError as e:
                raise InvalidRequest(f"endpoint answered 422: {self._summary(_message(e))}") from None
            except openai.APIStatusError as e:
                raise _status_error(f"endpoint {self._where} answered {e.status_code}: "
                                    f"{self._summary(_message(e))}", e.status_code) from None

    def _common(self, req: SampleRequest, n: int) -> dict:
        kw = dict(model=req.adapter or self.cfg.model, n=n, temperature=req.temperature,
                  top_p=req.top_p, max_tokens=req.max_tokens)
        if req.seed is not None:
            kw["seed"] = req.seed
        return kw

    async def _write(self, req: SampleRequest, with_ids: bool) -> list[Sample]:
        """The request's N samples (one call; greedy: one decode, copied); `with_ids`: each with
        its generated token ids in `extra["ids"]` (raises NoContinuation when they do not come)."""
        copies = req.n if req.temperature == 0 else 1
        kw = self._common(req, req.n // copies)
        n_prompt = len(req.prompt_ids) if req.prompt_ids is not None else None
        if self.cfg.api == "chat":
            out = await self._call(self._client.chat.completions.create, req, n_prompt, False,
                                   messages=fit_messages(self.tokenizer, req.messages), **kw)
            samples = [Sample(text=c.message.content or "", finish_reason=c.finish_reason,
                              n_tokens=self._count(c.message.content or ""))
                       for c in sorted(out.choices, key=lambda c: c.index)]
        else:
            if with_ids:
                kw.update(logprobs=0, extra_body={"return_tokens_as_token_ids": True})
            out = await self._call(self._client.completions.create, req, n_prompt, with_ids,
                                   prompt=req.prompt_ids, **kw)
            samples = []
            for c in sorted(out.choices, key=lambda c: c.index):
                s = Sample(text=c.text or "", finish_reason=c.finish_reason)
                if with_ids:
                    s.extra["ids"], s.n_tokens = self._generated_ids(c)
                else:
                    s.n_tokens = self._count(s.text)
                samples.append(s)
        return [s for s in samples for _ in range(copies)] if copies > 1 else samples

    def _generated_ids(self, c) -> tuple[list[int], int]:
        """The generated ids from "token_id:N" tokens, without the end-of-turn token (the
        completion continues before it), and the number generated."""
        tokens = (c.logprobs.tokens if c.logprobs is not None else None) or []
        ids = [_token_id(t) for t in tokens]
        if (not ids and c.text) or any(i is None for i in ids):
            raise NoContinuation("the endpoint returned no generated token ids "
                                 "(return_tokens_as_token_ids unsupported)")
        n = len(ids)
        if c.finish_reason == "stop" and ids and ids[-1] in self._stop:
            ids = ids[:-1]
        return ids, n  # type: ignore[return-value]

    def _count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if self.tokenizer else 0

    async def _read(self, req: SampleRequest, prompt_ids: list[int],
                    tokens: list[int]) -> dict[int, float]:
        """Raw log-probabilities of `tokens` as the next token after `prompt_ids`."""
        out = await self._call(self._client.completions.create, req, len(prompt_ids), True,
                               model=req.adapter or self.cfg.model, prompt=prompt_ids, max_tokens=1,
                               temperature=0.0, logprobs=1,
                               extra_body={"logprob_token_ids": tokens,
                                           "return_tokens_as_token_ids": True})
        lp = out.choices[0].logprobs if out.choices else None
        top = (lp.top_logprobs or [None])[0] if lp is not None else None
        got = {}
        for key, v in (top or {}).items():
            i = _token_id(key)
            if i is not None and v is not None:
                got[i] = float(v)
        missing = [t for t in tokens if t not in got]
        if missing:
            raise NoContinuation(f"no log-probabilities for the asked token ids {missing[:5]} "
                                 "(logprob_token_ids unsupported)")
        return {t: got[t] for t in tokens}

    async def _complete(self, req: SampleRequest, s: Sample) -> None:
        plan = self.plan(req, s.extra.get("ids", []), s.text)
        reads = await asyncio.gather(*(self._read(req, plan.prefix + list(node), toks)
                                       for node, toks in plan.reads()))
        s.choice_logprobs = plan.combine(reads)

    async def _agen(self, req: SampleRequest) -> list[Sample]:
        completing = req.complete and self.can_complete
        samples: list[Sample] | None = None
        if completing:
            try:
                samples = (await self._write(req, with_ids=True) if req.feedback
                           else [Sample(text="", finish_reason="score_only")] * req.n)
                distinct = {id(s): s for s in samples}.values()  # greedy copies share one completion
                await asyncio.gather(*(self._complete(req, s) for s in distinct))
            except NoContinuation as e:
                self._fall_back(str(e))  # raises with completion: on
                completing = False
                if samples is not None and req.feedback:
                    for s in samples:
                        s.choice_logprobs = None
                else:
                    samples = None
        if samples is None:
            if req.feedback or req.complete:  # without continuation a score-only request writes
                samples = await self._write(req, with_ids=False)
            else:
                samples = [Sample(text="", finish_reason="score_only")] * req.n
        if req.complete and not completing:
            why = self._why or "endpoint offers no prompt continuation"
            extra = "" if req.feedback else " (score-only needs it: feedback written)"
            for s in samples:
                s.completion = f"{why}{extra}: {TEXT_ONLY}"
        for s in samples:
            s.extra.pop("ids", None)
        return samples

    def close(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            self._submit(client.close()).result(timeout=10)
            self._client = None
        self._stop_loop()
