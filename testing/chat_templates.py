"""Chat templates of the released judges, for tiny stand-in models.

MISTRAL is Mistral-7B-Instruct-v0.2's template, which Prometheus-2 7B and 8x7B ship: it refuses a
system turn ("Conversation roles must alternate ..."), as the real judges' tokenizers do.
"""

from __future__ import annotations

from pathlib import Path

MISTRAL = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
    "{% endfor %}"
)


def with_mistral_template(model_dir: Path) -> Path:
    """Give the tokenizer saved in `model_dir` Mistral's chat template (in place); returns `model_dir`."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.chat_template = MISTRAL
    tok.save_pretrained(model_dir)
    return Path(model_dir)
