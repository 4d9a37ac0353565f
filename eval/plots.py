"""PNG plots of a report (matplotlib, Agg backend: no display needed).

judge vs reference scatter and score confusion matrix per (judge, absolute set),
per-category Pearson bars per absolute set, the N ablation per set, and the cascade what-if
(coverage vs agreement, blended Pearson vs share escalated) per mimic set.
Scatter points come from predictions; everything else from metrics.json.
"""

from __future__ import annotations

import re
from pathlib import Path

from judgeforge.judge.prompts import Scale
from judgeforge.eval.metrics_file import EXPECTED, Metrics, vote_n
from judgeforge.eval.report import unit_score


def _slug(*parts: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "__".join(parts))


def plot_name(kind: str, *parts: str) -> str:
    """The file name of one plot in plots/ (`kind__judge__set__variant.png`, file-safe), so that
    readers of a report (eval.html) find a plot by what it shows."""
    return f"{kind}__{_slug(*parts)}.png" if parts else f"{kind}.png"


def scatter_variants(m: Metrics) -> list[str]:
    """The variants each judge's scatter and confusion matrix are drawn for: the headline vote, plus
    the expected score of the completed distributions."""
    return [m.primary_variant] + [x for x in (EXPECTED,) if x in m.variants]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(metrics: dict, preds: list[dict], out: Path) -> list[Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plt = _plt()
    m = Metrics(metrics)
    written: list[Path] = []
    for s in m.sets("absolute"):
        scale = Scale.parse(s["scale"])
        for judge in m.judges:
            recs = [r for r in preds if r["judge"] == judge and r["set"] == s["name"] and r["mode"] == "absolute"]
            for v in scatter_variants(m):
                rep = m.result(judge, s["name"], v)
                if not rep:
                    continue
                name = lambda kind: out / plot_name(kind, judge, s["name"], v)
                written.append(_scatter(plt, recs, v, scale, rep, name("scatter"),
                                        f"{judge} ({v}) vs {s['reference']} on {s['name']}"))
                written.append(_confusion(plt, rep["confusion"], name("confusion"),
                                          f"{judge} ({v}) on {s['name']}", s["reference"]))
        written.append(_categories(plt, metrics, s["name"], m.primary_variant,
                                   out / plot_name("categories", s["name"])))
        written.append(_cascade(plt, metrics, s["name"], out / plot_name("cascade", s["name"])))
    written.append(_ablation(plt, metrics, out / plot_name("n_ablation")))
    return [p for p in written if p is not None]


def _scatter(plt, recs, variant, scale, rep, path, title):
    import numpy as np

    pts = [(r["ref"], unit_score(r, variant, scale)) for r in recs]
    pts = [(x, y) for x, y in pts if x is not None and y is not None]
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    if pts:
        x, y = np.asarray(pts, dtype=float).T
        jitter = np.random.default_rng(0).uniform(-0.12, 0.12, size=(2, x.size))
        ax.scatter(x + jitter[0], y + jitter[1], s=18, alpha=0.6)
    ax.plot([scale.lo, scale.hi], [scale.lo, scale.hi], "k--", lw=0.8)
    ax.set_xlim(scale.lo - 0.5, scale.hi + 0.5)
    ax.set_ylim(scale.lo - 0.5, scale.hi + 0.5)
    ax.set_xlabel("reference score (mean of samples)")
    ax.set_ylabel("judge score")
    p = rep["correlation"]["pearson"]["value"]
    ax.set_title(f"{title}\nPearson {'n/a' if p is None else f'{p:.3f}'}, "
                 f"{rep['parse_failures']}/{rep['n']} without a score", fontsize=8)
    return _save(plt, fig, path)


def _confusion(plt, conf, path, title, reference):
    import numpy as np

    mat = np.asarray(conf["counts"])
    fig, ax = plt.subplots(figsize=(5, 4.2))
    im = ax.imshow(mat, cmap="Blues")
    ax.set_xticks(range(len(conf["columns"])), [str(c) for c in conf["columns"]], fontsize=7)
    ax.set_yticks(range(len(conf["labels"])), [str(c) for c in conf["labels"]])
    for (i, j), v in np.ndenumerate(mat):
        ax.text(j, i, str(v), ha="center", va="center", fontsize=7)
    ax.set_xlabel("judge score")
    ax.set_ylabel(f"{reference} score (rounded mean)")
    ax.set_title(title, fontsize=8)
    fig.colorbar(im, ax=ax)
    return _save(plt, fig, path)


def _categories(plt, metrics, set_name, variant, path):
    import numpy as np

    m = Metrics(metrics)
    judges = [j for j in m.judges if m.result(j, set_name, variant)]
    if not judges:
        return None
    cats = sorted(m.result(judges[0], set_name, variant).get("per_category", {}))
    if not cats:
        return None
    fig, ax = plt.subplots(figsize=(max(5, len(cats) * 0.9), 3.8))
    width = 0.8 / len(judges)
    for k, judge in enumerate(judges):
        pc = m.result(judge, set_name, variant)["per_category"]
        vals = [pc.get(c, {}).get("correlation", {}).get("pearson", {}).get("value") for c in cats]
        ax.bar(np.arange(len(cats)) + k * width, [v if v is not None else 0 for v in vals], width, label=judge)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xticks(np.arange(len(cats)) + 0.4 - width / 2, cats, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("Pearson with reference")
    ax.set_title(f"per category on {set_name} ({variant}; undefined shown as 0)", fontsize=8)
    ax.legend(fontsize=7)
    return _save(plt, fig, path)


def _cascade(plt, metrics, set_name, path):
    """Trust or escalate what-if: coverage vs agreement, and the blended judge's Pearson."""
    import numpy as np

    by_judge = {j: res[set_name] for j, res in (metrics.get("cascade") or {}).items() if set_name in res}
    if not by_judge:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    for judge, r in by_judge.items():
        cc, b = r["coverage_curve"], r["blend"]
        left.step(cc["coverage"], cc["agreement"], where="post", marker=".",
                  label=f"{judge} (area {cc['area']:.3f})")
        pearson = [np.nan if p is None else p for p in b["pearson"]]
        right.plot(b["escalated"], pearson, marker="o", label=judge)
    left.set_xlabel("coverage (share answered locally, most confident first)")
    left.set_ylabel("agreement with the teacher")
    left.set_ylim(0, 1.02)
    right.set_xlabel("share escalated to the teacher")
    right.set_ylabel("Pearson with the reference")
    for ax in (left, right):
        ax.legend(fontsize=7)
    fig.suptitle(f"cascade what-if on {set_name}", fontsize=9)
    return _save(plt, fig, path)


def _ablation(plt, metrics, path):
    m = Metrics(metrics)
    variants = m.vote_variants
    xs = [vote_n(v) for v in variants]
    fig, ax = plt.subplots(figsize=(5, 3.8))
    for judge in m.judges:
        for s in m.sets():
            rep = m.results(judge).get(s["name"])
            if not rep:
                continue
            if s["kind"] == "absolute":
                ys = [m.result(judge, s["name"], v)["correlation"]["pearson"]["value"] for v in variants]
                label = f"{judge} / {s['name']} (Pearson)"
            elif "absolute" in rep:
                ys = [m.result(judge, s["name"], v, mode="absolute")["accuracy"] for v in variants]
                label = f"{judge} / {s['name']} (pairwise acc.)"
            else:
                continue
            ax.plot(xs, [y if y is not None else float("nan") for y in ys], marker="o", label=label)
    ax.set_xticks(xs)
    ax.set_xlabel("self-consistency N (votes)")
    ax.set_ylabel("metric")
    ax.set_title("N ablation (first k of the same samples)", fontsize=8)
    ax.legend(fontsize=6)
    return _save(plt, fig, path)


def _save(plt, fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
