"""Pairwise (relative-grading) judgments: readers and the record they produce.

A `PairJudgment` is one judge's choice between two responses to one instruction, in one order
(A, B). Its SFT record holds the released Prometheus-2 relative prompt (judge.prompts) and the
target `feedback [RESULT] A|B`. A judgment without a rationale gets the target `[RESULT] A` alone
and `verdict_only: true` in its record.

Ties (source option `ties`): relative grading has only A and B, so a tie is no target of its own.
`reject` (default) rejects it with reason `tie`. `split` keeps it as two records of the SAME order,
one with verdict A and one with verdict B (`extra.tie: true`): trained together they teach
P(A) = P(B) = 1/2 for that prompt, which is what a tie means, and no position preference (the
alternative of one record per order, both "A", would teach "the first wins"). A split tie read
once counts as two records read, like a swapped pair; both are kept (or rejected) on their own.

Readers (each returns `(sample_idx, PairJudgment | Reject)` entries, like data.parsers):
- FastChat pair logs (MT-Bench `gpt-4_pair.jsonl`): one line holds two games, g1 (model_1 as A) and
  g2 (the swapped order); both become judgments. When their winners disagree the pair is handled by
  `pair_inconsistent`: reject (both games, reason `pair_inconsistent`), keep_first (g1 only) or keep.
- AlpacaEval annotations (`alpaca_eval`): instruction, output_1, output_2, preference.
- the generic jsonl reader with pairwise `columns` (instruction, response_a, response_b, verdict).
Swap augmentation (`swap`) adds every judgment again in the other order with the verdict flipped
and the A/B labels in its rationale exchanged (FastChat logs hold both orders already: not swapped).

Pure logic: no torch, no vLLM.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from dataclasses import dataclass, field, replace
from typing import Sequence

from judgeforge.data.schema import Provenance
from judgeforge.judge.items import item_hash
from judgeforge.judge.prompts import TEMPLATE_VERSION, RESULT_MARKER, Rubric, relative_messages, rubric_preset
from judgeforge.data.validate import (EMPTY_RESPONSE, MISSING_FIELD, PAIR_INCONSISTENT, SCORE_FEEDBACK_MISMATCH, TIE,
                                      UNPARSEABLE_PROMPT, UPSTREAM_PARSE_FAILURE, Reject, optional_text,
                                      require_text)

PAIR_INCONSISTENT_POLICIES = ("reject", "keep_first", "keep")
TIE_POLICIES = ("reject", "split")


@dataclass(slots=True)
class PairJudgment(Provenance):
    instruction: str
    response_a: str
    response_b: str
    rubric: Rubric
    feedback: str
    """The judge's rationale without its verdict; empty when the source has none (verdict_only)."""
    verdict: str
    """'A' or 'B' ('tie' only between a parser and `split_ties`, never in a record)."""
    reference_answer: str | None = None
    response_model_a: str = "unknown"
    response_model_b: str = "unknown"

    @property
    def verdict_only(self) -> bool:
        return not self.feedback

    @property
    def models(self) -> tuple[str, str]:
        return self.response_model_a, self.response_model_b

    @property
    def response_model(self) -> str:
        """Both models, for listings (dropped.jsonl); splits use `models`."""
        return f"{self.response_model_a} vs {self.response_model_b}"

    @property
    def response(self) -> str:
        """Both responses: what decontamination checks for the `response` field."""
        return f"{self.response_a}\n\n{self.response_b}"

    def target(self) -> str:
        verdict = f"{RESULT_MARKER} {self.verdict}"
        return f"{self.feedback} {verdict}" if self.feedback else verdict

    def content_hash(self) -> str:
        key = json.dumps(["relative", self.instruction, self.response_a, self.response_b, self.reference_answer,
                          self.rubric.to_dict(), self.feedback, self.verdict], ensure_ascii=False)
        return hashlib.sha256(key.encode("utf-8")).hexdigest()

    def item_hash(self) -> str:
        """The pair regardless of order (`judge.items.item_hash`): both orders are one item, split together."""
        return item_hash(self.instruction, (self.response_a, self.response_b), self.rubric.to_dict(),
                         self.reference_answer)

    def messages(self) -> list[dict]:
        msgs = relative_messages(self.instruction, self.response_a, self.response_b, self.rubric,
                                 self.reference_answer)
        return msgs + [{"role": "assistant", "content": self.target()}]

    def to_sft(self) -> dict:
        h = self.content_hash()
        return {"id": h[:16], "mode": "relative", "messages": self.messages(),
                "item_id": self.item_id or self.item_hash()[:16], "sample_idx": self.sample_idx,
                "instruction": self.instruction, "response_a": self.response_a, "response_b": self.response_b,
                "reference_answer": self.reference_answer, "rubric": self.rubric.to_dict(),
                "feedback": self.feedback, "verdict": self.verdict, "verdict_only": self.verdict_only,
                "response_model_a": self.response_model_a, "response_model_b": self.response_model_b,
                "judge_model": self.judge_model, "source": self.source, "category": self.category,
                "content_hash": h, "template_version": TEMPLATE_VERSION, "extra": self.extra}


# --- verdicts, rationales, swapping ----------------------------------------------------------

_VERDICTS = {"a": "A", "1": "A", "1.0": "A", "response_a": "A", "model_a": "A", "model_1": "A",
             "b": "B", "2": "B", "2.0": "B", "response_b": "B", "model_b": "B", "model_2": "B",
             "tie": "tie", "c": "tie", "1.5": "tie", "0.5": "tie", "draw": "tie"}
_BRACKET_VERDICT_RE = re.compile(r"\s*\"?\[\[\s*([ABC])\s*\]\]\"?\s*\.?\s*$")
# A/B labels in a rationale, exchanged when the pair is swapped ("Assistant A", "Response B", "Output (a)").
_LABEL_RE = re.compile(r"\b(Assistant|Response|Output|Model|assistant|response|output|model)( \(?)([ABab])\b")
_MODEL_N_RE = re.compile(r"\b(model|output)_([12])\b")
_OTHER = {"A": "B", "B": "A", "a": "b", "b": "a", "1": "2", "2": "1"}


def norm_verdict(value) -> str | None:
    """'A', 'B', 'tie' or None (unknown)."""
    if value is None or isinstance(value, bool):
        return None
    return _VERDICTS.get(str(value).strip().strip("[]").lower())


def swap_labels(text: str) -> str:
    """A rationale written about (A, B) rewritten for (B, A): the labels it names are exchanged."""
    text = _LABEL_RE.sub(lambda m: m.group(1) + m.group(2) + _OTHER[m.group(3)], text)
    text = _MODEL_N_RE.sub(lambda m: f"{m.group(1)}_{_OTHER[m.group(2)]}", text)
    return text


def swapped(j: PairJudgment) -> PairJudgment:
    return replace(j, response_a=j.response_b, response_b=j.response_a, verdict=_OTHER[j.verdict],
                   response_model_a=j.response_model_b, response_model_b=j.response_model_a,
                   feedback=swap_labels(j.feedback), sample_idx=j.sample_idx + 1,
                   extra={**j.extra, "swapped": True})


def split_ties(entries: list) -> list:
    """Each tied judgment as two, verdict A then B, same order; entries renumbered in sequence when
    any was split (unchanged otherwise, so builds without ties stay byte-identical)."""
    if not any(isinstance(res, PairJudgment) and res.verdict == "tie" for _, res in entries):
        return entries
    out: list = []
    for _, res in entries:
        if isinstance(res, PairJudgment) and res.verdict == "tie":
            halves = [replace(res, verdict=v, extra={**res.extra, "tie": True}) for v in ("A", "B")]
        else:
            halves = [res]
        for h in halves:
            k = len(out)
            out.append((k, h if isinstance(h, Reject) else replace(h, sample_idx=k)))
    return out


def expand(entries: list, ctx) -> list:
    """A parser's judgments with the source's tie policy (`split`) and swap augmentation applied."""
    return with_swaps(split_ties(entries), ctx.swap)


def with_swaps(entries: list, swap: bool) -> list:
    """Each kept judgment followed by its swapped copy when `swap` (rejects stay single)."""
    if not swap:
        return entries
    out = []
    for i, res in entries:
        out.append((2 * i, res if isinstance(res, Reject) else replace(res, sample_idx=2 * i)))
        if isinstance(res, PairJudgment):
            out.append((2 * i + 1, swapped(out[-1][1])))
    return out


def _decisive(verdict: str | None, what: str, ties: str = "reject") -> str:
    """'A', 'B', or 'tie' when the tie policy keeps ties (`split_ties` resolves them)."""
    if verdict is None:
        raise Reject(UPSTREAM_PARSE_FAILURE, f"{what}: no A/B verdict")
    if verdict == "tie" and ties != "split":
        raise Reject(TIE, f"{what}: tie (relative grading targets only A or B; ties: split keeps it)")
    return verdict


def _pair_rubric(ctx) -> Rubric:
    return ctx.rubric or rubric_preset("helpfulness")


# --- FastChat pair logs ------------------------------------------------------------------------

FASTCHAT_PAIR_FIELDS = ("model_1", "model_2", "g1_winner", "g2_winner")
FASTCHAT_PAIR_CRITERIA = {
    False: "Considering helpfulness, relevance, accuracy, depth, creativity, and level of detail, which "
           "response better follows the user's instructions and answers the user's question?",
    True: "Compared with the reference answer, which response is more correct and helpful?",
}
_FC_PAIR_RE = re.compile(
    r"^\[User Question\]\n(?P<q>.*?)\n\n"
    r"(?:\[The Start of Reference Answer\]\n(?P<ref>.*?)\n\[The End of Reference Answer\]\n\n)?"
    r"\[The Start of Assistant A's Answer\]\n(?P<a>.*?)\n\[The End of Assistant A's Answer\]\n\n"
    r"\[The Start of Assistant B's Answer\]\n(?P<b>.*?)\n\[The End of Assistant B's Answer\]\s*$", re.S)
_FC_WINNER = {"model_1": "model_1", "model_2": "model_2", "tie": "tie"}


def is_fastchat_pair(obj: dict) -> bool:
    """Pair logs are told from single-answer logs by their fields, not by the file name."""
    return all(f in obj for f in FASTCHAT_PAIR_FIELDS)


def _fastchat_game(obj: dict, g: int, ctx) -> PairJudgment:
    winner = obj.get(f"g{g}_winner")
    if winner not in _FC_WINNER:
        raise Reject(UPSTREAM_PARSE_FAILURE, f"g{g}_winner {winner!r}")
    first, second = (obj["model_1"], obj["model_2"]) if g == 1 else (obj["model_2"], obj["model_1"])
    verdict = _decisive({first: "A", second: "B"}.get(obj[winner]) if winner != "tie" else "tie", f"game {g}",
                        ctx.ties)
    m = _FC_PAIR_RE.match(require_text(obj.get(f"g{g}_user_prompt"), f"g{g}_user_prompt"))
    if m is None:
        raise Reject(UNPARSEABLE_PROMPT, f"g{g}_user_prompt is not a FastChat single-turn pair prompt")
    judgment = require_text(obj.get(f"g{g}_judgment"), f"g{g}_judgment")
    said = _BRACKET_VERDICT_RE.search(judgment)
    if said and {"A": "A", "B": "B", "C": "tie"}[said.group(1)] != verdict:
        raise Reject(SCORE_FEEDBACK_MISMATCH, f"game {g}: judgment says [[{said.group(1)}]], winner {winner}")
    feedback = _BRACKET_VERDICT_RE.sub("", judgment).strip()
    judge = obj.get("judge") if isinstance(obj.get("judge"), list) else []
    return PairJudgment(
        instruction=m["q"], response_a=m["a"], response_b=m["b"],
        rubric=Rubric(FASTCHAT_PAIR_CRITERIA[m["ref"] is not None]), feedback=feedback, verdict=verdict,
        reference_answer=m["ref"], response_model_a=str(first), response_model_b=str(second),
        judge_model=str(judge[0]) if judge else ctx.judge_model, source=ctx.source, sample_idx=g - 1,
        extra={"question_id": obj.get("question_id"), "turn": obj.get("turn"), "game": g,
               "judge_prompt": judge[1] if len(judge) > 1 else None})


def parse_fastchat_pair(obj: dict, ctx) -> list:
    """Both games of a FastChat pair line, under the source's `pair_inconsistent` policy."""
    games: list = []
    for g in (1, 2):
        try:
            games.append((g - 1, _fastchat_game(obj, g, ctx)))
        except Reject as e:
            games.append((g - 1, e))
    w1, w2 = obj.get("g1_winner"), obj.get("g2_winner")
    # Only two real decisions can disagree: a game FastChat could not parse ("error") leaves the other alone.
    if w1 == w2 or w1 not in _FC_WINNER or w2 not in _FC_WINNER or ctx.pair_inconsistent == "keep":
        return split_ties(games)
    detail = f"g1_winner {w1!r} vs g2_winner {w2!r} (swapped order)"
    drop = (0, 1) if ctx.pair_inconsistent == "reject" else (1,)
    games = [(i, Reject(PAIR_INCONSISTENT, detail) if i in drop and not isinstance(res, Reject) else res)
             for i, res in games]
    return split_ties(games)


# --- AlpacaEval annotations ------------------------------------------------------------------

_RATIONALE_MIN_CHARS = 20  # shorter raw completions are bare labels ("m", "Output (a)"), not rationales


def _alpaca_preference(value) -> str | None:
    """1 -> A, 2 -> B, 1.5 -> tie, 0/None -> unknown; a weighted preference in (1, 2) takes the nearer side."""
    try:
        p = float(value)
    except (TypeError, ValueError):
        return None
    if not 1 <= p <= 2:
        return None
    return "tie" if p == 1.5 else "A" if p < 1.5 else "B"


def parse_alpaca_eval(obj: dict, ctx) -> list:
    try:
        instruction = require_text(obj.get("instruction"), "instruction")
        if (optional_text(obj.get("input")) or "").strip():
            instruction = f"{instruction}\n\n{obj['input']}"
        a = require_text(obj.get("output_1"), "output_1", EMPTY_RESPONSE)
        b = require_text(obj.get("output_2"), "output_2", EMPTY_RESPONSE)
        verdict = _decisive(_alpaca_preference(obj.get("preference")), f"preference {obj.get('preference')!r}",
                            ctx.ties)
        raw = obj.get("raw_completion")
        feedback = raw.strip() if isinstance(raw, str) and len(raw.strip()) >= _RATIONALE_MIN_CHARS else ""
        j = PairJudgment(instruction=instruction, response_a=a, response_b=b, rubric=_pair_rubric(ctx),
                         feedback=feedback, verdict=verdict, response_model_a=str(obj.get("generator_1") or "unknown"),
                         response_model_b=str(obj.get("generator_2") or "unknown"),
                         judge_model=str(obj.get("annotator") or ctx.judge_model), source=ctx.source,
                         extra={"preference": obj.get("preference"), "dataset": obj.get("dataset")})
        return expand([(0, j)], ctx)
    except Reject as e:
        return [(0, e)]


# --- generic jsonl with pairwise columns -----------------------------------------------------

PAIR_COLUMNS = ("instruction", "response_a", "response_b", "verdict")


def parse_generic_pair(obj: dict, ctx) -> list:
    col = ctx.columns

    def get(name):
        return obj.get(col[name]) if name in col else None

    try:
        verdict = _decisive(norm_verdict(get("verdict")), f"verdict {get('verdict')!r}", ctx.ties)
        criteria = get("criteria")
        rubric = Rubric(str(criteria)) if criteria else _pair_rubric(ctx)
        j = PairJudgment(
            instruction=require_text(get("instruction"), col["instruction"]),
            response_a=require_text(get("response_a"), col["response_a"], EMPTY_RESPONSE),
            response_b=require_text(get("response_b"), col["response_b"], EMPTY_RESPONSE), rubric=rubric,
            feedback=(optional_text(get("feedback")) or "").strip(), verdict=verdict,
            reference_answer=optional_text(get("reference_answer")),
            response_model_a=str(get("response_model_a") or "unknown"),
            response_model_b=str(get("response_model_b") or "unknown"),
            judge_model=str(get("judge_model") or ctx.judge_model), source=ctx.source,
            category=optional_text(get("category")))
        return expand([(0, j)], ctx)
    except Reject as e:
        return [(0, e)]
    except (TypeError, ValueError) as e:
        return [(0, Reject(MISSING_FIELD, str(e)[:200]))]


SKIP_TIES, HALF_TIES = "skip", "half"


# --- a build's relative records as pairs (training: train.ranking; evaluation: eval.sets) --------

@dataclass
class Pair:
    """Two responses to one instruction and the teacher's probability that `first` is better."""

    instruction: str
    first: str
    second: str
    rubric: dict
    reference_answer: str | None
    target: float
    """P(first better): the share of the pair's judgments preferring it (>= 0.5: `first` is preferred)."""
    judgments: int
    ids: list[str] = field(default_factory=list)
    """The records aggregated into this pair."""
    origin: str = "relative"
    """`relative`: GPT-4 compared the two (relative records); `scores`: two absolutely graded responses to
    one item, ordered by GPT-4's scores (`score_pairs`); `cross_item`: responses to two different items
    (`cross_item_pairs`)."""
    second_item: dict | None = None
    """Cross-item pairs: the second response's own `instruction`, `rubric` and `reference_answer`; None: the
    pair's, shared by both responses."""

    def context(self, second: bool) -> tuple[str, dict, str | None]:
        """(instruction, rubric, reference answer) one of the responses is graded with."""
        if second and self.second_item is not None:
            o = self.second_item
            return o["instruction"], o.get("rubric") or {}, o.get("reference_answer")
        return self.instruction, self.rubric, self.reference_answer


def _pair_key(rec: dict) -> str:
    return item_hash(rec["instruction"], (rec["response_a"], rec["response_b"]), rec.get("rubric"),
                     rec.get("reference_answer"))


def build_pairs(records: Sequence[dict], ties: str = SKIP_TIES, max_pairs: int | None = None,
                seed: int = 0, from_scores: Sequence[int] | None = None) -> tuple[list[Pair], dict]:
    """Pairs from relative (pairwise) records, one per unordered pair of responses to one instruction:
    both orders of a swapped pair, a split tie's two halves and repeated judgments are one pair whose
    target is the share of its judgments preferring the response first in sort order, then turned so
    the preferred response is `first`. Balanced pairs are ties: skipped, or kept with target 0.5.
    `from_scores` (a scale, e.g. (1, 10)): absolute records on that scale are paired too (`score_pairs`).

    Every record ends in one bucket of the counts: absolute (no pair), scored (an absolute record that
    another response to its item was paired with), tie (skipped), over_max_pairs (not drawn) or paired.
    `pairs` is how many pairs were made, `score_pairs` how many of them came from scores; a scored record
    is in every pair of its response, so pairs from scores are counted as pairs (`score_ties`,
    `score_over_max_pairs`), not as records."""
    if ties not in (SKIP_TIES, HALF_TIES):
        raise ValueError(f"ties must be {SKIP_TIES!r} or {HALF_TIES!r}, got {ties!r}")
    counts = {"records": len(records), "absolute": 0, "scored": 0, "tie": 0, "over_max_pairs": 0, "paired": 0,
              "pairs": 0, "score_pairs": 0, "score_ties": 0, "score_over_max_pairs": 0}
    groups: dict[str, list[dict]] = {}
    absolute = []
    for rec in records:
        if rec.get("mode") != "relative" or rec.get("verdict") not in ("A", "B"):
            absolute.append(rec)
            continue
        groups.setdefault(_pair_key(rec), []).append(rec)
    pairs = []
    for recs in groups.values():
        pair = _aggregate(recs)
        if pair.target == 0.5 and ties == SKIP_TIES:
            counts["tie"] += len(recs)
            continue
        pairs.append(pair)
    scored, counts["score_ties"], counts["scored"] = (score_pairs(absolute, from_scores, ties) if from_scores
                                                            else ([], 0, 0))
    counts["absolute"] = len(absolute) - counts["scored"]
    pairs += scored
    if max_pairs is not None and len(pairs) > max_pairs:
        keep = set(random.Random(f"{seed}:pairs").sample(range(len(pairs)), max_pairs))
        dropped = [p for i, p in enumerate(pairs) if i not in keep]
        counts["over_max_pairs"] = sum(p.judgments for p in dropped if p.origin == "relative")
        counts["score_over_max_pairs"] = sum(p.origin == "scores" for p in dropped)
        pairs = [p for i, p in enumerate(pairs) if i in keep]
    counts["paired"] = sum(p.judgments for p in pairs if p.origin == "relative")
    counts["pairs"] = len(pairs)
    counts["score_pairs"] = sum(p.origin == "scores" for p in pairs)
    return pairs, counts


def score_pairs(records: Sequence[dict], scale: Sequence[int], ties: str = SKIP_TIES) -> tuple[list[Pair], int, int]:
    """Pairs of absolutely graded responses to one item (instruction, rubric and reference answer equal,
    graded on `scale`: the one a pair's prompts are read on), one per unordered pair of responses: P(first better) is the share of (sample of first,
    sample of second) score pairs where the first scored higher, equal scores counting half. Why: a log of
    GPT-4 absolute judgments of several response models holds their ranking too, on the very items and
    prompt the judge is used with. Returns (pairs, balanced pairs skipped, records paired); records
    without a numeric score or with no other response to their item are not paired."""
    by_item: dict[str, dict[str, list[dict]]] = {}
    for recs in _graded_responses(records, scale).values():
        by_item.setdefault(_item_key(recs[0]), {})[recs[0]["response"]] = recs
    pairs, balanced, paired = [], 0, 0
    for responses in by_item.values():
        if len(responses) < 2:
            continue
        paired += sum(len(v) for v in responses.values())
        for a, b in itertools.combinations(sorted(responses), 2):
            sa, sb = ([r["score"] for r in responses[x]] for x in (a, b))
            t = sample_share(sa, sb)
            if t == 0.5 and ties == SKIP_TIES:
                balanced += 1
                continue
            first, second, t = (a, b, t) if t >= 0.5 else (b, a, 1.0 - t)
            r0 = responses[a][0]
            pairs.append(Pair(instruction=r0["instruction"], first=first, second=second,
                              rubric=r0.get("rubric") or {}, reference_answer=r0.get("reference_answer"),
                              target=t, judgments=len(sa) + len(sb),
                              ids=[r["id"] for r in responses[first] + responses[second]], origin="scores"))
    return pairs, balanced, paired


def graded_on(rec: dict, scale: Sequence[int]) -> bool:
    """Whether `rec` is an absolute record with a numeric GPT-4 score on `scale`."""
    return (rec.get("mode", "absolute") == "absolute" and isinstance(rec.get("score"), (int, float))
            and list(rec.get("scale") or ()) == list(scale))


def _item_key(rec: dict) -> str:
    """What makes two graded responses answers to one item: instruction, rubric and reference answer."""
    return json.dumps([rec["instruction"], rec.get("rubric"), rec.get("reference_answer")], sort_keys=True)


def _graded_responses(records: Sequence[dict], scale: Sequence[int]) -> dict[str, list[dict]]:
    """Absolute records graded on `scale`, grouped by (item, response): each group is GPT-4's samples of one
    graded response."""
    out: dict[str, list[dict]] = {}
    for rec in records:
        if graded_on(rec, scale):
            key = json.dumps([rec["instruction"], rec.get("rubric"), rec.get("reference_answer"), rec["response"]],
                             sort_keys=True)
            out.setdefault(key, []).append(rec)
    return out


def sample_share(first: Sequence[float], second: Sequence[float]) -> float:
    """P(first better) from GPT-4's samples of two responses: the share of (sample of first, sample of second)
    pairs where the first scored higher, equal scores counting half."""
    return sum((x > y) + 0.5 * (x == y) for x in first for y in second) / (len(first) * len(second))


def cross_item_pairs(records: Sequence[dict], scale: Sequence[int], k: int, seed: int,
                     min_gap: float = 1.0) -> tuple[list[Pair], dict]:
    """Up to `k` pairs of two graded responses to *different* items on `scale`, drawn (seeded) among the
    pairs whose mean GPT-4 scores differ by at least `min_gap`; P(first better) as in `score_pairs` (the
    share of sample pairs where the first scored higher, equal scores half), the preferred response first,
    each with its own item (`Pair.second_item`).

    Why: absolute grading puts every item on one scale, and the held-out figure (Pearson over items) is how
    well the judge orders responses to different items. Logs like MT-Bench's 1-5 single-answer judgments
    hold one graded response per item, so they give no `score_pairs`; across items they give thousands,
    many of them won by the shorter response. Returns (pairs, counts): `responses` (distinct graded
    responses on the scale), `cross_item` (pairs drawn), `cross_item_shorter` (of them, won by the response
    with fewer characters)."""
    if min_gap <= 0:
        raise ValueError(f"min_gap must be > 0, got {min_gap}")
    groups = _graded_responses(records, scale)
    keys = sorted(groups)
    items = [_item_key(groups[key][0]) for key in keys]
    means = [sum(r["score"] for r in groups[key]) / len(groups[key]) for key in keys]
    rng = random.Random(f"{seed}:cross_item")
    chosen: dict[tuple[int, int], Pair] = {}
    tries = 0
    while len(chosen) < k and len(keys) >= 2 and tries < 50 * max(k, 1):
        tries += 1
        i, j = sorted(rng.sample(range(len(keys)), 2))
        if items[i] == items[j] or abs(means[i] - means[j]) < min_gap or (i, j) in chosen:
            continue
        a, b = groups[keys[i]], groups[keys[j]]
        t = sample_share([r["score"] for r in a], [r["score"] for r in b])
        # The samples' share and the means must agree on the winner (they can split on wide samples).
        if t != 0.5 and (t > 0.5) == (means[i] > means[j]):
            chosen[(i, j)] = _cross_pair(a, b, t) if t > 0.5 else _cross_pair(b, a, 1.0 - t)
    pairs = [chosen[ij] for ij in sorted(chosen)]
    shorter = sum(len(p.first) < len(p.second) for p in pairs)
    return pairs, {"responses": len(keys), "cross_item": len(pairs), "cross_item_shorter": shorter}


def _cross_pair(first: list[dict], second: list[dict], t: float) -> Pair:
    f, s = first[0], second[0]
    return Pair(instruction=f["instruction"], first=f["response"], second=s["response"], rubric=f.get("rubric") or {},
                reference_answer=f.get("reference_answer"), target=t, judgments=len(first) + len(second),
                ids=[r["id"] for r in first + second], origin="cross_item",
                second_item={"instruction": s["instruction"], "rubric": s.get("rubric") or {},
                             "reference_answer": s.get("reference_answer")})


def _aggregate(recs: list[dict]) -> Pair:
    first, second = sorted((recs[0]["response_a"], recs[0]["response_b"]))
    wins = sum((r["response_a"] if r["verdict"] == "A" else r["response_b"]) == first for r in recs)
    t = wins / len(recs)
    if t < 0.5:
        first, second, t = second, first, 1.0 - t
    r0 = recs[0]
    return Pair(instruction=r0["instruction"], first=first, second=second, rubric=r0.get("rubric") or {},
                reference_answer=r0.get("reference_answer"), target=t, judgments=len(recs),
                ids=[r["id"] for r in recs])
