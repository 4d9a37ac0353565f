"""report.html: one self-contained page beside every report.md (eval) and comparison .md (compare).

The tables are the markdown's own (report.render_markdown, compare.format_rows) rendered to HTML, so
every number has one printer and one source, metrics.json (compare: its rows); the plots are the
report's plots/ PNGs inline as base64 data URIs, each judge's beside the others'. No external CSS, JS,
font or image: the file opens offline, mailed or archived alone. Stdlib only, pure logic.
"""

from __future__ import annotations

import base64
import re
import struct
from dataclasses import dataclass, field
from html import escape
from itertools import groupby
from pathlib import Path
from string import Template

from judgeforge.eval.metrics_file import Metrics
from judgeforge.eval.plots import plot_name, scatter_variants
from judgeforge.eval.report import _label, render_markdown

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WIDE_PX = 700
"""A plot at least this wide (the cascade what-if's two panels) gets a whole row to stay readable."""

MIN_TOC = 3
"""Sections a page needs for a table of contents (a comparison has one table and its plots)."""
_CI = re.compile(r"(?<=\d )\[(?:-?\d+(?:\.\d+)?|n/a), (?:-?\d+(?:\.\d+)?|n/a)\]")
_NUMERIC = re.compile(r"^(?:-?\d|n/a$)")
_SEPARATOR = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+$")
_HEADING = re.compile(r"^(#{1,4}) (.*)$")


def _inline(text: str) -> str:
    """Escaped text with its `code` spans (an unmatched backtick stays literal)."""
    parts = re.split(r"`([^`]*)`", text)
    return "".join(f"<code>{escape(p)}</code>" if i % 2 else escape(p) for i, p in enumerate(parts))


def _plain(text: str) -> str:
    return re.sub(r"`([^`]*)`", r"\1", text)


def _cell(tag: str, text: str) -> str:
    body = _inline(text)
    if tag == "th":
        return f"<th>{body}</th>"
    # an interval set apart from its value, so a column of "value [lo, hi]" reads down the values
    body = _CI.sub(lambda m: f'<span class="ci">{m.group(0)}</span>', body)
    return f'<td class="num">{body}</td>' if _NUMERIC.match(text) else f"<td>{body}</td>"


def _table(lines: list[str]) -> str:
    rows = [[c.strip() for c in ln.strip()[1:-1].split("|")] for ln in lines if not _SEPARATOR.match(ln.strip())]
    head = "".join(_cell("th", c) for c in rows[0])
    body = "".join("<tr>" + "".join(_cell("td", c) for c in r) + "</tr>" for r in rows[1:])
    return f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _kind(line: str) -> str:
    s = line.strip()
    if not s:
        return "blank"
    if _HEADING.match(s):
        return "heading"
    if s.startswith("|"):
        return "table"
    if line.startswith("- "):
        return "item"
    return "indented" if line.startswith("  ") else "text"  # indented: a note under the item above


@dataclass
class Page:
    """An HTML page built block by block; the table of contents (every h2) goes before the first h2."""

    title: str = ""
    head: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    toc: list[tuple[str, str]] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)

    def add(self, fragment: str) -> None:
        (self.body if self.toc else self.head).append(fragment)

    def heading(self, level: int, text: str) -> None:
        self.title = self.title or _plain(text)
        hid = re.sub(r"[^a-z0-9]+", "-", _plain(text).lower()).strip("-") or "section"
        hid = hid if hid not in self.ids else f"{hid}-{len(self.ids)}"
        self.ids.add(hid)
        if level == 2:
            self.toc.append((hid, text))
        self.add(f'<h{level} id="{hid}">{_inline(text)}</h{level}>')

    def markdown(self, md: str) -> None:
        """The markdown report.py and compare.py write: headings, pipe tables, `- ` lists, paragraphs
        and `code` (nothing else appears there, so no markdown library)."""
        for kind, group in groupby(md.splitlines(), key=_kind):
            lines = list(group)
            if kind == "heading":
                for ln in lines:
                    hashes, text = _HEADING.match(ln.strip()).groups()
                    self.heading(len(hashes), text)
            elif kind == "table":
                self.add(_table(lines))
            elif kind == "item":
                self.add("<ul>" + "".join(f"<li>{_inline(ln[2:])}</li>" for ln in lines) + "</ul>")
            elif kind != "blank":
                cls = ' class="indent"' if kind == "indented" else ""
                self.add(f"<p{cls}>{_inline(' '.join(ln.strip() for ln in lines))}</p>")

    def html(self) -> str:
        toc = "".join(f'<li><a href="#{hid}">{_inline(text)}</a></li>' for hid, text in self.toc)
        nav = f'<nav class="toc"><h2>Contents</h2><ol>{toc}</ol></nav>' if len(self.toc) >= MIN_TOC else ""
        return _PAGE.substitute(title=escape(self.title or "judgeforge report"), css=_CSS,
                                body="\n".join(self.head + [nav] + self.body))


# ---------------------------------------------------------------- plots

@dataclass(frozen=True)
class Figure:
    caption: str
    path: Path


Row = tuple[str, list[Figure]]
"""A label and the figures shown side by side under it."""


def _png(path: Path) -> tuple[bytes, int, int] | None:
    """The file's bytes and pixel size, None when it is absent or no PNG."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(PNG_SIGNATURE) or len(data) < 24:
        return None
    return (data, *struct.unpack(">II", data[16:24]))  # IHDR: width, height


def _figure(label: str, fig: Figure) -> str:
    found = _png(fig.path)
    if found is None:
        return ""
    data, w, h = found
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    alt = escape(f"{label}: {fig.caption}" if fig.caption else label)
    wide = ' class="wide"' if w >= WIDE_PX else ""
    return (f'<figure{wide}><img src="{uri}" width="{w}" height="{h}" '
            f'alt="{alt}" title="{escape(fig.path.name)}">'
            + (f"<figcaption>{_inline(fig.caption)}</figcaption>" if fig.caption else "") + "</figure>")


def add_plots(page: Page, sections: list[tuple[str, list[Row]]]) -> int:
    """A "Plots" section with one sub-heading per (heading, rows); figures whose file is missing are
    left out, and so are rows and sections left empty. Returns how many images it inlined."""
    parts, n = [], 0
    for heading, rows in sections:
        html_rows = []
        for label, figs in rows:
            shown = [f for f in (_figure(label, fig) for fig in figs) if f]
            n += len(shown)
            if shown:
                html_rows.append(f'<div class="figrow"><h4>{_inline(label)}</h4>'
                                 f'<div class="figs">{"".join(shown)}</div></div>')
        if html_rows:
            parts.append(f"<h3>{_inline(heading)}</h3>" + "".join(html_rows))
    if parts:
        page.heading(2, "Plots")
        page.add("".join(parts))
    return n


def report_plots(m: Metrics, plots: Path) -> list[tuple[str, list[Row]]]:
    """Per absolute set: each judge's scatter and confusion matrix side by side per variant, the
    per-category bars and the cascade what-if (its calibrated threshold); then the N ablation and any
    other PNG of plots/ (a plot added later shows up before this page learns its name)."""
    plots = Path(plots)
    sections = []
    for s in m.sets("absolute"):
        name = s["name"]
        rows: list[Row] = [(f"{kind}, {_label(v)}", [Figure(j, plots / plot_name(kind, j, name, v))
                                                     for j in m.judges])
                           for v in scatter_variants(m) for kind in ("scatter", "confusion")]
        rows += [(label, [Figure("", plots / plot_name(kind, name))]) for kind, label in _SET_PLOTS]
        sections.append((f"`{name}`: judges vs {s['reference']}", rows))
    sections.append(("Self-consistency N ablation",
                     [("all judges and sets", [Figure("", plots / plot_name("n_ablation"))])]))
    placed = {f.path.name for _, rows in sections for _, figs in rows for f in figs}
    other = [Figure(p.name, p) for p in sorted(plots.glob("*.png")) if p.name not in placed]
    return sections + ([("Other plots", [("plots/", other)])] if other else [])


_SET_PLOTS = (("categories", "Pearson per category"),
              ("cascade", "cascade what-if: coverage vs agreement, calibrated threshold"))
"""The plots drawn once per absolute set (all judges in one plot)."""


def report_html(metrics: dict, plots: str | Path) -> str:
    """report.html of a report from its metrics dict (the tables of report.md) and its plots/ dir."""
    page = Page()
    page.markdown(render_markdown(metrics))
    add_plots(page, report_plots(Metrics(metrics), Path(plots)))
    return page.html()


def compare_plots(dir_a: str | Path, dir_b: str | Path, rows: list[dict]) -> list[tuple[str, list[Row]]]:
    """Per set the comparison covers, judge A's plot (report A) beside judge B's (report B)."""
    pa, pb = Path(dir_a) / "plots", Path(dir_b) / "plots"
    variants = scatter_variants(Metrics.load(dir_a))
    sections = []
    for name, ja, jb in dict.fromkeys((r["set"], r["judge_a"], r["judge_b"]) for r in rows):
        a_b = lambda file_a, file_b: [Figure(f"A: {ja}", pa / file_a), Figure(f"B: {jb}", pb / file_b)]
        out: list[Row] = [(f"{kind}, {_label(v)}",
                           a_b(plot_name(kind, ja, name, v), plot_name(kind, jb, name, v)))
                          for v in variants for kind in ("scatter", "confusion")]
        out += [(label, a_b(plot_name(kind, name), plot_name(kind, name))) for kind, label in _SET_PLOTS]
        sections.append((f"`{name}`: {ja} (A) vs {jb} (B)", out))
    n_ablation = plot_name("n_ablation")
    sections.append(("Self-consistency N ablation", [("A and B", [Figure("A", pa / n_ablation),
                                                                  Figure("B", pb / n_ablation)])]))
    return sections


def compare_html(markdown: str, dir_a: str | Path, dir_b: str | Path, rows: list[dict]) -> str:
    """The comparison page: compare.format_rows's table, then both reports' plots side by side."""
    page = Page()
    page.markdown(markdown)
    add_plots(page, compare_plots(dir_a, dir_b, rows))
    return page.html()


_PAGE = Template("""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="judgeforge">
<title>$title</title>
<style>$css</style>
</head>
<body>
<main>
$body
<footer>Written by judgeforge from metrics.json and plots/; one file, nothing loaded from elsewhere.</footer>
</main>
</body>
</html>
""")

_CSS = """
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --alt: #f6f8fa; --accent: #0969da; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff;
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1280px; margin: 0 auto; padding: 24px 32px 48px; }
h1 { font-size: 1.75em; margin: 0 0 .6em; padding-bottom: .3em; border-bottom: 1px solid var(--line); }
h2 { font-size: 1.3em; margin: 2em 0 .6em; padding-bottom: .25em; border-bottom: 1px solid var(--line); }
h3 { font-size: 1.1em; margin: 1.6em 0 .5em; }
h4 { font-size: .95em; margin: 1em 0 .4em; color: var(--muted); font-weight: 600; }
p, li { max-width: 80em; }
ul { padding-left: 1.4em; }
p.indent { margin-left: 1.4em; color: var(--muted); }
code { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: var(--alt);
  padding: .1em .35em; border-radius: 4px; overflow-wrap: anywhere; }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
nav.toc { background: var(--alt); border: 1px solid var(--line); border-radius: 6px; padding: 4px 20px 12px;
  margin: 16px 0; }
nav.toc h2 { border: 0; margin: .6em 0 .3em; font-size: 1em; }
nav.toc ol { columns: 2 360px; margin: 0; padding-left: 1.4em; }
.table { overflow-x: auto; margin: 10px 0 18px; border: 1px solid var(--line); border-radius: 6px; }
table { border-collapse: collapse; font-size: 13px; min-width: 100%; }
th, td { padding: 5px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: var(--alt); font-weight: 600; white-space: nowrap; }
td { max-width: 36em; }
tbody tr:last-child td { border-bottom: 0; }
tbody tr:nth-child(even) { background: #fafbfc; }
tbody tr:hover { background: #eef4fd; }
td.num { white-space: nowrap; font-variant-numeric: tabular-nums; }
.ci { color: var(--muted); font-size: 12px; }
.figrow { margin: 4px 0 18px; }
.figs { display: grid; grid-template-columns: repeat(auto-fill, minmax(340px, 1fr)); gap: 14px; }
figure { margin: 0; padding: 8px; border: 1px solid var(--line); border-radius: 6px; background: #fff; }
figure.wide { grid-column: 1 / -1; }
figure img { display: block; max-width: 100%; height: auto; margin: 0 auto; }
figcaption { margin-top: 4px; text-align: center; font-size: 12px; color: var(--muted); }
footer { margin-top: 3em; padding-top: 1em; border-top: 1px solid var(--line); font-size: 12px;
  color: var(--muted); }
"""
