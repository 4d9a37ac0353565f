"""Engine doubles: `JudgeEngine`s that answer without a model.

- `ScriptedEngine`: answers from a script of texts, with an optional delay, cancellation counter and a
  `dead` switch: for testing HTTP logic (auth, limits, 429/504/503) without a model.
- `PromptEngine`: every sample a pure function of the prompt, for eval tests.
"""

from __future__ import annotations

import asyncio
import functools
import itertools

from judgeforge.judge.engines import JudgeEngine, Sample, SampleRequest

SCRIPTED_LOGPROBS = {"3": -1.2, "4": -0.4, "A": -0.4, "B": -1.2}
"""The completed choice log-probabilities a ScriptedEngine reports (those among the request's choices)."""


@functools.lru_cache(maxsize=1)
def shipped_tokenizer():
    """The tokenizer that ships in the repo (the default judge's, judgeforge/default_judge/): test engines
    render, count and bound prompts with the real chat template and vocabulary, as real engines do."""
    from judgeforge.judge.engines import load_tokenizer
    from judgeforge.models import SHIPPED_ADAPTER

    return load_tokenizer(str(SHIPPED_ADAPTER))


class PromptEngine(JudgeEngine):
    """An engine whose every sample is `_sample(request)`, a pure function of the prompt, for eval tests
    (subclasses say how the prompt decides it); prompts counted on the shipped tokenizer."""

    max_model_len = 4096

    def __init__(self, cfg):
        self.model_name = cfg.model
        self.tokenizer = shipped_tokenizer()

    def generate(self, requests):
        return [[self._sample(req) for _ in range(req.n)] for req in requests]

    def _sample(self, req) -> Sample:
        raise NotImplementedError


class ScriptedEngine(JudgeEngine):
    """Answers from a script of texts (cycled), each completed with SCRIPTED_LOGPROBS unless
    `complete=False` (an endpoint that cannot continue a prompt). Prompts are prepared as a real
    engine prepares them (JudgeEngine.prepare), on the shipped tokenizer."""

    kind = "fake"

    def __init__(self, texts=("Good. [RESULT] 4",), delay: float = 0.0, max_model_len: int = 4096,
                 adapters=("ad1",), complete: bool = True):
        self.can_complete = complete
        self.texts = itertools.cycle(texts)
        self.delay = delay
        self.max_model_len = max_model_len
        self.model_name = "fake-judge"
        self.tokenizer = shipped_tokenizer()
        self._adapters = list(adapters)
        self.calls: list[SampleRequest] = []
        self.cancelled = 0
        self.dead = False

    def adapters(self):
        return self._adapters

    @property
    def alive(self):
        return not self.dead

    def _samples(self, req):
        self.calls.append(req)
        lps = {c: lp for c, lp in SCRIPTED_LOGPROBS.items() if c in req.choices} if self.can_complete else None
        why = None if self.can_complete else "scripted engine without completion"
        if not req.feedback:
            return [Sample(text="", finish_reason="score_only", choice_logprobs=lps, completion=why)] * req.n
        return [Sample(text=next(self.texts), finish_reason="stop", choice_logprobs=lps, completion=why)
                for _ in range(req.n)]

    def generate(self, requests):
        return [self._samples(self.prepare(r)) for r in requests]

    async def agenerate(self, req):
        self.prepare(req)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return self._samples(req)
