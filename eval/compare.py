"""`judgeforge eval compare A B`: diff two report directories into a markdown table.

Judges are matched by name; when each report holds a single judge, those two are
compared whatever their names (base report vs trained report); `--judges A:B` names the
two to compare (judge A of report A against judge B of report B, e.g. one judge of a
multi-judge report against a candidate graded on its own). For absolute sets
and pairwise sets graded absolutely whose predictions cover the same items, the
difference also gets a paired bootstrap interval (B minus A: Pearson, or pairwise
accuracy); otherwise only the two values and their difference.

`--out` / `--json` write only where nothing is, or replace an earlier comparison with `--overwrite`;
any other file there is refused untouched, before any work.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from judgeforge.config import ConfigError
from judgeforge.judge.prompts import Scale
from judgeforge.eval.html import compare_html
from judgeforge.eval.metrics_file import Metrics
from judgeforge.eval.report import _aligned, _f, _label, _table, paired_on_set, shorter_preferred
from judgeforge.io import atomic_write_json, atomic_write_text, check_file_out, read_jsonl

TITLE = "# Comparison: "
"""How a comparison table starts: what tells an earlier one (replaceable with --overwrite) from another file."""


def _load(d: str | Path) -> tuple[Metrics, list[dict] | None]:
    preds = Path(d) / "predictions.jsonl"
    return Metrics.load(d), (read_jsonl(preds) if preds.is_file() else None)


def _judge_pairs(a: Metrics, b: Metrics, judges: tuple[str, str] | None = None) -> list[tuple[str, str]]:
    ja, jb = a.judges, b.judges
    if judges is not None:
        for name, have, side in ((judges[0], ja, "A"), (judges[1], jb, "B")):
            if name not in have:
                raise ConfigError(f"report {side} has no judge {name!r}: its judges are {have}")
        return [judges]
    if len(ja) == 1 and len(jb) == 1:
        return [(ja[0], jb[0])]
    return [(j, j) for j in ja if j in jb]


def _headline(s: dict, rep: dict, v: str) -> tuple[str, float | None, float | None]:
    """(metric name, value, no-score rate: items the judge gave no score) of one judge on one set under a variant."""
    r = rep.get(v, {}) if s["kind"] == "absolute" else rep.get("absolute", {}).get(v, {})
    if s["kind"] == "absolute":
        return "Pearson", r.get("correlation", {}).get("pearson", {}).get("value"), r.get("parse_failure_rate")
    return "accuracy", r.get("accuracy"), r.get("parse_failure_rate")


def _paired(pa, pb, ja, jb, s, v, boot) -> dict | None:
    if pa is None or pb is None:
        return None
    sel = lambda P, j: [r for r in P if r["judge"] == j and r["set"] == s["name"] and r["mode"] == "absolute"]
    ra, rb = sel(pa, ja), sel(pb, jb)
    if len(_aligned(ra, rb)[0]) < 3:
        return None
    scale = Scale.parse(s.get("scale") or [1, 5])
    out = paired_on_set(s["kind"], ra, rb, v, scale, boot)
    if s["kind"] != "absolute":  # does a judge gain where the reference prefers the shorter answer?
        short = shorter_preferred(ra)
        sa, sb = ([r for r in x if r["item_id"] in short] for x in (ra, rb))
        if len(_aligned(sa, sb)[0]) >= 6:
            out["shorter_preferred"] = paired_on_set(s["kind"], sa, sb, v, scale, boot)
    return out


def compare_rows(dir_a: str | Path, dir_b: str | Path, n_boot: int = 1000, seed: int = 42,
                 judges: tuple[str, str] | None = None) -> list[dict]:
    """One dict per (judge pair, set, variant): the headline metric of A and B, B - A and, where
    both graded the same items, the paired bootstrap interval (`paired`: lo, hi, significant...).
    `judges`: (judge of A, judge of B) to compare, instead of matching them by name."""
    a, pa = _load(dir_a)
    b, pb = _load(dir_b)
    boot = {"n_boot": n_boot, "seed": seed}
    rows = []
    for ja, jb in _judge_pairs(a, b, judges):
        for s in a.sets():
            if b.set(s["name"]) is None:
                continue
            ra, rb = a.results(ja).get(s["name"]), b.results(jb).get(s["name"])
            if not ra or not rb:
                continue
            for v in (x for x in a.variants if x in b.variants):
                metric, va, fa = _headline(s, ra, v)
                _, vb, fb = _headline(s, rb, v)
                rows.append({"set": s["name"], "judge_a": ja, "judge_b": jb, "variant": v, "metric": metric,
                             "a": va, "b": vb, "diff": None if va is None or vb is None else vb - va,
                             "paired": _paired(pa, pb, ja, jb, s, v, boot), "no_score_a": fa, "no_score_b": fb})
    return rows


def compare(dir_a: str | Path, dir_b: str | Path, n_boot: int = 1000, seed: int = 42) -> str:
    return format_rows(dir_a, dir_b, compare_rows(dir_a, dir_b, n_boot, seed))


def format_rows(dir_a: str | Path, dir_b: str | Path, found: list[dict]) -> str:
    """The markdown table of `compare_rows`."""
    rows = []
    for r in found:
        d = r["paired"]
        has_ci = bool(d and d["lo"] is not None)
        ci = f"[{_f(d['lo'])}, {_f(d['hi'])}]" if has_ci else ""
        sig = ("forgetting" if d["forgetting"] else "yes") if has_ci and d["significant"] else (
            "no" if has_ci else "")
        short = (d or {}).get("shorter_preferred")
        rows.append([r["set"], f"{r['judge_a']} → {r['judge_b']}", _label(r["variant"]), r["metric"], _f(r["a"]),
                     _f(r["b"]), _f(r["diff"]), ci, sig, f"{_f(r['no_score_a'])} → {_f(r['no_score_b'])}",
                     f"{_f(short['diff'])} [{_f(short['lo'])}, {_f(short['hi'])}] (n {short['n']})" if short else ""])
    head = ["set", "judges (A → B)", "variant", "metric", "A", "B", "B − A", "paired 95% CI", "significant",
            "no-score rate A → B", "B − A where the reference prefers the shorter [paired 95% CI]"]
    title = [f"{TITLE}`{dir_a}` (A) vs `{dir_b}` (B)", "",
             "Paired CI: bootstrap over the items both reports graded (absolute sets and pairwise sets graded "
             "absolutely, with predictions).", ""]
    if not rows:
        return "\n".join(title + ["No set and judge in common."]) + "\n"
    return "\n".join(title + _table(head, rows))


def _judge_names(text: str) -> tuple[str, str]:
    a, sep, b = text.partition(":")
    if not (sep and a and b):
        raise argparse.ArgumentTypeError(f"--judges takes A:B (two judge names), got {text!r}")
    return a, b


def html_path(out: str | Path) -> Path:
    """The page beside a comparison's markdown: same stem, .html (never the markdown file itself)."""
    out = Path(out)
    return out.with_name(out.name + ".html") if out.suffix == ".html" else out.with_suffix(".html")


def check_outputs(out: str | None, json_out: str | None, overwrite: bool = False) -> None:
    """Before any work: --out, its .html page and --json may replace only an earlier comparison
    (its title, the judgeforge page, a JSON list of rows), and that only with `overwrite`."""
    if out:
        check_file_out(out, "a comparison table", lambda p: p.read_text(encoding="utf-8").startswith(TITLE),
                       overwrite=overwrite)
        check_file_out(html_path(out), "a comparison page", _judgeforge_page, overwrite=overwrite)
    if json_out:
        check_file_out(json_out, "comparison rows (JSON)",
                       lambda p: isinstance(json.loads(p.read_text(encoding="utf-8")), list), overwrite=overwrite)


def _judgeforge_page(path: Path) -> bool:
    with open(path, encoding="utf-8", errors="replace") as f:
        return '<meta name="generator" content="judgeforge">' in f.read(4096)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="judgeforge eval compare", description=__doc__.split("\n")[0])
    p.add_argument("a", help="report directory A (e.g. the base judge)")
    p.add_argument("b", help="report directory B (e.g. the trained judge)")
    p.add_argument("--out", help="also write the table to this file, and beside it (same stem, .html) the "
                   "table and both reports' plots as one self-contained page")
    p.add_argument("--json", help="also write the rows (values, differences, paired intervals) as JSON here")
    p.add_argument("--judges", type=_judge_names, metavar="A:B",
                   help="compare judge A of report A with judge B of report B (default: matched by name)")
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier comparison at --out / --json (never another file)")
    args = p.parse_args(argv)
    check_outputs(args.out, args.json, overwrite=args.overwrite)
    found = compare_rows(args.a, args.b, n_boot=args.n_boot, seed=args.seed, judges=args.judges)  # bootstrapped once
    text = format_rows(args.a, args.b, found)
    if args.out:
        atomic_write_text(args.out, text)
        atomic_write_text(html_path(args.out), compare_html(text, args.a, args.b, found))
    if args.json:
        atomic_write_json(args.json, found)
    print(text, end="")
    return 0
