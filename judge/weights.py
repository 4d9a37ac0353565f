"""Where a judge's weights come from: a model name resolved to what `from_pretrained` takes, and a
LoRA adapter folded into its base.

`default` is the embedded base (judgeforge.models fetches and converts it; `gemma3-270m` and any
other name in its EMBEDDED_BASES likewise); `default-judge` is the `default` base with the shipped
adapter (judgeforge/default_judge/) merged in once, cached under the adapter's content hash.
Merging lives here, in the judge layer, and not in train/: resolving `default-judge` needs it
wherever a judge is loaded (the engines, the tokenizers). `judgeforge train merge` (train/merge.py)
is the command over `merge_adapter`.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Callable

from judgeforge.io import atomic_dir, atomic_write_json, check_out
from judgeforge.judge.adapters import META_FILE, check_template_version, read_meta
from judgeforge.models import (DEFAULT_JUDGE, DEFAULT_MODEL, EMBEDDED_BASES, SHIPPED_ADAPTER,
                               default_judge_dir, embedded_base, ensure_default_model, ensure_model)

log = logging.getLogger(__name__)


def resolve_model(name: str | None) -> str:
    """Map a model name from a config to something `from_pretrained` accepts.

    `default` (or empty), `gemma3-270m` (judgeforge.models.EMBEDDED_BASES) -> the converted embedded
    model directory, `default-judge` -> the merged trained judge (all prepared on first use); an
    existing local path -> its absolute path; anything else is passed through as a hub id.
    """
    base = embedded_base(name)
    if base is not None:
        return str(ensure_model(base))
    if name == DEFAULT_JUDGE:
        return str(ensure_default_judge())
    p = Path(os.path.expanduser(name))
    if p.exists():
        return str(p.resolve())
    return name


def adapter_base(adapter: Path) -> str:
    """The base an adapter dir was trained on: its judgeforge.json's, else its adapter_config's."""
    return read_meta(adapter).get("base_model") or \
        json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]


def merge_adapter(adapter: Path, out: Path, base: str | None = None, dtype: str = "auto",
                  extra: Callable[[Path], object] | None = None, *, overwrite: bool = False,
                  kind: str | None = "model") -> Path:
    """Fold the LoRA adapter dir `adapter` into `base` (default: `adapter_base`) and publish a plain
    model dir at `out` atomically: the merged weights, the adapter's tokenizer (the base's when the
    adapter saved none) and its judgeforge.json plus `merged_from`. `extra(staging)` adds files.
    An earlier merged model at `out` is replaced only with `overwrite` (checked before the merge);
    `kind` None: `out` is the model cache's own, replaced whatever it holds."""
    if kind is not None:  # before the heavy imports: a refused --out fails at once
        check_out(out, kind, overwrite=overwrite)
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    meta = read_meta(adapter)
    base = base or adapter_base(adapter)
    log.info("merging %s into %s (%s) -> %s", adapter, base, dtype, out)
    # `auto`: the base's own dtype (config.json), so a bf16 8x7B merges in ~93 GB of host memory, not 190
    model = AutoModelForCausalLM.from_pretrained(resolve_model(base),
                                                 dtype="auto" if dtype == "auto" else getattr(torch, dtype))
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    with atomic_dir(out, kind, overwrite=overwrite) as tmp:
        merged.save_pretrained(tmp)
        tokenizer_dir = adapter if (adapter / "tokenizer_config.json").is_file() else resolve_model(base)
        AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(tmp)
        atomic_write_json(tmp / META_FILE, {**meta, "merged_from": str(adapter.resolve())})
        if extra is not None:
            extra(tmp)
    return out


def ensure_default_judge(force: bool = False) -> Path:
    """The base with the shipped adapter merged in (cached by the adapter's content)."""
    final = default_judge_dir()
    if (final / "config.json").is_file() and not force:
        return final
    ensure_default_model()
    check_template_version(SHIPPED_ADAPTER, required=False)
    log.info("merging the shipped default-judge adapter into %s -> %s", DEFAULT_MODEL, final)
    return merge_adapter(SHIPPED_ADAPTER, final, base=DEFAULT_MODEL, kind=None)  # the cache's own directory


def main(argv: list[str] | None = None) -> int:
    """`judgeforge model prepare`: fetch and convert the embedded base (`default`) and merge the
    shipped trained adapter into it (`default-judge`); `--model gemma3-270m`: that base alone."""
    import argparse

    p = argparse.ArgumentParser(prog="judgeforge model prepare", description=main.__doc__)
    p.add_argument("--model", default=DEFAULT_MODEL, choices=sorted(EMBEDDED_BASES),
                   help="which embedded base (default: %(default)s); the shipped adapter is `default`'s")
    p.add_argument("--force", action="store_true", help="rebuild even if cached")
    p.add_argument("--base-only", action="store_true", help="only the untrained base (`default`)")
    args = p.parse_args(argv)
    if args.model != DEFAULT_MODEL:
        print(ensure_model(EMBEDDED_BASES[args.model], force=args.force))
        return 0
    print(ensure_default_model(force=args.force))
    if not args.base_only:
        print(ensure_default_judge(force=args.force))
    return 0
