"""Fitting the judge's messages to a tokenizer's chat template: the one owner of system turns.

Every prompt judgeforge builds opens with a system turn (the Prometheus-2 system prompt). Mistral's
chat template, which Prometheus-2 7B and 8x7B ship, refuses one ("Conversation roles must alternate
user/assistant/...") and other templates drop it silently. For such a template the system text is
folded into the first user turn as `system + "\\n" + user`: the layout prometheus-eval renders for
these models (FastChat's `mistral` conversation, `[INST] {system}\\n{user} [/INST]`), so the judge
is trained and served on the same text. Training, serving, Ray grading and length accounting all
render through `fit_messages`, so they agree on it.

No torch here: a tokenizer is any object with `apply_chat_template` and a `chat_template`.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

SEPARATOR = "\n"  # FastChat's mistral conversation: "[INST] " + system + "\n" + user + " [/INST]"
_PROBE = "judgeforge-system-probe"
_TAKES_SYSTEM: dict[tuple[int, str | None], bool] = {}  # (id(tokenizer), its template) -> verdict


def fold_system(messages: list[dict]) -> list[dict]:
    """`messages` without system turns: their text opens the first user turn."""
    system = [m["content"] for m in messages if m.get("role") == "system"]
    rest = [dict(m) for m in messages if m.get("role") != "system"]
    if not system:
        return rest
    first_user = next((m for m in rest if m.get("role") == "user"), None)
    if first_user is None:
        raise ValueError("a system turn needs a user turn to fold into: the messages have none")
    first_user["content"] = SEPARATOR.join([*system, first_user["content"]])
    return rest


def takes_system(tokenizer) -> bool:
    """Whether the tokenizer's chat template renders a system turn (neither raises nor drops it)."""
    key = (id(tokenizer), getattr(tokenizer, "chat_template", None))
    if key not in _TAKES_SYSTEM:
        probe = [{"role": "system", "content": _PROBE}, {"role": "user", "content": "u"}]
        try:
            text = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
            ok = _PROBE in text
        except Exception as e:  # jinja2's TemplateError from raise_exception, or any other refusal
            log.debug("chat template refuses a system turn: %s", e)
            ok = False
        if not ok:
            log.info("the chat template takes no system turn: the system prompt opens the user turn")
        _TAKES_SYSTEM[key] = ok
    return _TAKES_SYSTEM[key]


def fit_messages(tokenizer, messages: list[dict]) -> list[dict]:
    """`messages` as the tokenizer's chat template accepts them (system folded in where it must be)."""
    if tokenizer is None or takes_system(tokenizer) or not any(m.get("role") == "system" for m in messages):
        return messages
    return fold_system(messages)
