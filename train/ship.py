"""`judgeforge model ship`: make a trained adapter the shipped `default-judge` (maintainers).

    judgeforge model ship --adapter runs/curve/score/r2/train --command "python bench/learning_curve.py ..."

Copies the adapter (weights in bf16: half the bytes, and PEFT upcasts adapter weights to the
base's float32 when it loads them), its tokenizer and config into judgeforge/default_judge/,
and adds to its judgeforge.json the command that trained it (the data manifest hashes are there
already). `judgeforge model prepare` then merges it into the base as `default-judge`.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from judgeforge.models import SHIPPED_ADAPTER

log = logging.getLogger(__name__)


def ship_adapter(adapter: str | Path, command: str, dest: Path = SHIPPED_ADAPTER) -> Path:
    """Copy `adapter` (a run dir or its adapter/) to `dest` as the shipped judge; returns `dest`.
    Shipping replaces the adapter at `dest` by design, but never a directory that is not one."""
    from judgeforge.io import atomic_dir, atomic_write_json, check_out

    check_out(dest, "adapter", overwrite=True)  # before torch is imported: a refusal is immediate
    import json
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from judgeforge.judge.adapters import META_FILE, read_meta
    from judgeforge.train.run import adapter_path

    src = adapter_path(str(adapter))
    with atomic_dir(dest, "adapter", overwrite=True) as tmp:
        for f in src.iterdir():
            if f.name not in ("adapter_model.safetensors", META_FILE) and f.is_file() and \
                    (f.suffix in (".json", ".jinja") or f.name == "config.yaml"):
                shutil.copy2(f, tmp / f.name)
        weights = {k: v.to(torch.bfloat16) for k, v in load_file(src / "adapter_model.safetensors").items()}
        save_file(weights, tmp / "adapter_model.safetensors", metadata={"format": "pt"})
        meta = {**read_meta(src), "command": command, "shipped_from": str(src), "weights_dtype": "bfloat16"}
        atomic_write_json(tmp / META_FILE, meta)
    log.info("shipped %s as the default judge (%s)", src, json.dumps(meta.get("data")))
    return dest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="judgeforge model ship", description=__doc__.split("\n\n")[0])
    p.add_argument("--adapter", required=True, help="a train run dir or its adapter/ dir")
    p.add_argument("--command", required=True, help="the command that trained it (recorded)")
    p.add_argument("--dest", type=Path, default=SHIPPED_ADAPTER,
                   help="where the shipped adapter goes (default: %(default)s, the package's default judge)")
    args = p.parse_args(argv)
    print(ship_adapter(args.adapter, args.command, args.dest))
    return 0
