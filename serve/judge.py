"""Grading with self-consistency: prompts -> engine samples -> parse -> re-sample -> vote.

    judge = Judge(build_engine(cfg.engine), cfg.sampling)
    grades = judge.grade([GradeItem(instruction, response, rubric, reference_answer)])  # batch (eval)
    grade = await judge.agrade(item)                                                   # server
    cmp = judge.compare([CompareItem(instruction, a, b, rubric, both_orders=True)])

Each round sends one engine request per item that still needs samples: round 1
asks for n; later rounds (at most `max_resample_rounds`) ask only for the
unparseable ones, with a different seed so a seeded request does not repeat
its failure. Results are `voting.Grade` / `voting.Comparison`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Sequence

from judgeforge.data.templates import DEFAULT_SCALE, Rubric, Scale, absolute_messages, relative_messages
from judgeforge.serve.engines import JudgeEngine, Sample, SampleRequest
from judgeforge.serve.parsing import ParseResult, parse_score, parse_verdict
from judgeforge.serve.voting import Comparison, Grade, SampleSlots, vote_scores, vote_verdicts

RESEED_STRIDE = 100_003  # seed offset per re-sample round (vLLM gives child i the seed + i)


@dataclass
class Options:
    """Per-request sampling options (None -> the config's default)."""

    n: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    adapter: str | None = None


@dataclass
class GradeItem:
    instruction: str
    response: str
    rubric: Rubric
    reference_answer: str | None = None
    scale: Scale = DEFAULT_SCALE
    options: Options | None = None

    def messages(self) -> list[dict]:
        return absolute_messages(self.instruction, self.response, self.rubric,
                                 self.reference_answer, self.scale)


@dataclass
class CompareItem:
    instruction: str
    response_a: str
    response_b: str
    rubric: Rubric | str
    reference_answer: str | None = None
    both_orders: bool = False
    """Also grade with A and B swapped; a win counts only when both orders agree."""
    options: Options | None = None

    def messages(self, swapped: bool = False) -> list[dict]:
        a, b = (self.response_b, self.response_a) if swapped else (self.response_a, self.response_b)
        return relative_messages(self.instruction, a, b, self.rubric, self.reference_answer)


class Judge:
    def __init__(self, engine: JudgeEngine, sampling):
        self.engine = engine
        self.sampling = sampling  # serve.config.SamplingConfig

    def request(self, messages: list[dict], options: Options | None, scale: Scale = DEFAULT_SCALE,
                n: int | None = None) -> SampleRequest:
        o, s = options or Options(), self.sampling
        return SampleRequest(
            messages=messages, n=n or o.n or s.n,
            temperature=s.temperature if o.temperature is None else o.temperature,
            top_p=o.top_p or s.top_p, max_tokens=o.max_tokens or s.max_tokens,
            seed=s.seed if o.seed is None else o.seed, adapter=o.adapter, scale=scale)

    # --- rounds: pure bookkeeping around the engine call ---------------------------
    def _next(self, req: SampleRequest, slots: SampleSlots) -> SampleRequest | None:
        k = slots.to_resample(self.sampling.max_resample_rounds)
        if k == 0 or (slots.rounds and req.temperature == 0):
            return None  # a greedy re-sample would repeat the same failure
        seed = None if req.seed is None else req.seed + RESEED_STRIDE * slots.rounds
        return replace(req, n=k, seed=seed)

    @staticmethod
    def _fill(slots: SampleSlots, samples: Sequence[Sample], parse) -> None:
        slots.fill([parse(s.text) for s in samples], [s.score_logprobs for s in samples],
                   [s.text for s in samples])

    def _run(self, reqs: list[SampleRequest], parse) -> list[SampleSlots]:
        slots = [SampleSlots(r.n) for r in reqs]
        while True:
            todo = [(i, nxt) for i, r in enumerate(reqs) if (nxt := self._next(r, slots[i])) is not None]
            if not todo:
                return slots
            outs = self.engine.generate([r for _, r in todo])
            for (i, r), samples in zip(todo, outs):
                self._fill(slots[i], samples, lambda t, r=r: parse(t, r.scale))

    async def _arun(self, req: SampleRequest, parse) -> SampleSlots:
        slots = SampleSlots(req.n)
        while (nxt := self._next(req, slots)) is not None:
            self._fill(slots, await self.engine.agenerate(nxt), lambda t: parse(t, req.scale))
        return slots

    # --- absolute grading ------------------------------------------------------------
    def grade(self, items: Sequence[GradeItem]) -> list[Grade]:
        reqs = [self.request(it.messages(), it.options, it.scale) for it in items]
        return [vote_scores(s, it.scale) for s, it in zip(self._run(reqs, parse_score), items)]

    async def agrade(self, item: GradeItem) -> Grade:
        req = self.request(item.messages(), item.options, item.scale)
        return vote_scores(await self._arun(req, parse_score), item.scale)

    # --- relative grading ------------------------------------------------------------
    def _compare_reqs(self, it: CompareItem) -> list[SampleRequest]:
        orders = (False, True) if it.both_orders else (False,)
        return [self.request(it.messages(swapped), it.options) for swapped in orders]

    @staticmethod
    def _verdict(text: str, _scale=None) -> ParseResult:
        return parse_verdict(text)

    @staticmethod
    def _vote_pair(slots: Sequence[SampleSlots]) -> Comparison:
        parsed = [[p for p in s.parsed if p is not None] for s in slots]
        return vote_verdicts(parsed[0], parsed[1] if len(parsed) > 1 else None)

    def compare(self, items: Sequence[CompareItem]) -> list[Comparison]:
        per_item = [self._compare_reqs(it) for it in items]
        flat = self._run([r for rs in per_item for r in rs], self._verdict)
        out, k = [], 0
        for rs in per_item:
            out.append(self._vote_pair(flat[k:k + len(rs)]))
            k += len(rs)
        return out

    async def acompare(self, item: CompareItem) -> Comparison:
        slots = await asyncio.gather(*(self._arun(r, self._verdict) for r in self._compare_reqs(item)))
        return self._vote_pair(slots)
