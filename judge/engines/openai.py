"""The OpenAI-compatible engine: `vllm serve` replicas behind a balancer, or a hosted judge.

`n` and log-probabilities are passed through: one HTTP call asks for the N
samples (`n=N`), so a vLLM replica prefills the prompt once. `api: chat` sends
the template's messages (the endpoint applies its chat template: the same one
for a `vllm serve` of the trained model); `api: completions` sends the prompt
rendered here, byte-identical to training. A LoRA adapter served by the
replica (`vllm serve --lora-modules name=path`) is selected as the `model`.
"""

from __future__ import annotations

import asyncio
import os

from judgeforge.judge.engines import (EngineDead, EngineError, LoopThreadEngine, PromptTooLong, Sample,
                                      SampleRequest, render_prompt)
from judgeforge.judge.parsing import score_logprobs_at, score_position


class OpenAIEngine(LoopThreadEngine):
    kind = "openai"

    def __init__(self, cfg, transport=None):
        self.cfg = cfg
        self.model_name = cfg.model
        self.max_model_len = cfg.max_model_len
        self._transport = transport  # tests inject an httpx.MockTransport
        self._client = None
        self.tokenizer = None
        tok = cfg.tokenizer or (cfg.model if cfg.api == "completions" else None)
        if tok:
            from judgeforge.judge.engines import load_tokenizer

            self.tokenizer = load_tokenizer(tok)
        self._adapter_names = sorted(cfg.adapters)  # served by the endpoint under these model names
        self._start_loop()
        self._sem = None

    def adapters(self) -> list[str]:
        return self._adapter_names

    def _http(self):
        import httpx

        if self._client is None:
            key = os.environ.get(self.cfg.api_key_env, "")
            self._client = httpx.AsyncClient(
                base_url=self.cfg.base_url.rstrip("/") + "/", timeout=self.cfg.timeout_s,
                headers={"Authorization": f"Bearer {key}"} if key else {}, transport=self._transport)
            self._sem = asyncio.Semaphore(self.cfg.max_concurrency)
        return self._client

    @staticmethod
    def _n(req: SampleRequest) -> int:
        return 1 if req.temperature == 0 else req.n  # greedy: one decode, copied (vLLM refuses n>1)

    def _payload(self, req: SampleRequest) -> tuple[str, dict]:
        body = {"model": req.adapter or self.cfg.model, "n": self._n(req), "temperature": req.temperature,
                "top_p": req.top_p, "max_tokens": req.max_tokens}
        if req.seed is not None:
            body["seed"] = req.seed
        k = self.cfg.top_logprobs if req.want_logprobs else 0
        if self.cfg.api == "chat":
            body["messages"] = req.messages
            if k:
                body.update(logprobs=True, top_logprobs=k)
            return "chat/completions", body
        body["prompt"] = render_prompt(self.tokenizer, req.messages)
        if k:
            body["logprobs"] = k
        return "completions", body

    async def _agen(self, req: SampleRequest) -> list[Sample]:
        import httpx

        path, body = self._payload(req)
        client = self._http()
        async with self._sem:
            try:
                r = await client.post(path, json=body)
            except httpx.TransportError as e:
                raise EngineDead(f"endpoint {self.cfg.base_url} unreachable: {e!r}") from e
        if r.status_code == 400 and "context" in r.text.lower():
            raise PromptTooLong(-1, req.max_tokens, self.max_model_len)
        if r.status_code >= 400:
            raise EngineError(f"endpoint answered {r.status_code}: {r.text[:300]}")
        samples = [self._sample(c, req) for c in r.json()["choices"]]
        return samples * (req.n // self._n(req))

    def _sample(self, choice: dict, req: SampleRequest) -> Sample:
        lp = choice.get("logprobs") or {}
        if self.cfg.api == "chat":
            text = (choice.get("message") or {}).get("content") or ""
            content = lp.get("content") or []
            tokens = [c["token"] for c in content]
            tops = [{t["token"]: t["logprob"] for t in c.get("top_logprobs") or []} for c in content]
        else:
            text = choice.get("text") or ""
            tokens = lp.get("tokens") or []
            tops = lp.get("top_logprobs") or []
        lps = None
        i = score_position(tokens) if tokens else None
        if i is not None and i < len(tops) and tops[i]:
            lps = score_logprobs_at(tops[i], req.scale)
        return Sample(text=text, finish_reason=choice.get("finish_reason"), n_tokens=len(tokens),
                      score_logprobs=lps)

    def close(self) -> None:
        if self._client is not None:
            self._submit(self._client.aclose()).result(timeout=5)
            self._client = None
        self._stop_loop()
