"""Training data: data-build directories -> the replay mix -> prompt/completion examples.

Each build line is a `Judgment.to_sft()` dict whose `messages` are
[system, user, assistant]. TRL trains prompt-completion examples with the loss
on the completion only, so the messages are split there: prompt = [system,
user] (rendered by the chat template with the generation prompt, exactly as
serving renders it), completion = [assistant] (feedback + `[RESULT] n`).

Pure logic: no torch, no transformers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from judgeforge.config import ConfigError
from judgeforge.judge.prompts import TEMPLATE_VERSION, score_target
from judgeforge.io import read_jsonl, sha256_file


@dataclass
class Build:
    """One data-build directory, read."""

    path: Path
    train: list[dict]
    test: list[dict]
    manifest_sha256: str
    train_sha256: str


@dataclass
class Mix:
    """The records chosen for this run and where they came from."""

    train: list[dict]
    eval: list[dict]
    sources: list[dict] = field(default_factory=list)
    duplicates: int = 0
    validation: list[dict] = field(default_factory=list)
    """With `stopping.enabled`: the records held out of `train` for the stopping rule."""
    length: dict = field(default_factory=dict)
    """With `data.length_decorrelate`: per scale, r(score, length) before and after, and the records dropped."""


def load_build(path: str | Path) -> Build:
    p = Path(path)
    missing = [n for n in ("manifest.json", "train.jsonl") if not (p / n).is_file()]
    if missing:
        raise ConfigError(f"data source {p} is not a data build (missing {', '.join(missing)}); "
                          "make one with `judgeforge data build`")
    test = read_jsonl(p / "test.jsonl") if (p / "test.jsonl").is_file() else []
    return Build(p, read_jsonl(p / "train.jsonl"), test, sha256_file(p / "manifest.json"),
                 sha256_file(p / "train.jsonl"))


def draw(records: list[dict], fraction: float, limit: int | None, rng: random.Random) -> list[dict]:
    """A seeded subset of `fraction` of the records (at most `limit`), kept in file order."""
    k = round(len(records) * fraction) if fraction < 1.0 else len(records)
    if limit is not None:
        k = min(k, limit)
    if k >= len(records):
        return list(records)
    return [records[i] for i in sorted(rng.sample(range(len(records)), k))]


def window(records: list[dict], offset: int, limit: int | None, seed: int) -> list[dict]:
    """Positions [offset, offset + limit) of one seeded shuffle of `records`, kept in file order.

    The shuffle depends on the seed only, so consecutive windows never overlap: continual round
    k+1 (offset = what rounds 1..k took) sees new records only, and their union is a prefix."""
    order = list(range(len(records)))
    random.Random(f"{seed}:window").shuffle(order)
    end = len(order) if limit is None else offset + limit
    return [records[i] for i in sorted(order[offset:end])]


def mix_builds(builds: list[Build], fractions: list[float], limits: list[int | None], seed: int,
               eval_limit: int | None, offsets: list[int | None] | None = None) -> Mix:
    """The replay mix: each build's seeded draw, concatenated, duplicates (content hash) once."""
    mix = Mix(train=[], eval=[])
    seen: set[str] = set()
    offsets = offsets or [None] * len(builds)
    for i, (b, frac, lim, off) in enumerate(zip(builds, fractions, limits, offsets, strict=True)):
        picked = draw(b.train, frac, lim, random.Random(f"{seed}:{i}")) if off is None \
            else window(b.train, off, lim, seed)
        fresh = [r for r in picked if _key(r) not in seen]
        seen.update(_key(r) for r in fresh)
        mix.duplicates += len(picked) - len(fresh)
        mix.train += fresh
        mix.eval += b.test
        mix.sources.append({"path": str(b.path), "manifest_sha256": b.manifest_sha256,
                            "train_sha256": b.train_sha256, "available": len(b.train),
                            "fraction": frac, "limit": lim, "offset": off, "used": len(fresh)})
    if not mix.train:
        raise ConfigError("the data mix is empty: the sources' train.jsonl hold no records")
    mix.eval = draw(_unique(mix.eval), 1.0, eval_limit, random.Random(f"{seed}:eval"))
    return mix


def carve_validation(records: list[dict], n: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, validation): `n` items' absolute records, drawn (seeded) out of `records`, all of an item's
    records (every GPT-4 sample of one graded response, `item_id`) on one side, so the stopping rule
    never reads a response it trained on. Relative records and records without a score always train."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        if r.get("mode", "absolute") == "absolute" and isinstance(r.get("score"), (int, float)) and r.get("scale"):
            groups.setdefault(item_key(r), []).append(i)
    if n >= len(groups):
        raise ConfigError(f"stopping.validation={n} items, but the training mix holds {len(groups)} scored "
                          "items: lower it, or add data (the rest must still train)")
    chosen = set(random.Random(f"{seed}:validation").sample(sorted(groups), n))
    held = {i for k in chosen for i in groups[k]}
    return ([r for i, r in enumerate(records) if i not in held],
            [r for i, r in enumerate(records) if i in held])


def decorrelate_length(records: list[dict], limit: float) -> tuple[list[dict], list[dict], dict]:
    """(kept, dropped, summary): whole graded items dropped, greedily, until the Pearson correlation of
    the teacher's score with the response's length (characters) is at most `limit` on each scale.

    A judge trained on records whose scores follow length learns length as a shortcut; this takes the
    shortcut's reward out of the mix while keeping as many records as it can. Each step drops the item
    (all its samples, `item_key`) whose removal lowers r the most; ties go to the first in record order,
    so the choice is deterministic. Relative records and records without a score or scale are kept."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(records):
        if r.get("mode", "absolute") == "absolute" and isinstance(r.get("score"), (int, float)) \
                and r.get("scale") and isinstance(r.get("response"), str):
            groups.setdefault(tuple(r["scale"]), []).append(i)
    dropped_idx: set[int] = set()
    summary: dict = {}
    for scale, idx in groups.items():
        drop, before, after = _greedy_decorrelate([records[i] for i in idx], limit)
        dropped_idx.update(idx[j] for j in drop)
        summary[f"{scale[0]}-{scale[1]}"] = {"records": len(idx), "dropped": len(drop),
                                             "r_before": before, "r_after": after}
    kept = [r for i, r in enumerate(records) if i not in dropped_idx]
    return kept, [records[i] for i in sorted(dropped_idx)], summary


def _greedy_decorrelate(recs: list[dict], limit: float) -> tuple[list[int], float | None, float | None]:
    """(indices dropped, r before, r after) for one scale's records; r is over records, items drop whole."""
    items: dict[str, list[int]] = {}
    for j, r in enumerate(recs):
        items.setdefault(item_key(r), []).append(j)
    # per item: (count, sum x, sum y, sum xx, sum yy, sum xy), x = length, y = score
    stats = {k: _sums([(float(len(recs[j]["response"])), float(recs[j]["score"])) for j in js])
             for k, js in items.items()}
    total = [sum(s[t] for s in stats.values()) for t in range(6)]
    before = r = _pearson(total)
    while r is not None and r > limit and len(stats) > 2:
        best_key, best_r = None, r
        for k, s in stats.items():
            cand = _pearson([a - b for a, b in zip(total, s)])
            if cand is not None and cand < best_r:
                best_key, best_r = k, cand
        if best_key is None:
            break
        total = [a - b for a, b in zip(total, stats.pop(best_key))]
        r = best_r
    dropped = sorted(j for k, js in items.items() if k not in stats for j in js)
    return dropped, before, r


def _sums(xy: list[tuple[float, float]]) -> tuple[float, ...]:
    return (len(xy), sum(x for x, _ in xy), sum(y for _, y in xy), sum(x * x for x, _ in xy),
            sum(y * y for _, y in xy), sum(x * y for x, y in xy))


def _pearson(s) -> float | None:
    n, sx, sy, sxx, syy, sxy = s
    vx, vy = n * sxx - sx * sx, n * syy - sy * sy
    if n < 3 or vx <= 1e-12 * max(1.0, n * sxx) or vy <= 1e-12 * max(1.0, n * syy):
        return None
    return (n * sxy - sx * sy) / (vx * vy) ** 0.5


def item_key(rec: dict) -> str:
    """The graded item a record belongs to: every GPT-4 sample of one response shares it."""
    return rec.get("item_id") or _key(rec)


def _key(rec: dict) -> str:
    return rec.get("content_hash") or rec["id"]


def _unique(records: list[dict]) -> list[dict]:
    seen: set[str] = set()
    return [r for r in records if not (_key(r) in seen or seen.add(_key(r)))]


def to_prompt_completion(rec: dict, target: str = "feedback") -> dict:
    """A build line -> TRL conversational prompt-completion example (`id` kept for provenance).

    `target="score"` replaces the judgment by its verdict alone (`[RESULT] n`, from the record's
    `score`; a relative record's `[RESULT] A|B`): the score-only judge's training target.
    `target="distribution"` is that example too; its loss is train.soft's (`score_distribution`)."""
    version = rec.get("template_version")
    if version != TEMPLATE_VERSION:
        raise ConfigError(f"record {rec.get('id')} was built with template {version!r}, this "
                          f"judgeforge trains {TEMPLATE_VERSION!r}: rebuild the data")
    msgs = rec.get("messages") or []
    roles = [m.get("role") for m in msgs]
    if len(msgs) < 2 or roles[-1] != "assistant" or "assistant" in roles[:-1]:
        raise ConfigError(f"record {rec.get('id')}: messages must end with the one assistant "
                          f"turn (the judgment), got roles {roles}")
    completion = msgs[-1:]
    if target == "distribution":
        score_distribution(rec)  # fail here, at load, on a record that has none
        target = "score"  # the example carries the first sample's verdict; train.soft replaces its loss
    if target == "score" and rec.get("mode") == "relative":  # a pair's verdict alone: `[RESULT] A|B`
        completion = [{"role": "assistant", "content": score_target(rec["verdict"])}]
    elif target == "score":
        if rec.get("score") is None:
            raise ConfigError(f"record {rec.get('id')} has no score: data.target=score needs one")
        completion = [{"role": "assistant", "content": score_target(rec["score"])}]
    return {"id": rec["id"], "prompt": msgs[:-1], "completion": completion}


def score_distribution(rec: dict) -> tuple[tuple[int, int], list[float]]:
    """(scale, probability of each of its values lo..hi): the teacher's sample distribution of an
    absolute record, from `extra.score_samples` (a `sample_policy: distribution` build), else its one
    `score`. Every sample is a real teacher score on the record's scale; nothing is smoothed or filled in."""
    if rec.get("mode") == "relative":
        raise ConfigError(f"record {rec.get('id')} is a pairwise judgment: data.target=distribution "
                          "trains absolute records (a score distribution over a scale) only")
    samples = (rec.get("extra") or {}).get("score_samples") or (
        [rec["score"]] if rec.get("score") is not None else [])
    scale = rec.get("scale")
    if not samples or not (isinstance(scale, list | tuple) and len(scale) == 2):
        raise ConfigError(f"record {rec.get('id')} has no score samples or scale: data.target=distribution "
                          "needs them (build with sample_policy: distribution)")
    lo, hi = int(scale[0]), int(scale[1])
    bad = [v for v in samples if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi]
    if bad:
        raise ConfigError(f"record {rec.get('id')}: score samples {bad} are not integers in {lo}-{hi}")
    return (lo, hi), [samples.count(v) / len(samples) for v in range(lo, hi + 1)]
