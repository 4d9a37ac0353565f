"""`Judge`: items -> engine samples (each with its completed score) -> votes. The one path from a
prompt to a score, shared by the API, the `grade` client and batch evaluation.

    judge = Judge(build_engine(cfg.engine), cfg.sampling)
    grades = judge.grade([GradeItem(instruction, response, rubric, reference_answer)])  # batch (eval)
    grade = await judge.agrade(item)                                                   # server
    cmp = judge.compare([CompareItem(instruction, a, b, rubric, both_orders=True)])

`requests(item)` renders, tokenizes and checks an item's engine requests once (the server calls it
before admitting a request, to answer 413/422 early, and passes them on). Every sample is read by
`read`: the value the judge wrote after its last `[RESULT]` and the distribution the engine completed
there (judge.scores.Judged). A slot without a vote (only possible where the engine cannot complete)
is re-sampled in bounded rounds with a different seed, so a seeded request does not repeat its
failure. Results are `voting.Grade` / `voting.Comparison`.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Sequence

from judgeforge.judge.engines import COMPLETION_TOKENS, JudgeEngine, Sample, SampleRequest
from judgeforge.judge.items import CompareItem, GradeItem, Options
from judgeforge.judge.parsing import ParseResult, parse_score, parse_verdict, valid_judgment
from judgeforge.judge.scores import Judged, distribution
from judgeforge.judge.voting import Comparison, Grade, SampleSlots, vote_scores, vote_verdicts

RESEED_STRIDE = 100_003  # seed offset per re-sample round (vLLM gives child i the seed + i)
BATCH = 32  # most requests per engine call in batch grading (progress granularity)
KV_SHARE = 0.9  # of the engine's KV cache a batch may plan to fill (the rest absorbs rounding)
SCORE_ONLY = "score-only: nothing written"


def read(sample: Sample, item: GradeItem | CompareItem, strict: bool = False,
         engine: str | None = None) -> Judged:
    """One engine sample as a vote: the written value and the completed distribution. `strict`: a
    written score whose feedback states another verdict is no vote (judge.parsing.valid_judgment).
    `engine`: the kind that drew it, unless the sample names its own (`extra["engine"]`)."""
    if sample.finish_reason == "score_only":
        written = ParseResult(reason=SCORE_ONLY)
    elif isinstance(item, GradeItem):
        written = parse_score(sample.text, item.scale)
        if strict:
            written = valid_judgment(written)
    else:
        written = parse_verdict(sample.text)
    return Judged(written=written, probs=distribution(sample.choice_logprobs, item.choices),
                  text=sample.text, finish_reason=sample.finish_reason, n_tokens=sample.n_tokens,
                  completion=sample.completion, engine=sample.extra.get("engine", engine))


def request_cost(req: SampleRequest) -> int:
    """KV-cache tokens a request holds at its peak: the prompt once (its n samples share it through
    the prefix cache), each sample's feedback, and the few tokens of each score completion."""
    prompt = len(req.prompt_ids or ())
    return prompt + req.n * ((req.max_tokens if req.feedback else 0) + COMPLETION_TOKENS)


def plan_batches(costs: Sequence[int], budget: int | None, max_size: int = BATCH) -> list[range]:
    """Consecutive batches of at most `max_size` requests whose costs add up to at most `budget`
    (None: no budget); a request over the budget on its own gets a batch of its own.

    Why: vLLM admits a request when its prompt fits and preempts (recomputes) running ones when
    decoding runs out of KV blocks, so a batch larger than the cache pays its prefills twice; and a
    batch that fits leaves its prompts cached for the score-only read that follows it."""
    out, start, used = [], 0, 0
    for i, c in enumerate(costs):
        full = i - start >= max_size or (budget is not None and i > start and used + c > budget)
        if full:
            out.append(range(start, i))
            start, used = i, 0
        used += c
    if start < len(costs):
        out.append(range(start, len(costs)))
    return out


class Judge:
    def __init__(self, engine: JudgeEngine, sampling, strict: bool = False):
        """`strict`: the data builder's rule for a valid judgment applies to written scores (see
        `read`): the cascade's teacher, whose judgments are served and then trained on."""
        self.engine = engine
        self.sampling = sampling  # judge.config.SamplingConfig
        self.strict = strict

    def request(self, messages: list[dict], options: Options | None, choices: Sequence[str]) -> SampleRequest:
        """An engine request with the config's defaults under the item's options (not prepared)."""
        o, s = options or Options(), self.sampling
        return SampleRequest(
            messages=messages, n=o.n or s.n,
            temperature=s.temperature if o.temperature is None else o.temperature,
            top_p=o.top_p or s.top_p, max_tokens=o.max_tokens or s.max_tokens,
            seed=s.seed if o.seed is None else o.seed, adapter=o.adapter, choices=tuple(choices),
            feedback=s.feedback if o.feedback is None else o.feedback)

    def requests(self, item: GradeItem | CompareItem) -> list[SampleRequest]:
        """The item's engine requests, rendered, tokenized and checked once (raises PromptTooLong,
        UnknownAdapter); one for a grading, one per order for a comparison."""
        if isinstance(item, GradeItem):
            msgs = [item.messages()]
        else:
            msgs = [item.messages(swapped) for swapped in item.orders()]
        return [self.engine.prepare(self.request(m, item.options, item.choices)) for m in msgs]

    # --- rounds: pure bookkeeping around the engine call ---------------------------
    def _next(self, req: SampleRequest, slots: SampleSlots) -> SampleRequest | None:
        k = slots.to_resample(self.sampling.max_resample_rounds)
        if k == 0 or (slots.rounds and (req.temperature == 0 or not req.feedback)):
            return None  # a greedy (or score-only) re-sample would repeat the same answer
        seed = None if req.seed is None else req.seed + RESEED_STRIDE * slots.rounds
        return req if slots.rounds == 0 else replace(req, n=k, seed=seed)

    def _run(self, reqs: list[SampleRequest], items: list, progress=None) -> list[SampleSlots]:
        slots = [SampleSlots(r.n) for r in reqs]
        while True:
            todo = [(i, nxt) for i, r in enumerate(reqs) if (nxt := self._next(r, slots[i])) is not None]
            if not todo:
                return slots
            first = all(slots[i].rounds == 0 for i, _ in todo)
            for batch in self.batches([r for _, r in todo]):
                chunk = [todo[k] for k in batch]
                outs = self.engine.generate([r for _, r in chunk])
                for (i, _), samples in zip(chunk, outs):
                    slots[i].fill([read(s, items[i], self.strict, self.engine.kind) for s in samples])
                if progress is not None and first:
                    progress.update(len(chunk))

    def batches(self, reqs: Sequence[SampleRequest | Sequence[SampleRequest]]) -> list[range]:
        """Batches of prepared requests (or of items' request lists, kept together) that fit the
        engine's KV cache (see `plan_batches`)."""
        cap = getattr(self.engine, "kv_capacity_tokens", None)
        costs = [request_cost(r) if isinstance(r, SampleRequest) else sum(map(request_cost, r)) for r in reqs]
        return plan_batches(costs, int(cap * KV_SHARE) if cap else None)

    async def _arun(self, req: SampleRequest, item) -> SampleSlots:
        slots = SampleSlots(req.n)
        while (nxt := self._next(req, slots)) is not None:
            samples = await self.engine.agenerate(nxt)
            slots.fill([read(s, item, self.strict, self.engine.kind) for s in samples])
        return slots

    @staticmethod
    def _progress(total: int, enabled: bool, desc: str):
        # A bar on a terminal, log lines under nohup/CI/a scheduler (judgeforge.progress).
        from judgeforge.progress import progress

        return progress(total=total, desc=desc, unit="prompt", enabled=enabled)

    # --- absolute grading ------------------------------------------------------------
    def grade(self, items: Sequence[GradeItem], reqs: Sequence[SampleRequest] | None = None,
              progress: bool = False) -> list[Grade]:
        """Batch grading; `reqs` are the items' prepared requests when the caller has them."""
        reqs = list(reqs) if reqs is not None else [self.requests(it)[0] for it in items]
        with self._progress(len(reqs), progress, "grading") as bar:
            slots = self._run(reqs, list(items), bar)
        return [vote_scores(s, it.scale) for s, it in zip(slots, items)]

    async def agrade(self, item: GradeItem, reqs: Sequence[SampleRequest] | None = None) -> Grade:
        req = (reqs or self.requests(item))[0]
        return vote_scores(await self._arun(req, item), item.scale)

    # --- relative grading ------------------------------------------------------------
    def compare(self, items: Sequence[CompareItem], reqs: Sequence[Sequence[SampleRequest]] | None = None,
                progress: bool = False) -> list[Comparison]:
        """Batch comparison; `reqs` are the items' prepared requests (one list per item) when known."""
        per_item = list(reqs) if reqs is not None else [self.requests(it) for it in items]
        flat_items = [it for it, rs in zip(items, per_item) for _ in rs]
        with self._progress(len(flat_items), progress, "comparing") as bar:
            flat = self._run([r for rs in per_item for r in rs], flat_items, bar)
        out, k = [], 0
        for rs in per_item:
            out.append(self._vote_pair(flat[k:k + len(rs)]))
            k += len(rs)
        return out

    async def acompare(self, item: CompareItem, reqs: Sequence[SampleRequest] | None = None) -> Comparison:
        reqs = reqs or self.requests(item)
        slots = await asyncio.gather(*(self._arun(r, item) for r in reqs))
        return self._vote_pair(slots)

    @staticmethod
    def _vote_pair(slots: Sequence[SampleSlots]) -> Comparison:
        judged = [[j for j in s.judged if j is not None] for s in slots]
        return vote_verdicts(judged[0], judged[1] if len(judged) > 1 else None)
