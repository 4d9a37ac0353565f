"""A small random LoRA adapter on a local base model (for tests and the LoRA benchmark), and the config
overrides that serve adapters."""

from __future__ import annotations

from pathlib import Path


def make_lora_adapter(base_dir: str | Path, out_dir: str | Path, r: int = 8, seed: int = 0,
                      template_version: str | None = None, targets: tuple[str, ...] = ("q_proj", "v_proj"),
                      target_parameters: tuple[str, ...] = (), scale: float | None = None) -> Path:
    """A small random-initialised PEFT LoRA adapter on `targets` (q/v by default; `target_parameters`:
    fused parameters such as a Mixtral's experts), with the `judgeforge.json` a `judgeforge train` run
    writes (for tests and the LoRA benchmark). `scale`: multiply the random B matrices (large ranks
    would otherwise swamp a tiny model's outputs)."""
    import json

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from judgeforge.judge.adapters import META_FILE, new_meta

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    cfg = LoraConfig(r=r, lora_alpha=2 * r, target_modules=list(targets), lora_dropout=0.0,
                     target_parameters=list(target_parameters) or None,
                     init_lora_weights=False)  # random B: the adapter visibly changes outputs
    peft_model = get_peft_model(model, cfg)
    if scale is not None:
        with torch.no_grad():
            for name, p in peft_model.named_parameters():
                if "lora_B" in name:
                    p.mul_(scale)
    out = Path(out_dir)
    peft_model.save_pretrained(out)
    meta = new_meta(base_model=str(base_dir))
    if template_version:
        meta["template_version"] = template_version
    (out / META_FILE).write_text(json.dumps(meta))
    return out


def adapter_overrides(adapters: dict[str, str | Path]) -> list[str]:
    """`engine.adapters.<name>=<path>` config overrides serving `adapters` (name -> adapter dir)."""
    return [f"engine.adapters.{name}={path}" for name, path in adapters.items()]
