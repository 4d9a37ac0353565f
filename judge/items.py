"""The two things a judge grades: one response (`GradeItem`, absolute) or two (`CompareItem`,
relative). The one place that turns an item into the judge's chat messages (with
`judgeforge.data.templates`); training records, evaluation sets and API requests all build these.
Pure logic."""

from __future__ import annotations

from dataclasses import dataclass

from judgeforge.data.templates import DEFAULT_SCALE, Rubric, Scale, absolute_messages, relative_messages

VERDICTS = ("A", "B")
"""The choices of relative grading."""


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

    def orders(self) -> tuple[bool, ...]:
        """The `swapped` flags this item is graded in."""
        return (False, True) if self.both_orders else (False,)

    def messages(self, swapped: bool = False, feedback: str | None = None,
                 verdict: str | None = None) -> list[dict]:
        a, b = (self.response_b, self.response_a) if swapped else (self.response_a, self.response_b)
        return relative_messages(self.instruction, a, b, self.rubric, self.reference_answer, feedback,
                                 verdict)
