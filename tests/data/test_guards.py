"""The builder against hostile files (issue 18, findings 14-16): over-long records are rejected as
`too_long` (counted with the build's tokenizer, or by characters), duplicate JSON keys are a reject
reason (`duplicate_key`) instead of the last value silently winning, and a UTF-8 BOM is stripped."""

from __future__ import annotations

import hashlib
import json

import pytest

from judgeforge.config import load_config
from judgeforge.data import ingest, length
from judgeforge.data.build import EmptyBuildError, run_build
from judgeforge.data.config import BuildConfig
from judgeforge.data.readers import UnreadableFile, iter_file, read_objects, sniff_format
from judgeforge.data.validate import REASONS

from .conftest import REPO, build, read_lines

COLUMNS = {"instruction": "q", "response": "a", "score": "s", "feedback": "f", "criteria": "c",
           "response_model": "m"}
BOM = "\ufeff"


def rec(**kw) -> dict:
    base = {"q": "Why is the sky blue?", "a": "Air scatters blue light the most.", "s": 4,
            "f": "Correct and short.", "c": "Is the explanation correct?", "m": "model-a"}
    return {**base, **kw}


def jsonl_source(path, **kw) -> dict:
    return {"path": str(path), "format": "jsonl", "columns": COLUMNS, "name": "src", **kw}


def write_lines(path, lines: list[str], prefix: str = "") -> None:
    path.write_text(prefix + "".join(line + "\n" for line in lines), encoding="utf-8")


def assert_adds_up(m: dict) -> None:
    c = m["counts"]
    assert c["adds_up"] and c["read"] == c["kept"] + c["rejected"]
    for s in c["per_source"].values():
        assert s["read"] == s["kept"] + s["rejected"] and s["rejected"] == sum(s["by_reason"].values())


def reasons(out) -> dict[int, str]:
    return {r["line"]: r["reason"] for r in read_lines(out / "rejects.jsonl")}


def test_new_reason_codes_are_listed_and_documented():
    readme = (REPO / "docs" / "data.md").read_text(encoding="utf-8")  # the data guide owns the reason codes
    for code in ("too_long", "duplicate_key"):
        assert code in REASONS and f"`{code}`" in readme
    for name in ("max_tokens", "tokenizer"):
        assert BuildConfig.model_fields[name].description, name


# --- 14. length guard ------------------------------------------------------------------------------

def test_default_build_rejects_the_ten_million_character_response(tmp_path):
    """The issue's record: a 10,485,760-character response went into test.jsonl (~5M tokens)."""
    path = tmp_path / "in.jsonl"
    write_lines(path, [json.dumps(rec()), json.dumps(rec(a="x" * 10_485_760, q="Another question?"))])
    m = build(None, tmp_path / "o", sources=[jsonl_source(path)])
    assert m["counts"]["by_reason"] == {"too_long": 1} and m["counts"]["kept"] == 1
    assert_adds_up(m)
    (r,) = read_lines(tmp_path / "o/rejects.jsonl")
    assert r["line"] == 2 and "characters" in r["detail"] and "max_tokens 32768" in r["detail"]
    line = path.read_bytes().split(b"\n")[1]  # quoted by its head, its size and its hash: not copied whole
    assert (r["original_bytes"], r["original_sha256"]) == (len(line), hashlib.sha256(line).hexdigest())
    assert len(r["original"]) == ingest.ORIGINAL_MAX_BYTES and line.decode().startswith(r["original"])
    assert all(len(line) < 10_000 for line in (tmp_path / "o/train.jsonl").read_text().splitlines())


def test_character_rule_counts_four_characters_a_token(tmp_path):
    """No tokenizer named: tokens = ceil(characters of the record's messages / 4)."""
    lo = rec()
    path = tmp_path / "in.jsonl"
    write_lines(path, [json.dumps(lo)])
    chars = length.record_size(_only_judgment(path))
    limit = -(-chars // length.CHARS_PER_TOKEN)  # exactly enough
    m = build(None, tmp_path / "fits", f"max_tokens={limit}", sources=[jsonl_source(path)])
    assert m["counts"]["kept"] == 1
    with pytest.raises(EmptyBuildError, match="kept 0 of 1 .*too_long 1"):
        build(None, tmp_path / "over", f"max_tokens={limit - 1}", sources=[jsonl_source(path)])
    m = build(None, tmp_path / "over", f"max_tokens={limit - 1}", "allow_empty=true", sources=[jsonl_source(path)])
    (r,) = read_lines(tmp_path / "over/rejects.jsonl")
    assert r["reason"] == "too_long" and f"{chars} characters / 4" in r["detail"]
    assert_adds_up(m)


def _only_judgment(path):
    from judgeforge.data.parsers import PARSERS, make_context

    ((_, j),) = PARSERS["jsonl"](json.loads(path.read_text()), make_context("jsonl", "src", columns=COLUMNS))
    return j


def test_record_chars_are_the_messages_characters(tmp_path):
    """The cheap count (no prompt rendered) equals the rendered messages' characters."""
    path = tmp_path / "in.jsonl"
    write_lines(path, [json.dumps(rec(a="Blue light scatters.\n" * 30, f="Fine ü. [RESULT] 4"))])
    j = _only_judgment(path)
    assert length.record_size(j) == sum(len(msg["content"]) for msg in j.messages())


def test_max_tokens_null_turns_the_guard_off(tmp_path):
    path = tmp_path / "in.jsonl"
    write_lines(path, [json.dumps(rec(a="y" * 200_000))])
    m = build(None, tmp_path / "o", "max_tokens=null", sources=[jsonl_source(path)])
    assert m["counts"]["kept"] == 1


def test_pairwise_records_are_guarded_too(tmp_path):
    cols = {"instruction": "q", "response_a": "a", "response_b": "b", "verdict": "v", "feedback": "f",
            "response_model_a": "ma", "response_model_b": "mb"}
    pair = {"q": "Which answer is kinder?", "a": "Thanks!", "b": "No.", "v": "A", "f": "A is polite.",
            "ma": "x", "mb": "y"}
    path = tmp_path / "pairs.jsonl"
    write_lines(path, [json.dumps(pair), json.dumps({**pair, "q": "Long one?", "b": "z" * 50_000})])
    m = build(None, tmp_path / "o", "max_tokens=4096", sources=[{"path": str(path), "format": "jsonl",
                                                                "columns": cols, "name": "pairs"}])
    assert m["counts"]["by_reason"] == {"too_long": 1} and reasons(tmp_path / "o") == {2: "too_long"}
    assert_adds_up(m)


@pytest.fixture(scope="module")
def tokenizer(default_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(default_model_dir))


def test_tokenizer_counts_exactly_as_training_does(tmp_path, tokenizer, default_model_dir):
    """`tokenizer=` counts the chat-templated messages (what train/run.py measures against max_length)."""
    path = tmp_path / "in.jsonl"
    write_lines(path, [json.dumps(rec(a="Rayleigh scattering, mostly. " * 40))])
    j = _only_judgment(path)
    text = tokenizer.apply_chat_template(j.messages(), tokenize=False)
    n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    tok = f"tokenizer={default_model_dir}"
    m = build(None, tmp_path / "fits", f"max_tokens={n}", tok, sources=[jsonl_source(path)])
    assert m["counts"]["kept"] == 1
    m = build(None, tmp_path / "over", f"max_tokens={n - 1}", tok, "allow_empty=true", sources=[jsonl_source(path)])
    (r,) = read_lines(tmp_path / "over/rejects.jsonl")
    assert r["reason"] == "too_long" and r["detail"].startswith(f"{n} tokens") and f"max_tokens {n - 1}" in r["detail"]
    assert_adds_up(m)


def test_tokenizer_runs_only_near_the_limit(tmp_path, monkeypatch, default_model_dir):
    """Far below the limit (UTF-8 bytes bound the tokens) and far above it (characters), no tokenizing."""
    calls = []
    real = length.LengthGuard.count_tokens
    monkeypatch.setattr(length.LengthGuard, "count_tokens", lambda self, j: calls.append(1) or real(self, j))
    path = tmp_path / "in.jsonl"
    lines = [json.dumps(rec(q=f"Question {i}?")) for i in range(20)]
    lines.append(json.dumps(rec(q="Huge?", a="w " * 400_000)))  # > 32 characters a token over the limit
    lines.append(json.dumps(rec(q="Near?", a="Scattering. " * 700)))  # ~8,400 bytes: must be counted
    write_lines(path, lines)
    m = build(None, tmp_path / "o", "max_tokens=8192", f"tokenizer={default_model_dir}",
              sources=[jsonl_source(path)])
    assert reasons(tmp_path / "o") == {21: "too_long"} and m["counts"]["kept"] == 21
    assert len(calls) == 1


def test_unloadable_tokenizer_is_a_config_error(tmp_path):
    from judgeforge.config import ConfigError

    path = tmp_path / "in.jsonl"
    write_lines(path, [json.dumps(rec())])
    with pytest.raises(ConfigError, match="tokenizer .*no-such-tokenizer"):
        build(None, tmp_path / "o", "tokenizer=/no-such-tokenizer", sources=[jsonl_source(path)])


# --- 15. duplicate keys --------------------------------------------------------------------------

DUP_SCORE = '{"q": "Why?", "a": "Because.", "s": 1, "f": "Fine.", "c": "Correct?", "m": "m", "s": 2}'
DUP_NESTED = ('{"q": "How?", "a": "So.", "s": 3, "f": "Ok.", "m": "m", '
              '"c": "Correct?", "extra": {"k": 1, "k": 2}}')


def test_duplicate_keys_in_a_jsonl_line_are_a_reject(tmp_path):
    path = tmp_path / "in.jsonl"
    write_lines(path, [json.dumps(rec()), DUP_SCORE, DUP_NESTED])
    m = build(None, tmp_path / "o", sources=[jsonl_source(path)])
    assert reasons(tmp_path / "o") == {2: "duplicate_key", 3: "duplicate_key"}
    assert_adds_up(m)
    r2, r3 = read_lines(tmp_path / "o/rejects.jsonl")
    assert "'s'" in r2["detail"] and r2["original"] == DUP_SCORE and "'k'" in r3["detail"]
    with pytest.raises(UnreadableFile, match=r"line 2: duplicate key 's'"):
        read_objects(path)  # evaluation sets are read strictly


def test_duplicate_keys_in_a_parallel_build(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(ingest, "CHUNK_BYTES", 2_000)
    path = tmp_path / "in.jsonl"
    write_lines(path, [json.dumps(rec(q=f"Q{i}?")) for i in range(40)] + [DUP_SCORE], prefix=BOM)
    assert len(ingest.plan_chunks(path)) > 1
    outs = []
    for workers in (1, 2):
        cfg = load_config(BuildConfig, None, ["progress=false", f"workers={workers}"],
                          extra={"sources": [jsonl_source(path)]})
        run_build(cfg, tmp_path / f"w{workers}")
        outs.append(tmp_path / f"w{workers}")
    for name in ("train.jsonl", "test.jsonl", "rejects.jsonl", "manifest.json"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    assert reasons(outs[1]) == {41: "duplicate_key"}  # and the BOM cost no record


def test_duplicate_keys_in_a_json_document_reject_only_their_record(tmp_path):
    ok = json.dumps(rec())
    path = tmp_path / "list.json"
    path.write_text(f"[\n{ok},\n{DUP_SCORE},\n{json.dumps(rec(q='Other?'))}\n]\n", encoding="utf-8")
    m = build(None, tmp_path / "o", sources=[jsonl_source(path)])
    assert reasons(tmp_path / "o") == {2: "duplicate_key"} and m["counts"]["kept"] == 2
    (r,) = read_lines(tmp_path / "o/rejects.jsonl")
    assert '"s": 1' in r["original"] and '"s": 2' in r["original"]  # both values, as read
    assert_adds_up(m)


def test_repeated_record_id_in_a_keyed_document(tmp_path):
    """BiGGen's layout keys records by id: a repeated id silently dropped the first record."""
    a, b = json.dumps(rec()), json.dumps(rec(q="Other?"))
    path = tmp_path / "keyed.json"
    path.write_text(f'{{"x1": {a}, "x2": {b}, "x1": {b}}}', encoding="utf-8")
    m = build(None, tmp_path / "o", sources=[jsonl_source(path)])
    assert m["counts"]["read"] == 3 and reasons(tmp_path / "o") == {3: "duplicate_key"}
    (r,) = read_lines(tmp_path / "o/rejects.jsonl")
    assert "'x1'" in r["detail"] and "record 1" in r["detail"]


# --- 16. UTF-8 BOM ---------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["jsonl", "one-line", "pretty-list", "keyed"])
def test_a_bom_is_stripped(tmp_path, layout):
    one, two = rec(), rec(q="Other?")
    text = {"jsonl": json.dumps(one) + "\n" + json.dumps(two) + "\n",
            "one-line": json.dumps(one) + "\n",
            "pretty-list": json.dumps([one, two], indent=2),
            "keyed": json.dumps({"a": one, "b": two})}[layout]
    path = tmp_path / "in.json"
    path.write_text(BOM + text, encoding="utf-8")
    n = 1 if layout == "one-line" else 2
    assert sniff_format(path) == ("json" if layout in ("pretty-list", "keyed") else "jsonl")
    assert [raw.obj is not None for raw in iter_file(path)] == [True] * n
    m = build(None, tmp_path / "o", sources=[jsonl_source(path)])
    assert m["counts"]["read"] == m["counts"]["kept"] == n, read_lines(tmp_path / "o/rejects.jsonl")


def test_a_bom_in_an_evaluation_set_is_stripped(tmp_path):
    path = tmp_path / "eval.jsonl"
    write_lines(path, [json.dumps(rec()), json.dumps(rec(q="Other?"))], prefix=BOM)
    assert [obj["q"] for _, obj in read_objects(path)] == ["Why is the sky blue?", "Other?"]
