"""Score completion planning (judge.completion), pure: toy tokenizers and a toy language model whose
true score distribution is known, so "exact" can be checked exactly."""

from __future__ import annotations

import math
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judgeforge.judge.completion import plan_completion
from judgeforge.judge.scores import distribution

SPLIT_DIGITS = ["[RESULT]", " [", "RES", "ULT", "]", " "]  # SmolLM2-like: "]", " ", "3"; "10" = "1","0"
MERGED = ["[RESULT]", " [RESULT]", " 10", " 1", " 2", " 3", " 4", " 5", " 6", " 7", " 8", " 9", "10", " A", " B"]


class ToyTokenizer:
    """Greedy longest match over a few multi-character pieces; every other character is a token."""

    def __init__(self, pieces):
        self.vocab = sorted(set(pieces) | set(string.printable) | {"é"}, key=lambda p: (-len(p), p))
        self.ids = {p: i for i, p in enumerate(self.vocab)}

    def encode(self, text):
        out, i = [], 0
        while i < len(text):
            piece = next((p for p in self.vocab if text.startswith(p, i)), text[i])
            if piece not in self.ids:
                self.ids[piece] = len(self.vocab)
                self.vocab.append(piece)
            out.append(self.ids[piece])
            i += len(piece)
        return out

    def decode(self, ids):
        return "".join(self.vocab[i] for i in ids)


def toy_reads(tok, plan, prefix_text_len, q):
    """Next-token log-probabilities implied by a model that writes score string s (then stops) with
    probability q[s] after `[RESULT] `: P(token | node) by marginalising over the strings."""
    reads = []
    for node, toks in plan.reads():
        typed = tok.decode(node)
        consistent = {s: p for s, p in q.items() if (" " + s).startswith(typed) or s.startswith(typed)}
        total = sum(consistent.values())
        got = {}
        for t in toks:
            piece = typed + tok.decode([t])
            mass = sum(p for s, p in consistent.items() if (" " + s).startswith(piece) and len(piece) <= len(" " + s)
                       or s.startswith(piece))
            got[t] = math.log(mass / total) if mass > 0 else -math.inf
        reads.append(got)
    return reads


@pytest.mark.parametrize("pieces", [SPLIT_DIGITS, MERGED])
def test_one_to_ten_is_exact_and_11_is_not_read_as_1(pieces):
    tok = ToyTokenizer(pieces)
    choices = [str(v) for v in range(1, 11)]
    q = {"1": 0.1, "10": 0.3, "11": 0.05, "3": 0.25, "7": 0.3}  # "11" is out of scale
    plan = plan_completion(tok, [1, 2, 3], tok.encode("Fine. [RESULT] 7"), "Fine. [RESULT] 7", choices)
    lps = plan.combine(toy_reads(tok, plan, 0, q))
    for c in choices:
        want = q.get(c, 0.0)
        if pieces is SPLIT_DIGITS or c != "1":
            assert math.exp(lps[c]) == pytest.approx(want, abs=1e-9), c
    d = distribution(lps, choices)
    assert list(d) == choices and sum(d.values()) == pytest.approx(1.0)
    if pieces is SPLIT_DIGITS:  # "1" then "1" is 11, never a 1
        assert d["1"] == pytest.approx(0.1 / 0.95)


def test_prefix_keeps_generated_ids_and_cuts_before_the_last_marker():
    tok = ToyTokenizer(SPLIT_DIGITS)
    text = "Quote: [RESULT] 5 is not mine. Good. [RESULT] 2"
    gen = tok.encode(text)
    plan = plan_completion(tok, [7, 7], gen, text, ["1", "2", "3", "4", "5"])
    assert plan.wrote_marker and plan.prefix[:2] == [7, 7]
    assert plan.prefix[2:2 + plan.kept_generated] == gen[:plan.kept_generated]
    assert tok.decode(plan.prefix[2:]) == "Quote: [RESULT] 5 is not mine. Good. [RESULT] "
    assert {c: tok.decode(p) for c, p in plan.paths.items()} == {c: c for c in "12345"}


@pytest.mark.parametrize("text,cont", [("No marker here", "No marker here [RESULT] "),
                                       ("ends with space ", "ends with space [RESULT] "),
                                       ("", "[RESULT] ")])
def test_continuation_without_a_written_marker(text, cont):
    tok = ToyTokenizer(SPLIT_DIGITS)
    plan = plan_completion(tok, [], tok.encode(text), text, ["1", "2"])
    assert not plan.wrote_marker and tok.decode(plan.prefix) == cont


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=string.printable + "é[]", max_size=80), graded=st.text(max_size=40),
       pieces=st.sampled_from([SPLIT_DIGITS, MERGED]), relative=st.booleans())
def test_any_output_is_continued_from_the_judges_own_text(text, graded, pieces, relative):
    """Garbage, truncation, markers written twice: the prefix is always the prompt (which may quote
    `[RESULT] 5` in the graded response) + the judge's own text up to its last marker + the marker."""
    tok = ToyTokenizer(pieces)
    prompt = tok.encode(f"###Response to evaluate: {graded} [RESULT] 5 ###Feedback: ")
    choices = ["A", "B"] if relative else ["1", "2", "3", "4", "5"]
    plan = plan_completion(tok, prompt, tok.encode(text), text, choices)
    assert plan.prefix[:len(prompt)] == prompt
    judge_part = tok.decode(plan.prefix[len(prompt):])
    i = text.lower().rfind("[result]")
    keep = text[:i] if i >= 0 else text
    assert judge_part.startswith(keep) and judge_part[len(keep):].strip() == "[RESULT]"
    assert len({tuple(p) for p in plan.paths.values()}) == len(choices) and all(plan.paths.values())
