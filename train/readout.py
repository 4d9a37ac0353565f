"""The score-only read of a judge being trained, in torch: where serving reads a score, and its value.

`score_readout` is the serving plan of a scale (judge.completion) as a `ranking.Readout`; the rest
reads it from the model in one left-padded forward pass whose LM head runs on the readout's last
positions only (`logits_to_keep`): the exact log-probability of each value, multi-token values and
their breakers included, and E[score]. train/ranking.py holds the numpy reference it is tested
against. Both score losses read through here: the RankNet term (train/distill.py) and the soft
targets (train/soft.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from judgeforge.config import ConfigError
from judgeforge.train import ranking


def score_readout(tokenizer, scale: tuple[int, int]) -> ranking.Readout:
    """The score-only read of `scale` for this tokenizer (judge.completion's plan, as serving reads it)."""
    from judgeforge.judge.completion import plan_completion
    from judgeforge.judge.engines.base import TokenizerView

    values = list(range(scale[0], scale[1] + 1))
    plan = plan_completion(TokenizerView(tokenizer), [], [], "", [str(v) for v in values])
    try:
        return ranking.readout_from_plan(plan, 0, values)
    except ValueError as e:
        raise ConfigError(f"distill.scale {list(scale)}: {e}") from None


def absolute_prompt_ids(tokenizer, instruction: str, response: str, rubric: dict, reference: str | None,
                        scale: tuple[int, int], r: ranking.Readout) -> list[int]:
    """Chat-templated absolute prompt of one response (exactly the served prompt) + `[RESULT] ` + chain."""
    from judgeforge.judge.engines.base import prompt_token_ids
    from judgeforge.judge.prompts import Rubric, Scale, absolute_messages

    msgs = absolute_messages(instruction, response, Rubric.from_dict(rubric), reference, Scale(*scale))
    return prompt_token_ids(tokenizer, msgs) + r.suffix


def choice_logprobs(rows: torch.Tensor, r: ranking.Readout) -> torch.Tensor:
    """[N, rows, vocab] next-token log-probs -> [N, values] exact log-probability of each value."""
    out = []
    for path, brk in zip(r.paths, r.breakers):
        lp = sum(rows[:, i, t] for i, t in enumerate(path))
        if brk:
            p_more = rows[:, len(path), list(brk)].exp().sum(-1)
            lp = lp + torch.log((1.0 - p_more).clamp(min=ranking.MIN_REST))
        out.append(lp)
    return torch.stack(out, dim=-1)


def expected_scores(model, seqs: list[list[int]], r: ranking.Readout, pad_id: int,
                    unpadded: bool = False) -> torch.Tensor:
    """E[score] of each sequence (prompt + readout suffix) in one left-padded forward pass, or with
    `unpadded` one forward per sequence. Why: a padded batch needs an attention mask, and with a mask
    CPU attention keeps every layer's [heads, n, n] scores for the backward pass; alone, a sequence gets
    the causal kernel (a training pair step of two ~2k-token FastChat prompts: 1.54x faster, peak RSS
    10.6 -> 7.1 GB; bench/pair_loss_bench.py)."""
    if unpadded:
        return torch.cat([expected_scores(model, [s], r, pad_id) for s in seqs])
    dist = value_logprobs(model, seqs, r, pad_id).softmax(-1)
    return dist @ torch.tensor(r.values, dtype=dist.dtype, device=dist.device)


def value_logprobs(model, seqs: list[list[int]], r: ranking.Readout, pad_id: int) -> torch.Tensor:
    """[N, values] exact log-probability of each scale value after each sequence (prompt + readout
    suffix), from one left-padded forward pass whose LM head runs on the last `r.rows` positions only."""
    device = next(model.parameters()).device
    if len(seqs) == 1:  # nothing to pad: no mask, so attention runs the causal kernel
        out = model(input_ids=torch.tensor(seqs, device=device), logits_to_keep=r.rows, use_cache=False)
        return choice_logprobs(F.log_softmax(out.logits[:, -r.rows:, :].float(), dim=-1), r)
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s):] = torch.tensor(s)
        mask[i, width - len(s):] = 1
    # Positions count real tokens only, so a padded row is read exactly as the unpadded prompt is served.
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=pos.to(device),
                logits_to_keep=r.rows, use_cache=False)
    return choice_logprobs(F.log_softmax(out.logits[:, -r.rows:, :].float(), dim=-1), r)
