"""The two things a judge grades: one response (`GradeItem`, absolute) or two (`CompareItem`,
relative). The one place that turns an item into the judge's chat messages (with
`judgeforge.judge.prompts`); training records, evaluation sets and API requests all build these.
Pure logic."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Sequence

from judgeforge.judge.prompts import (DEFAULT_SCALE, TEMPLATE_VERSION, Rubric, Scale, absolute_messages,
                                      relative_messages)

VERDICTS = ("A", "B")
"""The choices of relative grading."""


def _sha256(key) -> str:
    return hashlib.sha256(json.dumps(key, ensure_ascii=False).encode("utf-8")).hexdigest()


def item_hash(instruction: str, responses: Sequence[str], rubric: dict | str,
              reference_answer: str | None = None) -> str:
    """"The same item", one rule per mode: what groups the samples (and judgments) of one graded item
    and keeps it on one side of a split. Absolute (one response): the instruction, the response, the
    reference and the rubric (`Rubric.to_dict()`), not the scale. Pairwise (two responses): the
    instruction, the two responses in either order (both orders of a pair are one item) and the
    rubric. The reference is not part of a pair's identity: stored pair records were hashed without
    it, and their item ids must keep matching."""
    if len(responses) == 1:
        return _sha256([instruction, responses[0], reference_answer, rubric])
    if len(responses) != 2:
        raise ValueError(f"an item has one response (absolute) or two (pairwise), got {len(responses)}")
    a, b = sorted(responses)
    return _sha256(["relative", instruction, a, b, rubric])


def request_hash(mode: str, request: dict, template_version: str = TEMPLATE_VERSION) -> str:
    """"The same request", what a judgment store answers from its cache: the item exactly as the judge
    sees it (A/B order and scale included), under a template version (a new template is a new prompt)."""
    blob = json.dumps({"mode": mode, "request": request, "template_version": template_version},
                      ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class Options:
    """Per-request sampling options (None -> the config's default)."""

    n: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    adapter: str | None = None
    feedback: bool | None = None
    """False: score-only (the distribution straight after the prompt and `[RESULT] `)."""


@dataclass
class GradeItem:
    instruction: str
    response: str
    rubric: Rubric
    reference_answer: str | None = None
    scale: Scale = DEFAULT_SCALE
    options: Options | None = None

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(str(v) for v in self.scale.values)

    def item_hash(self) -> str:
        return item_hash(self.instruction, (self.response,), self.rubric.to_dict(), self.reference_answer)

    def messages(self, feedback: str | None = None, score: int | None = None) -> list[dict]:
        """The judge's input; with feedback and score, plus the assistant turn (a training target)."""
        return absolute_messages(self.instruction, self.response, self.rubric, self.reference_answer,
                                 self.scale, feedback, score)


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

    choices = VERDICTS

    def item_hash(self) -> str:
        rubric = self.rubric if isinstance(self.rubric, str) else self.rubric.to_dict()
        return item_hash(self.instruction, (self.response_a, self.response_b), rubric, self.reference_answer)

    def orders(self) -> tuple[bool, ...]:
        """The `swapped` flags this item is graded in."""
        return (False, True) if self.both_orders else (False,)

    def messages(self, swapped: bool = False, feedback: str | None = None,
                 verdict: str | None = None) -> list[dict]:
        a, b = (self.response_b, self.response_a) if swapped else (self.response_a, self.response_b)
        return relative_messages(self.instruction, a, b, self.rubric, self.reference_answer, feedback,
                                 verdict)
