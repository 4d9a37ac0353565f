"""HTTP request/response models of the grading API (pydantic), and their mapping to judge items.

Static limits live in the field constraints (so they show in the OpenAPI spec);
limits from the config (`max_n`, `max_input_chars`, `max_batch`) are checked by
`validate_limits`, which raises `FieldError` naming the field (served as 422).
Every string field is bounded (texts and rubric texts by `max_input_chars`, names
such as `adapter` by NAME_CHARS), and a 422 body never echoes more than a few
hundred characters of anything a client sent (`safe_errors`, `FieldError.detail`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import re
import types
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from judgeforge.judge.prompts import RUBRIC_PRESETS, Rubric, Scale
from judgeforge.judge.items import CompareItem, GradeItem, Options
from judgeforge.judge.voting import INTERNAL_FIELDS, Comparison, Grade

_DESC_KEY = re.compile(r"^score(\d{1,3})_description$")


class FieldError(ValueError):
    """A request field breaks a configured limit; `loc` names it."""

    def __init__(self, loc: list, msg: str, kind: str = "value_error"):
        self.loc, self.msg, self.kind = loc, msg, kind
        super().__init__(f"{'.'.join(map(str, loc))}: {msg}")

    def detail(self) -> list[dict]:
        return [{"loc": ["body", *map(_loc, self.loc)], "msg": _echo(self.msg, MSG_CHARS), "type": self.kind}]


def _unicode(v: str) -> str:
    """JSON's "\\ud800" escapes give Python strings no tokenizer accepts (a TypeError, a 500)."""
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"not valid Unicode: a lone surrogate at character {e.start}") from None
    return v


Text = Annotated[str, AfterValidator(_unicode)]
"""Request text: any string that is valid Unicode (encodable as UTF-8)."""
ECHO_CHARS = 200
"""Most characters of a client's input echoed in a 422."""
MSG_CHARS = 300
"""Longest 422 message (some quote the input: an unknown rubric key, an unknown adapter)."""
LOC_CHARS = 64
"""Longest field name in a 422's `loc` (an unknown key is the client's text)."""
MAX_ERRORS = 20
"""Most errors listed in one 422 (a batch of a million bad items must not answer a million)."""
NAME_CHARS = 256
"""Longest name field (`adapter`): names are short, and an unknown one is quoted back."""


def safe_errors(errors: list[dict]) -> list[dict]:
    """pydantic errors as JSON-safe 422 details whatever the client sent: the offending input is
    echoed only as a short scalar (NaN/inf as strings; a whole body or a 200k-character text is
    not sent back), constraint values (ctx) as JSON scalars."""
    out = []
    for e in errors[:MAX_ERRORS]:
        d = {"loc": [_loc(x) for x in e["loc"]], "msg": _echo(e["msg"], MSG_CHARS), "type": e["type"]}
        if not isinstance(e.get("input"), (dict, list, tuple)):
            d["input"] = _echo(e.get("input"))
        if e.get("ctx"):
            d["ctx"] = {_loc(k): _echo(v) for k, v in list(e["ctx"].items())[:8]}
        out.append(d)
    if len(errors) > MAX_ERRORS:
        out.append({"loc": ["body"], "msg": f"... and {len(errors) - MAX_ERRORS} more errors",
                    "type": "too_many_errors"})
    return out


def _loc(x: Any) -> Any:
    return x if isinstance(x, int) else _echo(str(x), LOC_CHARS)


def _echo(v: Any, limit: int = ECHO_CHARS) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # JSON has no NaN/inf: "nan", "inf"
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**63:
        return "<large integer>"  # JSON parsers of other languages lose it anyway
    if v is None or isinstance(v, (bool, int, float)):
        return v
    text = v if isinstance(v, str) else str(v)  # ctx may hold an exception
    return text if len(text) <= limit else text[:limit] + "..."


class RubricIn(BaseModel):
    """BiGGen-Bench rubric layout: `criteria` and `score<k>_description` for each score."""

    model_config = ConfigDict(extra="allow")
    criteria: Text = Field(min_length=1)

    @model_validator(mode="after")
    def _descriptions(self):
        for key, value in (self.model_extra or {}).items():
            if not _DESC_KEY.match(key):
                raise ValueError(f"unknown rubric key {_echo(key, LOC_CHARS)!r} (expected criteria, "
                                 "score<k>_description)")
            if not isinstance(value, str):
                raise ValueError(f"rubric {key} must be a string")
            _unicode(value)
        return self

    def to_rubric(self) -> Rubric:
        return Rubric.from_dict(self.model_dump())


class SamplingIn(BaseModel):
    # NaN/Infinity (which Python's json accepts, and 1e309 overflows to) pass no range check
    # cleanly: refuse non-finite floats outright, as a 422 naming the field.
    model_config = ConfigDict(allow_inf_nan=False)
    n: int | None = Field(None, ge=1, description="samples to vote over (<= the server's max_n)")
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1, le=1_000_000)
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    adapter: Text | None = Field(None, max_length=NAME_CHARS,
                                 description="LoRA adapter name from GET /v1/models; null = base")
    feedback: bool | None = Field(None, description="false: score-only (the distribution straight after "
                                  "the prompt and `[RESULT] `, no feedback written); null: server default")
    include_samples: bool = Field(False, description="also return the raw text of every sample")

    def options(self) -> Options:
        return Options(n=self.n, temperature=self.temperature, top_p=self.top_p,
                       max_tokens=self.max_tokens, seed=self.seed, adapter=self.adapter,
                       feedback=self.feedback)


PresetName = Literal[tuple(sorted(RUBRIC_PRESETS))]  # type: ignore[valid-type]
RubricField = Field(description="BiGGen-Bench rubric dict or a preset name: "
                                + ", ".join(sorted(RUBRIC_PRESETS)))


class GradeRequest(SamplingIn):
    model_config = ConfigDict(extra="forbid")
    instruction: Text = Field(min_length=1)
    response: Text
    rubric: RubricIn | PresetName = RubricField
    reference_answer: Text | None = None
    scale: list[int] | None = Field(None, min_length=2, max_length=2,
                                    description="[lo, hi] integer score range, default [1, 5]")

    @field_validator("scale")
    @classmethod
    def _scale(cls, v):
        if v is not None and not (0 <= v[0] < v[1] <= 100):
            raise ValueError("scale must be [lo, hi] with 0 <= lo < hi <= 100")
        return v

    def item(self) -> GradeItem:
        scale = Scale(*self.scale) if self.scale else Scale()
        return GradeItem(self.instruction, self.response, resolve_rubric(self.rubric, ["rubric"]),
                         self.reference_answer, scale, self.options())


class CompareRequest(SamplingIn):
    model_config = ConfigDict(extra="forbid")
    instruction: Text = Field(min_length=1)
    response_a: Text
    response_b: Text
    rubric: RubricIn | PresetName = RubricField
    reference_answer: Text | None = None
    both_orders: bool = Field(False, description="also grade B-vs-A; a win counts only if both agree")

    def item(self) -> CompareItem:
        return CompareItem(self.instruction, self.response_a, self.response_b,
                           resolve_rubric(self.rubric, ["rubric"]), self.reference_answer,
                           self.both_orders, self.options())


class GradeBatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[GradeRequest] = Field(min_length=1)


class CompareBatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[CompareRequest] = Field(min_length=1)


def resolve_rubric(rubric: RubricIn | str, loc: list) -> Rubric:
    if isinstance(rubric, RubricIn):
        return rubric.to_rubric()
    if rubric not in RUBRIC_PRESETS:
        raise FieldError(loc, f"unknown rubric preset {rubric!r}; known: {sorted(RUBRIC_PRESETS)}")
    return RUBRIC_PRESETS[rubric]


def validate_limits(req: GradeRequest | CompareRequest, cfg, loc: list | None = None) -> None:
    """Config-dependent limits: n <= max_n, max_tokens <= limit, text fields <= max_input_chars."""
    loc = loc or []
    if req.n is not None and req.n > cfg.sampling.max_n:
        raise FieldError(loc + ["n"], f"n={req.n} exceeds this server's max_n={cfg.sampling.max_n}",
                         "less_than_equal")
    if req.max_tokens is not None and req.max_tokens > cfg.sampling.max_tokens_limit:
        raise FieldError(loc + ["max_tokens"], f"max_tokens={req.max_tokens} exceeds this server's "
                         f"limit of {cfg.sampling.max_tokens_limit}", "less_than_equal")
    for where, value in _texts(req):
        if isinstance(value, str) and len(value) > cfg.server.max_input_chars:
            raise FieldError(loc + where, f"{where[-1]} is {len(value)} characters; the limit is "
                             f"{cfg.server.max_input_chars}", "string_too_long")


def _texts(req: GradeRequest | CompareRequest):
    """(loc, value) of every free text of a request: its texts and its custom rubric's."""
    for name in ("instruction", "response", "response_a", "response_b", "reference_answer"):
        yield [name], getattr(req, name, None)
    if isinstance(req.rubric, RubricIn):
        yield ["rubric", "criteria"], req.rubric.criteria
        for key, value in (req.rubric.model_extra or {}).items():
            yield ["rubric", key], value


class CascadeFields(BaseModel):
    """What a cascade (`cascade:`) and a judgment store (`store:`) add to an answer; absent otherwise."""

    judge: Literal["local", "teacher"] | None = Field(
        None, description="who answered: the local judge, or the teacher it escalated to")
    threshold: float | None = Field(None, description="escalate when confidence < threshold")
    guarantee: dict[str, float] | None = Field(
        None, description="calibrated threshold only: with probability >= 1 - delta over the n calibration "
        "items, the local judge agrees with the teacher on >= 1 - alpha of the items it answers")
    local_score: int | str | None = Field(None, description="teacher answers: the local judge's value")
    teacher_error: str | None = Field(None, description="escalated, but the teacher gave no usable "
                                      "judgment (error, timeout, unparseable): answered locally")
    budget_exhausted: bool | None = Field(None, description="escalation skipped: the teacher budget is "
                                          "spent; answered locally")
    cached: bool | None = Field(None, description="answered from the judgment store (an identical request "
                                "graded before by the same local judge)")
    teacher_calls: dict[str, int] | None = Field(
        None, description="escalated items: the teacher calls made for this item (re-asks and retries "
        "included) by outcome: answered and timeout count against the budget, error does not")


RESULT_DOCS = {
    "score": "voted score; null only when no sample has a vote (an engine that cannot complete scores "
             "and wrote none; see reason)",
    "votes": "one per sample: the score (verdict) it wrote, else its completed distribution's most probable value",
    "sources": "per vote: 'written' by the judge or 'completed'",
    "distribution": "votes per score (verdict)",
    "agreement": "share of valid votes equal to the voted score",
    "n_unparseable": "samples that wrote no valid value themselves",
    "feedback": "feedback of one sample that voted with the majority",
    "score_probs": "the judge's probability of each score, read after `[RESULT] ` following each sample's "
                   "feedback, renormalised over the scale and averaged over samples",
    "expected_score": "expectation of score_probs",
    "confidence": "the judge's probability of the voted value (score_probs[score], probs[winner]); the vote "
                  "agreement where no distribution",
    "n_written": "samples whose value the judge wrote itself",
    "written_agreement": "of samples that wrote a value, the share whose written value is the completed "
                         "distribution's most probable one",
    "n_sampled": "samples drawn, re-samples (and both orders) included",
    "engine": "the engine kind that answered (e.g. transformers while vLLM starts, then vllm)",
    "failures": "reason -> count of the samples that gave no valid value",
    "winner": '"A", "B", or null (tie, inconsistent, unparseable: see reason)',
    "probs": "P(A wins), P(B wins) from the completed distributions, averaged over samples and orders",
    "consistent": "both orders: whether the swapped order gave the same winner",
}
"""OpenAPI descriptions of the result fields; the fields themselves are `judge.voting`'s."""


def _json_type(tp: Any) -> Any:
    """A result field's type as JSON carries it: int dict keys become strings (see `Grade.to_dict`)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) is dict and args[0] is int:
        return dict[str, args[1]]
    if typing.get_origin(tp) in (Union, types.UnionType):
        return functools.reduce(operator.or_, map(_json_type, args))
    return tp


def _result_field(f: dataclasses.Field, tp: Any) -> tuple[Any, Any]:
    if f.default_factory is not dataclasses.MISSING:
        default = Field(default_factory=f.default_factory, description=RESULT_DOCS.get(f.name))
    else:
        default = Field(... if f.default is dataclasses.MISSING else f.default, description=RESULT_DOCS.get(f.name))
    return _json_type(tp), default


def result_model(name: str, result_cls: type, **extra: Any) -> type[BaseModel]:
    """The response model of a result class: its `to_dict` fields, plus the answer's `extra` ones."""
    hints = typing.get_type_hints(result_cls)
    fields = {f.name: _result_field(f, hints[f.name]) for f in dataclasses.fields(result_cls)
              if f.name not in INTERNAL_FIELDS}
    fields["samples"] = (list[str | None] | None, Field(None, description="raw sample texts (include_samples)"))
    return create_model(name, __base__=CascadeFields, **fields, **extra)


_ANSWER = dict(model=(str, ...), adapter=(str | None, None), latency_s=(float, ...))
GradeResponse = result_model("GradeResponse", Grade, **_ANSWER,
                             rubric=(str, Field(description="preset name or 'custom'")), scale=(list[int], ...))
CompareResponse = result_model("CompareResponse", Comparison, **_ANSWER)


def apply_limits_to_openapi(spec: dict, cfg) -> dict:
    """Write the config's limits into the spec (maximum n / max_tokens, maxLength of texts)."""
    limits = {"n": ("maximum", cfg.sampling.max_n), "max_tokens": ("maximum", cfg.sampling.max_tokens_limit)}
    for name in ("instruction", "response", "response_a", "response_b", "reference_answer"):
        limits[name] = ("maxLength", cfg.server.max_input_chars)
    for model in ("GradeRequest", "CompareRequest"):
        props = spec.get("components", {}).get("schemas", {}).get(model, {}).get("properties", {})
        for field, (key, value) in limits.items():
            if field not in props:
                continue
            for sub in props[field].get("anyOf", [props[field]]):
                if sub.get("type") in ("integer", "string"):
                    sub[key] = value
    for model in ("GradeBatchRequest", "CompareBatchRequest"):
        items = spec.get("components", {}).get("schemas", {}).get(model, {}).get("properties", {}).get("items")
        if items:
            items["maxItems"] = cfg.server.max_batch
    return spec


def rubric_name(rubric: Any) -> str:
    return rubric if isinstance(rubric, str) else "custom"
