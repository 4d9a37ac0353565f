"""LoRA targets: the recipe's names -> PEFT `target_modules` / `target_parameters`.

The BiGGen-Bench recipe adapts Mixtral's expert projections `w1`, `w2`, `w3`.
transformers 5 fuses each layer's experts into two 3-D parameters
(`experts.gate_up_proj` = w1 and w3 stacked, `experts.down_proj` = w2), which
PEFT reaches with `target_parameters`, not `target_modules`. `resolve_targets`
maps the names and refuses any name that hits nothing, so a config can never
silently train fewer weights than it says; `fused_patterns` gives the fused w1+w3
parameter twice the rank and alpha, so it keeps the capacity of their two LoRAs.
"""

from __future__ import annotations

import re

from judgeforge.config import ConfigError

# Mixtral's pre-transformers-5 expert Linear names -> the fused parameter holding them.
LEGACY_EXPERTS = {"w1": "experts.gate_up_proj", "w3": "experts.gate_up_proj", "w2": "experts.down_proj"}


def resolve_targets(requested: list[str], module_names: list[str],
                    param_names: list[str]) -> tuple[list[str], list[str]]:
    """Split `requested` into (target_modules, target_parameters) for this model.

    `module_names`: names of the model's Linear/Embedding modules; `param_names`: names of
    parameters owned by other modules (fused experts). Matching is by dotted suffix, as in PEFT.
    """
    def hits(names: list[str], suffix: str) -> bool:
        return any(n == suffix or n.endswith("." + suffix) for n in names)

    modules: list[str] = []
    params: list[str] = []
    for name in requested:
        if hits(module_names, name):
            modules.append(name)
        elif hits(param_names, name):
            params.append(name)
        elif name in LEGACY_EXPERTS and hits(param_names, LEGACY_EXPERTS[name]):
            params.append(LEGACY_EXPERTS[name])
        else:
            sample = sorted({n.rsplit(".", 1)[-1] for n in module_names})[:20]
            raise ConfigError(f"lora.target_modules: {name!r} matches no module or parameter of this "
                              f"model (module names: {sample})")
    fused = {"w1", "w3"} & set(requested)
    if fused and fused != {"w1", "w3"} and "experts.gate_up_proj" in params:
        raise ConfigError("lora.target_modules: w1 and w3 are one fused parameter "
                          "(experts.gate_up_proj) in this model; list both or neither")
    return list(dict.fromkeys(modules)), list(dict.fromkeys(params))


def model_target_names(model) -> tuple[list[str], list[str]]:
    """(Linear/Embedding module names, names of parameters owned by other modules)."""
    import torch.nn as nn

    leaf_types = (nn.Linear, nn.Embedding)
    modules = [n for n, m in model.named_modules() if isinstance(m, leaf_types)]
    params = [f"{n}.{p}" if n else p for n, m in model.named_modules()
              if not isinstance(m, leaf_types) for p, _ in m.named_parameters(recurse=False)]
    return modules, params


def lora_config(cfg, model):
    """The PEFT LoraConfig for `cfg.lora` on `model` (targets resolved as above)."""
    from peft import LoraConfig

    modules, params = resolve_targets(cfg.lora.target_modules, *model_target_names(model))
    ranks, alphas = fused_patterns(cfg.lora.target_modules, params, cfg.lora.r, cfg.lora.alpha)
    return LoraConfig(
        r=cfg.lora.r, lora_alpha=cfg.lora.alpha, bias=cfg.lora.bias, task_type="CAUSAL_LM",
        target_modules=modules or [], target_parameters=params or None,
        rank_pattern=ranks, alpha_pattern=alphas,
        # PEFT refuses dropout on parameter targets; module targets get it from apply_dropout.
        lora_dropout=0.0 if params else cfg.lora.dropout,
    )


def fused_patterns(requested: list[str], params: list[str], r: int, alpha: int) -> tuple[dict, dict]:
    """PEFT `rank_pattern` / `alpha_pattern` for the fused expert parameters the legacy names map onto.

    w1 and w3 are two matrices the recipe gives a LoRA each (rank r); transformers 5 stacks them into
    one `experts.gate_up_proj`, so one rank-r LoRA there would have half their capacity. It gets rank 2r
    and alpha 2 x alpha instead (the same alpha / r scaling): what PEFT's own conversion of a v4 Mixtral
    adapter gives it (peft.utils.transformers_weight_conversion), and able to hold the two separate
    rank-r updates exactly (lora_A stacked, lora_B block-diagonal). PEFT matches a pattern key as a
    regex against the end of the parameter's name (peft.utils.other.get_pattern_key)."""
    fused = LEGACY_EXPERTS["w1"]
    if not {"w1", "w3"} <= set(requested) or fused not in params:
        return {}, {}
    key = re.escape(fused)
    return {key: 2 * r}, {key: 2 * alpha}


def apply_dropout(model, p: float, adapter: str = "default") -> int:
    """Give every module-target LoRA layer input dropout `p` (parameter targets keep none).

    Returns the number of layers changed. Dropout only acts in training, so the saved
    adapter (whose config says 0.0 when parameter targets exist) serves the same.
    """
    import torch.nn as nn
    from peft.tuners.lora import LoraLayer
    from peft.tuners.lora.layer import ParamWrapper

    n = 0
    for module in model.modules():
        if isinstance(module, LoraLayer) and not isinstance(module, ParamWrapper) \
                and adapter in module.lora_dropout:
            module.lora_dropout[adapter] = nn.Dropout(p) if p > 0 else nn.Identity()
            n += 1
    return n


def lora_summary(model) -> dict:
    """Which weights carry LoRA: module names and parameter names, and trainable counts."""
    from peft.tuners.lora import LoraLayer
    from peft.tuners.lora.layer import ParamWrapper

    modules, params = [], []
    for name, module in model.named_modules():
        if isinstance(module, ParamWrapper):
            params.append(f"{name}.{module.parameter_name}")
        elif isinstance(module, LoraLayer):
            modules.append(name)
    # Under ZeRO-3 a parameter is this rank's partition (numel 0 outside a gather); ds_numel is its size.
    trainable = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters() if p.requires_grad)
    return {"modules": modules, "parameters": params, "trainable_params": trainable}
