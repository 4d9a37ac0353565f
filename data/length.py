"""The builder's length guard: a record longer than the build's `max_tokens` is rejected (`too_long`)
before it reaches training, where it would be truncated (a judgment that loses its score) or
dropped (train/run.py drops examples over `max_length`).

What is counted is the record's messages: the judge's system prompt, the user prompt (the template
with instruction, response, reference answer and rubric) and the target, the text training tokenizes.

- No `tokenizer`: tokens = ceil(characters / CHARS_PER_TOKEN), 4 characters a token. An estimate:
  4.5 on the vendored MT-Bench and FastChat records with SmolLM2's tokenizer, as few as 1.8 on code
  and maths, and fewer on non-Latin scripts. Name a tokenizer for an exact count.
- A `tokenizer`: the chat-templated messages are tokenized as training counts them, but only near
  the limit, since tokenizing a record costs ~3 ms against the builder's ~50 us a record:
  - at most `max_tokens` UTF-8 bytes with the template's (and SLACK): fits without tokenizing,
    since every token of a byte-level BPE or byte-fallback tokenizer covers at least one byte
    (SLACK covers SentencePiece's zero-byte prefix tokens);
  - over `max_tokens` * MAX_CHARS_PER_TOKEN characters: too long without tokenizing (no tokenizer's
    tokens average 32 characters of text; the issue's 10M-character response took seconds).
"""

from __future__ import annotations

from judgeforge.config import ConfigError
from judgeforge.data.pairwise import PairJudgment
from judgeforge.judge.prompts import ABS_SYSTEM_PROMPT, absolute_prompt, score_target
from judgeforge.judge.chat import fit_messages
from judgeforge.data.validate import TOO_LONG, Reject

CHARS_PER_TOKEN = 4
MAX_CHARS_PER_TOKEN = 32
SLACK = 16

_shells: dict[object, dict[tuple, int]] = {}  # measure -> memo


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))  # isascii() is O(1)


def _shell(j, has_ref: bool, measure) -> int:
    """Size of the system prompt and the user prompt without the item's texts. Memoised per rubric and
    scale (items share rubrics): rendering the prompt would cost ~17 us a record."""
    memo = _shells.setdefault(measure, {})
    key = (j.rubric.criteria, tuple(j.rubric.descriptions.items()), j.scale.lo, j.scale.hi, has_ref)
    size = memo.get(key)
    if size is None:
        if len(memo) > 100_000:  # free-text rubrics must not grow it forever
            memo.clear()
        text = ABS_SYSTEM_PROMPT + absolute_prompt("", "", j.rubric, "x" if has_ref else None, j.scale)
        size = memo[key] = measure(text) - has_ref
    return size


def item_size(j, measure=len) -> int:
    """The size of an absolute record's system and user prompts in `measure`'s unit (len: characters),
    without rendering them: the template's share is memoised and the texts slot into it unchanged."""
    has_ref = bool(j.reference_answer and j.reference_answer.strip())
    texts = (j.instruction, j.response, j.reference_answer) if has_ref else (j.instruction, j.response)
    return _shell(j, has_ref, measure) + sum(map(measure, texts))


def target_size(j, measure=len) -> int:
    """The size of assistant_target(feedback, score): `<feedback> [RESULT] <score>`."""
    return measure(j.feedback.strip()) + 1 + len(score_target(j.score))


def record_size(j, measure=len) -> int:
    """The size of the record's messages (system prompt, user prompt, target)."""
    if isinstance(j, PairJudgment):  # few: rendered
        return sum(measure(m["content"]) for m in j.messages())
    return item_size(j, measure) + target_size(j, measure)


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    from judgeforge.judge.weights import resolve_model

    try:
        return AutoTokenizer.from_pretrained(resolve_model(name))
    except Exception as e:  # noqa: BLE001 - whatever the failure, it is the config's: one clear line
        raise ConfigError(f"tokenizer {name!r} cannot be loaded ({type(e).__name__}: {str(e)[:300]})") from None


class LengthGuard:
    """`check(judgment)`: a too_long Reject, or None when the record fits in `max_tokens`."""

    def __init__(self, max_tokens: int, tokenizer: str | None = None):
        self.max_tokens = max_tokens
        self.name = tokenizer
        self.tok = load_tokenizer(tokenizer) if tokenizer else None
        self.template_bytes = self._template_bytes()
        self._item: tuple = (None,) * 6  # (rubric, scale, instruction, response, reference, size)

    def _template_bytes(self) -> int:
        """UTF-8 bytes the chat template adds around the three messages."""
        if self.tok is None or not self.tok.chat_template:
            return 0
        empty = [{"role": role, "content": ""} for role in ("system", "user", "assistant")]
        return len(self.tok.apply_chat_template(fit_messages(self.tok, empty), tokenize=False).encode("utf-8"))

    def _chars(self, j) -> int:
        """record_size(j), the item's share computed once for the samples of one item (they come one
        after the other and share their objects)."""
        if isinstance(j, PairJudgment):
            return record_size(j)
        last = self._item
        if not (j.rubric is last[0] and j.scale is last[1] and j.instruction is last[2] and j.response is last[3]
                and j.reference_answer is last[4]):
            last = self._item = (j.rubric, j.scale, j.instruction, j.response, j.reference_answer, item_size(j))
        return last[5] + target_size(j)

    def check(self, j) -> Reject | None:
        chars = self._chars(j)
        if self.tok is not None:
            return self._check_tokens(j, chars)
        tokens = -(-chars // CHARS_PER_TOKEN)
        if tokens <= self.max_tokens:
            return None
        return Reject(TOO_LONG, f"about {tokens} tokens ({chars} characters / {CHARS_PER_TOKEN}, no tokenizer "
                                f"named) > max_tokens {self.max_tokens}")

    def _check_tokens(self, j, chars: int) -> Reject | None:
        if chars > self.max_tokens * MAX_CHARS_PER_TOKEN:
            return Reject(TOO_LONG, f"{chars} characters > max_tokens {self.max_tokens} x {MAX_CHARS_PER_TOKEN}: "
                                    "too long for any tokenizer (not tokenized)")
        if record_size(j, _utf8_len) + self.template_bytes + SLACK <= self.max_tokens:
            return None
        tokens = self.count_tokens(j)
        if tokens <= self.max_tokens:
            return None
        return Reject(TOO_LONG, f"{tokens} tokens ({self.name}) > max_tokens {self.max_tokens}")

    def count_tokens(self, j) -> int:
        """Tokens of the chat-templated messages: what train/run.py measures against `max_length`."""
        messages = j.messages()
        if not self.tok.chat_template:
            return sum(len(self.tok(m["content"], add_special_tokens=False)["input_ids"]) for m in messages)
        text = self.tok.apply_chat_template(fit_messages(self.tok, messages), tokenize=False)
        return len(self.tok(text, add_special_tokens=False)["input_ids"])


_guards: dict[tuple, LengthGuard] = {}


def length_guard(max_tokens: int | None, tokenizer: str | None) -> LengthGuard | None:
    """The guard of a build (None: no limit), one per process: its tokenizer is loaded once (a parallel
    build's forked workers inherit the parent's)."""
    if max_tokens is None:
        return None
    guard = _guards.get((max_tokens, tokenizer))
    if guard is None:
        guard = _guards[(max_tokens, tokenizer)] = LengthGuard(max_tokens, tokenizer)
    return guard
