"""Paired bootstrap of two judges' r(score, length) and Pearson with the reference, on one absolute set.

`judgeforge eval compare` pairs the judges' agreement with the reference; this pairs their length
dependence too, on the same resampled items (issue 31: did a training choice lower it?). It reads two
committed predictions.jsonl files (score-only E[score] from `score_only_probs`) and writes JSON.

    python bench/paired_length.py bench/results/learning_curve/r5 \
        bench/results/learning_curve/choices/decorr-r5 --set heldout --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from judgeforge.judge.scores import expected

log = logging.getLogger("paired_length")


def expected_scores(run: Path, name: str) -> dict[str, tuple[float, float, float]]:
    """item id -> (E[score], response length, reference score) of a set's score-only reads."""
    out = {}
    for line in (run / "predictions.jsonl").read_text().splitlines():
        r = json.loads(line)
        probs = r.get("score_only_probs")
        if r.get("set") != name or not probs or r.get("ref") is None:
            continue
        out[r["item_id"]] = (expected(probs), float(r["length"]), float(r["ref"]))
    return out


def paired(a: dict, b: dict, n_boot: int = 10_000, seed: int = 0) -> dict:
    ids = sorted(a.keys() & b.keys())
    ea, eb = (np.array([d[i][0] for i in ids]) for d in (a, b))
    length, ref = np.array([a[i][1] for i in ids]), np.array([a[i][2] for i in ids])

    def figures(s):
        r = lambda x, y: np.corrcoef(x[s], y[s])[0, 1]  # noqa: E731
        return [r(ea, length), r(eb, length), r(ea, ref), r(eb, ref)]

    point = figures(np.arange(len(ids)))
    rng = np.random.default_rng(seed)
    boot = np.array([figures(rng.integers(0, len(ids), len(ids))) for _ in range(n_boot)])
    diff = lambda i, j: [float(v) for v in np.nanpercentile(boot[:, j] - boot[:, i], [2.5, 97.5])]  # noqa: E731
    return {"n": len(ids), "length_r": {"a": point[0], "b": point[1], "diff": point[1] - point[0], "ci": diff(0, 1)},
            "pearson": {"a": point[2], "b": point[3], "diff": point[3] - point[2], "ci": diff(2, 3)},
            "n_boot": n_boot, "seed": seed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path, help="run dir (or committed results dir) of judge A")
    ap.add_argument("b", type=Path, help="run dir of judge B")
    ap.add_argument("--set", default="heldout", help="absolute set name in both predictions")
    ap.add_argument("--json", type=Path, help="write the result here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    res = {"a": str(args.a), "b": str(args.b), "set": args.set,
           **paired(expected_scores(args.a, args.set), expected_scores(args.b, args.set))}
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    log.info("%s", json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
