"""Golden tests: the prompt text is the released Prometheus-2 text, byte for byte."""

from __future__ import annotations

import re

import pytest

from judgeforge.data.schema import Judgment
from judgeforge.judge import prompts as T


@pytest.fixture(scope="module")
def released(vendor) -> dict[str, str]:
    """The exact strings vendored from prometheus-eval's prompts.py."""
    md = (vendor / "prometheus-eval" / "prompt_templates.md").read_text()
    blocks = dict(re.findall(r"## (\w+)\n\n````text\n(.*?)\n````", md, re.S))
    assert len(blocks) == 7
    return blocks


def _abs(ref):
    text = T.absolute_prompt("{instruction}", "{response}", T.Rubric("RUBRIC"), ref)
    return text.replace("[RUBRIC]", "{rubric}")


def test_system_prompts(released):
    assert T.ABS_SYSTEM_PROMPT == released["ABS_SYSTEM_PROMPT"]
    assert T.REL_SYSTEM_PROMPT == released["REL_SYSTEM_PROMPT"]


def test_absolute_with_reference(released):
    assert _abs("{reference_answer}") == released["ABSOLUTE_PROMPT"]


def test_absolute_without_reference(released):
    assert _abs(None) == released["ABSOLUTE_PROMPT_WO_REF"]
    assert _abs("   ") == released["ABSOLUTE_PROMPT_WO_REF"]  # blank reference = no reference


def test_relative(released):
    args = ("{instruction}", "{response_A}", "{response_B}", "{rubric}")
    assert T.relative_prompt(*args, "{reference_answer}") == released["RELATIVE_PROMPT"]
    assert T.relative_prompt(*args) == released["RELATIVE_PROMPT_WO_REF"]


def test_rubric_template(released):
    r = T.Rubric("{criteria}", {k: f"{{score{k}_description}}" for k in range(1, 6)})
    assert r.render() == released["SCORE_RUBRIC_TEMPLATE"]


def test_custom_scale_says_so():
    text = T.absolute_prompt("q", "a", T.Rubric("c"), "ref", T.Scale(1, 10))
    assert "an integer between 1 and 10" in text
    assert "(an integer number between 1 and 10)" in text
    assert "###Reference Answer (Score 10):" in text
    assert "between 1 and 5" not in text


def test_rubric_dict_roundtrip():
    d = {"criteria": "c", "score1_description": "bad", "score5_description": "good"}
    assert T.Rubric.from_dict(d).to_dict() == d


def test_scale():
    s = T.Scale(1, 5)
    assert 3 in s and 0 not in s and 6 not in s and 3.0 not in s and True not in s
    assert T.Scale.parse("1-10") == T.Scale(1, 10) and T.Scale.parse([0, 4]).values == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        T.Scale(5, 1)


def test_messages_and_target():
    j = Judgment("Q?", "A.", T.rubric_preset("helpfulness"), "Good answer.", 4)
    msgs = j.messages()
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert msgs[0]["content"] == T.ABS_SYSTEM_PROMPT
    assert msgs[1]["content"].endswith("###Feedback: ")
    assert msgs[2]["content"] == "Good answer. [RESULT] 4"
    rec = j.to_sft()
    assert rec["template_version"] == T.TEMPLATE_VERSION
    assert Judgment.from_sft(rec).messages() == msgs


def test_unknown_preset():
    with pytest.raises(KeyError, match="helpfulness"):
        T.rubric_preset("nope")


def test_relative_records_fill_the_released_template(released):
    """A pairwise SFT record's prompt is the released RELATIVE_PROMPT(_WO_REF) with its fields filled in."""
    from judgeforge.data.pairwise import PairJudgment

    fields = {"instruction": "Q?", "response_A": "one", "response_B": "two", "rubric": "Helpful?"}
    for ref, key in ((None, "RELATIVE_PROMPT_WO_REF"), ("ref.", "RELATIVE_PROMPT")):
        j = PairJudgment("Q?", "one", "two", T.Rubric("Helpful?"), "B says more.", "B", reference_answer=ref)
        msgs = j.messages()
        assert msgs[0]["content"] == released["REL_SYSTEM_PROMPT"]
        assert msgs[1]["content"] == released[key].format(**fields, reference_answer=ref)
        assert msgs[2]["content"] == "B says more. [RESULT] B"
