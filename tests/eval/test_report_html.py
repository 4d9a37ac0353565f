"""report.html (eval.html) on a deterministic engine: the page parsed with the stdlib (its tables are
report.md's, every metric with its interval, every plot inline as a PNG, nothing fetched from elsewhere)
for `judgeforge eval` and `judgeforge eval compare`, then opened in a real headless Chromium."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from judgeforge.config import load_config
from judgeforge.eval import compare as C
from judgeforge.eval import run as R
from judgeforge.eval.config import EvalConfig
from judgeforge.eval.metrics_file import Metrics
from judgeforge.judge.engines import Sample
from testing.engines import PromptEngine, shipped_tokenizer


class JudgedByModelEngine(PromptEngine):
    """A stable per-prompt score shifted by the model's name (two judges disagree), with completed
    log-probabilities; pairs: a verdict from the prompt's length."""

    kind = "by-model"

    def _sample(self, req):
        prompt = req.messages[-1]["content"]
        if "###Response A" in prompt:
            v = "AB"[len(prompt) % 2]
            return Sample(text=f"ok [RESULT] {v}", finish_reason="stop",
                          choice_logprobs={v: -0.3, "AB"[v == "A"]: -1.4})
        s = 1 + (sum(map(ord, prompt[-300:])) + sum(map(ord, self.model_name))) % 5
        lps = {c: -3.0 for c in req.choices} | {str(s): -0.2}
        return Sample(text=f"Fine. [RESULT] {s}" if req.feedback else "", choice_logprobs=lps,
                      finish_reason="stop" if req.feedback else "score_only")


def _config(out: Path, vendor: Path, judges: tuple[str, ...]) -> EvalConfig:
    pv = vendor / "prometheus-eval"
    return load_config(EvalConfig, None, [
        f"out={out}", "n_values=[1, 2]", "bootstrap.n_resamples=100", "plots=true",
        "judges=[" + ", ".join(f"{{name: {j}, engine: {{model: {j}-model}}}}" for j in judges) + "]",
        "sets=[{name: vicuna, kind: prometheus, role: mimic, max_items: 12, path: " + str(pv / "vicuna_eval.json")
        + "},"
        " {name: hhh, kind: hhh, path: " + str(pv / "hhh_alignment_eval.json") + ", max_items: 6}]"])


@pytest.fixture(scope="module")
def reports(tmp_path_factory, vendor):
    """Report dirs: `both` (judges base and good: the paired comparison), `base` and `good` alone."""
    import judgeforge.judge.engines as E

    root = tmp_path_factory.mktemp("html")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(E, "build_engine", lambda cfg: JudgedByModelEngine(cfg))
        mp.setattr(R, "_length_tokenizer", lambda cfg: shipped_tokenizer())
        for name, judges in (("both", ("base", "good")), ("base", ("base",)), ("good", ("good",))):
            R.run_eval(_config(root / name, vendor, judges))
    return root


class Page(HTMLParser):
    """What a check needs of a page: its title, tables (cell texts), every src/href and tag seen."""

    def __init__(self, text: str):
        super().__init__()
        self.title, self.tables, self.refs, self.tags, self.imgs = "", [], [], [], []
        self._cell: list[str] | None = None
        self._in_title = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        self.refs += [(tag, k, v) for k, v in attrs if k in ("src", "href", "srcset", "data", "poster")]
        if tag == "img":
            self.imgs.append(a["src"])
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        self._in_title = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._in_title:
            self.title += data


def _md_tables(md: str) -> list[list[list[str]]]:
    """report.md's pipe tables, backticks dropped (the page shows them as <code>)."""
    tables, cur = [], None
    for line in md.splitlines():
        if line.startswith("|"):
            if cur is None:
                cur = []
                tables.append(cur)
            if not re.fullmatch(r"\|(-+\|)+", line):
                cur.append([c.strip().replace("`", "") for c in line[1:-1].split("|")])
        else:
            cur = None
    return tables


def _png_digests(srcs: list[str]) -> list[str]:
    out = []
    for src in srcs:
        head, _, payload = src.partition(",")
        assert head == "data:image/png;base64", head[:40]
        data = base64.b64decode(payload, validate=True)
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR"
        out.append(hashlib.sha256(data).hexdigest())
    return sorted(out)


def _file_digests(*dirs: Path) -> list[str]:
    return sorted(hashlib.sha256(p.read_bytes()).hexdigest() for d in dirs for p in d.glob("*.png"))


def _self_contained(page: Page, text: str) -> None:
    assert not {"script", "link", "iframe", "object", "embed", "base"} & set(page.tags)
    for tag, attr, value in page.refs:
        assert value.startswith(("data:", "#")), (tag, attr, value[:80])
    assert 'src="http' not in text and "@import" not in text and "url(" not in text


def _ci(e: dict, key: str = "value") -> str:
    return f"{e[key]:.3f} [{e['lo']:.3f}, {e['hi']:.3f}]"


def _row(page: Page, *first: str) -> list[str]:
    """The one table row whose first cells are `first`."""
    found = [r for t in page.tables for r in t if tuple(r[: len(first)]) == first]
    assert found, first
    return found[0]


def test_eval_writes_a_self_contained_report_html(reports):
    d = reports / "both"
    text = (d / "report.html").read_text()
    page = Page(text)
    metrics = Metrics.load(d).data
    assert page.title == "judgeforge evaluation report"
    # the tables are report.md's, cell for cell
    assert page.tables == _md_tables((d / "report.md").read_text())
    # each judge's correlations with their intervals, every variant; pairwise accuracy; paired differences
    labels = {"n1": "N=1", "n2": "N=2", "expected": "E[score]"}
    for judge in ("base", "good"):
        for v, label in labels.items():
            c = metrics["results"][judge]["vicuna"][v]["correlation"]
            assert _row(page, judge, label)[2:5] == [_ci(c[k]) for k in ("pearson", "spearman", "kendall")]
            acc = metrics["results"][judge]["hhh"]["absolute"][v]
            assert _row(page, "hhh", judge, "absolute", label)[4] == _ci(acc, "accuracy")
    for v, label in labels.items():
        d_ = metrics["comparisons"]["good"]["vicuna"][v]
        assert _row(page, "good − base", "vicuna", label)[6] == _ci(d_, "diff")
    # every plot inline, decoding to the very PNG of plots/
    assert len(page.imgs) == len(list((d / "plots").glob("*.png"))) >= 10
    assert _png_digests(page.imgs) == _file_digests(d / "plots")
    _self_contained(page, text)


def test_compare_writes_html_beside_its_markdown(reports, tmp_path):
    a, b, out = reports / "base", reports / "good", tmp_path / "cmp.md"
    assert C.main([str(a), str(b), "--out", str(out), "--n-boot", "50",
                   "--json", str(tmp_path / "rows.json")]) == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    text = (tmp_path / "cmp.html").read_text()
    page = Page(text)
    assert page.title.startswith("Comparison:") and page.tables == _md_tables(out.read_text())
    labels = {"n1": "N=1", "n2": "N=2", "expected": "E[score]"}
    for r in rows:
        cells = _row(page, r["set"], "base → good", labels[r["variant"]])
        assert cells[4:7] == [f"{r[k]:.3f}" for k in ("a", "b", "diff")]
        assert cells[7] == f"[{r['paired']['lo']:.3f}, {r['paired']['hi']:.3f}]"
    # A's plots beside B's: every plot of both reports, once each
    assert _png_digests(page.imgs) == _file_digests(a / "plots", b / "plots")
    _self_contained(page, text)
    assert C.html_path("x/cmp.md") == Path("x/cmp.html") and C.html_path("cmp.html") == Path("cmp.html.html")


CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1000")


@pytest.fixture
def browser(tmp_path):
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("no chromium/chromedriver on PATH (`make browser`, or "
                    "apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (the `test` extra)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM  # with the driver's path given too, Selenium Manager downloads nothing
    for flag in FLAGS + (f"--user-data-dir={tmp_path / 'profile'}",):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def test_report_html_renders_in_chromium(reports, browser, tmp_path):
    d = reports / "both"
    browser.get((d / "report.html").as_uri())
    assert browser.title == "judgeforge evaluation report"
    body = browser.find_element("tag name", "body").text
    pearson = Metrics.load(d).data["results"]["good"]["vicuna"]["n2"]["correlation"]["pearson"]
    assert "Correlation with gpt-4 on vicuna" in body and _ci(pearson) in body and "Plots" in body
    sizes = browser.execute_script(
        "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]);")
    assert len(sizes) == len(list((d / "plots").glob("*.png")))
    assert all(done and w > 0 and h > 0 for done, w, h in sizes), sizes
    # nothing fetched but the page itself (data: URIs are no requests)
    fetched = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
    assert fetched == [], fetched
    shots = tmp_path  # look at them: a clean, readable layout is the point of the page
    assert browser.save_screenshot(str(shots / "report-top.png"))
    browser.execute_script("document.getElementById('plots').scrollIntoView();")
    assert browser.save_screenshot(str(shots / "report-plots.png"))
    assert (shots / "report-top.png").stat().st_size > 10_000
