"""System turns on chat templates without a system role (Mistral's, which Prometheus-2 ships): folded
into the first user turn, the same text for training, serving and length accounting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from judgeforge.judge.chat import SEPARATOR, fit_messages, fold_system, takes_system
from judgeforge.judge.prompts import ABS_SYSTEM_PROMPT, RUBRIC_PRESETS, absolute_messages

text = st.text(max_size=20)


@given(system=text, turns=st.lists(st.tuples(st.sampled_from(["user", "assistant"]), text), min_size=1)
       .filter(lambda t: t[0][0] == "user"))
def test_fold_keeps_every_turn_and_opens_the_first_user_turn_with_the_system_text(system, turns):
    msgs = [{"role": "system", "content": system}] + [{"role": r, "content": c} for r, c in turns]
    folded = fold_system(msgs)
    assert [m["role"] for m in folded] == [r for r, _ in turns]
    assert folded[0]["content"] == system + SEPARATOR + turns[0][1]
    assert [m["content"] for m in folded[1:]] == [c for _, c in turns[1:]]
    assert msgs[1]["content"] == turns[0][1]  # the caller's messages are not changed


def test_fold_without_a_user_turn_is_refused():
    with pytest.raises(ValueError, match="user turn"):
        fold_system([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}])


class _Template:
    def __init__(self, render):
        self.chat_template, self._render = repr(render), render

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        return self._render(messages)


def test_a_template_that_drops_the_system_turn_silently_gets_it_folded():
    drops = _Template(lambda ms: "".join(m["content"] for m in ms if m["role"] != "system"))
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert not takes_system(drops)
    assert fit_messages(drops, msgs) == [{"role": "user", "content": "S" + SEPARATOR + "U"}]
    keeps = _Template(lambda ms: "".join(m["content"] for m in ms))
    assert takes_system(keeps) and fit_messages(keeps, msgs) is msgs


def test_real_tokenizers_smollm2_keeps_its_system_turn_mistral_gets_prometheus_layout(default_model_dir,
                                                                                     tiny_mistral):
    from transformers import AutoTokenizer

    from judgeforge.judge.engines.base import render_prompt

    msgs = absolute_messages("What is 2+2?", "4", RUBRIC_PRESETS["helpfulness"])
    smol = AutoTokenizer.from_pretrained(default_model_dir)
    assert takes_system(smol) and fit_messages(smol, msgs) is msgs
    mistral = AutoTokenizer.from_pretrained(tiny_mistral)
    with pytest.raises(Exception, match="roles must alternate"):
        mistral.apply_chat_template(msgs, tokenize=False)  # what the released judges' templates do
    text = render_prompt(mistral, msgs)
    # prometheus-eval's layout for these judges (FastChat's mistral conversation)
    assert text == f"{mistral.bos_token}[INST] {ABS_SYSTEM_PROMPT}\n{msgs[1]['content']} [/INST]"
