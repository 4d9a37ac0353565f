"""metrics.json, read: the one reader of an eval report's numbers (eval/report.py writes them).

Readers (compare, recompute, plots, calibration, the benches) walk a report through `Metrics`
rather than by string paths, and name variants through `vote_n` rather than slicing "n5".
Layout: `meta` (judges, variants, n_values, ...), `sets` (one dict per set: name, kind, role,
scale, ...), `results[judge][set]` (absolute sets: variant -> metrics; pairwise sets: their modes,
`absolute` among them, each variant -> metrics) and `reference[set]`. Pure logic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

EXPECTED = "expected"
"""The variant that scores by the expectation of the samples' completed distributions."""
SCORE_ONLY = "score_only"
"""The variant of the score-only read (the distribution straight after the prompt)."""
PROB_VARIANTS = (EXPECTED, SCORE_ONLY)
"""Variants read from distributions, not votes."""


def variant_names(n_values: list[int], score_only: bool = False) -> list[str]:
    """The variants of a report: a vote over the first k samples for every k, then the expectations."""
    return [f"n{k}" for k in n_values] + [EXPECTED] + ([SCORE_ONLY] if score_only else [])


def vote_n(variant: str) -> int:
    """How many samples a vote variant ("n5") votes over."""
    if variant in PROB_VARIANTS or not variant.startswith("n") or not variant[1:].isdigit():
        raise ValueError(f"{variant!r} is no vote variant (n<k>)")
    return int(variant[1:])


class NotAReport(FileNotFoundError):
    """A directory without a metrics.json."""


@dataclass(frozen=True)
class Metrics:
    """One report's metrics.json."""

    data: dict

    @classmethod
    def load(cls, report: str | Path) -> "Metrics":
        """From a report dir (or its metrics.json)."""
        path = Path(report)
        path = path if path.suffix == ".json" else path / "metrics.json"
        if not path.is_file():
            raise NotAReport(f"{path.parent} is not a judgeforge eval report (no metrics.json)")
        return cls(json.loads(path.read_text()))

    @property
    def meta(self) -> dict:
        return self.data["meta"]

    @property
    def judges(self) -> list[str]:
        return self.meta["judges"]

    @property
    def variants(self) -> list[str]:
        return self.meta["variants"]

    @property
    def vote_variants(self) -> list[str]:
        return [v for v in self.variants if v not in PROB_VARIANTS]

    @property
    def primary_variant(self) -> str:
        """The headline variant: the vote with the largest N, or score-only E[score] when the sampled
        pass ran on a subset of some set (`sampled_items`): the variant that covers every item."""
        subset = any(c["sampled"] < c["of"] for c in (self.data.get("sampled_units") or {}).values())
        if subset and SCORE_ONLY in self.variants:
            return SCORE_ONLY
        return f"n{max(self.meta['n_values'])}"

    def sets(self, kind: str | None = None, role: str | None = None) -> list[dict]:
        return [s for s in self.data.get("sets", [])
                if (kind is None or s["kind"] == kind) and (role is None or s.get("role") == role)]

    def set(self, name: str) -> dict | None:
        return next((s for s in self.sets() if s["name"] == name), None)

    def results(self, judge: str) -> dict:
        """set name -> that set's results for `judge` (empty when the judge graded none)."""
        return self.data.get("results", {}).get(judge, {})

    def result(self, judge: str, set_name: str, variant: str, mode: str | None = None) -> dict | None:
        """One judge's metrics on one set under a variant; `mode` for a pairwise set's mode
        (`absolute`: both sides graded absolutely)."""
        rep = self.results(judge).get(set_name) or {}
        rep = rep.get(mode, {}) if mode else rep
        return rep.get(variant)

    def reference(self, set_name: str) -> dict:
        """The set's reference numbers (length-only baseline, ceiling)."""
        return self.data.get("reference", {}).get(set_name, {})
