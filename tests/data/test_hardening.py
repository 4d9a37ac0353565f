"""The data builder under clumsy use: empty builds, slipped column mappings, absent held-out models,
FastChat-derived logs without a `judge` field, files whose extension lies, files that are not JSON,
poisoned records (numbers too large, nesting too deep, lone surrogates, bytes that are not UTF-8)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil

import pytest

from judgeforge.cli import main as cli_main
from judgeforge.config import ConfigError, load_config
from judgeforge.data.build import EmptyBuildError
from judgeforge.data.config import BuildConfig
from judgeforge.data.ingest import Pool
from judgeforge.data.parsers import FASTCHAT_CRITERIA, infer_prompt_name
from judgeforge.data.readers import UnreadableFile, iter_file, read_objects, sniff_format
from judgeforge.data.validate import REASONS

from .conftest import REPO, build, read_lines

HHH = "data/vendor/prometheus-eval/hhh_alignment_eval.json"
FASTCHAT_LOG = REPO / "data/vendor/fastchat-mt-bench/gpt-4_single.jsonl"
ARENA = REPO / "tests/data/fixtures/arena_hard_single.jsonl"
COLUMNS = {"instruction": "q", "response": "a", "score": "s", "feedback": "f", "criteria": "c",
           "response_model": "m"}
QUESTION = "Explain in a few sentences why the sky looks blue on a clear day to a curious ten year old child."


def rec(**kw) -> dict:
    base = {"q": QUESTION, "a": "Sunlight scatters off air molecules, blue light the most.", "s": 4,
            "f": "Correct and short.", "c": "Is the explanation correct?", "m": "model-a"}
    return {**base, **kw}


def write_jsonl(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def jsonl_source(path, **kw) -> dict:
    return {"path": str(path), "format": "jsonl", "columns": COLUMNS, "name": "src", **kw}


def assert_adds_up(m: dict) -> None:
    c = m["counts"]
    assert m["counts"]["adds_up"] and c["read"] == c["kept"] + c["rejected"]
    for s in c["per_source"].values():
        assert s["read"] == s["kept"] + s["rejected"]


# --- 1. a build that keeps nothing is an error --------------------------------------------------

def test_build_keeping_nothing_is_an_error_naming_inputs_and_reasons(tmp_path):
    with pytest.raises(EmptyBuildError) as e:
        build(None, tmp_path / "o", sources=[{"path": HHH, "format": "prometheus", "name": "hhh"}])
    msg = str(e.value)
    assert "kept 0 of 221" in msg and "hhh (prometheus, " + HHH + ")" in msg
    assert "missing_field 221" in msg and "allow_empty" in msg
    assert not (tmp_path / "o").exists()  # nothing written
    assert isinstance(e.value, ConfigError)  # the CLI prints it as one line


def test_allow_empty_writes_the_empty_build(tmp_path):
    m = build(None, tmp_path / "o", "allow_empty=true", sources=[{"path": HHH, "format": "prometheus"}])
    assert m["counts"]["kept"] == 0 and m["counts"]["rejected"] == 221 and (tmp_path / "o/train.jsonl").exists()
    assert_adds_up(m)
    assert "allow_empty" in BuildConfig.model_fields and BuildConfig.model_fields["allow_empty"].description


def test_empty_input_file_is_an_error(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(EmptyBuildError, match=r"kept 0 of 0 .*the inputs hold no records"):
        build(None, tmp_path / "o", sources=[jsonl_source(tmp_path / "empty.jsonl")])


def test_build_whose_kept_records_are_all_dropped_is_an_error(tmp_path):
    """Decontaminated against itself: every record is kept, then dropped; the build would write nothing."""
    path = write_jsonl(tmp_path / "in.jsonl", [rec(), rec(m="model-b", a="Because of Rayleigh scattering.")])
    decon = {"eval_sets": [{"path": path, "format": "jsonl", "fields": ["q"]}]}
    with pytest.raises(EmptyBuildError, match=r"0 records to train/test .*decontaminated 2"):
        build(None, tmp_path / "o", sources=[jsonl_source(path)], decontamination=decon)
    m = build(None, tmp_path / "o", "allow_empty=true", sources=[jsonl_source(path)], decontamination=decon)
    assert m["counts"]["decontaminated"] == 2 and m["counts"]["train"] == 0


def test_cli_exits_non_zero_on_an_empty_build(tmp_path, capsys):
    rc = cli_main(["data", "build", "--input", f"prometheus:{HHH}", "--out", str(tmp_path / "o"), "progress=false"])
    err = capsys.readouterr().err
    assert rc != 0 and "kept 0 of 221" in err and "missing_field 221" in err and "Traceback" not in err


# --- 2. instruction and response read from one column ---------------------------------------------

def test_instruction_and_response_on_one_column_warn_and_are_recorded(tmp_path, caplog):
    path = write_jsonl(tmp_path / "in.jsonl", [rec()])
    cols = {**COLUMNS, "response": "q"}
    with caplog.at_level(logging.WARNING, logger="judgeforge.data.build"):
        m = build(None, tmp_path / "o", sources=[jsonl_source(path, columns=cols)])
    assert m["warnings"] == ["source 'src': instruction and response read the same column 'q'"]
    assert any("same column 'q'" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    on_disk = json.loads((tmp_path / "o/manifest.json").read_text())
    assert on_disk["warnings"] == m["warnings"]
    assert build(None, tmp_path / "ok", sources=[jsonl_source(path)])["warnings"] == []


# --- 3. a held-out model that is not in the input -----------------------------------------------

def test_absent_test_model_is_an_error_naming_the_present_ones(tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", [rec(), rec(m="model-b", a="Rayleigh scattering.")])
    with pytest.raises(ConfigError) as e:
        build(None, tmp_path / "o", "split.test_models=[model-c]", sources=[jsonl_source(path)])
    msg = str(e.value)
    assert "'model-c'" in msg and "response models present: model-a, model-b" in msg
    assert "did you mean" in msg and not (tmp_path / "o").exists()
    with pytest.raises(ConfigError, match="'nope'"):  # one of two absent is enough
        build(None, tmp_path / "o", "split.test_models=[model-a, nope]", sources=[jsonl_source(path)])
    m = build(None, tmp_path / "o", "split.test_models=[model-b]", sources=[jsonl_source(path)])
    assert m["splits"]["test"]["response_models"] == ["model-b"]


# --- 4. FastChat-derived logs without a `judge` field (arena-hard v1 style) ------------------------

def arena_build(tmp_path, *overrides, **source):
    src = {"path": str(ARENA), "format": "fastchat", "name": "arena", **source}
    return build(None, tmp_path / "o", *overrides, sources=[src])


def test_arena_hard_style_log_is_read_whole(tmp_path):
    lines = [json.loads(x) for x in ARENA.read_text(encoding="utf-8").splitlines()]
    assert all("judge" not in r for r in lines)
    m = arena_build(tmp_path)
    c = m["counts"]
    assert c["read"] == len(lines) == c["kept"] == 8 and c["rejected"] == 0 and c["by_reason"] == {}
    assert c["kept"] == c["train"] + c["test"] and m["inputs"][0]["scale"] == [1, 10]
    assert_adds_up(m)
    by_key = {(r["question_id"], r["model"]): r for r in lines}
    records = read_lines(tmp_path / "o/train.jsonl")
    assert len(records) == 8
    for r in records:
        src = by_key[(r["extra"]["question_id"], r["response_model"])]
        prompt = src["user_prompt"]
        assert f"[Question]\n{r['instruction']}\n\n" in prompt
        assert f"[The Start of Assistant's Answer]\n{r['response']}\n[The End of Assistant's Answer]" in prompt
        assert r["score"] == src["score"] and r["judge_model"] == "unknown" and "[[" not in r["feedback"]
        math = "[The Start of Reference Answer]" in prompt
        assert r["extra"]["judge_prompt"] == ("single-math-v1" if math else "single-v1")
        assert r["rubric"]["criteria"] == FASTCHAT_CRITERIA[r["extra"]["judge_prompt"]]
        if math:
            assert f"[The Start of Reference Answer]\n{r['reference_answer']}\n[The End" in prompt
        else:
            assert r["reference_answer"] is None
    pencils = next(r for r in records if r["response_model"] == "mistral-7b-instruct-v0.2")
    assert pencils["instruction"] == "A shop sells pencils at 3 for $1.20. How much do 14 pencils cost?"
    assert pencils["response"] == "14 pencils is about 4 groups of 3, so the cost is 4 x $1.20 = $4.80."
    assert pencils["reference_answer"] == "One pencil costs $1.20 / 3 = $0.40, so 14 pencils cost 14 * $0.40 = $5.60."
    tcp = next(r for r in records if r["response_model"] == "gpt-3.5-turbo-0613")
    assert tcp["instruction"].endswith("engineer.\nKeep it under 150 words.")  # multi-line question kept whole
    assert tcp["response"].count("\n\n") == 1


def test_judge_model_and_prompt_name_from_the_source_config(tmp_path):
    m = arena_build(tmp_path, judge_model="gpt-4-1106-preview", prompt_name="single-math-v1")
    records = read_lines(tmp_path / "o/train.jsonl")
    assert m["counts"]["kept"] == 8 and {r["judge_model"] for r in records} == {"gpt-4-1106-preview"}
    assert {r["extra"]["judge_prompt"] for r in records} == {"single-math-v1"}  # configured: not inferred
    with pytest.raises(ConfigError, match="prompt_name is a fastchat option"):
        load_config(BuildConfig, None, [], extra={"sources": [{"path": "x.jsonl", "format": "prometheus",
                                                               "prompt_name": "single-v1"}]})
    with pytest.raises(ConfigError, match="prompt_name"):
        load_config(BuildConfig, None, [], extra={"sources": [{"path": "x", "format": "fastchat",
                                                               "prompt_name": "pair-v2"}]})


def test_prompt_name_is_inferred_as_fastchat_named_it():
    """On the real MT-Bench log, the section markers alone give back every record's judge[1]."""
    names = set()
    for line in FASTCHAT_LOG.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        assert infer_prompt_name(r["user_prompt"]) == r["judge"][1]
        names.add(r["judge"][1])
    assert names == set(FASTCHAT_CRITERIA)


def test_mt_bench_log_without_judge_builds_the_same_records(tmp_path, fastchat_build):
    """Dropping `judge` loses only the judge model name: the prompt names are inferred."""
    stripped = [{k: v for k, v in json.loads(x).items() if k != "judge"}
                for x in FASTCHAT_LOG.read_text(encoding="utf-8").splitlines()]
    path = write_jsonl(tmp_path / "nojudge.jsonl", stripped)
    m = build("configs/data/default.yaml", tmp_path / "o", "split.test_models=[]",
              sources=[{"path": path, "format": "fastchat", "judge_model": "gpt-4", "name": "fastchat:gpt-4_single"}])
    out, ref = fastchat_build
    assert m["counts"]["by_reason"] == ref["counts"]["by_reason"] and m["counts"]["kept"] == 793
    assert (tmp_path / "o/train.jsonl").read_bytes() == (out / "train.jsonl").read_bytes()


# --- 5. JSON vs JSONL by content ------------------------------------------------------------------

def test_sniffing_by_content_not_extension(tmp_path):
    one = rec()
    cases = {
        "list.jsonl": json.dumps([one, one], indent=2),  # a pretty JSON list named .jsonl
        "lines.json": json.dumps(one) + "\n" + json.dumps(one) + "\n",  # JSON Lines named .json
        "single.json": json.dumps(one) + "\n",  # one JSON Lines record, not a keyed document
        "keyed.jsonl": json.dumps({"a": one, "b": one}),  # BiGGen layout on one line
        "pretty.json": json.dumps(one, indent=2),  # one record, pretty-printed
        "badfirst.json": "{broken\n" + json.dumps(one) + "\n",  # JSON Lines whose first record is broken
    }
    expected = {"list.jsonl": ("json", 2), "lines.json": ("jsonl", 2), "single.json": ("jsonl", 1),
                "keyed.jsonl": ("json", 2), "pretty.json": ("json", 1), "badfirst.json": ("jsonl", 2)}
    for name, text in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        kind, n = expected[name]
        raws = list(iter_file(tmp_path / name))
        assert (sniff_format(tmp_path / name), len(raws)) == (kind, n), name
    assert [r["id"] for _, r in read_objects(tmp_path / "keyed.jsonl")] == ["a", "b"]


def test_parquet_by_magic_bytes(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([rec(), rec(m="model-b")]), tmp_path / "data.jsonl")
    assert sniff_format(tmp_path / "data.jsonl") == "parquet"
    assert [r["m"] for _, r in read_objects(tmp_path / "data.jsonl")] == ["model-a", "model-b"]


def test_build_reads_the_lying_extensions(tmp_path):
    """A single-record JSONL named .json used to be read as a keyed document (its fields as records),
    and a JSON list named .jsonl as broken lines."""
    single = tmp_path / "one.json"
    single.write_text(json.dumps(rec()) + "\n")
    m = build(None, tmp_path / "o1", sources=[jsonl_source(single)])
    assert m["counts"]["read"] == m["counts"]["kept"] == 1
    listed = tmp_path / "list.jsonl"
    listed.write_text(json.dumps([rec(), rec(m="model-b", a="Blue light scatters most.")], indent=2))
    m = build(None, tmp_path / "o2", sources=[jsonl_source(listed)])
    assert m["counts"]["read"] == m["counts"]["kept"] == 2
    shutil.copy(ARENA, tmp_path / "arena.json")
    m = build(None, tmp_path / "o3", sources=[{"path": str(tmp_path / "arena.json"), "format": "fastchat"}])
    assert m["counts"]["kept"] == 8


@pytest.mark.parametrize("text,where", [
    ("question,answer,score\nwhy,because,4\n", "line 1 column 1"),
    ('[\n  {"q": "a",\n   "a": "b"},\n  {"q": "c",\n', "line 5 column 1"),  # a truncated download
    ("", None),
])
def test_neither_json_nor_jsonl_names_file_and_place(tmp_path, text, where):
    path = tmp_path / "data.json"
    path.write_text(text)
    if where is None:  # an empty file is no error here: it holds no records
        assert list(iter_file(path)) == []
        return
    with pytest.raises(UnreadableFile) as e:
        list(iter_file(path))
    assert str(path) in str(e.value) and where in str(e.value) and isinstance(e.value, ConfigError)
    with pytest.raises(UnreadableFile, match=where):
        build(None, tmp_path / "o", sources=[jsonl_source(path)])


def test_broken_jsonl_line_is_still_a_reject_with_its_column(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(rec()) + '\n{"q": "x",, }\n')
    m = build(None, tmp_path / "o", sources=[jsonl_source(path)])
    assert m["counts"]["by_reason"] == {"unreadable_line": 1}
    assert_adds_up(m)
    (r,) = read_lines(tmp_path / "o/rejects.jsonl")
    assert r["line"] == 2 and r["detail"] == "bad JSON at column 11: Expecting property name enclosed in double quotes"
    with pytest.raises(UnreadableFile, match=r"in.jsonl line 2: bad JSON at column 11"):
        read_objects(path)


# --- 6. poisoned records: each is rejected alone, with its reason; none stops the build ------------

DEEP = b"[" * 100_000 + b"]" * 100_000
# A reason code -> a JSON value (bytes: one is not UTF-8) that no output line can hold.
POISONS = {
    "number_too_large": b"5" * 5000,  # json.loads fails past 4,300 digits
    "nesting_too_deep": DEEP,  # json.loads exhausts the stack
    "lone_surrogate": b'"half an emoji: \\ud800"',  # decodes, but UTF-8 cannot write it
    "invalid_utf8": b'"latin-1 \xe9t\xe9, not UTF-8"',  # read with U+FFFD it would be altered silently
}
GOOD = [rec(q=f"{QUESTION} Variant {i}.", m=("model-a", "model-b")[i % 2], s=1 + i % 5) for i in range(4)]


def json_bytes(value) -> bytes:
    return json.dumps(value).encode("utf-8")


def poisoned(record: dict, field: str, payload: bytes) -> bytes:
    """`record` with `field` (new or replaced) holding `payload` as written."""
    return json_bytes({**record, field: "@@poison@@"}).replace(b'"@@poison@@"', payload)


def write_config(tmp_path, data: bytes, name: str = "log.jsonl") -> str:
    (tmp_path / name).write_bytes(data)
    cfg = {"sources": [jsonl_source(tmp_path / name)], "split": {"test_models": []}}
    (tmp_path / f"{name}.yaml").write_text(json.dumps(cfg), encoding="utf-8")
    return str(tmp_path / f"{name}.yaml")


def cli_build(capsys, config: str, out, *overrides: str) -> tuple[int, str]:
    rc = cli_main(["data", "build", "--config", config, "--out", str(out), "progress=false", *overrides])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("workers", [1, 2])  # 2: the log is over 8 MB, so worker processes read it
def test_cli_rejects_each_poisoned_line_alone_and_quotes_huge_ones_by_hash(tmp_path, capsys, workers):
    """A 5,000-digit score, an array nested 100,000 deep and a lone surrogate in the feedback each
    aborted the whole build (a traceback, nothing written); a line that is not UTF-8 was kept with
    U+FFFD in place of its bytes; a rejected 10 MB record was copied whole into rejects.jsonl."""
    huge = json_bytes(rec(q="A ten megabyte answer?", a="x" * 10_485_760))  # too_long
    lines = [
        (json_bytes(GOOD[0]), None),
        (poisoned(rec(q="Q2?"), "s", POISONS["number_too_large"]), "number_too_large"),
        (json_bytes(GOOD[1]), None),
        (poisoned(rec(q="Q4?"), "tags", DEEP), "nesting_too_deep"),
        (poisoned(rec(q="Q5?"), "f", POISONS["lone_surrogate"]), "lone_surrogate"),
        (poisoned(rec(q="Q6?"), "a", POISONS["invalid_utf8"]), "invalid_utf8"),
        (json_bytes(GOOD[2]), None),
        (huge, "too_long"),
        (json_bytes(GOOD[3]), None),
    ]
    config = write_config(tmp_path, b"".join(line + b"\n" for line, _ in lines))
    assert Pool(workers).usable_for(tmp_path / "log.jsonl") == (workers > 1)
    rc, err = cli_build(capsys, config, tmp_path / "o", f"workers={workers}")
    assert rc == 0 and "Traceback" not in err
    m = json.loads((tmp_path / "o/manifest.json").read_text(encoding="utf-8"))
    c = m["counts"]
    assert c["read"] == len(lines) == c["kept"] + c["rejected"] and (c["kept"], c["rejected"]) == (4, 5)
    assert_adds_up(m)
    assert c["by_reason"] == {reason: 1 for _, reason in lines if reason}
    rejects = read_lines(tmp_path / "o/rejects.jsonl")
    assert {r["line"]: r["reason"] for r in rejects} == {n: why for n, (_, why) in enumerate(lines, 1) if why}
    assert (tmp_path / "o/rejects.jsonl").stat().st_size < 100_000
    by_reason = {r["reason"]: r for r in rejects}
    for reason, (line, _) in zip(("too_long", "nesting_too_deep", "invalid_utf8"), (lines[7], lines[3], lines[5])):
        r = by_reason[reason]  # quoted by a bounded excerpt and the hash of the bytes as read
        assert r["original_sha256"] == hashlib.sha256(line).hexdigest() and r["original_bytes"] == len(line)
        assert len(r["original"].encode("utf-8")) <= 16 << 10
        assert r["original"] == line[:len(r["original"])].decode("utf-8", "backslashreplace")
    assert by_reason["invalid_utf8"]["original"] == lines[5][0].decode("utf-8", "backslashreplace")
    for reason, line in (("number_too_large", lines[1][0]), ("lone_surrogate", lines[4][0])):
        assert by_reason[reason]["original"] == line.decode("utf-8")  # small and UTF-8: quoted whole
        assert "original_sha256" not in by_reason[reason]
    # The good records are kept unchanged: byte for byte what a log of them alone builds.
    rc, _ = cli_build(capsys, write_config(tmp_path, b"".join(json_bytes(r) + b"\n" for r in GOOD), "good.jsonl"),
                      tmp_path / "good")
    assert rc == 0
    assert (tmp_path / "o/train.jsonl").read_bytes() == (tmp_path / "good/train.jsonl").read_bytes()
    assert [(r["instruction"], r["score"]) for r in read_lines(tmp_path / "o/train.jsonl")] == \
        [(g["q"], g["s"]) for g in GOOD]


def test_every_reason_code_is_documented():
    guide = (REPO / "docs/data.md").read_text(encoding="utf-8")
    assert {"invalid_utf8", "number_too_large", "nesting_too_deep", "lone_surrogate"} <= set(REASONS)
    assert [code for code in REASONS if f"`{code}`" not in guide] == []


def _document(members: list[bytes], keys: list[str] | None) -> bytes:
    if keys is None:
        return b"[\n" + b",\n".join(members) + b"\n]\n"
    return b"{" + b", ".join(json_bytes(k) + b": " + v for k, v in zip(keys, members)) + b"}"


def _format_case(fmt: str, vendor, tmp_path) -> tuple[list[dict], list[str] | None, str, dict]:
    """(good records, their keys in a keyed document or None, the container, the source's options)."""
    if fmt == "fastchat":
        lines = (vendor / "fastchat-mt-bench/gpt-4_single.jsonl").read_text(encoding="utf-8").splitlines()
        return [json.loads(x) for x in lines[:12]], None, "jsonl", {}
    if fmt == "prometheus":
        return json.loads((vendor / "prometheus-eval/mt_bench_eval.json").read_text())[:6], None, "json", {}
    if fmt == "alpaca_eval":
        return json.loads((vendor / "alpaca-eval/annotations.json").read_text())[:8], None, "json", {}
    if fmt == "biggen":
        from .test_biggen_generic import synthetic_biggen

        records = synthetic_biggen(vendor, 12)
        return list(records.values()), list(records), "json", {}
    return GOOD, None, "json", {"columns": COLUMNS}


@pytest.mark.parametrize("fmt", ["fastchat", "prometheus", "alpaca_eval", "biggen", "jsonl"])
def test_every_reader_rejects_a_poisoned_record_alone(tmp_path, vendor, fmt):
    """One poisoned record of each kind, among a format's real records, in JSON Lines or inside a JSON
    document (a list; BiGGen's records keyed by id): each used to make the whole file unreadable (the
    document is decoded at once) or abort the build; now each is one reject with its own reason, and
    the good records build exactly as they do alone."""
    good, keys, container, options = _format_case(fmt, vendor, tmp_path)
    bad = [poisoned(good[0], "poison", payload) for payload in POISONS.values()]
    members = [json_bytes(r) for r in good]
    mixed = members[:1] + bad + members[1:]  # poisoned members between good ones
    mixed_keys = keys and keys[:1] + [f"poisoned-{reason}" for reason in POISONS] + keys[1:]
    builds = {}
    for name, body, body_keys in (("clean", members, keys), ("mixed", mixed, mixed_keys)):
        path = tmp_path / f"{name}.{container}"
        path.write_bytes(b"".join(x + b"\n" for x in body) if container == "jsonl" else _document(body, body_keys))
        source = {"path": str(path), "format": fmt, "name": "src", **options}
        builds[name] = build(None, tmp_path / name, "split.test_models=[]", "decontamination.eval_sets=[]",
                             sources=[source])
    clean, m = builds["clean"]["counts"], builds["mixed"]["counts"]
    assert_adds_up(builds["mixed"])
    assert m["read"] == clean["read"] + len(POISONS) and m["kept"] == clean["kept"] > 0
    assert m["by_reason"] == {**clean["by_reason"], **dict.fromkeys(POISONS, 1)}
    places = (2, 3, 4, 5)
    rejects = {r["line"]: r["reason"] for r in read_lines(tmp_path / "mixed/rejects.jsonl") if r["line"] in places}
    assert rejects == dict(zip(places, POISONS))  # each at its own place, with its own reason
    for split in ("train", "test"):
        assert (tmp_path / f"mixed/{split}.jsonl").read_bytes() == (tmp_path / f"clean/{split}.jsonl").read_bytes()


def test_a_poisoned_single_record_document_is_one_reject(tmp_path):
    """A pretty-printed document holding one record: the record is the document, poisoned whole."""
    path = tmp_path / "one.json"
    text = json.dumps(rec(f="@@poison@@"), indent=2).replace('"@@poison@@"', POISONS["lone_surrogate"].decode())
    path.write_text(text, encoding="utf-8")
    (raw,) = iter_file(path)
    assert (raw.line, raw.obj, raw.reason) == (1, None, "lone_surrogate") and raw.text == path.read_text()


def _utf8_column(values: list[bytes]):
    """An Arrow string column holding `values` unchecked: Arrow, like Parquet writers, does not check UTF-8."""
    import pyarrow as pa

    offsets = [0]
    for v in values:
        offsets.append(offsets[-1] + len(v))
    return pa.Array.from_buffers(pa.string(), len(values), [None, pa.array(offsets, pa.int32()).buffers()[1],
                                                            pa.py_buffer(b"".join(values))])


@pytest.mark.parametrize("container", ["parquet", "hub"])
def test_a_parquet_string_that_is_not_utf8_is_one_reject(tmp_path, container):
    """Converting the batch to Python raised UnicodeDecodeError and aborted the build (Parquet and a
    local Hugging Face dataset alike)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [dict(r) for r in GOOD]
    feedback = [r["f"].encode() for r in rows]
    feedback[1] = b"Correct \xff\xfe and short."
    table = pa.Table.from_pylist(rows).set_column(list(rows[0]).index("f"), "f", _utf8_column(feedback))
    path = tmp_path / "hub" if container == "hub" else tmp_path / "log.parquet"
    if container == "hub":
        path.mkdir()
    pq.write_table(table, path / "train.parquet" if container == "hub" else path)
    m = build(None, tmp_path / "o", "split.test_models=[]", sources=[jsonl_source(path)])
    assert m["counts"]["by_reason"] == {"invalid_utf8": 1} and m["counts"]["kept"] == 3
    assert_adds_up(m)
    (r,) = read_lines(tmp_path / "o/rejects.jsonl")
    assert r["line"] == 2 and "\\xff\\xfe" in r["original"]
    assert [k["feedback"] for k in read_lines(tmp_path / "o/train.jsonl")] == [GOOD[i]["f"] for i in (0, 2, 3)]


def test_a_store_row_with_a_lone_surrogate_is_one_reject(tmp_path):
    """The store's JSON columns can hold an escaped surrogate; the row's encoding aborted the build."""
    import sqlite3

    from judgeforge.data.store import JudgmentStore, LocalResult, Record, Request, TeacherResult

    path = tmp_path / "replica.db"
    with JudgmentStore(path) as store:
        for i in range(3):
            request = Request("absolute", f"{QUESTION} ({i})", (f"Blue light scatters most ({i}).",),
                              {"criteria": "Is the explanation correct?"}, None, (1, 5))
            store.put(Record(request, LocalResult("smollm2", 3, 0.4), escalated=True,
                             teacher=TeacherResult("gpt-4", "Correct and short.", 4, 2.0), replica="r1",
                             meta={"response_model": "model-a"}))
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE judgments SET meta = ? WHERE seq = 2", ('{"response_model": "model-\\ud800"}',))
    m = build(None, tmp_path / "o", "split.test_models=[]", sources=[{"path": str(path), "format": "store"}])
    assert m["counts"]["by_reason"] == {"lone_surrogate": 1} and m["counts"]["kept"] == 2
    (r,) = read_lines(tmp_path / "o/rejects.jsonl")
    assert r["line"] == 2 and '"model-\\ud800"' in r["original"]  # shown escaped, as JSON writes it
