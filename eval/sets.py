"""Evaluation sets: loaders that turn published files into items a judge can grade.

Two kinds of set:
- absolute (`AbsItem`): one response with a reference score, the mean of the
  reference judge's samples (GPT-4 three times in the Prometheus files) or a
  human score; the per-sample list is kept for the self-agreement ceiling.
- pairwise (`PairItem`): two responses and a human choice ('a', 'b', 'tie').

Every prompt is re-rendered with `judgeforge.judge.prompts`, so the judge sees
the exact format it was trained on. Sets without a rubric get a named preset
(recorded in `EvalSet.rubric_preset`). Pure logic: no torch, no vLLM.

Every record a loader reads is kept or rejected with one of the data builder's reason codes
(`data.validate`: missing_field for an absent field or one of the wrong type, unparseable_prompt,
unreadable_line, ...), counted in `Records` (read = kept + rejected, by reason) and reported per set in
metrics.json and report.md: a bad record costs one item, never the run. A file none of whose records
could be kept is a SetLayoutError naming the first one (usually the wrong `kind` for the file).

Set kinds are open: `@set_kind("name")` registers a loader `(SetConfig, seed, Records) -> (items,
n_available)` in SET_KINDS, and `kind: name` in an eval config then loads through it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from judgeforge.config import PACKAGE_ROOT, ConfigError, load_config, shipped_path
from judgeforge.data.pairwise import HALF_TIES, build_pairs
from judgeforge.data.readers import iter_file, read_objects, sniff_format
from judgeforge.data.validate import (MISSING_FIELD, NON_INTEGER_SCORE, REASONS, SCORE_OUT_OF_SCALE,
                                      UNPARSEABLE_PROMPT, UNREADABLE_LINE, UPSTREAM_PARSE_FAILURE, Reject,
                                      coerce_score, require_text)
from judgeforge.judge.prompts import DEFAULT_SCALE, Rubric, Scale, rubric_preset
from judgeforge.judge.items import CompareItem, GradeItem
from judgeforge.judge.registry import Registry

if TYPE_CHECKING:
    from judgeforge.eval.config import SetConfig

log = logging.getLogger(__name__)
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
    records: "Records | None" = None
    """What the loader read: kept and rejected records with reasons (None: a loader that keeps none)."""

    def summary(self) -> dict:
        return {"name": self.name, "kind": self.kind, "reference": self.reference,
                "n_items": len(self.items), "n_available": self.n_available, "source": self.source,
                "rubric_preset": self.rubric_preset, "notes": self.notes,
                **({"records": self.records.to_dict()} if self.records is not None else {})}


REJECTS_LISTED = 20
"""Rejects listed one by one (place, reason, detail) in metrics.json; all of them are counted."""


@dataclass
class Records:
    """The data builder's accounting for one set: every record read is kept or rejected with exactly one
    reason code of `data.validate.REASONS`, so read = kept + rejected. `filtered` counts kept records
    the set leaves out by choice (`response_models`); they are valid, so they stay in `kept`."""

    read: int = 0
    kept: int = 0
    filtered: int = 0
    by_reason: Counter = field(default_factory=Counter)
    rejects: list[dict] = field(default_factory=list)
    """The first REJECTS_LISTED rejects: place ('record 158', 'line 7'), reason, detail."""
    first: "SetLayoutError | None" = None
    """The first reject as the error raised when nothing could be kept (not serialised)."""

    @property
    def rejected(self) -> int:
        return sum(self.by_reason.values())

    def keep(self, filtered: bool = False) -> None:
        self.read += 1
        self.kept += 1
        self.filtered += filtered

    def reject(self, place: str, e: Reject, error: Callable[[], "SetLayoutError"]) -> None:
        """Count a rejected record; `error` builds its one-line SetLayoutError (only for the first)."""
        self.read += 1
        self.by_reason[e.reason] += 1
        if len(self.rejects) < REJECTS_LISTED:
            self.rejects.append({"place": place, "reason": e.reason, "detail": e.detail})
        if self.first is None:
            self.first = error()

    def to_dict(self) -> dict:
        return {"read": self.read, "kept": self.kept, "rejected": self.rejected, "filtered": self.filtered,
                "by_reason": {r: self.by_reason[r] for r in REASONS if self.by_reason[r]},
                "rejects": self.rejects}

    def check(self, path) -> None:
        """Raise the first reject's SetLayoutError when no record could be kept (the file is in another
        layout, as the builder refuses an empty build); otherwise log what was rejected."""
        if self.rejected and not self.kept:
            raise SetLayoutError(f"{self.first} (0 of {self.read} records kept)")
        if self.rejected:
            reasons = ", ".join(f"{r} {n}" for r, n in self.to_dict()["by_reason"].items())
            log.warning("%s: %d of %d records rejected (%s); first: %s", path, self.rejected, self.read,
                        reasons, self.first)


# ---------------------------------------------------------------- Prometheus prompts

def parse_prometheus_prompt(prompt: str, scale: Scale = DEFAULT_SCALE, name: str = "prompt") -> dict:
    """Split a full Prometheus absolute-grading prompt with the data builder's parser, which
    also checks that our template re-renders it exactly. Raises data.validate.Reject (missing_field
    for no text, unparseable_prompt) naming the field `name` if it cannot."""
    from judgeforge.data.parsers import parse_prometheus_prompt as parse

    require_text(prompt, name)
    m = _SCALE_RE.search(prompt)
    if m:
        scale = Scale(int(m.group(1)), int(m.group(2)))
    try:
        p = parse(prompt, scale)
    except Reject as e:
        raise Reject(e.reason, f"{name} is no readable Prometheus prompt: {e.detail}") from None
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


def layout_error(path, place: str, layout: str, problem: str, record: dict | None) -> SetLayoutError:
    others = [k for k, fields in LAYOUTS.items()
              if record is not None and k != layout and all(f in record for f in fields)]
    hint = f"; its fields are those of the {others[0]!r} layout" if others else ""
    fields = f" ({', '.join(LAYOUTS[layout])})" if layout in LAYOUTS else ""  # a kind registered elsewhere
    return SetLayoutError(f"{path} {place}: {problem}; expected the {layout!r} layout{fields}{hint}")


def require(record: dict, layout: str, fields: tuple[str, ...] | None = None) -> None:
    """Reject (missing_field) naming every field of `layout` (or `fields`) the record lacks (None counts:
    hub datasets give absent columns as None)."""
    missing = [f for f in (fields or LAYOUTS[layout]) if record.get(f) is None]
    if missing:
        raise Reject(MISSING_FIELD, f"missing {', '.join(map(repr, missing))}")


@contextlib.contextmanager
def checked():
    """A bad value met while building an item (a turn past the dialogue's end, a rubric that is no dict)
    as the builder's reject: missing_field for an absent key or a value of the wrong type, else
    unparseable_prompt. Never a traceback."""
    try:
        yield
    except KeyError as e:
        raise Reject(MISSING_FIELD, f"missing {e}") from None
    except (TypeError, AttributeError) as e:
        raise Reject(MISSING_FIELD, f"{type(e).__name__}: {e}") from None
    except (IndexError, ValueError) as e:
        raise Reject(UNPARSEABLE_PROMPT, f"{type(e).__name__}: {e}") from None


def read_numbered(path: str, split: str | None = None) -> list[tuple[str, "dict | Reject"]]:
    """Records with their place ('line 7' in JSON Lines, 'record 3' in JSON/Parquet, 'row 3' on the hub);
    a record that cannot be read (bad JSON, a repeated key, no object) comes as its Reject
    (unreadable_line, duplicate_key), as the builder counts it.

    A local file's format is told by its content (data.readers.sniff_format), so JSONL saved as .json
    loads; a file that is no JSON at all is a ConfigError naming it. Raises SetUnavailable when the path
    is neither a file nor a loadable dataset."""
    p = shipped_path(path)
    if p.is_file():
        kind = sniff_format(p)
        unit = "line" if kind == "jsonl" else "record"
        return [(f"{unit} {raw.line}", raw.obj if raw.obj is not None
                 else Reject(raw.reason or UNREADABLE_LINE, f"{raw.error} (read as {kind.upper()})"))
                for raw in iter_file(p, kind)]
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
    """A JSON list, JSONL or Parquet file, or a Hugging Face dataset id (all splits or `split`); strict:
    an unreadable record is a ConfigError naming it (data.readers.read_objects)."""
    p = shipped_path(path)
    if p.is_file():
        return [r for _, r in read_objects(p)]
    return [r for _, r in read_numbered(path, split)]


def accounted(path, layout: "str | Callable[[dict], str]", numbered: list[tuple[str, "dict | Reject"]],
              records: "Records | None", make: Callable) -> list:
    """Every record through `make(n, place, record)`, which returns an item (or None: a valid record the
    set leaves out) or raises Reject; each is counted in `records` as kept or rejected, and every item's
    texts are checked (`check_item`). Raises the first reject's SetLayoutError when none was kept."""
    records = Records() if records is None else records
    out = []
    for n, (place, r) in enumerate(numbered):
        try:
            if isinstance(r, Reject):
                raise r
            with checked():
                item = make(n, place, r)
                if item is not None:
                    check_item(item)
        except Reject as e:
            records.reject(place, e, lambda: _reject_error(path, place, layout, e, r))
            continue
        records.keep(filtered=item is None)
        if item is not None:
            out.append(item)
    records.check(path)
    return out


def _reject_error(path, place: str, layout, e: Reject, r) -> SetLayoutError:
    """A reject as one line: an unreadable record as the reader saw it, any other against its layout."""
    if not isinstance(r, dict):
        return SetLayoutError(f"{path} {place}: {e.detail}")
    return layout_error(path, place, layout(r) if callable(layout) else layout, e.detail, r)


_TEXTS = ("instruction", "response", "response_a", "response_b")


def check_item(item) -> None:
    """What every loader's items must be, whatever its file said: texts that are strings (a JSON `true`
    response is rejected here, not by the tokenizer mid-run) and reference scores on the item's scale."""
    for name in _TEXTS:
        if hasattr(item, name):
            require_text(getattr(item, name), name)
    for name in ("reference_answer", "instruction_b"):
        value = getattr(item, name, None)
        if value is not None and not isinstance(value, str):
            raise Reject(MISSING_FIELD, f"{name} is {type(value).__name__}, not text")
    for score in getattr(item, "ref_samples", ()):
        if not item.scale.lo <= score <= item.scale.hi:
            raise Reject(SCORE_OUT_OF_SCALE, f"reference score {score:g} outside {item.scale.label()}")


def subset(items: list, n: int | None, seed: int) -> list:
    """A seeded sample of n items, kept in source order (all of them when n is None or larger)."""
    if n is None or n >= len(items):
        return list(items)
    keep = sorted(random.Random(seed).sample(range(len(items)), n))
    return [items[i] for i in keep]


def _scores(value, name: str) -> list[float]:
    """One score or a list of them (a JSON string of one too); anything else is non_integer_score."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise Reject(NON_INTEGER_SCORE, f"{name} {value!r} is not a number") from None
    out = []
    for v in value if isinstance(value, (list, tuple)) else [] if value is None else [value]:
        try:
            x = None if v is None or isinstance(v, bool) else float(v)
        except (TypeError, ValueError):
            x = None
        if v is not None and (x is None or not math.isfinite(x)):
            raise Reject(NON_INTEGER_SCORE, f"{name} holds {v!r}, not a number")
        if x is not None:
            out.append(x)
    return out


def _integer(r: dict, name: str, lo: int = -(2 ** 31), hi: int = 2 ** 31) -> int:
    """An integer field read as the builder reads a score (data.validate.coerce_score)."""
    try:
        return coerce_score(r.get(name), lo, hi)
    except Reject as e:
        raise Reject(e.reason, f"{name}: {e.detail}") from None


def _label(r: dict, name: str, labels: dict):
    """A class label (0/1/2) as an integer field, mapped to what it means."""
    value = _integer(r, name)
    if value not in labels:
        ok = ", ".join(map(str, sorted(labels)[:-1])) + f" or {max(labels)}"
        raise Reject(SCORE_OUT_OF_SCALE, f"{name} must be {ok}, got {value}")
    return labels[value]


def _optional_text(r: dict, name: str) -> str | None:
    """An optional text field: absent, null or NaN (a pandas export's empty cell) is None."""
    value = r.get(name)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if not isinstance(value, str):
        raise Reject(MISSING_FIELD, f"{name} is {type(value).__name__}, not text")
    return value


def _abs_from_prompt(rec_id: str, prompt, scores: list[float], **kw) -> AbsItem:
    parts = parse_prometheus_prompt(prompt, name="instruction")
    return AbsItem(id=rec_id, ref_samples=scores,
                   ref_score=sum(scores) / len(scores) if scores else None, **parts, **kw)


# ---------------------------------------------------------------- loaders

_SCORE_FIELDS = ("gpt4_score", "score", "human_score")


def load_prometheus_absolute(path: str, name: str, *, response_models: list[str] | None = None,
                             split: str | None = None,
                             records: Records | None = None) -> tuple[list[AbsItem], int]:
    """Prometheus benchmark layout (Vicuna Bench, MT Bench, FLASK, Feedback Bench):
    `instruction` = full grading prompt, `gpt4_score` = one or several GPT-4 scores."""
    def item(n: int, place: str, r: dict) -> AbsItem | None:
        if "orig_instruction" in r:  # Feedback Collection / Feedback Bench layout
            require(r, "feedback_bench")
            return _feedback_collection_item(r, f"{name}:{n}")
        model = r.get("response_source") or r.get("model")
        score_field = next((k for k in _SCORE_FIELDS if k in r), None)
        require(r, "prometheus", ("instruction", score_field or "gpt4_score"))
        it = _abs_from_prompt(f"{name}:{r.get('idx', n)}:{model or n}", r["instruction"],
                              _scores(r[score_field], score_field), category=r.get("category"),
                              response_model=model)
        check_item(it)  # before the filter: a bad record left out is still a reject
        return it if not response_models or model in response_models else None

    layout = lambda r: "feedback_bench" if "orig_instruction" in r else "prometheus"  # noqa: E731
    records = Records() if records is None else records
    # n_available: every kept record, those left out by response_models included.
    return accounted(path, layout, read_numbered(path, split), records, item), records.kept


def _feedback_collection_item(r: dict, rec_id: str) -> AbsItem:
    """Feedback Collection / Feedback Bench (`prometheus-eval/Feedback-Bench`): orig_* columns."""
    rubric = Rubric.from_dict({"criteria": require_text(r["orig_criteria"], "orig_criteria"),
                               **{f"score{k}_description": r.get(f"orig_score{k}_description")
                                  for k in range(1, 6)}})
    score = _scores(r.get("orig_score"), "orig_score")
    return AbsItem(id=rec_id, instruction=require_text(r["orig_instruction"], "orig_instruction"),
                   response=require_text(r["orig_response"], "orig_response"),
                   rubric=rubric, reference_answer=_optional_text(r, "orig_reference_answer"),
                   ref_samples=score, ref_score=score[0] if score else None,
                   category=r.get("orig_criteria"))


def _build_split(build_dir: str) -> Path:
    path = Path(build_dir) / "test.jsonl"
    if not path.is_file():
        raise SetUnavailable(f"no held-out split at {path} (run `judgeforge data build` first)")
    return path


def _of_mode(numbered: list, relative: bool) -> list:
    """A build's records of one mode (unreadable ones go to both): the other mode's are another set's."""
    return [(place, r) for place, r in numbered
            if not isinstance(r, dict) or (r.get("mode") == "relative") == relative]


def load_heldout(build_dir: str, *, response_models: list[str] | None = None,
                 records: Records | None = None) -> tuple[list[AbsItem], int]:
    """The held-out split of a data build (`test.jsonl`): samples grouped per item_id,
    reference = mean of the GPT-4 samples (in sample_idx order). Its relative records are
    heldout_pairs' and not read here."""
    path = _build_split(build_dir)
    groups: dict[str, list[tuple[int, AbsItem]]] = defaultdict(list)

    def sample(n: int, place: str, r: dict) -> AbsItem | None:
        require(r, "heldout")
        order = r.get("sample_idx", 0)
        if not isinstance(order, int) or isinstance(order, bool):
            raise Reject(MISSING_FIELD, f"sample_idx is {type(order).__name__}, not an integer")
        it = AbsItem(id=r["item_id"], instruction=r["instruction"], response=r["response"],
                     rubric=Rubric.from_dict(r["rubric"]), reference_answer=r.get("reference_answer"),
                     scale=Scale.parse(r["scale"]), category=r.get("category"),
                     response_model=r.get("response_model"), ref_samples=_scores(r["score"], "score"))
        check_item(it)
        if response_models and r.get("response_model") not in response_models:
            return None
        groups[r["item_id"]].append((order, it))
        return it

    accounted(path, "heldout", _of_mode(read_numbered(str(path)), relative=False), records, sample)
    items = []
    for samples in groups.values():
        samples.sort(key=lambda s: s[0])
        scores = [x for _, it in samples for x in it.ref_samples]
        items.append(replace(samples[0][1], ref_samples=scores, ref_score=sum(scores) / len(scores)))
    return items, len(items)


def load_heldout_pairs(build_dir: str, *, seed: int = 0,
                       records: Records | None = None) -> tuple[list[PairItem], int]:
    """The relative (pairwise) records of a data build's held-out split as pairs, grouped as training
    groups them (data.pairwise.build_pairs): both orders of a swapped pair, a split tie's two halves and
    repeated judgments are one pair; reference = the judge's majority ('tie' when balanced, e.g. a split
    tie). The preferred side is put at A or B by a seeded coin, as for HHH."""
    path = _build_split(build_dir)

    def record(n: int, place: str, r: dict) -> dict:
        require(r, "heldout_pairs")
        for name in ("instruction", "response_a", "response_b"):
            require_text(r[name], name)
        if r["verdict"] not in ("A", "B"):
            raise Reject(UPSTREAM_PARSE_FAILURE, f"verdict {r['verdict']!r} is not A or B")
        Rubric.from_dict(r.get("rubric") or {})
        return r

    kept = accounted(path, "heldout_pairs", _of_mode(read_numbered(str(path)), relative=True), records, record)
    pairs, _ = build_pairs(kept, HALF_TIES)
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


def labelled_pairs(path: str, layout: str, item, records: Records | None = None,
                   split: str | None = None) -> tuple[list[PairItem], int]:
    """Every record of a labelled pair file, layout-checked, through `item(n, place, record)`."""
    def checked_item(n: int, place: str, r: dict) -> PairItem:
        require(r, layout)
        return item(n, place, r)

    records = Records() if records is None else records
    return accounted(path, layout, read_numbered(path, split), records, checked_item), records.kept


def load_hhh(path: str, *, seed: int = 0, records: Records | None = None) -> tuple[list[PairItem], int]:
    """HHH Alignment (Prometheus layout): chosen_instruction / rejected_instruction are full
    grading prompts without reference. The chosen side is put at A or B by a seeded coin so
    relative grading is not rewarded for a position bias."""
    rng = random.Random(seed)

    def item(n: int, place: str, r: dict) -> PairItem:
        chosen_first = rng.random() < 0.5  # drawn first: a rejected record does not move later coins
        ch = parse_prometheus_prompt(r["chosen_instruction"], name="chosen_instruction")
        rj = parse_prometheus_prompt(r["rejected_instruction"], name="rejected_instruction")
        a, b = (ch, rj) if chosen_first else (rj, ch)
        return PairItem(id=f"hhh:{n}", instruction=ch["instruction"], response_a=a["response"],
                        response_b=b["response"], human="a" if chosen_first else "b",
                        rubric=ch["rubric"], scale=ch["scale"], category=r.get("source"))

    return labelled_pairs(path, "hhh", item, records)


_MTB_WINNER = {"model_a": "a", "model_b": "b", "tie": "tie", "tie (bothbad)": "tie"}


def _dialogue(conv: list[dict], turn: int, name: str) -> tuple[str, str]:
    """MT-Bench conversation -> (instruction with earlier turns, assistant answer at `turn`)."""
    if not isinstance(conv, list) or not all(isinstance(m, dict) for m in conv):
        raise Reject(MISSING_FIELD, f"{name} is {type(conv).__name__}, not a list of messages")
    users = [require_text(m.get("content"), f"{name} content") for m in conv if m.get("role") == "user"]
    bots = [require_text(m.get("content"), f"{name} content") for m in conv if m.get("role") == "assistant"]
    if not 1 <= turn <= min(len(users), len(bots)):
        raise Reject(UNPARSEABLE_PROMPT, f"{name} has no turn {turn} ({len(users)} user, {len(bots)} assistant "
                                         "messages)")
    if turn == 1:
        return users[0], bots[0]
    history = "".join(f"User: {u}\nAssistant: {a}\n\n" for u, a in zip(users[:turn - 1], bots))
    return f"{history}User: {users[turn - 1]}", bots[turn - 1]


def load_mt_bench_human(path: str, *, preset: str = "helpfulness", split: str | None = "human",
                        records: Records | None = None) -> tuple[list[PairItem], int]:
    """MT-Bench human judgments (`lmsys/mt_bench_human_judgments` layout): question_id,
    model_a, model_b, winner, judge, conversation_a, conversation_b, turn."""
    rubric = rubric_preset(preset)

    def item(n: int, place: str, r: dict) -> PairItem:
        if r["winner"] not in _MTB_WINNER:  # the builder's word for a verdict it cannot read
            raise Reject(UPSTREAM_PARSE_FAILURE, f"unknown winner {r['winner']!r}")
        turn = _integer(r, "turn", lo=1)
        ia, ra = _dialogue(r["conversation_a"], turn, "conversation_a")
        ib, rb = _dialogue(r["conversation_b"], turn, "conversation_b")
        return PairItem(id=f"mtbh:{r['question_id']}:{r['model_a']}:{r['model_b']}:{turn}:{n}",
                        instruction=ia, response_a=ra, response_b=rb,
                        human=_MTB_WINNER[r["winner"]], rubric=rubric, category=f"turn{turn}",
                        instruction_b=ib if ib != ia else None)

    return labelled_pairs(path, "mt_bench_human", item, records, split)


_AUTOJ_LABEL = {0: "a", 1: "b", 2: "tie"}


def load_autoj(path: str, *, preset: str = "helpfulness",
               records: Records | None = None) -> tuple[list[PairItem], int]:
    """Auto-J pairwise test set (JSONL): scenario, label (0: response 1 better, 1: response 2,
    2: tie), prompt, `response 1`, `response 2`."""
    rubric = rubric_preset(preset)

    def item(n: int, place: str, r: dict) -> PairItem:
        return PairItem(id=f"autoj:{n}", instruction=require_text(r["prompt"], "prompt"),
                        response_a=require_text(r["response 1"], "response 1"),
                        response_b=require_text(r["response 2"], "response 2"),
                        human=_label(r, "label", _AUTOJ_LABEL), rubric=rubric, category=r.get("scenario"))

    return labelled_pairs(path, "autoj", item, records)


_PANDALM_LABEL = {0: "tie", 1: "a", 2: "b"}


def pandalm_majority(labels: list[int]) -> str:
    """The annotators' majority ('a', 'b', 'tie'); three different labels (a 3-way split) count as a tie."""
    top, votes = max(((lab, labels.count(lab)) for lab in set(labels)), key=lambda lv: lv[1])
    return _PANDALM_LABEL[top] if votes * 2 > len(labels) else "tie"


def load_pandalm(path: str, *, preset: str = "helpfulness",
                 records: Records | None = None) -> tuple[list[PairItem], int]:
    """PandaLM test set (`testset-v1.json` layout): instruction, input, response1, response2 and three
    human annotators (0: tie, 1: response1 better, 2: response2). Reference = the annotators' majority.
    A non-empty `input` is appended to the instruction, as PandaLM's own prompt does. The published file
    has 6 responses that are the JSON literal `true`, not text: those records are rejected
    (missing_field); its empty responses are kept (an empty answer is gradeable, and usually loses)."""
    rubric = rubric_preset(preset)
    labels_ok = {k: k for k in _PANDALM_LABEL}

    def item(n: int, place: str, r: dict) -> PairItem:
        labels = [_label(r, f"annotator{k}", labels_ok) for k in (1, 2, 3)]
        extra = _optional_text(r, "input")
        instruction = require_text(r["instruction"], "instruction")
        if (extra or "").strip():
            instruction += f"\n\n{extra}"
        return PairItem(id=f"pandalm:{r.get('idx', n)}", instruction=instruction,
                        response_a=require_text(r["response1"], "response1"),
                        response_b=require_text(r["response2"], "response2"),
                        human=pandalm_majority(labels), rubric=rubric, category=r.get("motivation_app"))

    return labelled_pairs(path, "pandalm", item, records)


# ---------------------------------------------------------------- set kinds

@dataclass(frozen=True)
class SetKind:
    """A registered set kind: its loader and what its items are."""

    load: Callable[["SetConfig", int, Records], tuple[list, int]]
    """(set config, seed, Records to count into) -> (items, n_available)."""
    pairwise: bool = False
    """Items are PairItems (graded absolutely per side and/or relatively) rather than AbsItems."""
    reference: str = "gpt-4"
    """Who made the reference labels: 'gpt-4' or 'human'."""
    role: str = "forgetting"
    """The table a set of this kind feeds unless its config says otherwise."""
    preset: bool = False
    """The files ship no rubric: the set config's `rubric_preset` is used (and reported)."""


SET_KINDS: Registry[SetKind] = Registry("set kind")
"""Every set kind an eval config may name; `set_kind` adds one."""


def set_kind(name: str, *, pairwise: bool = False, reference: str | None = None, role: str | None = None,
             preset: bool = False):
    """Register the decorated `load(set_config, seed, records) -> (items, n_available)` as set kind
    `name`. Defaults: pairwise kinds have human references and feed the human table, absolute ones
    GPT-4 references and the forgetting table."""
    def register(load):
        SET_KINDS.register(name, SetKind(load, pairwise, reference or ("human" if pairwise else "gpt-4"),
                                         role or ("human" if pairwise else "forgetting"), preset))
        return load
    return register


def ensure_heldout(sc: "SetConfig") -> Path:
    """The set's data-build directory, built from its `build_config` first when it has no test split."""
    path = shipped_path(sc.path)
    if not (path / "test.jsonl").is_file() and sc.build_config:
        from judgeforge.data.build import run_build
        from judgeforge.data.config import BuildConfig

        log.info("%s has no test.jsonl: building it from %s", path, sc.build_config)
        run_build(load_config(BuildConfig, shipped_path(sc.build_config)), out=path)
    return path


@set_kind("heldout", role="mimic")
def _heldout(sc: "SetConfig", seed: int, records: Records) -> tuple[list, int]:
    return load_heldout(str(ensure_heldout(sc)), response_models=sc.response_models or None, records=records)


@set_kind("heldout_pairs", pairwise=True, reference="gpt-4")
def _heldout_pairs(sc: "SetConfig", seed: int, records: Records) -> tuple[list, int]:
    return load_heldout_pairs(str(ensure_heldout(sc)), seed=seed, records=records)


@set_kind("prometheus")
@set_kind("flask")
@set_kind("feedback_bench")
def _prometheus(sc: "SetConfig", seed: int, records: Records) -> tuple[list, int]:
    return load_prometheus_absolute(sc.path, sc.name, response_models=sc.response_models or None,
                                    split=sc.split, records=records)


@set_kind("hhh", pairwise=True)
def _hhh(sc: "SetConfig", seed: int, records: Records) -> tuple[list, int]:
    return load_hhh(sc.path, seed=seed, records=records)


@set_kind("mt_bench_human", pairwise=True, preset=True)
def _mt_bench_human(sc: "SetConfig", seed: int, records: Records) -> tuple[list, int]:
    return load_mt_bench_human(sc.path, preset=sc.rubric_preset, split=sc.split or "human", records=records)


@set_kind("autoj", pairwise=True, preset=True)
def _autoj(sc: "SetConfig", seed: int, records: Records) -> tuple[list, int]:
    return load_autoj(sc.path, preset=sc.rubric_preset, records=records)


@set_kind("pandalm", pairwise=True, preset=True)
def _pandalm(sc: "SetConfig", seed: int, records: Records) -> tuple[list, int]:
    return load_pandalm(sc.path, preset=sc.rubric_preset, records=records)


# Reference figures from the papers, shown beside our accuracy as "published" (not recomputed here).
# PandaLM (Wang et al. 2023, Table 2): accuracy vs. the human majority on the PandaLM test set.
# Auto-J (Li et al. 2023, Table 2): agreement (%) on the Auto-J pairwise test set, ties included.
PUBLISHED: dict[str, dict[str, float]] = {
    "pandalm": {"PandaLM-7B": 0.668, "GPT-3.5": 0.711},
    "autoj": {"GPT-4": 0.6228, "Auto-J-13B": 0.5496},
}
