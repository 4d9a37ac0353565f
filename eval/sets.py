"""Evaluation sets: loaders that turn published files into items a judge can grade.

Two kinds of set:
- absolute (`AbsItem`): one response with a reference score, the mean of the
  reference judge's samples (GPT-4 three times in the Prometheus files) or a
  human score; the per-sample list is kept for the self-agreement ceiling.
- pairwise (`PairItem`): two responses and a human choice ('a', 'b', 'tie').

Every prompt is re-rendered with `judgeforge.data.templates`, so the judge sees
the exact format it was trained on. Sets without a rubric get a named preset
(recorded in `EvalSet.rubric_preset`). Pure logic: no torch, no vLLM.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from judgeforge.config import ConfigError
from judgeforge.data.pairwise import HALF_TIES, build_pairs
from judgeforge.data.readers import read_objects
from judgeforge.data.templates import DEFAULT_SCALE, Rubric, Scale, rubric_preset
from judgeforge.judge.items import CompareItem, GradeItem

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
VENDOR = PACKAGE_ROOT / "data" / "vendor"


class SetUnavailable(RuntimeError):
    """A configured set's data is not on this machine (e.g. a hub-only set offline)."""


@dataclass(kw_only=True)
class AbsItem(GradeItem):
    """A judge's absolute grading item (judge.items.GradeItem) with what evaluation needs beside it."""

    id: str
    category: str | None = None
    response_model: str | None = None
    ref_score: float | None = None
    """Reference score: mean of `ref_samples` (or a single human/GPT-4 score)."""
    ref_samples: list[float] = field(default_factory=list)


@dataclass(kw_only=True)
class PairItem(CompareItem):
    """A relative grading item (judge.items.CompareItem) with a human preference."""

    id: str
    human: str
    """'a', 'b' or 'tie'."""
    scale: Scale = DEFAULT_SCALE
    category: str | None = None
    instruction_b: str | None = None
    """When B answered a different dialogue history (multi-turn), B's own instruction."""

    def side(self, which: str) -> AbsItem:
        """One response as an absolute item (Prometheus-2 protocol: grade both absolutely)."""
        instr = self.instruction_b if which == "b" and self.instruction_b else self.instruction
        resp = self.response_a if which == "a" else self.response_b
        return AbsItem(id=f"{self.id}:{which}", instruction=instr, response=resp, rubric=self.rubric,
                       reference_answer=self.reference_answer, scale=self.scale, category=self.category)

    def swapped(self) -> "PairItem":
        """The pair with its responses exchanged (the position probe) and the human label with them;
        the instruction stays A's, as the relative prompt shows it in both orders."""
        return replace(self, response_a=self.response_b, response_b=self.response_a,
                       human={"a": "b", "b": "a"}.get(self.human, self.human), options=None)


@dataclass
class EvalSet:
    name: str
    kind: str
    """'absolute' or 'pairwise'."""
    reference: str
    """Who made the reference labels: 'gpt-4' or 'human'."""
    items: list
    source: str
    n_available: int
    """Items in the source before subsetting."""
    rubric_preset: str | None = None
    """Named preset rubric used for items without one (recorded in the report)."""
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        return {"name": self.name, "kind": self.kind, "reference": self.reference,
                "n_items": len(self.items), "n_available": self.n_available, "source": self.source,
                "rubric_preset": self.rubric_preset, "notes": self.notes}


# ---------------------------------------------------------------- Prometheus prompts

def parse_prometheus_prompt(prompt: str, scale: Scale = DEFAULT_SCALE) -> dict:
    """Split a full Prometheus absolute-grading prompt with the data builder's parser, which
    also checks that our template re-renders it exactly. Raises ValueError if it cannot."""
    from judgeforge.data.parsers import parse_prometheus_prompt as parse
    from judgeforge.data.validate import Reject

    m = _SCALE_RE.search(prompt)
    if m:
        scale = Scale(int(m.group(1)), int(m.group(2)))
    try:
        p = parse(prompt, scale)
    except Reject as e:
        raise ValueError(f"unreadable Prometheus prompt: {e}") from None
    return {"instruction": p.instruction, "response": p.response,
            "reference_answer": p.reference_answer, "rubric": p.rubric, "scale": p.scale}


_SCALE_RE = re.compile(r"an integer between (\d+) and (\d+)")


# ---------------------------------------------------------------- file access

class SetLayoutError(ConfigError):
    """A set's file is not in the layout its loader reads (an HHH file given as autoj, records without
    `label`): names the file, the record and the missing fields. A ConfigError, so `judgeforge eval`
    prints it as one line instead of a KeyError traceback."""


# The fields each layout must have, so that an error can say what was expected and, when a record
# has another layout's fields, which kind the file probably is.
LAYOUTS = {
    "prometheus": ("instruction", "gpt4_score"),
    "feedback_bench": ("orig_instruction", "orig_response", "orig_criteria"),
    "hhh": ("chosen_instruction", "rejected_instruction"),
    "mt_bench_human": ("question_id", "model_a", "model_b", "winner", "conversation_a", "conversation_b", "turn"),
    "autoj": ("label", "prompt", "response 1", "response 2"),
    "pandalm": ("instruction", "response1", "response2", "annotator1", "annotator2", "annotator3"),
    "heldout": ("item_id", "instruction", "response", "rubric", "scale", "score"),
    "heldout_pairs": ("id", "instruction", "response_a", "response_b", "verdict"),
}


def layout_error(path, place: str, layout: str, problem: str, record: dict) -> SetLayoutError:
    others = [k for k, fields in LAYOUTS.items() if k != layout and all(f in record for f in fields)]
    hint = f"; its fields are those of the {others[0]!r} layout" if others else ""
    return SetLayoutError(f"{path} {place}: {problem}; expected the {layout!r} layout "
                          f"({', '.join(LAYOUTS[layout])}){hint}")


def require(record: dict, layout: str, path, place: str, fields: tuple[str, ...] | None = None) -> None:
    """Raise SetLayoutError naming every field of `layout` (or `fields`) the record lacks (None counts:
    hub datasets give absent columns as None)."""
    missing = [f for f in (fields or LAYOUTS[layout]) if record.get(f) is None]
    if missing:
        raise layout_error(path, place, layout, f"missing {', '.join(map(repr, missing))}", record)


@contextlib.contextmanager
def reading(path, place: str, layout: str, record: dict):
    """Turn a bad value inside one record (a label that is no number, a prompt that does not parse) into
    one SetLayoutError naming the record, not a traceback."""
    try:
        yield
    except SetLayoutError:
        raise
    except (KeyError, IndexError, TypeError, ValueError) as e:
        problem = f"missing {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
        raise layout_error(path, place, layout, problem, record) from None


def read_numbered(path: str, split: str | None = None) -> list[tuple[str, dict]]:
    """Records with their place ('line 7' in JSON Lines, 'record 3' in JSON/Parquet, 'row 3' on the hub).

    A local file's format is told by its content (data.readers.sniff_format), so JSONL saved as .json
    loads; an unreadable line is a ConfigError naming it. Raises SetUnavailable when the path is neither
    a file nor a loadable dataset."""
    p = Path(path).expanduser()
    if not p.is_absolute() and not p.exists() and (PACKAGE_ROOT / p).exists():
        p = PACKAGE_ROOT / p
    if p.is_file():
        return read_objects(p)
    if p.exists():
        raise SetUnavailable(f"{p} is a directory, not a data file")
    try:
        import datasets
        ds = datasets.load_dataset(path, split=split)
    except Exception as e:  # offline, unknown id, auth: all mean "not here"
        raise SetUnavailable(f"{path!r} is not a local file and could not be loaded from the "
                             f"Hugging Face hub ({type(e).__name__}: {str(e)[:200]})") from None
    rows = [r for name in sorted(ds) for r in ds[name]] if isinstance(ds, datasets.DatasetDict) else list(ds)
    return [(f"row {n}", r) for n, r in enumerate(rows, 1)]


def read_records(path: str, split: str | None = None) -> list[dict]:
    """A JSON list, JSONL or Parquet file, or a Hugging Face dataset id (all splits or `split`)."""
    return [r for _, r in read_numbered(path, split)]


def subset(items: list, n: int | None, seed: int) -> list:
    """A seeded sample of n items, kept in source order (all of them when n is None or larger)."""
    if n is None or n >= len(items):
        return list(items)
    keep = sorted(random.Random(seed).sample(range(len(items)), n))
    return [items[i] for i in keep]


def _scores(value) -> list[float]:
    if value is None:
        return []
    if isinstance(value, str):
        value = json.loads(value)
    return [float(v) for v in (value if isinstance(value, (list, tuple)) else [value]) if v is not None]


def _abs_from_prompt(rec_id: str, prompt: str, scores: list[float], **kw) -> AbsItem:
    parts = parse_prometheus_prompt(prompt)
    return AbsItem(id=rec_id, ref_samples=scores,
                   ref_score=sum(scores) / len(scores) if scores else None, **parts, **kw)


# ---------------------------------------------------------------- loaders

_SCORE_FIELDS = ("gpt4_score", "score", "human_score")


def load_prometheus_absolute(path: str, name: str, *, response_models: list[str] | None = None,
                             split: str | None = None) -> tuple[list[AbsItem], int]:
    """Prometheus benchmark layout (Vicuna Bench, MT Bench, FLASK, Feedback Bench):
    `instruction` = full grading prompt, `gpt4_score` = one or several GPT-4 scores."""
    recs = read_numbered(path, split)
    items = []
    for n, (place, r) in enumerate(recs):
        if "orig_instruction" in r:  # Feedback Collection / Feedback Bench layout
            require(r, "feedback_bench", path, place)
            with reading(path, place, "feedback_bench", r):
                items.append(_feedback_collection_item(r, f"{name}:{n}"))
            continue
        model = r.get("response_source") or r.get("model")
        if response_models and model not in response_models:
            continue
        score_field = next((k for k in _SCORE_FIELDS if k in r), None)
        require(r, "prometheus", path, place, ("instruction", score_field or "gpt4_score"))
        with reading(path, place, "prometheus", r):
            items.append(_abs_from_prompt(f"{name}:{r.get('idx', n)}:{model or n}", r["instruction"],
                                          _scores(r[score_field]), category=r.get("category"),
                                          response_model=model))
    return items, len(recs)


def _feedback_collection_item(r: dict, rec_id: str) -> AbsItem:
    """Feedback Collection / Feedback Bench (`prometheus-eval/Feedback-Bench`): orig_* columns."""
    rubric = Rubric.from_dict({"criteria": r["orig_criteria"],
                               **{f"score{k}_description": r.get(f"orig_score{k}_description")
                                  for k in range(1, 6)}})
    score = _scores(r.get("orig_score"))
    return AbsItem(id=rec_id, instruction=r["orig_instruction"], response=r["orig_response"],
                   rubric=rubric, reference_answer=r.get("orig_reference_answer"),
                   ref_samples=score, ref_score=score[0] if score else None,
                   category=r.get("orig_criteria"))


def load_heldout(build_dir: str, *, response_models: list[str] | None = None) -> tuple[list[AbsItem], int]:
    """The held-out split of a data build (`test.jsonl`): samples grouped per item_id,
    reference = mean of the GPT-4 samples (in sample_idx order)."""
    path = Path(build_dir) / "test.jsonl"
    if not path.is_file():
        raise SetUnavailable(f"no held-out split at {path} (run `judgeforge data build` first)")
    groups: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    for place, r in read_objects(path):
        if r.get("mode") == "relative":  # a pairwise record of the build: no absolute reference score
            continue
        require(r, "heldout", path, place)
        if not response_models or r.get("response_model") in response_models:
            groups[r["item_id"]].append((place, r))
    items = []
    for item_id, recs in groups.items():
        recs.sort(key=lambda pr: pr[1].get("sample_idx", 0))
        place, r = recs[0]
        with reading(path, place, "heldout", r):
            scores = [float(x["score"]) for _, x in recs]
            items.append(AbsItem(id=item_id, instruction=r["instruction"], response=r["response"],
                                 rubric=Rubric.from_dict(r["rubric"]),
                                 reference_answer=r.get("reference_answer"), scale=Scale.parse(r["scale"]),
                                 category=r.get("category"), response_model=r.get("response_model"),
                                 ref_score=sum(scores) / len(scores), ref_samples=scores))
    return items, len(items)


def labelled_pairs(path: str, layout: str, item) -> tuple[list[PairItem], int]:
    """Every record of a labelled pair file, layout-checked, through `item(n, place, record)`."""
    recs = read_numbered(path)
    items = []
    for n, (place, r) in enumerate(recs):
        require(r, layout, path, place)
        items.append(item(n, place, r))
    return items, len(recs)


def load_heldout_pairs(build_dir: str, *, seed: int = 0) -> tuple[list[PairItem], int]:
    """The relative (pairwise) records of a data build's held-out split as pairs, grouped as training
    groups them (data.pairwise.build_pairs): both orders of a swapped pair, a split tie's two halves and
    repeated judgments are one pair; reference = the judge's majority ('tie' when balanced, e.g. a split
    tie). The preferred side is put at A or B by a seeded coin, as for HHH."""
    path = Path(build_dir) / "test.jsonl"
    if not path.is_file():
        raise SetUnavailable(f"no held-out split at {path} (run `judgeforge data build` first)")
    records = []
    for place, r in read_objects(path):
        if r.get("mode") == "relative":
            require(r, "heldout_pairs", path, place)
            records.append(r)
    pairs, _ = build_pairs(records, HALF_TIES)
    rng = random.Random(seed)
    items = []
    for p in sorted(pairs, key=lambda p: min(p.ids)):
        first_at_a = rng.random() < 0.5
        a, b = (p.first, p.second) if first_at_a else (p.second, p.first)
        human = "tie" if p.target == 0.5 else "a" if first_at_a else "b"
        items.append(PairItem(id=f"pair:{min(p.ids)}", instruction=p.instruction, response_a=a, response_b=b,
                              human=human, rubric=Rubric.from_dict(p.rubric),
                              reference_answer=p.reference_answer))
    return items, len(items)


def load_hhh(path: str, *, seed: int = 0) -> tuple[list[PairItem], int]:
    """HHH Alignment (Prometheus layout): chosen_instruction / rejected_instruction are full
    grading prompts without reference. The chosen side is put at A or B by a seeded coin so
    relative grading is not rewarded for a position bias."""
    rng = random.Random(seed)

    def item(n: int, place: str, r: dict) -> PairItem:
        with reading(path, place, "hhh", r):
            ch, rj = parse_prometheus_prompt(r["chosen_instruction"]), parse_prometheus_prompt(
                r["rejected_instruction"])
        chosen_first = rng.random() < 0.5
        a, b = (ch, rj) if chosen_first else (rj, ch)
        return PairItem(id=f"hhh:{n}", instruction=ch["instruction"], response_a=a["response"],
                        response_b=b["response"], human="a" if chosen_first else "b",
                        rubric=ch["rubric"], scale=ch["scale"], category=r.get("source"))

    return labelled_pairs(path, "hhh", item)


_MTB_WINNER = {"model_a": "a", "model_b": "b", "tie": "tie", "tie (bothbad)": "tie"}


def _dialogue(conv: list[dict], turn: int) -> tuple[str, str]:
    """MT-Bench conversation -> (instruction with earlier turns, assistant answer at `turn`)."""
    users = [m["content"] for m in conv if m["role"] == "user"]
    bots = [m["content"] for m in conv if m["role"] == "assistant"]
    if turn == 1:
        return users[0], bots[0]
    history = "".join(f"User: {u}\nAssistant: {a}\n\n" for u, a in zip(users[:turn - 1], bots))
    return f"{history}User: {users[turn - 1]}", bots[turn - 1]


def load_mt_bench_human(path: str, *, preset: str = "helpfulness",
                        split: str | None = "human") -> tuple[list[PairItem], int]:
    """MT-Bench human judgments (`lmsys/mt_bench_human_judgments` layout): question_id,
    model_a, model_b, winner, judge, conversation_a, conversation_b, turn."""
    recs = read_numbered(path, split)
    rubric = rubric_preset(preset)
    items = []
    for n, (place, r) in enumerate(recs):
        require(r, "mt_bench_human", path, place)
        if r["winner"] not in _MTB_WINNER:
            raise layout_error(path, place, "mt_bench_human", f"unknown winner {r['winner']!r}", r)
        with reading(path, place, "mt_bench_human", r):
            turn = int(r["turn"])
            ia, ra = _dialogue(r["conversation_a"], turn)
            ib, rb = _dialogue(r["conversation_b"], turn)
        items.append(PairItem(id=f"mtbh:{r['question_id']}:{r['model_a']}:{r['model_b']}:{turn}:{n}",
                              instruction=ia, response_a=ra, response_b=rb,
                              human=_MTB_WINNER[r["winner"]], rubric=rubric, category=f"turn{turn}",
                              instruction_b=ib if ib != ia else None))
    return items, len(recs)


_AUTOJ_LABEL = {0: "a", 1: "b", 2: "tie"}


def load_autoj(path: str, *, preset: str = "helpfulness") -> tuple[list[PairItem], int]:
    """Auto-J pairwise test set (JSONL): scenario, label (0: response 1 better, 1: response 2,
    2: tie), prompt, `response 1`, `response 2`."""
    rubric = rubric_preset(preset)

    def item(n: int, place: str, r: dict) -> PairItem:
        with reading(path, place, "autoj", r):
            label = int(r["label"])
        if label not in _AUTOJ_LABEL:
            raise layout_error(path, place, "autoj", f"label must be 0, 1 or 2, got {label}", r)
        return PairItem(id=f"autoj:{n}", instruction=r["prompt"], response_a=r["response 1"],
                        response_b=r["response 2"], human=_AUTOJ_LABEL[label], rubric=rubric,
                        category=r.get("scenario"))

    return labelled_pairs(path, "autoj", item)


_PANDALM_LABEL = {0: "tie", 1: "a", 2: "b"}


def pandalm_majority(labels: list[int]) -> str:
    """The annotators' majority ('a', 'b', 'tie'); three different labels (a 3-way split) count as a tie."""
    top, votes = max(((lab, labels.count(lab)) for lab in set(labels)), key=lambda lv: lv[1])
    return _PANDALM_LABEL[top] if votes * 2 > len(labels) else "tie"


def load_pandalm(path: str, *, preset: str = "helpfulness") -> tuple[list[PairItem], int]:
    """PandaLM test set (`testset-v1.json` layout): instruction, input, response1, response2 and three
    human annotators (0: tie, 1: response1 better, 2: response2). Reference = the annotators' majority.
    A non-empty `input` is appended to the instruction, as PandaLM's own prompt does."""
    rubric = rubric_preset(preset)

    def item(n: int, place: str, r: dict) -> PairItem:
        with reading(path, place, "pandalm", r):
            labels = [int(r[f"annotator{k}"]) for k in (1, 2, 3)]
        if any(lab not in _PANDALM_LABEL for lab in labels):
            raise layout_error(path, place, "pandalm", f"annotator labels must be 0, 1 or 2, got {labels}", r)
        instruction = r["instruction"] + (f"\n\n{r['input']}" if (r.get("input") or "").strip() else "")
        return PairItem(id=f"pandalm:{r.get('idx', n)}", instruction=instruction, response_a=r["response1"],
                        response_b=r["response2"], human=pandalm_majority(labels), rubric=rubric,
                        category=r.get("motivation_app"))

    return labelled_pairs(path, "pandalm", item)


# Reference figures from the papers, shown beside our accuracy as "published" (not recomputed here).
# PandaLM (Wang et al. 2023, Table 2): accuracy vs. the human majority on the PandaLM test set.
# Auto-J (Li et al. 2023, Table 2): agreement (%) on the Auto-J pairwise test set, ties included.
PUBLISHED: dict[str, dict[str, float]] = {
    "pandalm": {"PandaLM-7B": 0.668, "GPT-3.5": 0.711},
    "autoj": {"GPT-4": 0.6228, "Auto-J-13B": 0.5496},
}
