"""Format parsers: one raw record (a parsed JSON object) -> judgments or rejects.

Each parser returns a list of `(sample_idx, Judgment | Reject)`: one entry per
judgment the record holds (Prometheus files hold 3 GPT-4 samples per line), so
that every judgment read is accounted for. Pure logic, on the hot path.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import dataclass, field

from judgeforge.data.pairwise import (is_fastchat_pair, parse_alpaca_eval, parse_fastchat_pair,
                                      parse_generic_pair)
from judgeforge.data.schema import Judgment
from judgeforge.judge.prompts import Rubric, Scale, absolute_prompt, rubric_preset
from judgeforge.data.validate import (EMPTY_FEEDBACK, EMPTY_RESPONSE, MISSING_FIELD, RESCALE_RUBRIC_LEVELS,
                                      UNPARSEABLE_PROMPT, UNSUPPORTED_MODE, UPSTREAM_PARSE_FAILURE, Reject,
                                      check_feedback_score, clean_feedback, coerce_score, optional_text,
                                      require_text, rescale_score)

Parsed = list[tuple[int, "Judgment | Reject"]]


@dataclass(slots=True)
class Context:
    """What a parser needs to know about its source."""

    source: str
    scale: Scale
    judge_model: str = "unknown"
    check_feedback: bool = True
    columns: dict[str, str] = field(default_factory=dict)
    rubric: Rubric | None = None
    prompt_name: str | None = None
    """fastchat: the configured judge prompt name (None: each record's own, else inferred)."""
    swap: bool = False
    """Pairwise: also emit every judgment in the other order (data.pairwise.with_swaps)."""
    pair_inconsistent: str = "reject"
    """FastChat pair logs whose two game orders disagree: reject | keep_first | keep."""
    ties: str = "reject"
    """Pairwise ties: reject (reason tie) | split (two records, verdict A and B; data.pairwise.split_ties)."""
    max_tokens: int | None = None
    """The build's length limit (data.length; None: none)."""
    tokenizer: str | None = None
    """What counts `max_tokens` (None: characters / 4)."""
    rescale: Scale | None = None
    """Absolute judgments: the scale the records are mapped onto (validate.rescale_score; None: their own)."""


def make_judgment(ctx: Context, *, instruction: str, response: str, rubric: Rubric, feedback,
                  score, sample_idx: int = 0, **fields) -> Judgment:
    """Shared validation for every format: response, score, feedback (in that order)."""
    require_text(response, "response", EMPTY_RESPONSE)
    value = coerce_score(score, ctx.scale.lo, ctx.scale.hi)
    feedback = require_text(feedback, "feedback", EMPTY_FEEDBACK)
    if ctx.check_feedback:
        check_feedback_score(feedback, value)
    feedback = clean_feedback(feedback)
    if not feedback:
        raise Reject(EMPTY_FEEDBACK, "feedback holds only a verdict")
    scale = ctx.scale
    if ctx.rescale is not None and ctx.rescale != scale:
        value, scale, fields = _rescaled(ctx, rubric, value, fields)
    j = Judgment(instruction=instruction, response=response, rubric=rubric, feedback=feedback, score=value,
                 scale=scale, source=ctx.source, sample_idx=sample_idx, **fields)
    if not j.judge_model or j.judge_model == "unknown":
        j.judge_model = ctx.judge_model
    return j  # item_id is left to the builder, which hashes each item once (data/records.py)


def _rescaled(ctx: Context, rubric: Rubric, value: int, fields: dict) -> tuple[int, Scale, dict]:
    """(score, scale, fields) of a judgment mapped onto `ctx.rescale`; the teacher's own score and scale
    stay in `extra` (`original_score`, `original_scale`), so the mapping can be undone and audited."""
    if rubric.descriptions:
        raise Reject(RESCALE_RUBRIC_LEVELS, f"rubric describes levels {sorted(rubric.descriptions)} of "
                                            f"{ctx.scale.lo}-{ctx.scale.hi}")
    src, dst = (ctx.scale.lo, ctx.scale.hi), (ctx.rescale.lo, ctx.rescale.hi)
    extra = {**(fields.get("extra") or {}), "original_score": value, "original_scale": list(src)}
    return rescale_score(value, src, dst), ctx.rescale, {**fields, "extra": extra}


# --- prometheus -------------------------------------------------------------------------------

_P_INSTR = "###The instruction to evaluate:\n"
_P_RESP = "\n\n###Response to evaluate:\n"
_P_REF_RE = re.compile(r"\n\n###Reference Answer \(Score (\d+)\):\n")
_P_RUBRIC = "\n\n###Score Rubrics:\n"
_P_FEEDBACK_RE = re.compile(r"\n\n###Feedback:\s*$")
_SCORE_LINE_RE = re.compile(r"\nScore (\d+): ")
# Prometheus-1 (the eval files) vs Prometheus-2 (our template): only instruction 3 differs.
P1_FORMAT_LINE = '"Feedback: (write a feedback for criteria) [RESULT]'
P2_FORMAT_LINE = '"(write a feedback for criteria) [RESULT]'
PROMETHEUS_PROMPT_KEYS = ("instruction", "chosen_instruction", "rejected_instruction")


@dataclass(slots=True)
class PromptParts:
    instruction: str
    response: str
    reference_answer: str | None
    rubric: Rubric
    scale: Scale


def parse_rubric(text: str) -> Rubric:
    """`[criteria]` then `Score k: description` lines (Prometheus SCORE_RUBRIC_TEMPLATE)."""
    m = _SCORE_LINE_RE.search(text)
    head = text[:m.start()] if m else text
    if not (head.startswith("[") and head.endswith("]")):
        raise Reject(UNPARSEABLE_PROMPT, "rubric criteria not in [brackets]")
    parts = _SCORE_LINE_RE.split(text[m.start():]) if m else [""]
    descs = {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    return Rubric(head[1:-1], descs)


def parse_prometheus_prompt(prompt: str, scale: Scale, verify: bool = True) -> PromptParts:
    """Recover the fields of a full Prometheus absolute-grading prompt.

    With `verify`, re-rendering the fields with our template must reproduce the
    prompt (after swapping the Prometheus-1 instruction-3 wording), so nothing is
    mis-split and the training prompt is the released one.
    """
    i = prompt.find(_P_INSTR)
    r = prompt.find(_P_RESP, i + 1)
    k = prompt.rfind(_P_RUBRIC)
    f = _P_FEEDBACK_RE.search(prompt, k + 1 if k >= 0 else 0)
    if i < 0 or r < 0 or k < r or f is None:
        raise Reject(UNPARSEABLE_PROMPT, "missing Prometheus prompt sections")
    instruction = prompt[i + len(_P_INSTR):r]
    body = prompt[r + len(_P_RESP):k]
    reference = None
    refs = list(_P_REF_RE.finditer(body))
    if refs:
        ref = refs[-1]
        reference = body[ref.end():]
        body = body[:ref.start()]
        if int(ref.group(1)) != scale.hi:
            scale = Scale(scale.lo, int(ref.group(1)))
    parts = PromptParts(instruction, body, reference, parse_rubric(prompt[k + len(_P_RUBRIC):f.start()]), scale)
    if verify:
        expected = absolute_prompt(parts.instruction, parts.response, parts.rubric, parts.reference_answer, scale)
        if prompt.replace(P1_FORMAT_LINE, P2_FORMAT_LINE, 1).rstrip() != expected.rstrip():
            raise Reject(UNPARSEABLE_PROMPT, "prompt does not re-render to the Prometheus template")
    return parts


def parse_prometheus(obj: dict, ctx: Context) -> Parsed:
    prompt = obj.get("instruction")
    if not isinstance(prompt, str):
        return [(0, Reject(MISSING_FIELD, "instruction"))]
    scores, feedbacks = obj.get("gpt4_score"), obj.get("gpt4_feedback")
    if not isinstance(scores, list) or not isinstance(feedbacks, list):
        return [(0, Reject(MISSING_FIELD, "gpt4_score/gpt4_feedback lists"))]
    n = max(len(scores), len(feedbacks), 1)
    try:
        parts = parse_prometheus_prompt(prompt, ctx.scale)
    except Reject as e:
        return [(s, e) for s in range(n)]
    out: Parsed = []
    sctx = ctx if parts.scale == ctx.scale else dataclasses.replace(ctx, scale=parts.scale)
    extra = {"idx": obj.get("idx")}
    for s in range(n):
        try:
            if s >= len(scores) or s >= len(feedbacks):
                raise Reject(MISSING_FIELD, f"sample {s} lacks a score or a feedback")
            out.append((s, make_judgment(
                sctx, instruction=parts.instruction, response=parts.response, rubric=parts.rubric,
                reference_answer=parts.reference_answer, feedback=feedbacks[s], score=scores[s], sample_idx=s,
                response_model=str(obj.get("response_source") or "unknown"),
                category=optional_text(obj.get("category")), extra=dict(extra))))
        except Reject as e:
            out.append((s, e))
    return out


def prometheus_texts(obj: dict) -> list[str]:
    """Instruction, response and reference texts of every grading prompt in a record (for decontamination)."""
    texts = []
    for key in PROMETHEUS_PROMPT_KEYS:
        prompt = obj.get(key)
        if isinstance(prompt, str):
            try:
                p = parse_prometheus_prompt(prompt, Scale(), verify=False)
            except Reject:
                texts.append(prompt)  # keep the whole prompt rather than lose it
                continue
            texts += [t for t in (p.instruction, p.response, p.reference_answer) if t]
    return texts


# --- biggen -----------------------------------------------------------------------------------

def rubric_from(value) -> Rubric:
    """A rubric given as a BiGGen dict, a dict's repr (the vendored file), or a criteria string."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise Reject(MISSING_FIELD, "score_rubric is not a readable dict") from None
    if isinstance(value, dict):
        rubric = Rubric.from_dict(value)
        if not rubric.criteria.strip():
            raise Reject(MISSING_FIELD, "score_rubric.criteria")
        return rubric
    if isinstance(value, str) and value.strip():
        return Rubric(value)
    raise Reject(MISSING_FIELD, "score_rubric")


def parse_biggen(obj: dict, ctx: Context) -> Parsed:
    try:
        instruction = require_text(obj.get("input"), "input")
        j = make_judgment(
            ctx, instruction=instruction, response=obj.get("response"), rubric=rubric_from(obj.get("score_rubric")),
            feedback=obj.get("feedback"), score=obj.get("score"),
            reference_answer=optional_text(obj.get("reference_answer")),
            system_prompt=optional_text(obj.get("system_prompt")),
            response_model=str(obj.get("response_model_name") or "unknown"),
            judge_model=str(obj.get("eval_model_name") or ctx.judge_model),
            category=optional_text(obj.get("capability")),
            extra={"id": optional_text(obj.get("id")), "task": optional_text(obj.get("task"))})
        return [(0, j)]
    except Reject as e:
        return [(0, e)]


# --- fastchat ---------------------------------------------------------------------------------

# Criteria paraphrase FastChat's judge instructions (fastchat/llm_judge/data/judge_prompts.jsonl).
FASTCHAT_CRITERIA = {
    "single-v1": "Considering helpfulness, relevance, accuracy, depth, creativity, and level of detail, how good "
                 "is the AI assistant's response to the user question?",
    "single-math-v1": "Compared with the reference answer, how correct and helpful is the AI assistant's answer?",
    "single-v1-multi-turn": "Considering helpfulness, relevance, accuracy, depth, creativity, and level of detail, "
                            "how good is the AI assistant's answer to the second user question?",
    "single-math-v1-multi-turn": "Compared with the reference answer, how correct and helpful is the AI "
                                 "assistant's answer to the second user question?",
}
MULTI_TURN_PREAMBLE = ("Here is a previous dialogue between an assistant and an user. "
                       "Generate a human preferable response by the assistant.\n")
_FC_SINGLE_RE = re.compile(
    r"\[Question\]\n(?P<q>.*?)\n\n(?:\[The Start of Reference Answer\]\n(?P<ref>.*?)\n\[The End of Reference "
    r"Answer\]\n\n)?\[The Start of Assistant's Answer\]\n(?P<a>.*)\n\[The End of Assistant's Answer\]\s*$", re.S)
_FC_REF_BLOCK_RE = re.compile(r"<\|The Start of Reference Answer\|>(?P<ref>.*?)<\|The End of Reference Answer\|>",
                              re.S)
_FC_CONV_RE = re.compile(r"<\|The Start of Assistant A's Conversation with User\|>(?P<conv>.*)"
                         r"<\|The End of Assistant A's Conversation with User\|>\s*$", re.S)
_FC_TURN_RE = re.compile(r"\n\n### (User|Assistant A|Reference answer):\n")


def _turns(block: str, answer_tag: str) -> list[tuple[str, str]]:
    """`### User:` / `### <answer_tag>:` alternation -> [(question, answer), ...]."""
    parts = _FC_TURN_RE.split(block.rstrip("\n") + "\n")
    tags, texts = parts[1::2], [t.strip("\n") for t in parts[2::2]]
    if len(tags) % 2 or any(t != ("User" if n % 2 == 0 else answer_tag) for n, t in enumerate(tags)):
        raise Reject(UNPARSEABLE_PROMPT, f"unexpected turn structure {tags}")
    return list(zip(texts[0::2], texts[1::2]))


def parse_fastchat_prompt(user_prompt: str, prompt_name: str) -> tuple[str, str, str | None]:
    """(instruction, response, reference) from a FastChat single-answer judge prompt."""
    if "multi-turn" not in prompt_name:
        m = _FC_SINGLE_RE.search(user_prompt)
        if not m:
            raise Reject(UNPARSEABLE_PROMPT, f"not a {prompt_name} judge prompt")
        return m["q"], m["a"], m["ref"]
    conv = _FC_CONV_RE.search(user_prompt)
    if not conv:
        raise Reject(UNPARSEABLE_PROMPT, f"not a {prompt_name} judge prompt")
    turns = _turns("\n\n" + conv["conv"].strip("\n") + "\n\n", "Assistant A")
    if len(turns) < 2:
        raise Reject(UNPARSEABLE_PROMPT, "multi-turn prompt with fewer than two turns")
    ref = None
    rm = _FC_REF_BLOCK_RE.search(user_prompt)
    if rm:
        ref = _turns("\n\n" + rm["ref"].strip("\n") + "\n\n", "Reference answer")[-1][1]
    # The dialogue so far, worded as the Prometheus MT-Bench file words it.
    dialogue = "".join(f"User: {q}\n\nAssistant:{a}\n\n" for q, a in turns[:-1])
    return f"{MULTI_TURN_PREAMBLE}{dialogue}User: {turns[-1][0]}\n\nAssistant: ", turns[-1][1], ref


_FC_MULTI_MARK = "<|The Start of Assistant A's Conversation with User|>"
_FC_REF_MARKS = {True: "<|The Start of Reference Answer|>", False: "[The Start of Reference Answer]"}


def infer_prompt_name(user_prompt: str) -> str:
    """The FastChat single-answer prompt a judge prompt was rendered from, told by its section markers."""
    multi = _FC_MULTI_MARK in user_prompt
    math = _FC_REF_MARKS[multi] in user_prompt
    return ("single-math-v1" if math else "single-v1") + ("-multi-turn" if multi else "")


def _fastchat_judge(obj: dict, ctx: Context) -> tuple[str, str | None]:
    """(judge model, prompt name; None: infer it). A configured prompt name wins over the record's."""
    judge = obj.get("judge")
    if judge is None:  # FastChat-derived logs (arena-hard v1 style) do not say who judged, or with what
        return ctx.judge_model, ctx.prompt_name
    if not (isinstance(judge, list) and len(judge) == 2):
        raise Reject(MISSING_FIELD, "judge is not [model, prompt name]")
    return str(judge[0]), ctx.prompt_name or str(judge[1])


def parse_fastchat(obj: dict, ctx: Context) -> Parsed:
    if is_fastchat_pair(obj):
        return parse_fastchat_pair(obj, ctx)
    try:
        judge_model, name = _fastchat_judge(obj, ctx)
        if obj.get("score") == -1:  # FastChat's marker for "could not parse GPT-4's rating"
            raise Reject(UPSTREAM_PARSE_FAILURE, "score -1")
        user_prompt = require_text(obj.get("user_prompt"), "user_prompt")
        name = name or infer_prompt_name(user_prompt)
        criteria = FASTCHAT_CRITERIA.get(name)
        if criteria is None:
            raise Reject(UNPARSEABLE_PROMPT, f"unknown FastChat judge prompt {name!r}")
        instruction, response, ref = parse_fastchat_prompt(user_prompt, name)
        j = make_judgment(
            ctx, instruction=instruction, response=response, rubric=Rubric(criteria), reference_answer=ref,
            feedback=obj.get("judgment"), score=obj.get("score"),
            response_model=str(obj.get("model") or "unknown"), judge_model=judge_model,
            extra={"question_id": obj.get("question_id"), "turn": obj.get("turn"), "judge_prompt": name})
        return [(0, j)]
    except Reject as e:
        return [(0, e)]


# --- generic jsonl ----------------------------------------------------------------------------

def parse_generic(obj: dict, ctx: Context) -> Parsed:
    col = ctx.columns
    if "response_a" in col:  # a pairwise column mapping
        return parse_generic_pair(obj, ctx)

    def get(name):
        return obj.get(col[name]) if name in col else None

    try:
        if "rubric" in col and get("rubric") is not None:
            rubric = rubric_from(get("rubric"))
        elif "criteria" in col and get("criteria"):
            rubric = Rubric(str(get("criteria")))
        elif ctx.rubric is not None:
            rubric = ctx.rubric
        else:
            raise Reject(MISSING_FIELD, "rubric")
        j = make_judgment(
            ctx, instruction=require_text(get("instruction"), col["instruction"]), response=get("response"),
            rubric=rubric, feedback=get("feedback"), score=get("score"),
            reference_answer=optional_text(get("reference_answer")), system_prompt=optional_text(get("system_prompt")),
            response_model=str(get("response_model") or "unknown"), judge_model=str(get("judge_model") or "unknown"),
            category=optional_text(get("category")), sample_idx=int(get("sample_idx") or 0))
        if get("item_id") is not None:
            j.item_id = str(get("item_id"))
        return [(0, j)]
    except Reject as e:
        return [(0, e)]
    except (TypeError, ValueError) as e:
        return [(0, Reject(MISSING_FIELD, str(e)[:200]))]


# --- judgment store ---------------------------------------------------------------------------

def parse_store(obj: dict, ctx: Context) -> Parsed:
    """A judgment-store row (`data.store.Stored.to_dict()`) -> the teacher's judgment of its request.
    The teacher's answer was stored as it came back, so it is validated here like any other judgment."""
    try:
        if obj.get("mode") != "absolute":
            raise Reject(UNSUPPORTED_MODE, f"{obj.get('mode')} judgment: training records are absolute gradings")
        req, teacher, meta = obj["request"], obj.get("teacher") or {}, obj.get("meta") or {}
        scale = Scale(*req["scale"])
        # Each request carries its own scale; the source's only applies to rows that agree with it.
        sctx = ctx if scale == ctx.scale else dataclasses.replace(ctx, scale=scale)
        j = make_judgment(
            sctx, instruction=require_text(req.get("instruction"), "instruction"), response=req.get("response"),
            rubric=rubric_from(req.get("rubric")), feedback=teacher.get("feedback"), score=teacher.get("score"),
            reference_answer=optional_text(req.get("reference_answer")),
            response_model=str(meta.get("response_model") or "unknown"),
            judge_model=str(teacher.get("model") or ctx.judge_model), category=optional_text(meta.get("category")),
            extra={"store_seq": obj.get("seq"), "replica": obj.get("replica"), "escalated": obj.get("escalated"),
                   "local_score": (obj.get("local") or {}).get("score")})
        return [(0, j)]
    except Reject as e:
        return [(0, e)]
    except (KeyError, TypeError, ValueError) as e:  # a row without a request part or a usable scale
        return [(0, Reject(MISSING_FIELD, f"store row: {e!r}"[:200]))]


PARSERS = {"prometheus": parse_prometheus, "biggen": parse_biggen, "fastchat": parse_fastchat,
           "jsonl": parse_generic, "store": parse_store, "alpaca_eval": parse_alpaca_eval}
DEFAULT_SCALES = {"fastchat": Scale(1, 10)}
DEFAULT_JUDGES = {"prometheus": "gpt-4"}


def make_context(fmt: str, source: str, scale=None, judge_model=None, check_feedback=True, columns=None,
                 preset: str | None = None, prompt_name: str | None = None, swap: bool = False,
                 pair_inconsistent: str = "reject", ties: str = "reject", max_tokens: int | None = None,
                 tokenizer: str | None = None, rescale=None) -> Context:
    return Context(source=source, scale=Scale(*scale) if scale else DEFAULT_SCALES.get(fmt, Scale()),
                   judge_model=judge_model or DEFAULT_JUDGES.get(fmt, "unknown"), check_feedback=check_feedback,
                   columns=dict(columns or {}), rubric=rubric_preset(preset) if preset else None,
                   prompt_name=prompt_name, swap=swap, pair_inconsistent=pair_inconsistent, ties=ties,
                   max_tokens=max_tokens, tokenizer=tokenizer, rescale=Scale(*rescale) if rescale else None)
