"""Pairwise-to-pointwise distillation (train/ranking.py, train/distill.py): the pure math with its
properties, the torch version against it, the score read against the serving engine's, and real
TRL training runs of a tiny random Llama with the RankNet objective (slow)."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judgeforge.data.pairwise import build_pairs, cross_item_pairs
from judgeforge.train import ranking as R

finite = st.floats(-30, 30, allow_nan=False)


# --- pure math ------------------------------------------------------------------------------------

@settings(deadline=None)
@given(st.lists(finite, min_size=2, max_size=10))
def test_expected_score_lies_on_the_scale(lps):
    values = list(range(1, len(lps) + 1))
    e = float(R.expected_score(np.asarray(lps), values))
    assert 1 - 1e-9 <= e <= len(lps) + 1e-9
    assert R.distribution(np.asarray(lps)).sum() == pytest.approx(1.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 50), st.sampled_from([0.5, 0.75, 1.0])),
                max_size=40), st.integers(0, 5))
def test_length_balance_repeats_the_rarer_side_until_both_count_the_same(pairs, seed):
    lengths, targets = [(a, b) for a, b, _ in pairs], [t for _, _, t in pairs]
    order = R.length_balance(lengths, targets, seed)
    assert sorted(set(order)) == list(range(len(pairs))) and order[:len(pairs)] == list(range(len(pairs)))
    side = lambda i: ("tie" if targets[i] == 0.5 or lengths[i][0] == lengths[i][1]
                      else "shorter" if lengths[i][0] < lengths[i][1] else "longer")
    sides = [side(i) for i in order]
    if "shorter" in sides and "longer" in sides:  # both present: balanced exactly
        assert sides.count("shorter") == sides.count("longer")
    else:  # nothing to repeat from (or no need): every pair once
        assert len(order) == len(pairs)
    assert all(side(i) != "tie" for i in order[len(pairs):])  # ties and equal lengths never repeat
    assert order == R.length_balance(lengths, targets, seed)  # seeded


def test_length_balance_refuses_mismatched_inputs():
    with pytest.raises(ValueError):
        R.length_balance([(1, 2)], [], 0)



def test_expected_score_of_a_certain_value_is_that_value():
    assert R.expected_score(np.array([-50.0, 0.0, -50.0]), [1, 2, 3]) == pytest.approx(2.0)
    assert R.expected_score(np.zeros(5), [1, 2, 3, 4, 5]) == pytest.approx(3.0)


@settings(deadline=None)
@given(finite, st.floats(0, 1), st.floats(0.1, 5))
def test_ranknet_properties(d, t, sigma):
    loss = float(R.ranknet_loss(d, t, sigma))
    assert loss >= 0
    assert loss == pytest.approx(float(R.ranknet_loss(-d, 1 - t, sigma)), rel=1e-9, abs=1e-12)  # symmetric
    assert float(R.ranknet_loss(0.0, t, sigma)) == pytest.approx(math.log(2))
    # The expected-cross-entropy minimum sits where sigmoid(sigma * d) = t.
    if 0.01 < t < 0.99:
        best = math.log(t / (1 - t)) / sigma
        assert float(R.ranknet_loss(best, t, sigma)) <= loss + 1e-9


@settings(deadline=None)
@given(finite, finite, st.floats(0.1, 5))
def test_ranknet_falls_as_the_preferred_one_rises(d1, d2, sigma):
    lo, hi = sorted((d1, d2))
    assert float(R.ranknet_loss(hi, 1.0, sigma)) <= float(R.ranknet_loss(lo, 1.0, sigma)) + 1e-12


def test_pair_metrics():
    m = R.pair_metrics([3.0, 2.0, 4.0], [2.0, 2.5, 4.0], [1.0, 1.0, 0.5])
    assert m["pairs"] == 3 and m["accuracy"] == 0.5 and m["margin"] == pytest.approx(0.25)


def rel(instruction, a, b, verdict, rid=None, **kw):
    return {"id": rid or f"{instruction}|{a}|{b}|{verdict}|{random.random()}", "mode": "relative",
            "instruction": instruction, "response_a": a, "response_b": b, "verdict": verdict,
            "rubric": {"criteria": "Is it good?"}, "reference_answer": None, **kw}


def test_build_pairs_aggregates_orders_ties_and_repeats():
    recs = [rel("q1", "good", "bad", "A"), rel("q1", "bad", "good", "B"),       # swapped copy: one pair
            rel("q2", "x", "y", "A"), rel("q2", "x", "y", "B"),                 # a split tie
            rel("q3", "u", "v", "B"), rel("q3", "v", "u", "A"), rel("q3", "u", "v", "A"),  # 2 of 3 for v
            {"id": "abs", "mode": "absolute", "score": 3}]
    pairs, c = build_pairs(recs)
    assert c == {"records": 8, "absolute": 1, "scored": 0, "tie": 2, "over_max_pairs": 0, "paired": 5, "pairs": 2,
                 "score_pairs": 0, "score_ties": 0, "score_over_max_pairs": 0}
    by_q = {p.instruction: p for p in pairs}
    assert (by_q["q1"].first, by_q["q1"].second, by_q["q1"].target) == ("good", "bad", 1.0)
    assert (by_q["q3"].first, by_q["q3"].target, by_q["q3"].judgments) == ("v", pytest.approx(2 / 3), 3)
    half, c2 = build_pairs(recs, ties="half")
    assert c2["tie"] == 0 and c2["pairs"] == 3 and [p.target for p in half if p.instruction == "q2"] == [0.5]
    with pytest.raises(ValueError):
        build_pairs(recs, ties="keep")


def ab(instruction, response, score, scale=(1, 10), rid=None):
    return {"id": rid or f"{instruction}|{response}|{score}|{random.random()}", "mode": "absolute",
            "instruction": instruction, "response": response, "score": score, "scale": list(scale),
            "rubric": {"criteria": "Is it good?"}, "reference_answer": None}


def test_score_pairs_order_responses_by_gpt4_scores():
    recs = [ab("q1", "long", 4), ab("q1", "short", 9), ab("q1", "mid", 9),     # 3 responses: 3 pairs, 1 tie
            ab("q2", "a", 7), ab("q2", "a", 5), ab("q2", "b", 6),              # samples: P(a > b) = 1/2
            ab("q3", "alone", 3),                                                # no other response
            ab("q4", "x", 2, scale=(1, 5)), ab("q4", "y", 5, scale=(1, 5)),    # another scale: not read
            rel("q5", "good", "bad", "A")]
    pairs, c = build_pairs(recs, from_scores=(1, 10))
    assert c["records"] == c["absolute"] + c["scored"] + c["tie"] + c["over_max_pairs"] + c["paired"] == len(recs)
    assert (c["scored"], c["absolute"], c["paired"], c["score_pairs"], c["score_ties"]) == (6, 3, 1, 2, 2)
    scored = sorted((p.first, p.second, p.target) for p in pairs if p.origin == "scores")
    assert scored == [("mid", "long", 1.0), ("short", "long", 1.0)]
    assert all(p.judgments == 2 and len(p.ids) == 2 for p in pairs if p.origin == "scores")
    plain, c0 = build_pairs(recs)
    assert c0["score_pairs"] == 0 and c0["absolute"] == 9 and len(plain) == 1
    half, _ = build_pairs(recs, ties="half", from_scores=(1, 10))
    assert sorted(p.target for p in half if p.origin == "scores") == [0.5, 0.5, 1.0, 1.0]


def test_cross_item_pairs_order_two_items_by_gpt4_scores_each_with_its_own_item():
    recs = [ab("q1", "long answer", 2, (1, 5)), ab("q1", "long answer", 3, (1, 5)),   # one response, 2 samples
            ab("q2", "ok", 5, (1, 5)), ab("q3", "meh", 3, (1, 5)),
            ab("q4", "same item?", 3, (1, 5)), ab("q4", "another", 2, (1, 5)),          # one item, 2 responses
            ab("q5", "other scale", 9), rel("q6", "a", "b", "A")]                       # not read
    pairs, c = cross_item_pairs(recs, (1, 5), k=100, seed=0)
    assert c["responses"] == 5 and c["cross_item"] == len(pairs)
    got = {(p.first, p.second): p for p in pairs}
    # mean gaps of at least 1 (q1's response: 2.5): "ok" over all four, "meh" over "another"; q4's two never pair
    assert set(got) == {("ok", "long answer"), ("ok", "meh"), ("ok", "same item?"), ("ok", "another"),
                        ("meh", "another")}
    p = got[("ok", "long answer")]
    assert (p.target, p.judgments, p.origin, p.instruction) == (1.0, 3, "cross_item", "q2")
    assert p.context(False)[0] == "q2" and p.context(True)[0] == "q1" and p.second_item["instruction"] == "q1"
    assert c["cross_item_shorter"] == sum(len(q.first) < len(q.second) for q in pairs)
    assert cross_item_pairs(recs, (1, 5), k=100, seed=0)[0] == pairs           # seeded
    assert len(cross_item_pairs(recs, (1, 5), k=2, seed=1)[0]) == 2
    with pytest.raises(ValueError):
        cross_item_pairs(recs, (1, 5), k=1, seed=0, min_gap=0)


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 5), st.integers(0, 3)), min_size=0, max_size=30),
       st.integers(0, 20), st.integers(0, 5), st.sampled_from([0.5, 1.0, 2.0]))
def test_cross_item_pairs_are_across_items_decisive_and_at_most_k(rows, k, seed, gap):
    recs = [ab(f"q{q}", f"r{q}-{v}", score, (1, 5)) for q, score, v in rows]
    pairs, c = cross_item_pairs(recs, (1, 5), k, seed, gap)
    means = {}
    for r in recs:
        means.setdefault((r["instruction"], r["response"]), []).append(r["score"])
    assert c["cross_item"] == len(pairs) <= k and c["responses"] == len(means)
    for p in pairs:
        a, b = (sum(v) / len(v) for v in (means[(p.instruction, p.first)], means[(p.second_item["instruction"], p.second)]))
        assert p.instruction != p.second_item["instruction"] and a - b >= gap and p.target > 0.5
    assert len({(p.first, p.second) for p in pairs}) == len(pairs)


verdicts = st.lists(st.tuples(st.integers(0, 4), st.booleans(), st.sampled_from("AB")), min_size=1, max_size=30)


@settings(deadline=None)
@given(verdicts, st.randoms(use_true_random=False), st.sampled_from(["skip", "half"]),
       st.one_of(st.none(), st.integers(0, 5)))
def test_build_pairs_counts_add_up_and_ignore_record_order(rows, rnd, ties, max_pairs):
    recs = [rel(f"q{q}", *(("r1", "r2") if flip else ("r2", "r1")), v, rid=f"{i}")
            for i, (q, flip, v) in enumerate(rows)]
    pairs, c = build_pairs(recs, ties, max_pairs)
    assert c["records"] == c["absolute"] + c["scored"] + c["tie"] + c["over_max_pairs"] + c["paired"] == len(recs)
    assert c["pairs"] == len(pairs) <= (max_pairs if max_pairs is not None else len(pairs))
    assert all(p.target >= 0.5 and (ties == "half" or p.target > 0.5) for p in pairs)
    if max_pairs is None:
        shuffled = list(recs)
        rnd.shuffle(shuffled)
        again, _ = build_pairs(shuffled, ties)
        assert sorted((p.instruction, p.first, p.target) for p in again) == \
            sorted((p.instruction, p.first, p.target) for p in pairs)


@settings(deadline=None)
@given(st.integers(1, 20), st.integers(1, 7), st.integers(0, 3))
def test_batch_positions_cover_each_epoch_once(n, size, seed):
    seq = [p for i in range(n) for p in R.batch_positions(i, size, n, seed)]  # n batches = size epochs
    for e in range(size):
        assert sorted(seq[e * n:(e + 1) * n]) == list(range(n))
    assert R.batch_positions(3, size, n, seed) == R.batch_positions(3, size, n, seed)


# --- the torch version against the reference ------------------------------------------------------

@pytest.fixture(scope="module")
def tok(default_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_dir)


@pytest.mark.parametrize("scale", [(1, 5), (1, 10)])
def test_readout_matches_the_completion_plan(tok, scale):
    """The one-pass read equals judge.completion's own combination of the same next-token rows."""
    import torch

    from judgeforge.judge.completion import plan_completion
    from judgeforge.judge.engines.base import TokenizerView
    from judgeforge.train.readout import choice_logprobs, score_readout

    r = score_readout(tok, scale)
    values = [str(v) for v in range(scale[0], scale[1] + 1)]
    plan = plan_completion(TokenizerView(tok), [], [], "", values)
    assert tok.decode(list(r.base)) == "[RESULT] " and r.rows == (2 if scale[1] == 10 else 1)
    g = torch.Generator().manual_seed(0)
    rows = torch.log_softmax(torch.randn(3, r.rows, len(tok), generator=g) * 3, -1)
    got = choice_logprobs(rows, r)
    for n in range(3):
        reads = [{t: float(rows[n, len(node), t]) for t in toks} for node, toks in plan.reads()]
        want = plan.combine(reads)
        ref = R.choice_logprobs(rows[n].numpy(), r)
        assert got[n].tolist() == pytest.approx([want[v] for v in values], abs=1e-4)
        assert ref.tolist() == pytest.approx([want[v] for v in values], abs=1e-4)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.1, 3), st.floats(0, 1))
def test_torch_math_equals_the_reference(seed, sigma, t):
    import torch

    from judgeforge.train.distill import ranknet_loss
    from judgeforge.train.readout import choice_logprobs

    r = R.Readout(base=(7,), chain=(1,), values=(1, 2, 3), paths=((1,), (2,), (1, 4)), breakers=((3, 4), (), ()))
    g = torch.Generator().manual_seed(seed)
    rows = torch.log_softmax(torch.randn(2, r.rows, 6, generator=g, dtype=torch.float64) * 2, -1)
    lps = choice_logprobs(rows, r)
    for n in range(2):
        assert lps[n].tolist() == pytest.approx(R.choice_logprobs(rows[n].numpy(), r).tolist(), abs=1e-9)
    e = torch.softmax(lps, -1) @ torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    assert e.tolist() == pytest.approx(R.expected_score(lps.numpy(), [1, 2, 3]).tolist(), abs=1e-9)
    d = e[0] - e[1]
    assert float(ranknet_loss(d, torch.tensor(t, dtype=torch.float64), sigma)) == \
        pytest.approx(float(R.ranknet_loss(float(d), t, sigma)), abs=1e-9)


# --- real components: a tiny random Llama (tests/conftest.py) ------------------------------------

def distill_config(model, data, out, *overrides):
    from judgeforge.config import load_config
    from judgeforge.train.config import TrainConfig

    return load_config(TrainConfig, None, [
        f"model.name={model}", f"out={out}", f"data.sources=[{{path: {data}}}]", "data.max_length=1024",
        "data.eval_limit=0", "data.target=score", "precision=fp32", "optim.batch_size=1", "optim.lr=1e-2",
        "lora.r=8", "lora.alpha=16", "lora.dropout=0.0", "lora.target_modules=[q_proj,v_proj,lm_head]",
        "optim.gradient_checkpointing=false", "tracking.wandb=false", "distill.enabled=true",
        "distill.batch_pairs=6", *overrides])


@pytest.mark.slow
def test_length_balanced_feed_prefers_the_shorter_as_often_as_the_longer(tiny_llama, pair_build, tmp_path):
    from transformers import AutoTokenizer

    from judgeforge.io import read_jsonl
    from judgeforge.train.distill import prepare_pairs

    tok = AutoTokenizer.from_pretrained(tiny_llama)
    records = read_jsonl(pair_build / "train.jsonl")
    # That build prefers the shorter response in every pair: make its first pair's preferred one longer.
    first = next(r for r in records if r.get("mode") == "relative")
    same = [r for r in records if {r["response_a"], r["response_b"]} == {first["response_a"], first["response_b"]}]
    won = first["response_a"] if first["verdict"] == "A" else first["response_b"]
    for r in same:
        for side in ("response_a", "response_b"):
            if r[side] == won:
                r[side] = won + " More detail." * 40
    plain = prepare_pairs(distill_config(tiny_llama, pair_build, tmp_path / "a"), tok, records)
    feed = prepare_pairs(distill_config(tiny_llama, pair_build, tmp_path / "b", "distill.length_balance=true"),
                         tok, records)
    sides = [(len(a) > len(b)) - (len(a) < len(b)) for a, b in zip(feed.first_ids, feed.second_ids)]
    assert sides.count(1) == sides.count(-1) > 0  # the preferred side: longer as often as shorter
    assert feed.counts == {**plain.counts, "length_repeats": len(feed.pairs) - len(plain.pairs)}
    assert feed.pairs[:len(plain.pairs)] == plain.pairs  # every pair once, then the repeats


@pytest.mark.slow
def test_score_and_counterfactual_pairs_join_the_feed(tiny_llama, build_dir, tmp_path, helpers):
    """Absolute records alone feed the ranking loss: an item's two responses ordered by GPT-4's scores,
    and each response against its padded (and, scored high, its truncated) self."""
    from transformers import AutoTokenizer

    from judgeforge.io import read_jsonl
    from judgeforge.train.distill import prepare_pairs

    absolute = helpers.short_build(build_dir, tmp_path / "abs", 4, n_test=0)
    records = [{**r, "response": r["response"].rstrip(".") + ". It has a second sentence. And a third."}
               for r in read_jsonl(absolute / "train.jsonl")]  # responses that can be halved
    r0 = records[0]
    other = {**r0, "id": "other", "response": r0["response"] + " And an error.", "score": 1 if r0["score"] > 1 else 5}
    cfg = distill_config(tiny_llama, absolute, tmp_path / "run", "distill.score_pairs=true",
                         "distill.counterfactuals=2")
    feed = prepare_pairs(cfg, AutoTokenizer.from_pretrained(tiny_llama), records + [other])
    c = feed.counts
    assert (c["score_pairs"], c["scored"], c["counterfactual"]["pad"]) == (1, 2, 2)
    assert c["records"] == c["absolute"] + c["scored"] + c["tie"] + c["over_max_pairs"] + c["overlong"] + c["paired"]
    origins = [p.origin for p in feed.pairs]
    assert origins.count("scores") == 1 and origins.count("counterfactual_pad") == 2
    scored = feed.pairs[origins.index("scores")]
    assert scored.first == (r0 if r0["score"] > other["score"] else other)["response"] and scored.target == 1.0
    for p, a, b in zip(feed.pairs, feed.first_ids, feed.second_ids):
        if p.origin == "counterfactual_pad":
            assert len(a) < len(b)  # the preferred original is the shorter prompt


@pytest.mark.slow
def test_cross_item_pairs_join_the_feed_each_response_read_with_its_own_item(tiny_llama, build_dir, tmp_path, helpers):
    from transformers import AutoTokenizer

    from judgeforge.io import read_jsonl
    from judgeforge.train.distill import prepare_pairs

    records = read_jsonl(helpers.short_build(build_dir, tmp_path / "abs", 6, n_test=0) / "train.jsonl")
    records = [{**r, "score": 1 + 2 * (i % 3)} for i, r in enumerate(records)]  # scores 1, 3, 5: gaps of 2
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    feed = prepare_pairs(distill_config(tiny_llama, tmp_path / "abs", tmp_path / "run", "distill.cross_item=4"),
                         tok, records)
    assert feed.counts["cross_item"]["cross_item"] == len(feed.pairs) >= 2 and feed.counts["cross_item_overlong"] == 0
    for p, a, b in zip(feed.pairs, feed.first_ids, feed.second_ids):
        assert p.origin == "cross_item" and p.target > 0.5
        first, second = tok.decode(a), tok.decode(b)
        assert p.first in first and p.second in second and p.instruction.strip() in first
        assert p.second_item["instruction"].strip() in second and p.instruction.strip() not in second


@pytest.mark.slow
def test_one_pass_read_equals_the_serving_engine(tiny_llama, pair_build, tmp_path):
    """E[score] from the padded training forward = the transformers engine's score-only distribution."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from judgeforge.judge.prompts import Rubric, Scale
    from judgeforge.io import read_jsonl
    from judgeforge.judge.config import EngineConfig
    from judgeforge.judge.engines import SampleRequest, build_engine
    from judgeforge.judge.items import GradeItem
    from judgeforge.train.distill import prepare_pairs
    from judgeforge.train.readout import expected_scores

    tok = AutoTokenizer.from_pretrained(tiny_llama)
    cfg = distill_config(tiny_llama, pair_build, tmp_path / "run")
    feed = prepare_pairs(cfg, tok, read_jsonl(pair_build / "train.jsonl"))
    assert feed.counts == {"records": 16, "absolute": 0, "scored": 0, "tie": 4, "over_max_pairs": 0, "paired": 12,
                           "pairs": 6, "overlong": 0, "score_pairs": 0, "score_ties": 0, "score_over_max_pairs": 0,
                           "score_overlong": 0, "counterfactual_overlong": 0}
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()
    with torch.no_grad():
        batch = expected_scores(model, feed.first_ids + feed.second_ids, feed.readout, feed.pad_id)
        alone = expected_scores(model, feed.first_ids + feed.second_ids, feed.readout, feed.pad_id, unpadded=True)
    assert len({len(s) for s in feed.first_ids + feed.second_ids}) > 1  # the batch did pad
    assert torch.allclose(batch, alone, atol=1e-4)  # the training step's one-at-a-time read is the same read
    p = feed.pairs[0]
    it = GradeItem(p.instruction, p.first, Rubric.from_dict(p.rubric), p.reference_answer, Scale(1, 5))
    with build_engine(EngineConfig(kind="transformers", model=str(tiny_llama), dtype="float32",
                                   cpu_threads=1)) as eng:
        s = eng.generate([SampleRequest(messages=it.messages(), choices=it.choices, n=1, temperature=0.0,
                                        feedback=False)])[0][0]
    served = float(R.expected_score(np.array([s.choice_logprobs[c] for c in it.choices]), [1, 2, 3, 4, 5]))
    assert float(batch[0]) == pytest.approx(served, abs=1e-4)


@pytest.mark.slow
def test_distillation_orders_the_pairs_and_resumes(tiny_llama, pair_build, tmp_path):
    """A real `train()` with SFT + RankNet: the pairs' loss falls, more pairs are ordered as GPT-4
    preferred them and the margin grows; a run resumed from its middle checkpoint ends identical."""
    from safetensors.torch import load_file

    from judgeforge.train.run import train

    out = tmp_path / "run"
    # On a random model the SFT gradient (loss ~ln(vocab)) would drown the RankNet one: weight 10.
    cfg = distill_config(tiny_llama, pair_build, out, "optim.max_steps=6", "checkpoint.every=3",
                         "checkpoint.keep=null", "distill.weight=10")
    adapter = train(cfg)
    report = json.loads((out / "distill.json").read_text())
    before, after = report["before"], report["after"]
    assert report["counts"]["pairs"] == before["pairs"] == 6
    assert after["loss"] < before["loss"] - 0.02, report
    assert after["accuracy"] > before["accuracy"] and after["accuracy"] >= 5 / 6, report
    assert after["margin"] > before["margin"] + 0.05, report
    history = [e for e in json.loads((out / "checkpoints/checkpoint-6/trainer_state.json").read_text())
               ["log_history"] if "distill_loss" in e]
    assert len(history) == 6 and all(math.isfinite(e["distill_loss"]) for e in history)
    data = json.loads((out / "data.json").read_text())
    assert data["distill"]["pairs"] == 6 and data["train"] == 16
    weights = load_file(adapter / "adapter_model.safetensors")

    # Resume: as if killed after checkpoint-3 -- the rerun must draw the same pairs and end the same.
    import shutil

    shutil.rmtree(out / "checkpoints/checkpoint-6")
    shutil.rmtree(adapter)
    again = load_file(train(cfg) / "adapter_model.safetensors")
    assert weights.keys() == again.keys()
    assert all(np.allclose(weights[k].numpy(), again[k].numpy(), atol=1e-6) for k in weights)

    # Unmeasured (distill.measure=false): no distill.json, and the same training as the measured run.
    quiet = distill_config(tiny_llama, pair_build, tmp_path / "quiet", "optim.max_steps=6", "checkpoint.every=3",
                           "checkpoint.keep=null", "distill.weight=10", "distill.measure=false")
    unmeasured = load_file(train(quiet) / "adapter_model.safetensors")
    assert not (tmp_path / "quiet" / "distill.json").exists()
    assert json.loads((tmp_path / "quiet" / "data.json").read_text())["distill"]["pairs"] == 6
    assert all(np.allclose(weights[k].numpy(), unmeasured[k].numpy(), atol=1e-6) for k in weights)


def test_distill_sources_apart_from_the_sft_data(tiny_llama, pair_build, build_dir, tmp_path, helpers):
    """Pairs from `distill.sources` while SFT trains on an absolute build; the config is part of the
    run's identity (a resumed run may not change it)."""
    from judgeforge.config import ConfigError, save_resolved
    from judgeforge.train.run import _check_run_dir, make_trainer

    absolute = helpers.short_build(build_dir, tmp_path / "abs", 3, n_test=0)
    cfg = distill_config(tiny_llama, absolute, tmp_path / "run", "data.target=feedback",
                         f"distill.sources=[{pair_build}]", "distill.max_pairs=4", "distill.ties=half")
    trainer, mix, *_ = make_trainer(cfg)
    assert all(r.get("mode", "absolute") == "absolute" for r in mix.train) and len(trainer.train_dataset) == 3
    c = trainer.feed.counts  # 7 pairs (the tie kept at 0.5), 4 drawn
    assert (c["records"], c["tie"], c["pairs"]) == (16, 0, 4)
    assert c["records"] == c["absolute"] + c["scored"] + c["tie"] + c["over_max_pairs"] + c["overlong"] + c["paired"]
    save_resolved(cfg, tmp_path / "run")
    assert _check_run_dir(cfg, tmp_path / "run")
    with pytest.raises(ConfigError, match="distill"):
        _check_run_dir(cfg.model_copy(update={"distill": cfg.distill.model_copy(update={"weight": 3.0})}),
                       tmp_path / "run")


def test_distill_config_is_checked(repo):
    from judgeforge.config import ConfigError, load_config
    from judgeforge.train.config import TrainConfig

    shipped = load_config(TrainConfig, repo / "configs/train/distill.yaml")
    assert shipped.distill.enabled and shipped.distill.sources == ["runs/data/alpaca-eval"]
    mixed = load_config(TrainConfig, repo / "configs/train/mixed.yaml")
    assert not mixed.distill.enabled and [s.fraction for s in mixed.data.sources] == [1.0, 0.25]

    with pytest.raises((ConfigError, ValueError), match="scale"):
        load_config(TrainConfig, None, ["distill.scale=[5,1]"])
    with pytest.raises((ConfigError, ValueError)):
        load_config(TrainConfig, None, ["distill.ties=keep"])
