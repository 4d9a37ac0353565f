"""`judgeforge data build`: judgment logs -> validated, leak-free SFT records.

Pipeline: read (per source) -> parse + validate (reason code on every reject)
-> exact dedup -> sample policy -> split by response model (+ instruction)
-> n-gram decontamination of train -> atomic write. Every judgment read ends
in exactly one bucket, and the manifest proves the arithmetic:

    read = kept + rejected
    kept = train + test + dropped_by_policy + dropped_by_split + decontaminated

`run_build(cfg)` is the API for other stages and tests; `main(argv)` the CLI.
"""

from __future__ import annotations

import difflib
import json
import logging
import operator
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from judgeforge.config import ConfigError, builtin_config, command_parser, load_config, save_resolved
from judgeforge.data.config import BuildConfig, EvalSetConfig, SourceConfig
from judgeforge.data.decontam import NgramIndex
from judgeforge.data.ingest import (Pool, default_workers, gc_paused, process, read_span, reject_quote,
                                    spooled)
from judgeforge.data.length import length_guard
from judgeforge.data.parsers import PARSERS, make_context, prometheus_texts
from judgeforge.data.readers import Raw, open_source, open_store, resolve_path
from judgeforge.data.records import Ref, Spool, SpoolWriter, compact
from judgeforge.data.schema import Judgment
from judgeforge.data.split import models_of, apply_policy, choose_test_models, seeded_fraction, split_records
from judgeforge.judge.prompts import TEMPLATE_VERSION, Rubric
from judgeforge.data.validate import DUPLICATE, REASONS, Reject
from judgeforge.io import atomic_dir, atomic_write_json, check_out, dumps_record, sha256_file, sha256_text

BUCKETS = ("train", "test", "dropped_by_policy", "dropped_by_split", "decontaminated")
_order = operator.attrgetter("order")
log = logging.getLogger(__name__)


class EmptyBuildError(ConfigError):
    """A build that would write no records (allowed only with `allow_empty`): almost always the wrong
    reader, column mapping or split, so it fails loudly instead of writing an empty train.jsonl."""


@dataclass(slots=True)
class Kept:
    """A valid judgment, where its encoded output line (but for rubric and extra) is spooled, its content
    hash and its input position."""

    j: Judgment
    ref: Ref
    chash: str
    order: tuple


@dataclass
class SourceCounts:
    read: int = 0
    kept: int = 0
    rejected: int = 0
    by_reason: Counter = field(default_factory=Counter)
    buckets: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict:
        d = {"read": self.read, "kept": self.kept, "rejected": self.rejected,
             "by_reason": {r: self.by_reason[r] for r in REASONS if self.by_reason[r]}}
        d.update({b: self.buckets[b] for b in BUCKETS})
        return d


def sha256_path(path: Path | None) -> str | None:
    """sha256 of a file; of a directory, over its files' relative paths and hashes; None for hub ids."""
    if path is None:
        return None
    if path.is_file():
        return sha256_file(path)
    listing = "".join(f"{p.relative_to(path).as_posix()}\0{sha256_file(p)}\n"
                      for p in sorted(path.rglob("*")) if p.is_file())
    return sha256_text(listing)


def store_marks(since: str | None) -> dict[str, int]:
    """Store id -> the last seq a previous build read from that store (from its manifest's inputs)."""
    if since is None:
        return {}
    path = resolve_path(since)
    if path is not None and path.is_dir():
        path = path / "manifest.json"
    if path is None or not path.is_file():
        raise ConfigError(f"since: no build manifest at {since}")
    marks: dict[str, int] = {}
    try:
        inputs = json.loads(path.read_text(encoding="utf-8"))["inputs"]
        for store in (inp["store"] for inp in inputs if inp.get("store")):
            marks[store["id"]] = max(marks.get(store["id"], 0), int(store["max_seq"]))
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ConfigError(f"since: {path} is not a build manifest ({type(e).__name__}: {e})") from None
    if not marks:
        log.warning("since: %s records no judgment-store input; every store is read in full", path)
    return marks


def open_input(src: SourceConfig, marks: dict[str, int]) -> tuple[Iterator[Raw], Path | None, dict]:
    """(records, local file or None, what the manifest says of the input besides name, format, path)."""
    if src.format == "store":
        records, store = open_store(src.path, marks)
        # A store keeps growing: what was read is pinned by its id and the seq range (rows that hold a
        # teacher judgment never change), not by a hash of the file.
        return records, None, {"sha256": None, "store": store}
    records, local = open_source(src.path, src.hf_split, src.hf_config)
    return records, local, {"sha256": sha256_path(local)}


def read_sources(cfg: BuildConfig, spool: Spool) -> tuple[list[Kept], list[dict], dict[str, SourceCounts], list[dict]]:
    """Parse and validate every source, encoding kept lines into `spool`: (kept, rejects, counts per
    source, input descriptions)."""
    # Here, once, before any reading: an unloadable tokenizer fails the build at once, and the forked
    # workers of a parallel build inherit the loaded one.
    length_guard(cfg.max_tokens, cfg.tokenizer)
    pool = Pool(cfg.workers or default_workers())
    try:
        with gc_paused():
            return _read_sources(cfg, pool, spool)
    finally:
        pool.close()


def _read_sources(cfg: BuildConfig, pool: Pool, spool: Spool):
    from judgeforge.progress import progress

    kept: list[Kept] = []
    rejects: list[dict] = []
    counts: dict[str, SourceCounts] = {}
    inputs: list[dict] = []
    seen: dict[str, str] = {}
    marks = store_marks(cfg.since)
    for si, src in enumerate(cfg.sources):
        name = src.display_name()
        if name in counts:
            raise ConfigError(f"two sources are named {name!r}; give them distinct `name`s")
        c = counts[name] = SourceCounts()
        ctx = make_context(src.format, name, src.scale, src.judge_model, cfg.check_feedback_score, src.columns,
                           src.rubric_preset, src.prompt_name, src.swap, src.pair_inconsistent,
                           src.ties, cfg.max_tokens, cfg.tokenizer, src.rescale)
        parse = PARSERS[src.format]
        records, local, described = open_input(src, marks)
        inputs.append({"name": name, "format": src.format, "path": src.path, **described,
                       "scale": [ctx.scale.lo, ctx.scale.hi],
                       **({"rescaled_to": [ctx.rescale.lo, ctx.rescale.hi]} if ctx.rescale else {})})
        writer = None
        if pool.usable_for(local):
            stream = pool.jsonl(local, src.format, ctx, spool)
        else:
            writer = SpoolWriter(spool.new_file())
            stream = ((raw, spooled(process(raw, parse, ctx), writer)) for raw in records)
        for raw, entries in progress(stream, desc=f"read {name}", unit=" rec", enabled=cfg.progress,
                                     mininterval=0.5, leave=False):
            for sample_idx, res, chash, ref in entries:
                c.read += 1
                if chash is not None and cfg.dedup and chash in seen:
                    res = Reject(DUPLICATE, f"same content as {seen[chash]}")
                if isinstance(res, Reject):
                    c.rejected += 1
                    c.by_reason[res.reason] += 1
                    original = raw.text if raw.span is None else read_span(local, raw.span)
                    quote = reject_quote(original, res.detail)  # bounded: a 10 MB record is quoted by its head
                    rejects.append({"reason": res.reason, "detail": quote.pop("detail"), "source": name,
                                    "line": raw.line, "sample_idx": sample_idx, **quote})
                    continue
                seen[chash] = f"{name} line {raw.line} sample {sample_idx}"
                c.kept += 1
                kept.append(Kept(res, ref, chash, (si, raw.line, sample_idx)))
        if writer is not None:
            writer.close()
        inputs[-1]["records_read"] = c.read
    return kept, rejects, counts, inputs


def eval_texts(sets: list[EvalSetConfig]) -> tuple[list[str], list[dict]]:
    """The texts of every evaluation set (for the n-gram index) and their descriptions."""
    texts, described = [], []
    for es in sets:
        records, local = open_source(es.path)
        n_before, unreadable = len(texts), 0
        for raw in records:
            if raw.obj is None:
                unreadable += 1
            elif es.format == "prometheus":
                texts += prometheus_texts(raw.obj)
            else:
                texts += [raw.obj[f] for f in es.fields if isinstance(raw.obj.get(f), str)]
        described.append({"path": es.path, "format": es.format, "sha256": sha256_path(local),
                          "texts": len(texts) - n_before, "unreadable_lines": unreadable})
    return texts, described


def decontaminate(cfg: BuildConfig, train: list[Kept]) -> tuple[list[Kept], list[Kept], dict]:
    """(kept train, removed, manifest section). In flag mode nothing is removed; records get extra.contaminated."""
    dc = cfg.decontamination
    if not dc.eval_sets:
        return train, [], {"enabled": False}
    texts, sets = eval_texts(dc.eval_sets)
    index = NgramIndex(texts, dc.ngram)
    keep, removed, flagged = [], [], 0
    for k in train:
        hit = any(index.contaminated(getattr(k.j, f)) for f in dc.fields)
        if dc.mode == "flag":
            k.j.extra = {**k.j.extra, "contaminated": hit}
            flagged += hit
            keep.append(k)
        elif hit:
            removed.append(k)
        else:
            keep.append(k)
    info = {"enabled": True, "ngram": dc.ngram, "mode": dc.mode, "fields": list(dc.fields), "eval_sets": sets,
            "eval_ngrams": len(index.grams), "contaminated": flagged if dc.mode == "flag" else len(removed)}
    return keep, removed, info


def _key_union(dicts) -> list[str]:
    """All keys, rubric-style order: criteria, score1..N descriptions, then the rest sorted."""
    keys = {k for d in dicts for k in d}
    scores = sorted((k for k in keys if k.startswith("score") and k.endswith("_description")
                     and k[5:-12].isdigit()), key=lambda k: int(k[5:-12]))
    return [k for k in ("criteria",) if k in keys] + scores + sorted(keys - set(scores) - {"criteria"})


def _own_levels(rubric_keys: list[str]) -> set[int] | None:
    """The score levels of the rubrics whose own encoding has exactly the build's rubric keys."""
    try:
        levels = {int(key[5:-12]) for key in rubric_keys if key != "criteria"}
    except ValueError:
        return None
    return levels if list(Rubric("", dict.fromkeys(levels, "")).to_dict()) == rubric_keys else None


def _pair_line(j, rubric_keys: list[str], extra_keys: list[str]) -> bytes:
    rec = j.to_sft()
    rec["rubric"] = {key: rec["rubric"].get(key) for key in rubric_keys}
    rec["extra"] = {key: j.extra.get(key) for key in extra_keys}
    return (dumps_record(rec) + "\n").encode("utf-8")


def encode_lines(records: list[Kept], spool: Spool, rubric_keys: list[str], extra_keys: list[str]) -> Iterator[bytes]:
    """Output lines, as pieces of UTF-8. Every line gets the same `rubric` and `extra` keys (None where
    absent) so that Arrow infers one schema for datasets.load_dataset("json"); Rubric.from_dict ignores
    the Nones. The rest of each line was encoded when it was parsed."""
    levels = _own_levels(rubric_keys)
    rubrics: dict[int, bytes] = {}
    extras: dict[tuple, bytes] = {}
    for k in records:
        if k.ref is None:  # a pairwise judgment: encoded here (data.pairwise), with the build's keys
            yield _pair_line(k.j, rubric_keys, extra_keys)
            continue
        rubric = None  # the spooled encoding: its keys are the build's keys already
        if levels is None or k.j.rubric.descriptions.keys() != levels:
            rubric = rubrics.get(id(k.j.rubric))
            if rubric is None:
                d = k.j.rubric.to_dict()
                rubric = rubrics[id(k.j.rubric)] = compact({key: d.get(key) for key in rubric_keys})
        extra = k.j.extra
        try:
            values = (tuple(extra.items()), tuple(map(type, extra.values())))  # typed: True != 1 here
            enc = extras.get(values)
        except TypeError:  # unhashable values (lists, dicts): encode every time
            values = enc = None
        if enc is None:
            enc = compact({key: extra.get(key) for key in extra_keys})
            if values is not None:
                extras[values] = enc
        yield from spool.line(k.ref, rubric, enc)


def _models(records: list[Kept]) -> list[str]:
    return sorted({m for k in records for m in models_of(k.j)})


def run_build(cfg: BuildConfig, out: str | Path | None = None, overwrite: bool = False) -> dict:
    """Build `cfg` into `out` (default `cfg.out`); returns the manifest (also written as manifest.json).
    An existing `out` must be an earlier build, and is replaced only with `overwrite` (io.check_out):
    checked before the inputs are read, so a refused build fails at once and touches nothing."""
    if not cfg.sources:
        raise ConfigError("no sources: set `sources` in the config or pass --input FORMAT:PATH")
    out = Path(out if out is not None else cfg.out)
    check_out(out, "data", overwrite=overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Beside the output: the spool (over half the output's size) goes on the file system that must hold it.
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.spool-") as tmp, gc_paused():
        spool = Spool(tmp)
        try:
            return _build(cfg, out, spool, overwrite)
        finally:
            spool.close()


def _describe_inputs(cfg: BuildConfig) -> str:
    return "; ".join(f"{src.display_name()} ({src.format}, {src.path})" for src in cfg.sources)


def _top_reasons(rejects: list[dict], n: int = 3) -> str:
    """The most frequent reject reasons with counts, each with its first example."""
    counts = Counter(r["reason"] for r in rejects)
    first = {}
    for r in rejects:
        first.setdefault(r["reason"], r)
    return ", ".join(f"{reason} {count} (e.g. {first[reason]['source']} line {first[reason]['line']}: "
                     f"{first[reason]['detail'][:120]!r})" for reason, count in counts.most_common(n))


def check_not_empty(cfg: BuildConfig, kept: list[Kept], rejects: list[dict]) -> None:
    if kept or cfg.allow_empty:
        return
    reasons = _top_reasons(rejects) or "none (the inputs hold no records)"
    raise EmptyBuildError(
        f"the build kept 0 of {len(rejects)} records read from {_describe_inputs(cfg)}; top reject reasons: "
        f"{reasons}. Check each source's `format` (and `columns`), or set allow_empty=true to write it anyway")


def check_written(cfg: BuildConfig, buckets: dict[str, list[Kept]]) -> None:
    """Kept records can all be dropped later (policy, split, decontamination): as empty as keeping none."""
    if buckets["train"] or buckets["test"] or cfg.allow_empty:
        return
    dropped = ", ".join(f"{b} {len(buckets[b])}" for b in BUCKETS[2:])
    raise EmptyBuildError(f"the build would write 0 records to train/test from {_describe_inputs(cfg)}: every "
                          f"kept record was dropped ({dropped}); set allow_empty=true to write it anyway")


def check_test_models(cfg: BuildConfig, kept: list[Kept]) -> None:
    """A held-out model name that matches nothing (a typo, or another input's model) would leave the test
    split silently empty: name it, and the models that are there."""
    present = _models(kept)
    absent = sorted(set(cfg.split.test_models) - set(present))
    if not absent or not kept:
        return
    hints = {m: difflib.get_close_matches(m, present, n=1) for m in absent}
    named = ", ".join(f"{m!r}" + (f" (did you mean {hints[m][0]!r}?)" if hints[m] else "") for m in absent)
    shown = ", ".join(present[:40]) + (f", ... ({len(present)} in all)" if len(present) > 40 else "")
    raise ConfigError(f"split.test_models: {named} is not a response model of the kept records from "
                      f"{_describe_inputs(cfg)}; response models present: {shown}")


def _build(cfg: BuildConfig, out: Path, spool: Spool, overwrite: bool = False) -> dict:
    warnings = [w for src in cfg.sources for w in src.column_warnings()]
    for w in warnings:
        log.warning("%s", w)
    kept, rejects, counts, inputs = read_sources(cfg, spool)
    check_not_empty(cfg, kept, rejects)
    check_test_models(cfg, kept)

    policy_kept, by_policy = apply_policy([k.j for k in kept], cfg.sample_policy)
    wrap = {id(k.j): k for k in kept}
    policy_kept_k, by_policy_k = [wrap[id(j)] for j in policy_kept], [wrap[id(j)] for j in by_policy]

    sp = cfg.split
    test_models = choose_test_models(_models(policy_kept_k), sp.test_models, sp.test_model_fraction, sp.seed)
    train_j, test_j, split_j = split_records([k.j for k in policy_kept_k], test_models,
                                             sp.test_instruction_fraction, sp.seed)
    train, test, by_split = ([wrap[id(j)] for j in part] for part in (train_j, test_j, split_j))
    train, decontaminated, decon_info = decontaminate(cfg, train)

    buckets = {"train": train, "test": test, "dropped_by_policy": by_policy_k, "dropped_by_split": by_split,
               "decontaminated": decontaminated}
    for bucket, records in buckets.items():
        for k in records:
            counts[k.j.source].buckets[bucket] += 1
    for records in buckets.values():
        records.sort(key=_order)
    check_written(cfg, buckets)

    manifest = _manifest(cfg, inputs, counts, buckets, test_models, decon_info, warnings)
    _write(cfg, out, spool, buckets, rejects, manifest, overwrite)
    return manifest


def _manifest(cfg, inputs, counts: dict[str, SourceCounts], buckets, test_models, decon_info,
              warnings: list[str]) -> dict:
    total = SourceCounts()
    for c in counts.values():
        total.read += c.read
        total.kept += c.kept
        total.rejected += c.rejected
        total.by_reason.update(c.by_reason)
        total.buckets.update(c.buckets)
    overall = total.to_dict()
    checks = {}
    for name, c in [("overall", total), *counts.items()]:
        d = c.to_dict()
        checks[name] = (d["read"] == d["kept"] + d["rejected"]
                        and d["rejected"] == sum(d["by_reason"].values())
                        and d["kept"] == sum(d[b] for b in BUCKETS))
    if not all(checks.values()):
        raise RuntimeError(f"data build bug: counts do not add up: {checks}")
    train_models, test_models_seen = set(_models(buckets["train"])), set(_models(buckets["test"]))
    train_instr = {k.j.instruction for k in buckets["train"]}
    # Recomputed from the seeded rule over every kept instruction, not taken from the splitter's word.
    frac, seed = cfg.split.test_instruction_fraction, cfg.split.seed
    every_instr = {k.j.instruction for records in buckets.values() for k in records}
    held_instr = {i for i in every_instr if frac > 0 and seeded_fraction(i, seed, frac)}
    splits = {
        "train": {"records": len(buckets["train"]), "response_models": sorted(train_models),
                  "items": len({k.j.item_id for k in buckets["train"]})},
        "test": {"records": len(buckets["test"]), "response_models": sorted(test_models_seen),
                 "items": len({k.j.item_id for k in buckets["test"]}),
                 "records_with_unseen_instruction": sum(k.j.instruction not in train_instr for k in buckets["test"])},
        "held_out_models": test_models,
        "disjoint": not (train_models & test_models_seen),
        "shared_response_models": sorted(train_models & test_models_seen),
        "held_out_instructions": len(held_instr),
        "instructions_disjoint": not (train_instr & held_instr),
    }
    return {
        "template_version": TEMPLATE_VERSION,
        "inputs": inputs,
        "warnings": warnings,
        "counts": {**overall, "per_source": {name: c.to_dict() for name, c in counts.items()},
                   "identity": "read = kept + rejected; kept = " + " + ".join(BUCKETS),
                   "adds_up": all(checks.values())},
        "splits": splits,
        "decontamination": decon_info,
        "sample_policy": cfg.sample_policy,
        # The output location, progress display and worker count do not change the data, so they are
        # left out: two builds of the same inputs and config are byte-identical wherever they are written.
        "config": cfg.model_dump(mode="json", exclude={"out", "progress", "workers"}),
    }


def _write(cfg: BuildConfig, out: Path, spool: Spool, buckets, rejects: list[dict], manifest: dict,
           overwrite: bool = False) -> None:
    written = buckets["train"] + buckets["test"]
    rubric_keys = _key_union(r.to_dict() for r in {id(k.j.rubric): k.j.rubric for k in written}.values())
    extra_keys = _key_union(k.j.extra for k in written)
    dropped = [{"bucket": b, "id": k.chash[:16], "source": k.j.source, "item_id": k.j.item_id,
                "sample_idx": k.j.sample_idx, "response_model": k.j.response_model}
               for b in ("dropped_by_policy", "dropped_by_split", "decontaminated") for k in buckets[b]]
    with atomic_dir(out, "data", overwrite=overwrite) as tmp:
        for name in ("train", "test"):
            with open(tmp / f"{name}.jsonl", "wb", buffering=1 << 20) as f:  # few, large writes
                f.writelines(encode_lines(buckets[name], spool, rubric_keys, extra_keys))
        for name, lines in (("rejects", rejects), ("dropped", dropped)):
            with open(tmp / f"{name}.jsonl", "w", encoding="utf-8") as f:
                f.writelines(dumps_record(r) + "\n" for r in lines)
        atomic_write_json(tmp / "manifest.json", manifest)
        save_resolved(cfg, tmp)


def summary_table(manifest: dict):
    """A rich table: one row per source and a total row."""
    from rich.table import Table

    cols = ["read", "kept", "rejected", "dropped_by_policy", "dropped_by_split", "decontaminated", "train", "test"]
    table = Table(title=f"judgeforge data build ({manifest['template_version']})")
    table.add_column("source")
    for col in cols:
        table.add_column(col.replace("dropped_by_", "").replace("decontaminated", "decontam"), justify="right")
    table.add_column("reject reasons")
    rows = list(manifest["counts"]["per_source"].items()) + [("TOTAL", manifest["counts"])]
    for name, c in rows:
        reasons = ", ".join(f"{r} {n}" for r, n in c["by_reason"].items())
        table.add_row(name, *(str(c[col]) for col in cols), reasons, end_section=name == rows[-2][0])
    return table


def parse_input(spec: str) -> dict:
    fmt, sep, path = spec.partition(":")
    if not sep or not path or fmt not in PARSERS:
        raise ConfigError(f"--input {spec!r}: expected FORMAT:PATH with FORMAT one of {sorted(PARSERS)}")
    return {"format": fmt, "path": path}


def main(argv: list[str]) -> int:
    parser = command_parser("judgeforge data build", "Build validated, leak-free SFT records from judgment logs.",
                            stage="data")
    parser.add_argument("--input", "-i", action="append", metavar="FORMAT:PATH",
                        help="input replacing the config's sources (repeatable); FORMAT: " + ", ".join(PARSERS))
    parser.add_argument("--out", "-o", help="output directory (overrides `out`); it must not exist, be empty, or "
                        "hold an earlier data build")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the earlier data build at `out` (never a directory that is not one)")
    args = parser.parse_args(argv)
    extra = {"out": args.out}
    if args.input:
        extra["sources"] = [parse_input(s) for s in args.input]
    cfg = load_config(BuildConfig, args.config, args.overrides, extra=extra)
    if args.config is None and not cfg.sources:  # no inputs named: the default build, what `train` reads
        cfg = load_config(BuildConfig, builtin_config("default", "data"), args.overrides, extra=extra)
    manifest = run_build(cfg, overwrite=args.overwrite)

    from rich.console import Console

    console = Console() if sys.stdout.isatty() else Console(width=160)  # pipes: do not squeeze to 80
    console.print(summary_table(manifest))
    sp = manifest["splits"]
    console.print(f"train models: {', '.join(sp['train']['response_models']) or '-'} | "
                  f"test models: {', '.join(sp['test']['response_models']) or '-'} | disjoint: {sp['disjoint']}"
                  + (f" | held-out instructions: {sp['held_out_instructions']}, instructions disjoint: "
                     f"{sp['instructions_disjoint']}" if sp.get("held_out_instructions") else ""))
    console.print(f"wrote {cfg.out}/ (train.jsonl, test.jsonl, rejects.jsonl, dropped.jsonl, manifest.json, config.yaml)")
    return 0


__all__ = ["run_build", "main", "summary_table", "BuildConfig", "SourceConfig"]
