"""Counterfactual length pairs: the rule, the counts, and that length alone never predicts the target side."""

from hypothesis import given, settings, strategies as st

from judgeforge.data.counterfactual import length_counterfactuals, padded, truncated, units


def rec(i, response, score, scale=(1, 5)):
    return {"id": f"r{i}", "mode": "absolute", "instruction": f"q{i}", "response": response, "score": score,
            "scale": list(scale), "rubric": {"criteria": "Is it helpful?"}, "reference_answer": None}


def test_edits_split_paragraphs_else_sentences():
    assert units("One.\n\nTwo.\n\n\nThree.") == (["One.", "Two.", "Three."], "\n\n")
    assert units("One. Two! Three?") == (["One.", "Two!", "Three?"], " ")
    assert padded("One. Two. Three.") == "One. Two. Three. One. Two."
    assert truncated("One.\n\nTwo.\n\nThree.") == "One."
    assert padded("Just one sentence") is None and truncated("Just one sentence") is None


def test_pairs_follow_the_rule():
    recs = [rec(0, "A. B.", 5), rec(1, "C. D. E.", 2), rec(2, "single", 5), rec(3, "F. G.", 4, scale=(1, 10)),
            rec(4, "A. B.", 5)]  # a repeated response is one response
    pairs, c = length_counterfactuals(recs, (1, 5), k=10, seed=0)
    assert c == {"responses": 3, "pad": 2, "truncate": 1, "unsplittable": 1, "truncate_low": 1}
    by = {(p.origin, p.first): p for p in pairs}
    pad = by[("counterfactual_pad", "A. B.")]
    assert pad.second == "A. B. A." and pad.target == 1.0 and pad.ids == ["r0"]
    assert by[("counterfactual_truncate", "A. B.")].second == "A."          # scored 5 of 5: cut loses
    assert ("counterfactual_truncate", "C. D. E.") not in by                 # scored 2: nothing known


sentences = st.lists(st.text("abcdefgh ", min_size=1, max_size=12).map(lambda s: s.strip() + "."), min_size=1,
                     max_size=8)


@settings(deadline=None)
@given(st.lists(st.tuples(sentences, st.integers(1, 5)), min_size=1, max_size=25), st.integers(0, 30),
       st.integers(0, 3))
def test_counts_add_up_and_the_original_is_always_first(rows, k, seed):
    recs = [rec(i, " ".join(s), score) for i, (s, score) in enumerate(rows)]
    pairs, c = length_counterfactuals(recs, (1, 5), k=k, seed=seed, kinds=("pad", "truncate", "offtopic"))
    assert c["offtopic"] <= k and c["pad"] <= k and c["truncate"] <= k and len(pairs) == c["pad"] + c["truncate"] + c["offtopic"]
    assert c["unsplittable"] + c["pad"] <= c["responses"]
    for p in pairs:
        assert p.first in {r["response"] for r in recs}
        if p.origin in ("counterfactual_pad", "counterfactual_offtopic"):
            assert len(p.second) > len(p.first) and p.second.startswith(p.first)
        else:
            assert len(p.second) < len(p.first) and p.first.startswith(p.second)
    again, c2 = length_counterfactuals(list(reversed(recs)), (1, 5), k=k, seed=seed,
                                       kinds=("pad", "truncate", "offtopic"))
    assert c2 == c and sorted((p.origin, p.first) for p in again) == sorted((p.origin, p.first) for p in pairs)


def test_offtopic_appends_another_instructions_response_and_counts_only_the_kinds_asked():
    recs = [rec(0, "A. B.", 5), rec(1, "C. D. E. F.", 2), rec(2, "G. H.", 4)]
    recs.append({**rec(3, "I. J.", 3), "instruction": "q0"})  # q0's second response: never q0's donor
    pairs, c = length_counterfactuals(recs, (1, 5), k=10, seed=0, kinds=["offtopic"])
    assert c == {"responses": 4, "offtopic": 4, "unsplittable": 0, "truncate_low": 0}
    assert {p.origin for p in pairs} == {"counterfactual_offtopic"} and all(p.target == 1.0 for p in pairs)
    by_first = {p.first: p.second for p in pairs}
    own = {"A. B.": "q0", "I. J.": "q0", "C. D. E. F.": "q1", "G. H.": "q2"}
    for first, second in by_first.items():
        added = second.removeprefix(first + " ")
        donor = next(r for r in own if r.startswith(added))
        assert own[donor] != own[first]  # the added text answers another instruction
        assert added == " ".join(donor.split(" ")[:max(1, len(donor.split(" ")) // 2)])


def test_kinds_are_checked():
    import pytest
    for bad in ([], ["pad", "shuffle"]):
        with pytest.raises(ValueError, match="kinds"):
            length_counterfactuals([rec(0, "A. B.", 5)], (1, 5), k=1, seed=0, kinds=bad)
