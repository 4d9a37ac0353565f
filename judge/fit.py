"""Serving settings that follow the judge: what an engine config leaves unset (None) is read from the
judge it serves, so a recipe's judge (LoRA r=256, trained at 4096 tokens, 93 GB of weights) serves
without hand-tuned flags.

- `max_lora_rank`: the largest rank among the served adapters (their `adapter_config.json`, `r` and
  every `rank_pattern` entry), rounded up to a rank vLLM accepts.
- `max_model_len`: the length the judge was trained at (`data.max_length` of the training config an
  adapter or a merged judge carries), else `DEFAULT_MODEL_LEN`.
- `tensor_parallel_size` (vLLM on GPUs): the fewest GPUs, a power of two, whose memory holds the
  weights with room for the KV cache.

No torch here: files and numbers only.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from judgeforge.config import ConfigError

log = logging.getLogger(__name__)

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vllm.config.lora.MaxLoRARanks
DEFAULT_LORA_RANK = 16
DEFAULT_MODEL_LEN = 2048
WEIGHTS_SHARE = 0.75  # of a GPU's usable memory the weights may take: the rest is KV cache and activations


def lora_rank(adapters: dict[str, str]) -> int:
    """The smallest rank vLLM accepts that holds every adapter's largest rank (16 with none)."""
    ranks = [_adapter_rank(Path(p)) for p in adapters.values()]
    need = max(ranks, default=DEFAULT_LORA_RANK)
    fit = next((r for r in VLLM_LORA_RANKS if r >= need), None)
    if fit is None:
        raise ConfigError(f"an adapter has LoRA rank {need}; vLLM serves ranks up to {VLLM_LORA_RANKS[-1]}: "
                          "merge it (`judgeforge train merge`) and serve the merged model")
    return fit


def _adapter_rank(adapter: Path) -> int:
    try:
        conf = json.loads((adapter / "adapter_config.json").read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"adapter {adapter}: no readable adapter_config.json ({e})") from None
    return max([int(conf.get("r", 0)), *(int(v) for v in (conf.get("rank_pattern") or {}).values())])


def trained_length(model_dir: str | None, adapters: dict[str, str]) -> int | None:
    """The longest `data.max_length` among the judge's training configs (None: none recorded)."""
    dirs = [Path(p) for p in adapters.values()]
    if model_dir is not None and Path(model_dir).is_dir():
        dirs.append(Path(model_dir))
        merged_from = _meta(Path(model_dir)).get("merged_from")
        if merged_from:
            dirs.append(Path(merged_from))
    lengths = [n for d in dirs if (n := _config_length(d)) is not None]
    return max(lengths, default=None)


def _meta(d: Path) -> dict:
    try:
        meta = json.loads((d / "judgeforge.json").read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _config_length(d: Path) -> int | None:
    import yaml

    try:
        conf = yaml.safe_load((d / "config.yaml").read_text())
        return int(conf["data"]["max_length"])
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError):
        return None


def tensor_parallel(weight_bytes: int, gpu_bytes: int, n_gpus: int, utilization: float) -> int:
    """The fewest GPUs (a power of two, at most `n_gpus`) whose usable memory holds the weights."""
    usable = gpu_bytes * utilization * WEIGHTS_SHARE
    t = 1
    while weight_bytes / t > usable and t * 2 <= n_gpus:
        t *= 2
    if weight_bytes / t > usable:
        raise ConfigError(f"the judge's weights ({weight_bytes / 2**30:.0f} GiB) do not fit on the "
                          f"{n_gpus} GPU(s) here ({gpu_bytes / 2**30:.0f} GiB each at "
                          f"gpu_memory_utilization {utilization}): use more GPUs or set tensor_parallel_size")
    return t


def weight_bytes(model_dir: str) -> int:
    """Bytes of a local model's weight files (0 for a hub id not downloaded)."""
    d = Path(model_dir)
    return sum(f.stat().st_size for pat in ("*.safetensors", "*.bin") for f in d.glob(pat)) if d.is_dir() else 0


def fit_to_judge(cfg, model_dir: str | None):
    """`cfg` (an EngineConfig) with its unset LoRA rank and length read from the judge."""
    update = {}
    if cfg.max_lora_rank is None:
        update["max_lora_rank"] = lora_rank(cfg.adapters)
    if cfg.max_model_len is None:
        update["max_model_len"] = trained_length(model_dir, cfg.adapters) or DEFAULT_MODEL_LEN
    told = {k: v for k, v in update.items() if k != "max_lora_rank" or cfg.adapters}  # a rank alone means nothing
    if told:
        log.info("serving settings from the judge: %s", ", ".join(f"{k}={v}" for k, v in told.items()))
    return cfg.model_copy(update=update)


def _adapter_config(adapter: str) -> dict:
    try:
        conf = json.loads((Path(adapter) / "adapter_config.json").read_text())
    except (OSError, ValueError):
        return {}
    return conf if isinstance(conf, dict) else {}


def vllm_unsupported(adapter: str) -> list[str]:
    """What of an adapter vLLM's per-request LoRA cannot apply: fused expert parameters (PEFT
    `target_parameters`: PEFT saves a Mixtral's under transformers 5's `mlp.experts`, vLLM's Mixtral
    keeps `block_sparse_moe.experts` in the 2-D per-expert layout) and LoRA on the vocabulary layers
    (vLLM 0.32 takes none on `lm_head` or `embed_tokens` for Llama/Mistral/Mixtral: its worker
    raises at the first request and the engine dies)."""
    conf = _adapter_config(adapter)
    targets = conf.get("target_modules") or []
    targets = [targets] if isinstance(targets, str) else list(targets)
    vocab = [t for t in targets if t.split(".")[-1] in ("lm_head", "embed_tokens")]
    saved = [m for m in conf.get("modules_to_save") or [] if m.split(".")[-1] in ("lm_head", "embed_tokens")]
    return [*(conf.get("target_parameters") or []), *vocab, *saved]


def refuse_for_vllm(adapters: dict[str, str]) -> None:
    """Refuse, before the engine starts, an adapter vLLM would ignore in part or die on (see
    `vllm_unsupported`): the merged model serves the same judge."""
    for name, path in adapters.items():
        if parts := vllm_unsupported(path):
            raise ConfigError(f"adapter {name!r} ({path}) trains {parts}, which vLLM's per-request LoRA cannot "
                              "apply: merge it (`judgeforge train merge --adapter ADAPTER --out DIR`) and serve "
                              "the merged model, or serve it per request on the transformers engine")
