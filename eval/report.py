"""Predictions -> metrics.json -> report.md.

`compute_metrics` needs only the raw per-item predictions (predictions.jsonl)
and the set summaries, so a report can be recomputed without re-running a
judge. `render_markdown` reads only the metrics dict: every number in
report.md is a number in metrics.json. Pure logic (no torch/vLLM).

A prediction record is one graded unit of one judge on one set:
`judge, set, mode` ('absolute' | 'relative'), `item_id`, `unit` ('item', or 'a'/'b'
for one side of a pair, or 'pair' in relative mode), `category`, `response_model`,
`ref` (reference score), `ref_samples`, `human` ('a'/'b'/'tie' for pairs), `length`
(response tokens), `samples` (max N in draw order, each `judge.scores.Judged.to_record()`: the
written score|verdict or the reason none was written, `probs` the completed distribution, text) and,
with score-only on, `score_only_probs`. A unit left out of the sampled pass (its set's `sampled_items`)
has `samples: []` and `sampled: false`: the sampled variants leave it out (`for_variant`), score-only
counts it.

Bias-probe units (eval.probes, eval.judges) are recorded with `mode: 'probe'` and `probe`: 'swap' (a
relative pair with A and B exchanged, `unit: 'pair'`, verdicts and `human` in the swapped prompt's labels)
or 'injection' (an absolute item whose response ends with the injection line, `unit: 'item'`). They feed
only `metrics['probes']`; every other table is computed from the main units.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Iterable

from judgeforge.eval import length as LB
from judgeforge.eval import metrics as M
from judgeforge.eval import probes as P
from judgeforge.eval import whatif as W
from judgeforge.eval.cascade_inputs import from_records
from judgeforge.eval.config import WhatIfConfig
from judgeforge.eval.sets import PUBLISHED
from judgeforge.judge.prompts import Scale
from judgeforge.judge.scores import Judged, expected
from judgeforge.judge.voting import vote_scores, vote_verdicts

from judgeforge.eval.metrics_file import (EXPECTED, PROB_VARIANTS, SCORE_ONLY, Metrics,  # noqa: F401
                                           variant_names, vote_n)


def judged(rec: dict, k: int | None = None) -> list[Judged]:
    return [Judged.from_record(s) for s in rec["samples"][:k]]


def in_variant(rec: dict, variant: str) -> bool:
    """Whether a variant reads this unit: score-only reads every unit; the sampled variants only the
    units that had the sampled pass (eval.config.SetConfig.sampled_items), so a unit left out of it
    is neither scored nor counted as "no score"."""
    return variant == SCORE_ONLY or was_sampled(rec)


def was_sampled(rec: dict) -> bool:
    """False for a unit its set's `sampled_items` left out of the sampled pass (eval.judges.mark_unsampled)."""
    return rec.get("sampled") is not False


def for_variant(recs: Iterable[dict] | None, variant: str) -> list[dict]:
    """The units a variant is computed over (`in_variant`), in their order."""
    return [r for r in recs or [] if in_variant(r, variant)]


def unit_score(rec: dict, variant: str, scale: Scale) -> float | None:
    """The judge's score for one unit under a variant: the vote over the first k samples, the
    expectation of the samples' completed distributions averaged, or the score-only expectation."""
    if variant == EXPECTED:
        return vote_scores(judged(rec), scale).expected_score
    if variant == SCORE_ONLY:
        return expected(rec.get("score_only_probs"))
    return vote_scores(judged(rec, vote_n(variant)), scale).score


def unit_choice(rec: dict, variant: str) -> str | None:
    """Relative mode: voted 'a'/'b', 'tie' on an even split, None when nothing voted."""
    comp = vote_verdicts(judged(rec, vote_n(variant)))
    if comp.winner:
        return comp.winner.lower()
    return "tie" if (comp.reason or "").startswith("tie") else None


def sample_stats(recs: list[dict]) -> dict:
    """Over every drawn sample (max N per unit): how many got a completed distribution, how many
    carried a score the judge wrote itself, how often that written score matched the completed
    one's most probable value, and why the others wrote none (grouped before any ':' detail)."""
    reasons: dict[str, int] = defaultdict(int)
    n = written = completed = agree = both = truncated = 0
    for r in recs:
        for j in judged(r):
            n += 1
            truncated += j.finish_reason == "length"
            completed += j.probs is not None
            written += j.written_value is not None
            if j.written_value is not None and j.probs:
                both += 1
                agree += j.written_value == j.completed
            if j.written.reason:
                reasons[j.written.reason.split(":")[0]] += 1
    return {"n": n, "completed": completed, "completed_rate": completed / n if n else None,
            "written": written, "written_rate": written / n if n else None, "written_agrees": agree,
            "written_and_completed": both, "written_agreement": agree / both if both else None,
            "truncated": truncated, "reasons": dict(sorted(reasons.items()))}


def _group(preds: Iterable[dict]) -> dict:
    out: dict = defaultdict(lambda: defaultdict(list))
    for r in preds:
        out[(r["judge"], r["set"])][r["mode"]].append(r)
    return out


PROBE_MODE = "probe"


def _probe_results(probe_recs: list[dict], by: dict, judges: list[str], sets: list[dict],
                   variants: list[str], scale_of: dict, boot: dict) -> dict:
    """judge -> set -> {'swap': {variant: position_consistency}, 'injection': {variant: score_shift}}:
    each probe unit against the main unit of the same item, same judge (eval.probes)."""
    probed: dict = defaultdict(lambda: defaultdict(dict))
    for r in probe_recs:
        probed[(r["judge"], r["set"])][r["probe"]][r["item_id"]] = r
    votes = [v for v in variants if v not in PROB_VARIANTS]  # relative mode votes only
    out: dict = {}
    for judge in judges:
        for s in sets:
            kinds, modes = probed.get((judge, s["name"])), by.get((judge, s["name"]), {})
            if not kinds:
                continue
            res = {}
            if "swap" in kinds:
                main, ids = _matched(modes.get("relative"), kinds["swap"])
                res["swap"] = {v: P.position_consistency([unit_choice(main[i], v) for i in ids],
                                                         [unit_choice(kinds["swap"][i], v) for i in ids], **boot)
                               for v in votes}
            if "injection" in kinds:
                res["injection"] = {v: _injection_shift(modes.get("absolute"), kinds["injection"], v,
                                                        scale_of[s["name"]], boot) for v in variants}
            out.setdefault(judge, {})[s["name"]] = res
    return out


def _injection_shift(main_recs: list[dict] | None, probe_by_id: dict, v: str, scale: Scale, boot: dict) -> dict:
    """The injection probe under variant v, on the items v reads on both sides (a probe unit is in
    its item's sampled subset or out with it: eval.judges.mark_unsampled)."""
    probed = {i: r for i, r in probe_by_id.items() if in_variant(r, v)}
    main, ids = _matched(for_variant(main_recs, v), probed)
    return P.score_shift([unit_score(main[i], v, scale) for i in ids],
                         [unit_score(probed[i], v, scale) for i in ids], **boot)


def _matched(main_recs: list[dict] | None, probe_by_id: dict) -> tuple[dict, list[str]]:
    """The main units by item id, and the probed item ids that have one (sorted: seeded intervals)."""
    main = {r["item_id"]: r for r in main_recs or []}
    return main, sorted(i for i in probe_by_id if i in main)


def _absolute_set(recs: list[dict], variants: list[str], scale: Scale, set_info: dict, boot: dict) -> dict:
    """Variant -> metrics. With response lengths: `length_bias` (judge only), `vs_length` (Pearson minus
    length alone's) and `length` (eval.length.absolute_length: judge's and reference's r with length,
    their paired difference, Pearson with the reference controlling for length). Each variant over
    the units it reads (`for_variant`)."""
    out = {}
    for v in variants:
        rs = for_variant(recs, v)
        ref, cats, lengths = [r["ref"] for r in rs], [r.get("category") for r in rs], [r.get("length") for r in rs]
        scores = [unit_score(r, v, scale) for r in rs]
        rep = M.score_report(scores, ref, categories=cats, **boot)
        rep["confusion"] = M.confusion(scores, ref, scale.values)
        if all(n is not None for n in lengths):
            rep["length_bias"] = M.length_bias(scores, lengths)
            # the floor a judge must clear: ranking by length alone, paired on the same items
            rep["vs_length"] = M.paired_difference(lengths, scores, ref, **boot)
            rep["length"] = LB.absolute_length(scores, ref, lengths, **boot)  # beside the reference's own
        if set_info.get("external_ranking"):
            rep["ranking"] = M.ranking(scores, [r.get("response_model") or "?" for r in rs],
                                       set_info["external_ranking"])
        out[v] = rep
    return out


def _pairs(recs: list[dict]) -> tuple[list[str], dict[str, dict]]:
    by_item: dict[str, dict] = defaultdict(dict)
    for r in recs:
        by_item[r["item_id"]][r["unit"]] = r
    ids = [i for i in by_item if {"a", "b"} <= set(by_item[i])]
    return ids, by_item


def absolute_sides(recs: list[dict], variant: str, scale: Scale) -> tuple[list[str], list, list, list[str], list]:
    """Pair ids, A's and B's scores under `variant`, the human choices and the categories."""
    ids, by = _pairs(recs)
    sa = [unit_score(by[i]["a"], variant, scale) for i in ids]
    sb = [unit_score(by[i]["b"], variant, scale) for i in ids]
    return ids, sa, sb, [by[i]["a"]["human"] for i in ids], [by[i]["a"].get("category") for i in ids]


def absolute_choices(recs: list[dict], variant: str, scale: Scale) -> tuple[list, list[str], list]:
    _, sa, sb, human, cats = absolute_sides(recs, variant, scale)
    return M.outcomes(sa, sb), human, cats


def _pairwise_set(modes: dict, variants: list[str], scale: Scale, boot: dict, ties: dict | None = None) -> dict:
    """`ties` (the set's {margin, fraction}, eval.config.SetConfig.tie_margin): add 3-way agreement.
    With response lengths, each variant also gets `length` (eval.length.pairwise_length)."""
    out: dict = {}
    lengths = _pair_lengths(modes)
    if modes.get("absolute"):
        out["absolute"] = {}
        for v in variants:  # both sides of a pair are in a variant's units or out together
            ids, sa, sb, human, cats = absolute_sides(for_variant(modes["absolute"], v), v, scale)
            choices = M.outcomes(sa, sb)
            rep = M.pairwise_agreement(choices, human, **boot)
            rep["per_category"] = _pairwise_by_category(choices, human, cats, boot)
            if ties:
                rep["three_way"] = M.tie_margin_report(ids, sa, sb, human, **ties, **boot)
            _add_pair_length(rep, ids, choices, human, lengths, boot)
            out["absolute"][v] = rep
    if modes.get("relative"):
        recs = modes["relative"]
        ids, human = [r["item_id"] for r in recs], [r["human"] for r in recs]
        out["relative"] = {}
        for v in (x for x in variants if x not in PROB_VARIANTS):  # relative units: always sampled
            choices = [unit_choice(r, v) for r in recs]
            out["relative"][v] = M.pairwise_agreement(choices, human, **boot)
            _add_pair_length(out["relative"][v], ids, choices, human, lengths, boot)
    return out


def _pair_lengths(modes: dict) -> dict[str, tuple]:
    """Pair id -> (length of A, length of B), judge-independent (eval.judges.add_lengths): a relative
    unit's `length_a`/`length_b` where recorded, else its sides graded absolutely."""
    _, by = _pairs(modes.get("absolute") or [])
    out = {i: (s["a"].get("length"), s["b"].get("length")) for i, s in by.items() if {"a", "b"} <= set(s)}
    for r in modes.get("relative") or []:
        if r.get("length_a") is not None and r.get("length_b") is not None:
            out[r["item_id"]] = (r["length_a"], r["length_b"])
    return out


def shorter_preferred(recs: list[dict]) -> set[str]:
    """Ids of the pairs (absolute-mode units) where the reference prefers the shorter response: decisive,
    both lengths known and unequal (eval.length.pairwise_length's `shorter` pairs)."""
    _, by = _pairs(recs)
    out = set()
    for i, (la, lb) in _pair_lengths({"absolute": recs}).items():
        human = by[i]["a"]["human"]
        if la is not None and lb is not None and la != lb and human in ("a", "b") and (human == "a") == (la < lb):
            out.add(i)
    return out


def _add_pair_length(rep: dict, ids: list[str], choices: list, human: list[str], lengths: dict,
                     boot: dict) -> None:
    """rep['length']: accuracy where the reference prefers the shorter/longer response and the
    length-controlled accuracy; left out when no pair has both lengths (no tokenizer)."""
    la, lb = ([lengths.get(i, (None, None))[k] for i in ids] for k in (0, 1))
    if any(a is not None and b is not None for a, b in zip(la, lb)):
        rep["length"] = LB.pairwise_length(choices, human, la, lb, **boot)


def _pairwise_by_category(choices, human, cats, boot) -> dict:
    groups = defaultdict(list)
    for i, c in enumerate(cats):
        groups[c or "uncategorised"].append(i)
    return {c: M.pairwise_agreement([choices[i] for i in ii], [human[i] for i in ii], **boot)
            for c, ii in sorted(groups.items())}


def _reference_stats(recs: list[dict], boot: dict) -> dict:
    """Judge-independent facts about a set: the reference's own ceiling and the length baseline."""
    out = {"ceiling": M.self_agreement([r.get("ref_samples") or [] for r in recs], **boot)}
    lengths = [r.get("length") for r in recs]
    if all(n is not None for n in lengths):
        out["length_only"] = M.length_bias([r["ref"] for r in recs], lengths)
    return out


def _aligned(ra: list[dict], rb: list[dict]) -> tuple[list[dict], list[dict]]:
    """The units both judges graded, in the same order (a paired test needs the same items)."""
    kb = {(r["item_id"], r["unit"]): r for r in rb}
    both = [r for r in ra if (r["item_id"], r["unit"]) in kb]
    return both, [kb[(r["item_id"], r["unit"])] for r in both]


def paired_on_set(kind: str, ra: list[dict], rb: list[dict], variant: str, scale: Scale, boot: dict) -> dict:
    """B minus A on the absolute-mode units both judges graded, paired bootstrap over items: the Pearson
    difference (absolute sets) or the pairwise-accuracy difference (pairwise sets, both sides graded).
    Only the units `variant` reads in both (`for_variant`)."""
    ra, rb = _aligned(for_variant(ra, variant), for_variant(rb, variant))
    if kind == "absolute":
        return M.paired_difference([unit_score(r, variant, scale) for r in ra],
                                   [unit_score(r, variant, scale) for r in rb], [r["ref"] for r in ra], **boot)
    ca, human, _ = absolute_choices(ra, variant, scale)
    cb, _, _ = absolute_choices(rb, variant, scale)
    return M.paired_accuracy_difference(ca, cb, human, **boot)


def _comparisons(preds_by: dict, judges: list[str], baseline: str, sets: list[dict],
                 variants: list[str], scale_of: dict, boot: dict) -> dict:
    out: dict = {}
    for judge in (j for j in judges if j != baseline):
        res: dict = {}
        for s in sets:
            name = s["name"]
            a, b = preds_by.get((baseline, name), {}), preds_by.get((judge, name), {})
            if a.get("absolute") and b.get("absolute"):
                res[name] = {v: paired_on_set(s["kind"], a["absolute"], b["absolute"], v, scale_of[name], boot)
                             for v in variants}
        out[judge] = res
    return out


def _cascade(by: dict, sets: list[dict], judges: list[str], n_max: int, scale_of: dict, params: dict) -> dict:
    """Offline cascade what-if (judgeforge.eval.whatif) for every judge on every mimic set: the
    local vote over all N samples, its confidence, GPT-4's first cached judgment as the teacher: on
    the units with the sampled pass (the confidence is the samples')."""
    out: dict = {}
    for s in _sets_of({"sets": sets}, kind="absolute", role="mimic"):
        for judge in judges:
            recs = for_variant(by.get((judge, s["name"]), {}).get("absolute"), f"n{n_max}")
            inp = from_records(recs, scale_of[s["name"]], k=n_max)
            if len(inp):
                out.setdefault(judge, {})[s["name"]] = W.simulate(inp, **params)
    return out


def compute_metrics(preds: list[dict], *, sets: list[dict], judges: list[str], baseline: str,
                    n_values: list[int], n_boot: int, score_only: bool = False, level: float, seed: int,
                    meta: dict | None = None, skipped: list[dict] | None = None,
                    cascade: dict | None = None) -> dict:
    """All metrics of a run from its predictions (see the module doc for the record layout).

    `sets` are EvalSet summaries plus `scale` [lo, hi] and optional `external_ranking`;
    `cascade`: the what-if's parameters (eval.config.WhatIfConfig fields; default: its defaults).
    """
    cascade = WhatIfConfig(**(cascade or {})).model_dump()
    boot = {"n_boot": n_boot, "seed": seed, "level": level}
    variants = variant_names(n_values, score_only)
    by = _group(r for r in preds if r["mode"] != PROBE_MODE)
    # Units must line up across judges for paired tests: sort by (item_id, unit) once.
    for modes in by.values():
        for recs in modes.values():
            recs.sort(key=lambda r: (r["item_id"], r["unit"]))
    scale_of = {s["name"]: Scale.parse(s.get("scale") or [1, 5]) for s in sets}
    results: dict = {}
    samples: dict = {}
    reference: dict = {}
    for s in sets:
        name = s["name"]
        for judge in judges:
            modes = by.get((judge, name))
            if not modes:
                continue
            if s["kind"] == "absolute":
                res = _absolute_set(modes["absolute"], variants, scale_of[name], s, boot)
                reference.setdefault(name, _reference_stats(modes["absolute"], boot))
            else:
                res = _pairwise_set(modes, variants, scale_of[name], boot, s.get("ties"))
            results.setdefault(judge, {})[name] = res
            samples.setdefault(judge, {})[name] = sample_stats([r for recs in modes.values() for r in recs])
    return {
        "meta": {**(meta or {}), "judges": judges, "baseline": baseline, "n_values": n_values,
                 "variants": variants, "bootstrap": {"n_resamples": n_boot, "level": level, "seed": seed},
                 "cascade": cascade},
        "sets": sets, "skipped": skipped or [], "reference": reference, "results": results,
        "samples": samples, "sampled_units": sampled_units(by, sets),
        "comparisons": _comparisons(by, judges, baseline, sets, variants, scale_of, boot),
        "cascade": _cascade(by, sets, judges, max(n_values), scale_of, cascade),
        "published": published_figures(sets),
        "probes": _probe_results([r for r in preds if r["mode"] == PROBE_MODE], by, judges, sets, variants,
                                 scale_of, boot),
    }


def sampled_units(by: dict, sets: list[dict]) -> dict:
    """Set name -> {sampled, of}: its absolute-graded units (items; pairs for pairwise sets) and how
    many had the sampled pass (the N=k and E[score] rows' units; score-only reads all of them)."""
    ids: dict = defaultdict(dict)
    for (_, name), modes in by.items():
        for r in modes.get("absolute", []):
            ids[name][r["item_id"]] = ids[name].get(r["item_id"], False) or was_sampled(r)
    return {s["name"]: {"sampled": sum(ids[s["name"]].values()), "of": len(ids[s["name"]])}
            for s in sets if ids.get(s["name"])}


def published_figures(sets: list[dict]) -> dict:
    """Set name -> the papers' reference figures for its kind (eval.sets.PUBLISHED), so the report can
    show them beside ours and still take every number it prints from metrics.json."""
    return {s["name"]: PUBLISHED[s["set_kind"]] for s in sets
            if s.get("kind") == "pairwise" and s.get("set_kind") in PUBLISHED}


# ---------------------------------------------------------------- markdown (from metrics.json only)

def _f(x, nd: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


def _ci(e: dict | None, key: str = "value") -> str:
    if not e or e.get(key) is None:
        return "n/a"
    if e.get("lo") is None:
        return _f(e[key])
    return f"{_f(e[key])} [{_f(e['lo'])}, {_f(e['hi'])}]"


def _label(variant: str) -> str:
    return {EXPECTED: "E[score]", SCORE_ONLY: "score-only E[score]"}.get(variant) or f"N={vote_n(variant)}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return out + ["| " + " | ".join(r) + " |" for r in rows] + [""]


def primary_variant(m: dict) -> str:
    return Metrics(m).primary_variant


def _sets_of(m: dict, kind: str | None = None, role: str | None = None) -> list[dict]:
    return Metrics(m).sets(kind, role)


def _header(m: dict) -> list[str]:
    meta = m["meta"]
    lines = ["# judgeforge evaluation report", ""]
    for key in ("date", "command"):
        if meta.get(key):
            lines.append(f"- {key}: `{meta[key]}`")
    for j in meta.get("judge_info", []):
        lines.append(f"- judge `{j['name']}`: {j['description']}")
    lines.append(f"- bootstrap: {meta['bootstrap']['n_resamples']} resamples over items, "
                 f"{meta['bootstrap']['level']:.2f} percentile intervals, seed {meta['bootstrap']['seed']}")
    pv = primary_variant(m)
    how = ("the expected score straight after the prompt, on every item: the sampled pass ran on a subset"
           if pv == SCORE_ONLY else "majority vote")
    lines.append(f"- headline variant: {_label(pv)} ({how}; items without a score are counted, never scored)")
    lines += ["", "## Evaluation sets", ""]
    rows = [[s["name"], s["kind"], s.get("role") or "", s["reference"], str(s["n_items"]),
             str(s["n_available"]), s.get("rubric_preset") or "from the data", s["source"]] for s in m["sets"]]
    lines += _table(["set", "kind", "role", "reference", "items evaluated", "items available",
                     "rubric", "source"], rows)
    lines += _subset_lines(m)
    lines += _records_lines(m)
    for sk in m.get("skipped", []):
        lines.append(f"- skipped `{sk['name']}`: {sk['reason']}")
    if m.get("skipped"):
        lines.append("")
    return lines


def _subset_lines(m: dict) -> list[str]:
    """The sets whose sampled pass ran on a seeded subset (eval.config.SetConfig.sampled_items)."""
    part = {n: c for n, c in (m.get("sampled_units") or {}).items() if c["sampled"] < c["of"]}
    if not part:
        return []
    unit = {s["name"]: "pairs" if s["kind"] == "pairwise" else "items" for s in m["sets"]}
    return ["- sampled pass on K of N units per set (seeded subset; the N=k and E[score] rows are over the "
            "K, score-only E[score] over all N): " + "; ".join(
                f"`{n}` {c['sampled']} of {c['of']} {unit.get(n, 'units')}" for n, c in part.items()), ""]


def _records_lines(m: dict) -> list[str]:
    """The loaders' accounting (eval.sets.Records): read = kept + rejected per set, by reason, and the
    rejects metrics.json lists. Reports from before it was kept have none: no section."""
    counted = [s for s in m["sets"] if s.get("records")]
    if not counted:
        return []
    rows = [[s["name"], *(str(s["records"][k]) for k in ("read", "kept", "rejected", "filtered")),
             ", ".join(f"{r} {n}" for r, n in s["records"]["by_reason"].items()) or "none"] for s in counted]
    lines = ["### Records read", "", "Every record of a set's file is kept or rejected with a reason (the data "
             "builder's codes); kept records left out by the set's `response_models` are counted apart.", ""]
    lines += _table(["set", "read", "kept", "rejected", "left out", "reject reasons"], rows)
    for s in counted:
        for rej in s["records"]["rejects"]:
            detail = " ".join(rej["detail"].split())[:200]  # one line, whatever the file held
            lines.append(f"- `{s['name']}` {rej['place']}: {rej['reason']}: {detail}")
        hidden = s["records"]["rejected"] - len(s["records"]["rejects"])
        if hidden > 0:
            lines.append(f"- `{s['name']}`: {hidden} more rejects (counted above, not listed)")
    if any(s["records"]["rejects"] for s in counted):
        lines.append("")
    return lines


def _mimic_tables(m: dict) -> list[str]:
    """Table 12 layout: correlation with the proprietary judge on unseen responses."""
    lines = []
    for s in _sets_of(m, kind="absolute"):
        name = s["name"]
        lines += [f"## Correlation with {s['reference']} on `{name}` ({s.get('role')}; Table 12 layout)", ""]
        rows = []
        for judge, res in m["results"].items():
            for v, rep in res.get(name, {}).items():
                c, a = rep["correlation"], rep["agreement"]
                rows.append([judge, _label(v), _ci(c["pearson"]), _ci(c["spearman"]), _ci(c["kendall"]),
                             _f(a["exact"]), _f(a["within1"]),
                             f"{rep['parse_failures']}/{rep['n']} ({_f(rep['parse_failure_rate'])})"])
        ref = m["reference"].get(name, {})
        ceil = ref.get("ceiling", {})
        if ceil.get("n"):
            rows.append([f"{s['reference']} self-agreement (ceiling)", f"1 vs mean of {ceil['k'] - 1}",
                         _ci(ceil["pearson"]), "", "", "", "", ""])
        if ref.get("length_only", {}).get("r") is not None:
            rows.append(["response length alone", "tokens", _f(ref["length_only"]["r"]), "", "", "", "", ""])
        lines += _table(["judge", "variant", "Pearson [95% CI]", "Spearman [95% CI]", "Kendall [95% CI]",
                         "exact", "within-1", "no score"], rows)
    return lines


def _category_tables(m: dict) -> list[str]:
    """Table 3 layout: Pearson per capability/category, one row per judge and N."""
    lines = []
    for s in _sets_of(m, kind="absolute"):
        name = s["name"]
        cats = sorted({c for res in m["results"].values() for rep in res.get(name, {}).values()
                       for c in rep.get("per_category", {})})
        if not cats:
            continue
        lines += [f"## Pearson per category on `{name}` (Table 3 layout)", ""]
        rows = []
        for judge, res in m["results"].items():
            for v, rep in res.get(name, {}).items():
                pc = rep["per_category"]
                rows.append([judge, _label(v)] + [_f(pc[c]["correlation"]["pearson"]["value"]) if c in pc
                                                  else "" for c in cats] + [_f(rep["correlation"]["pearson"]["value"])])
        lines += _table(["judge", "variant"] + [f"{c} (n={_cat_n(m, name, c)})" for c in cats] + ["all"], rows)
    return lines


def _cat_n(m: dict, set_name: str, cat: str) -> int:
    for res in m["results"].values():
        for rep in res.get(set_name, {}).values():
            if cat in rep.get("per_category", {}):
                return rep["per_category"][cat]["n"]
    return 0


def _forgetting_table(m: dict) -> list[str]:
    """Table 13 layout: forgetting benchmarks, base vs each other judge with a paired CI."""
    fsets = _sets_of(m, role="forgetting")
    skipped = [sk for sk in m.get("skipped", []) if sk.get("role") == "forgetting"]
    if not fsets and not skipped:
        return []
    pv = primary_variant(m)
    head = ["judge"] + [s["name"] for s in fsets] + [sk["name"] for sk in skipped]
    rows = []
    for judge, res in m["results"].items():
        rows.append([judge] + [_ci(res.get(s["name"], {}).get(pv, {}).get("correlation", {}).get("pearson"))
                               for s in fsets] + ["skipped"] * len(skipped))
        diff = m["comparisons"].get(judge)
        if diff is not None:
            cells = []
            for s in fsets:
                d = diff.get(s["name"], {}).get(pv)
                cells.append("n/a" if not d or d["diff"] is None else
                             f"{_ci({'value': d['diff'], 'lo': d['lo'], 'hi': d['hi']})}"
                             + (" forgetting" if d["forgetting"] else " significant" if d["significant"] else ""))
            rows.append([f"Δ {judge} − {m['meta']['baseline']}"] + cells + [""] * len(skipped))
    return [f"## Forgetting (Table 13 layout): Pearson with the reference, {_label(pv)}", "",
            "A drop counts as forgetting only when its paired-bootstrap 95% interval lies below 0.", ""] + \
        _table(head, rows)


def _human_table(m: dict) -> list[str]:
    psets = _sets_of(m, kind="pairwise")
    if not psets:
        return []
    rows = []
    for s in psets:
        for judge, res in m["results"].items():
            for mode, by_v in res.get(s["name"], {}).items():
                for v, rep in by_v.items():
                    rows.append([s["name"], judge, mode, _label(v),
                                 _ci({"value": rep["accuracy"], "lo": rep["lo"], "hi": rep["hi"]}),
                                 f"{_f(rep['accuracy_decided'])} (n={rep['n_decided']})",
                                 str(rep["judge_ties"]), str(rep["parse_failures"]),
                                 str(rep["human_ties"]["n"]), str(rep["n_decisive"])])
    return ["## Agreement with human preferences (Prometheus-2 protocol)", "",
            "absolute: both responses graded, the higher score wins; a judge tie or an unparsed side is a "
            "miss in `accuracy`, left out of `decided`. Human ties are reported apart.", ""] + _table(
        ["set", "judge", "mode", "variant", "accuracy [95% CI]", "decided", "judge ties", "no score",
         "human ties", "decisive pairs"], rows) + _three_way_lines(m) + _published_lines(m)


def _three_way_lines(m: dict) -> list[str]:
    """3-way agreement (ties included) of the sets with a `tie_margin`, beside the decisive-pairs figure."""
    rows = []
    for s in _sets_of(m, kind="pairwise"):
        for judge, res in m["results"].items():
            for v, rep in res.get(s["name"], {}).get("absolute", {}).items():
                t = rep.get("three_way")
                if t:
                    rows.append([s["name"], judge, _label(v), _ci(t, "accuracy"),
                                 f"{_f(t['margin'])} ({'fitted' if t['fitted'] else 'fixed'})",
                                 _f(t["accuracy_margin0"]), _ci(t["decisive"], "accuracy"),
                                 str(t["n"]), str(t["n_ties"]), str(t["judge_ties"]), str(t["missing"]),
                                 str(t["n_calibration"])])
    if not rows:
        return []
    return ["", "### Three-way agreement, ties included (the published protocol)", "",
            "absolute: a pair is a judge tie when |E[A] − E[B]| < margin; a fitted margin maximises 3-way "
            "accuracy on a seeded calibration share of the pairs, and every figure here is on the other "
            "pairs only (`pairs`). `at margin 0`: the same pairs without the margin; `decisive`: accuracy on "
            "their human-decisive pairs; a side without a score is a miss (`no score`).", ""] + _table(
        ["set", "judge", "variant", "3-way accuracy [95% CI]", "margin", "at margin 0",
         "decisive [95% CI]", "pairs", "human ties", "judge ties", "no score", "calibration pairs"], rows)


def _published_lines(m: dict) -> list[str]:
    """The papers' figures (not rerun here; their own judges and protocol), one line per set."""
    pub = m.get("published") or {}
    if not pub:
        return []
    return ["", "published (paper figures, ties included, not rerun here): " + "; ".join(
        f"{name}: " + ", ".join(f"{j} {_f(v)}" for j, v in figs.items()) for name, figs in pub.items())]


def _ablation_table(m: dict) -> list[str]:
    variants = m["meta"]["variants"]
    rows = []
    for judge, res in m["results"].items():
        for s in m["sets"]:
            rep = res.get(s["name"])
            if not rep:
                continue
            if s["kind"] == "absolute":
                rows.append([judge, s["name"], "Pearson"] + [_ci(rep.get(v, {}).get("correlation", {}).get("pearson"))
                                                              for v in variants])
            elif "absolute" in rep:
                rows.append([judge, s["name"], "accuracy"] + [
                    _f(rep["absolute"][v]["accuracy"]) if v in rep["absolute"] else "n/a" for v in variants])
    return ["## Self-consistency ablation and expected scores", "",
            "N=k votes over the first k of the same samples (paired; a sample's vote is the score it wrote, "
            "else its completed distribution's most probable value); E[score] is the expectation of the "
            "samples' completed distributions (read after each sample's feedback with `[RESULT] `), "
            "averaged; score-only E[score] reads the distribution straight after the prompt plus "
            "`[RESULT] `, no feedback written.", ""] + _table(
        ["judge", "set", "metric"] + [_label(v) for v in variants], rows)


def _length_table(m: dict) -> list[str]:
    pv = primary_variant(m)
    rows = []
    for s in _sets_of(m, kind="absolute"):
        ref = m["reference"].get(s["name"], {}).get("length_only")
        if ref and ref.get("r") is not None:
            rows.append([s["name"], f"{s['reference']} (reference)", _f(ref["r"]), _f(ref["r2"]), _f(ref["p"]),
                         str(ref["n"]), ""])
        for judge, res in m["results"].items():
            for v in dict.fromkeys([pv, SCORE_ONLY]):  # score-only too: the variant the embedded judge is used with
                rep = res.get(s["name"], {}).get(v, {})
                lb, vs = rep.get("length_bias"), rep.get("vs_length") or {}
                if lb:
                    rows.append([s["name"], f"{judge} {_label(v)}", _f(lb["r"]), _f(lb["r2"]), _f(lb["p"]),
                                 str(lb["n"]), _ci(vs, "diff") if vs else ""])
    if not rows:
        return []
    return ["## Length bias: score vs response length in tokens", "",
            "Last column: the judge's Pearson with the reference minus that of response length alone, "
            "paired bootstrap over the same items (above 0: the judge beats the length baseline).", ""] + _table(
        ["set", "scores of", "r", "R²", "p", "n", "Δ Pearson vs length alone [paired 95% CI]"], rows)


def _length_variants(m: dict, by_v: dict) -> list[str]:
    """The variants the length tables show, as `_length_table`: the headline vote and score-only."""
    return [v for v in dict.fromkeys([primary_variant(m), SCORE_ONLY]) if "length" in by_v.get(v, {})]


def _absolute_length_rows(m: dict) -> list[list[str]]:
    rows = []
    for s in _sets_of(m, kind="absolute"):
        for judge, res in m["results"].items():
            by_v = res.get(s["name"], {})
            for v in _length_variants(m, by_v):
                lz = by_v[v]["length"]
                rows.append([s["name"], judge, _label(v)] + [_ci(lz[k]) for k in (
                    "judge", "reference", "diff", "pearson", "controlled")] + [str(lz["n"])])
    return rows


def _pairwise_length_rows(m: dict) -> list[list[str]]:
    share = lambda e: f"{_ci(e)} (n={e['n']})"
    rows = []
    for s in _sets_of(m, kind="pairwise"):
        for judge, res in m["results"].items():
            for mode, by_v in res.get(s["name"], {}).items():
                for v in _length_variants(m, by_v):
                    lz = by_v[v]["length"]
                    rows.append([s["name"], judge, mode, _label(v), share(lz["shorter"]), share(lz["longer"]),
                                 _ci(lz["gap"]), share(lz["equal"]), _ci(lz["controlled"]),
                                 _f(lz["controlled"]["slope"]), _ci(lz["accuracy"]),
                                 share(lz["judge_prefers_longer"]), share(lz["reference_prefers_longer"]),
                                 f"{lz['n']} ({lz['n_no_length']})"])
    return rows


def _length_reference_tables(m: dict) -> list[str]:
    """metrics `length` of every judge, set and variant (eval.length): length bias beside the
    reference's own, and agreement with length controlled (formulas: docs/evaluation.md)."""
    ab, pw = _absolute_length_rows(m), _pairwise_length_rows(m)
    if not ab and not pw:
        return []
    lines = ["## Length bias beside the reference, and agreement with length controlled", ""]
    if ab:
        lines += ["Absolute sets: Pearson r of the judge's and of the reference's scores with response length "
                  "on the same items, their paired difference (above 0: the judge leans on length more than "
                  "the reference does), and the judge's Pearson with the reference before and after "
                  "controlling for length (partial correlation: the residuals of each after a line on "
                  "length).", ""] + _table(
            ["set", "judge", "variant", "r(judge, length) [95% CI]", "r(reference, length) [95% CI]",
             "Δ judge − reference [paired 95% CI]", "Pearson with reference [95% CI]",
             "length-controlled Pearson [95% CI]", "n"], ab)
    if pw:
        lines += ["Pairwise sets, reference-decisive pairs with both lengths: accuracy where the reference "
                  "prefers the shorter / the longer response (a judge tie or no choice is a miss); "
                  "length-controlled: the accuracy a balanced logistic fit of agreement on tanh(Δlength / sd) "
                  "predicts at equal lengths (slope > 0: the judge agrees more when the reference prefers the "
                  "longer response).", ""] + _table(
            ["set", "judge", "mode", "variant", "ref. prefers shorter [95% CI]", "ref. prefers longer [95% CI]",
             "longer − shorter [95% CI]", "equal length", "length-controlled accuracy [95% CI]", "slope",
             "accuracy [95% CI]", "judge picks longer", "ref. prefers longer", "pairs (no length)"], pw)
    return lines


def _probe_rows(m: dict, probe: str, cells) -> list[list[str]]:
    return [[judge, set_name, _label(v)] + cells(r) for judge, by_set in (m.get("probes") or {}).items()
            for set_name, res in by_set.items() for v, r in res.get(probe, {}).items()]


def _position_cells(r: dict) -> list[str]:
    return [_ci({"value": r["consistent"], "lo": r["lo"], "hi": r["hi"]}),
            _ci({"value": r["first_position"], "lo": r["first_lo"], "hi": r["first_hi"]}),
            str(r["n_ties"]), str(r["n"]), str(r["n_missing"])]


def _injection_cells(r: dict) -> list[str]:
    ci = lambda k: _ci({"value": r[k], "lo": r[f"{k}_lo"], "hi": r[f"{k}_hi"]})
    return [_f(r["clean_mean"]), _f(r["probed_mean"]), ci("rise"), ci("moved"), ci("up"), _f(r["down"]),
            str(r["n"]), str(r["n_missing"])]


def _probe_tables(m: dict) -> list[str]:
    """The bias probes (eval.probes): length (pointing at its table), position, prompt injection."""
    cfg = m["meta"].get("probes") or {}
    length = (f"in \"Length bias\" above ({_label(primary_variant(m))} scores of each judge beside the "
              "reference's own)." if _length_table(m) else "not measured (no tokenizer for response lengths).")
    lines = ["## Bias probes", "", f"- length: score against response length in tokens, {length}", ""]
    pos = _probe_rows(m, "swap", _position_cells)
    lines += ["- position: each pair graded in relative mode is graded again with A and B exchanged. "
              "`consistent`: share of pairs whose verdicts name the same response in both orders (a tie in "
              "both counts); `first shown wins`: share of the decisive verdicts, both orders, that chose the "
              "response shown first (0.5 without position bias). Pairs without a verdict in either order "
              "are counted, not scored.", ""]
    lines += _table(["judge", "set", "variant", "consistent [95% CI]", "first shown wins [95% CI]",
                     "pairs with a tie", "pairs", "no verdict"], pos) if pos else [
        "  not run: no set graded in relative mode (set `modes: [absolute, relative]`; `probes.swap`).", ""]
    inj = _probe_rows(m, "injection", _injection_cells)
    text = json.dumps(cfg.get("injection_text", P.INJECTION))
    lines += [f"- prompt injection: each absolute item graded again with `{text}` appended to its response "
              "(`{top}`: the scale's top score). `rise`: mean injected minus clean score; `moved`/`up`/`down`: "
              "shares of items whose score, rounded to the scale, changed/rose/fell. Items without a score "
              "on either side are counted, not scored.", ""]
    lines += _table(["judge", "set", "variant", "clean mean", "injected mean", "rise [95% CI]",
                     "moved [95% CI]", "up [95% CI]", "down", "items", "no score"], inj) if inj else [
        "  not run (`probes.injection: true` turns it on).", ""]
    return lines


def _ranking_table(m: dict) -> list[str]:
    pv = primary_variant(m)
    rows = []
    for judge, res in m["results"].items():
        for s in _sets_of(m, kind="absolute"):
            rk = res.get(s["name"], {}).get(pv, {}).get("ranking")
            if rk:
                rows.append([judge, s["name"], str(rk["n_models"]), _f(rk["spearman"]), _f(rk["kendall"])])
    if not rows:
        return []
    return ["## Ranking of response models vs the external ranking", ""] + _table(
        ["judge", "set", "models", "Spearman", "Kendall"], rows)


def _comparison_table(m: dict) -> list[str]:
    rows = []
    for judge, by_set in m["comparisons"].items():
        for set_name, by_v in by_set.items():
            for v, d in by_v.items():
                rows.append([f"{judge} − {m['meta']['baseline']}", set_name, _label(v), d["method"],
                             _f(d["a"]), _f(d["b"]), _ci({"value": d["diff"], "lo": d["lo"], "hi": d["hi"]}),
                             _f(d["p"]), "yes" if d["significant"] else "no", str(d["n"])])
    if not rows:
        return []
    return ["## Paired differences between judges (paired bootstrap over items)", ""] + _table(
        ["comparison", "set", "variant", "metric", "baseline", "judge", "difference [95% CI]", "p",
         "significant", "n"], rows)


def _guarantee_cells(g: dict) -> list[str]:
    """The split simulation's columns; an infeasible set says so instead of failing."""
    split = f"{g['n_calibration']} / {g['n_test']}"
    if g["status"] in ("infeasible", "too_few_items"):
        why = (f"infeasible: best bound {_f(g['best_bound'])} > α" if g["status"] == "infeasible"
               else "too few items to split")
        return [split, str(g["min_n"]), str(g["n_splits"]), why, "n/a", "n/a", "n/a"]
    return [split, str(g["min_n"]), str(g["n_splits"]), _f(g["threshold_found_rate"]),
            f"{_f(g['holds_rate'])} (target {_f(g['target'])})", _f(g["holds_rate_when_answering"]),
            _f(g["coverage_mean"])]


def _agreement_rule(tolerance: int) -> str:
    return "the same score" if tolerance == 0 else f"the local vote within {tolerance} of the teacher's score"


def _cascade_set(m: dict, name: str, by_judge: dict) -> list[str]:
    p = m["meta"].get("cascade") or {}
    rows = [[j, str(r["n"]), str(r["n_no_score"]), _f(r["coverage_curve"]["overall"]),
             _f(r["coverage_curve"]["area"])] + _guarantee_cells(r["guarantee"]) for j, r in by_judge.items()]
    shares = next(iter(by_judge.values()))["blend"]["share"]
    blend = []
    for j, r in by_judge.items():
        blend.append([j, "Pearson with the reference"] + [_f(x) for x in r["blend"]["pearson"]])
        calls = r["blend"]["teacher_calls_per_1000"]
        blend.append([j, "teacher calls per 1,000 items"] + [_f(x, 1) for x in calls])
    return [f"## Trust or escalate: a cascade on `{name}` (offline what-if)", "",
            f"The local judge answers when its confidence (N={max(m['meta']['n_values'])} vote; its own "
            "probability of the voted score) clears a threshold and escalates the rest to the teacher, here "
            f"the first cached GPT-4 judgment; agreement = {_agreement_rule(p.get('tolerance', 0))}. The "
            "threshold is calibrated on a random share of the items (Clopper-Pearson bounds, fixed-sequence "
            f"testing; α = {_f(p.get('alpha'), 2)}, δ = {_f(p.get('delta'), 2)}) and checked on the rest, "
            "once per split. `guarantee held`: the share of splits whose answered test items agree at >= 1 − α "
            "(nothing answered counts as held; `held when answering` leaves those out). The guarantee is "
            "about the population: a small test split adds its own noise and can miss 1 − α by chance.",
            ""] + _table(
        ["judge", "items", "no local score", "agreement, all local", "area under coverage-agreement",
         "calibration / test items", "min n", "splits", "threshold found", "guarantee held",
         "held when answering", "mean test coverage"], rows) + [
        "Blended judge: the least confident share escalated (items without a local score always are). "
        "Pearson is with the mean of GPT-4's samples, which includes the teacher's own sample, so the "
        "all-escalated column is an optimistic ceiling.", ""] + _table(
        ["judge", "metric"] + [f"{100 * x:.0f}% escalated" for x in shares], blend)


def _cascade_tables(m: dict) -> list[str]:
    cas = m.get("cascade") or {}
    lines: list[str] = []
    for s in _sets_of(m, kind="absolute", role="mimic"):
        by_judge = {j: res[s["name"]] for j, res in cas.items() if s["name"] in res}
        if by_judge:
            lines += _cascade_set(m, s["name"], by_judge)
    return lines


def _samples_table(m: dict) -> list[str]:
    rows = []
    for judge, by_set in m.get("samples", {}).items():
        for set_name, st in by_set.items():
            why = "; ".join(f"{r} ({c})" for r, c in st["reasons"].items()) or "-"
            rows.append([judge, set_name, str(st["n"]), f"{st['completed']} ({_f(st['completed_rate'])})",
                         f"{st['written']} ({_f(st['written_rate'])})",
                         f"{st['written_agrees']}/{st['written_and_completed']} ({_f(st['written_agreement'])})",
                         str(st["truncated"]), why])
    if not rows:
        return []
    return ["## Judge samples: completed, written by the judge itself, and why the rest wrote none", "",
            "Every sample's score is completed by the engine (`[RESULT] ` after its feedback). `written`: "
            "the judge wrote a valid score itself; `written = completed`: of the samples with both, how "
            "many wrote the completed distribution's most probable value.", ""] + _table(
        ["judge", "set", "samples drawn", "completed", "written", "written = completed",
         "stopped at max_tokens", "why no score was written"], rows)


def _timing(m: dict) -> list[str]:
    t = m["meta"].get("timing")
    if not t:
        return []
    rows = [[j, str(v["prompts"]), str(v["samples"]), _f(v["seconds"], 1), _f(v["samples_per_s"], 2)]
            for j, v in t.items()]
    return ["## Run time", ""] + _table(["judge", "prompts", "samples", "seconds", "samples/s"], rows)


def render_markdown(m: dict) -> str:
    """report.md from the metrics dict alone."""
    parts = (_header(m) + _mimic_tables(m) + _cascade_tables(m) + _forgetting_table(m) + _human_table(m)
             + _category_tables(m)
             + _ablation_table(m) + _length_table(m) + _length_reference_tables(m) + _probe_tables(m)
             + _ranking_table(m)
             + _comparison_table(m)
             + _samples_table(m) + _timing(m))
    return "\n".join(parts).rstrip() + "\n"
