"""The canonical judgment record every reader produces and every stage consumes.

One `Judgment` is one grading of one response by one judge (a GPT-4 sample).
`to_sft()` turns it into the builder's output line: TRL conversational
`messages` plus the canonical fields beside it at the top level.

Pure logic: no torch, no vLLM.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from judgeforge.judge.prompts import TEMPLATE_VERSION, Rubric, Scale
from judgeforge.judge.items import GradeItem


@dataclass(slots=True, kw_only=True)
class Provenance:
    """Where a judgment comes from, the same for absolute (`Judgment`) and pairwise (`PairJudgment`)
    ones. Keyword-only: the judgment's own fields stay positional, in their order."""

    judge_model: str = "unknown"
    source: str = "unknown"
    """Which reader/config source produced it."""
    category: str | None = None
    """Category or capability of the item."""
    item_id: str = ""
    """Identifies the graded item; several samples share it (empty: `item_hash()` names it)."""
    sample_idx: int = 0
    """Index of this judgment among the samples of the same item."""
    extra: dict = field(default_factory=dict)
    """Reader-specific fields kept for provenance (e.g. turn, question_id)."""


@dataclass(slots=True)
class Judgment(Provenance):
    instruction: str
    """The task the response answers (for multi-turn items, the whole dialogue so far)."""
    response: str
    """The graded response."""
    rubric: Rubric
    """Criteria and per-score descriptions."""
    feedback: str
    """The judge's written feedback, without any trailing `[RESULT] n`."""
    score: int
    """The judge's integer score, inside `scale`."""
    scale: Scale = field(default_factory=Scale)
    reference_answer: str | None = None
    system_prompt: str | None = None
    """The system prompt the graded model saw (BiGGen-Bench), not the judge's."""
    response_model: str = "unknown"

    def content_hash(self) -> str:
        """sha256 over everything that defines the training example (duplicates share it)."""
        key = json.dumps([self.instruction, self.response, self.reference_answer, self.system_prompt,
                          self.rubric.to_dict(), [self.scale.lo, self.scale.hi], self.feedback,
                          self.score], ensure_ascii=False)
        return hashlib.sha256(key.encode("utf-8")).hexdigest()

    def item_hash(self) -> str:
        """The graded item alone (`judge.items.item_hash`): groups samples."""
        return self.item().item_hash()

    def item(self) -> GradeItem:
        return GradeItem(self.instruction, self.response, self.rubric, self.reference_answer, self.scale)

    def messages(self) -> list[dict]:
        """The judge's input and this judgment as its target."""
        return self.item().messages(self.feedback, self.score)

    def to_sft(self) -> dict:
        """One output line: `messages` first, canonical fields beside it."""
        h = self.content_hash()
        return {
            "id": h[:16],
            "messages": self.messages(),
            "item_id": self.item_id or self.item_hash()[:16],
            "sample_idx": self.sample_idx,
            "instruction": self.instruction,
            "system_prompt": self.system_prompt,
            "response": self.response,
            "reference_answer": self.reference_answer,
            "rubric": self.rubric.to_dict(),
            "scale": [self.scale.lo, self.scale.hi],
            "feedback": self.feedback,
            "score": self.score,
            "response_model": self.response_model,
            "judge_model": self.judge_model,
            "source": self.source,
            "category": self.category,
            "content_hash": h,
            "template_version": TEMPLATE_VERSION,
            "extra": self.extra,
        }

    @classmethod
    def from_sft(cls, rec: dict) -> "Judgment":
        """Inverse of `to_sft` (used by eval and train to re-render prompts)."""
        return cls(
            instruction=rec["instruction"], response=rec["response"],
            rubric=Rubric.from_dict(rec["rubric"]), feedback=rec["feedback"], score=rec["score"],
            scale=Scale.parse(rec["scale"]), reference_answer=rec.get("reference_answer"),
            system_prompt=rec.get("system_prompt"), response_model=rec.get("response_model", "unknown"),
            judge_model=rec.get("judge_model", "unknown"), source=rec.get("source", "unknown"),
            category=rec.get("category"), item_id=rec.get("item_id", ""),
            sample_idx=rec.get("sample_idx", 0), extra=rec.get("extra") or {},
        )
