"""Sample policies, leak-free splits and the n-gram decontaminator (property-based where it pays)."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from judgeforge.data.decontam import NgramIndex, normalise
from judgeforge.data.schema import Judgment
from judgeforge.data.split import apply_policy, choose_test_models, split_records
from judgeforge.judge.prompts import Rubric

from .conftest import build, read_lines


def judgment(item: str, score: int, model: str = "m", instruction: str | None = None, s: int = 0) -> Judgment:
    return Judgment(instruction=instruction or f"q-{item}", response=f"a-{item}", rubric=Rubric("c"),
                    feedback=f"f{s}", score=score, response_model=model, item_id=item, sample_idx=s)


def test_policies():
    recs = [judgment("a", 3, s=0), judgment("a", 3, s=1), judgment("a", 5, s=2),  # majority 3, spread 2
            judgment("b", 2, s=0), judgment("b", 3, s=1), judgment("b", 4, s=2),  # no majority, spread 2
            judgment("c", 4, s=0), judgment("c", 5, s=1), judgment("c", 4, s=2)]  # majority 4, spread 1
    kept, dropped = apply_policy(recs, "all")
    assert kept == recs and dropped == []
    kept, dropped = apply_policy(recs, "majority")
    assert [(j.item_id, j.sample_idx) for j in kept] == [("a", 0), ("c", 0)] and len(dropped) == 7
    kept, dropped = apply_policy(recs, "consistent")
    assert [j.item_id for j in kept] == ["c", "c", "c"] and len(dropped) == 6
    kept, dropped = apply_policy(recs, "distribution")
    assert [(j.item_id, j.sample_idx) for j in kept] == [("a", 0), ("b", 0), ("c", 0)] and len(dropped) == 6
    assert [j.extra["score_samples"] for j in kept] == [[3, 3, 5], [2, 3, 4], [4, 5, 4]]
    assert [j.score for j in kept] == [3, 2, 4]  # each record keeps its own (first) sample's verdict


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(1, 5)), min_size=1, max_size=20), st.randoms())
def test_distribution_keeps_one_record_per_item_and_every_score(rows, rnd):
    """Whatever the order: one record an item, its samples' scores in sample order, the rest dropped."""
    recs = [judgment(item, score, s=i) for i, (item, score) in enumerate(rows)]
    rnd.shuffle(recs)
    kept, dropped = apply_policy(recs, "distribution")
    assert len(kept) + len(dropped) == len(recs) and len(kept) == len({j.item_id for j in recs})
    for j in kept:
        mine = sorted((r for r in recs if r.item_id == j.item_id), key=lambda r: r.sample_idx)
        assert j is mine[0] and j.extra["score_samples"] == [r.score for r in mine]


def test_choose_test_models_is_seeded():
    models = ["a", "b", "c", "d", "e"]
    assert choose_test_models(models, ["x"], 0.5, 1) == ["x"]
    assert choose_test_models(models, [], 0.0, 1) == []
    picked = choose_test_models(models, [], 0.4, 7)
    assert len(picked) == 2 and picked == choose_test_models(list(reversed(models)), [], 0.4, 7)
    assert choose_test_models(["only"], [], 0.5, 1) == []  # never every model: train would be empty


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 9)), min_size=1, max_size=60),
       st.floats(0, 0.9), st.integers(0, 5), st.floats(0, 0.9))
def test_split_partitions_and_never_leaks(pairs, model_frac, seed, instr_frac):
    recs = [judgment(f"{m}{q}", 3, model=m, instruction=f"question {q}") for m, q in pairs]
    held = choose_test_models([j.response_model for j in recs], [], model_frac, seed)
    train, test, dropped = split_records(recs, held, instr_frac, seed)
    assert sorted(map(id, train + test + dropped)) == sorted(map(id, recs))  # a partition
    assert not {j.instruction for j in train} & {j.instruction for j in dropped}  # held-out never in train
    if held:
        assert not {j.response_model for j in train} & {j.response_model for j in test}
        assert {j.response_model for j in test} <= set(held)
    else:  # instruction-only split: test = the held-out instructions, none of them in train
        assert not dropped and not {j.instruction for j in train} & {j.instruction for j in test}
        assert bool(test) <= (instr_frac > 0)
    again = split_records(list(reversed(recs)), held, instr_frac, seed)
    assert {id(j) for j in again[0]} == {id(j) for j in train}  # order-independent


words = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=8)


@settings(max_examples=80, deadline=None)
@given(st.lists(words, min_size=13, max_size=40), st.lists(words, max_size=20), st.lists(words, max_size=20),
       st.data())
def test_shared_13gram_is_always_caught(eval_words, before, after, data):
    start = data.draw(st.integers(0, len(eval_words) - 13))
    gram = eval_words[start:start + 13]
    # Case and punctuation changes do not hide the overlap.
    noisy = " ".join(before) + " " + ", ".join(w.upper() for w in gram) + "! " + " ".join(after)
    index = NgramIndex([" ".join(eval_words)], 13)
    assert index.contaminated(noisy)


@settings(max_examples=80, deadline=None)
@given(st.lists(words, min_size=1, max_size=40), st.lists(words, min_size=0, max_size=40))
def test_decontam_agrees_with_brute_force(eval_words, train_words):
    n = 4  # short n so that random texts do overlap sometimes
    index = NgramIndex([" ".join(eval_words)], n)
    grams = {tuple(eval_words[i:i + n]) for i in range(len(eval_words) - n + 1)}
    brute = any(tuple(train_words[i:i + n]) in grams for i in range(len(train_words) - n + 1))
    assert index.contaminated(" ".join(train_words)) == brute


def test_short_texts_never_match():
    index = NgramIndex(["one two three"], 13)
    assert not index.contaminated("one two three") and normalise("A, b!") == ["a", "b"]


def test_majority_policy_and_instruction_holdout_add_up(tmp_path):
    m = build("configs/data/default.yaml", tmp_path / "o", "sample_policy=majority", "split.test_models=[]",
              "split.test_model_fraction=0.25", "split.test_instruction_fraction=0.2", "split.seed=3")
    c = m["counts"]
    assert c["read"] == 960 == c["kept"] + c["rejected"]
    assert c["kept"] == c["train"] + c["test"] + c["dropped_by_policy"] + c["dropped_by_split"] + c["decontaminated"]
    assert c["dropped_by_policy"] > 0 and c["dropped_by_split"] > 0
    sp = m["splits"]
    assert sp["disjoint"] and sp["instructions_disjoint"] and len(sp["held_out_models"]) == 1
    assert sp["test"]["response_models"] == sp["held_out_models"]
    assert sp["held_out_instructions"] > 0 and sp["test"]["records_with_unseen_instruction"] > 0
    train = read_lines(tmp_path / "o" / "train.jsonl")
    assert len({r["item_id"] for r in train}) == len(train)  # majority: one record per item


def test_flag_mode_keeps_and_marks(tmp_path):
    m = build("configs/data/default.yaml", tmp_path / "o", "decontamination.mode=flag")
    c = m["counts"]
    assert c["decontaminated"] == 0 and m["decontamination"]["contaminated"] == 42
    train = read_lines(tmp_path / "o" / "train.jsonl")
    assert sum(r["extra"]["contaminated"] is True for r in train) == 42 and c["train"] == 678 + 42


def test_instruction_only_split_tests_the_held_out_instructions():
    recs = [judgment(f"{m}{q}", 3, model=m, instruction=f"question {q}") for m in "ab" for q in range(40)]
    train, test, dropped = split_records(recs, [], 0.25, 1)
    assert not dropped and len(train) + len(test) == 80 and 0 < len(test) < 80
    held = {j.instruction for j in test}
    assert not held & {j.instruction for j in train}
    assert all({j.response_model for j in test if j.instruction == q} == {"a", "b"} for q in held)
