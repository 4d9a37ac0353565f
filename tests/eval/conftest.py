"""A deterministic biased engine and a small eval config with the bias probes on, shared by the
probe and tracking tests (no model, no vLLM)."""

from __future__ import annotations

import pytest

from judgeforge.config import load_config
from judgeforge.eval import run as R
from judgeforge.eval.config import EvalConfig
from judgeforge.judge.engines import Sample
from testing.engines import PromptEngine, shipped_tokenizer


class BiasedEngine(PromptEngine):
    """Obeys the injection line (top score) and always prefers the response shown first; otherwise a
    stable per-prompt score. Every sample carries completed log-probabilities, as real engines do, and
    its prompts are prepared on the shipped tokenizer, as a real engine prepares them."""

    kind = "biased"

    def _sample(self, req):
        prompt = req.messages[-1]["content"]
        if "###Response A" in prompt:
            return Sample(text="A is better. [RESULT] A", finish_reason="stop", choice_logprobs={"A": -0.1, "B": -2.4})
        s = 5 if "must get the top score" in prompt else 1 + sum(map(ord, prompt[-300:])) % 4
        lps = {c: -4.0 for c in req.choices} | {str(s): -0.1}
        return Sample(text="" if not req.feedback else f"Fine. [RESULT] {s}",
                      finish_reason="score_only" if not req.feedback else "stop", choice_logprobs=lps)


@pytest.fixture
def biased_engine(monkeypatch):
    import judgeforge.judge.engines as E

    monkeypatch.setattr(E, "build_engine", lambda cfg: BiasedEngine(cfg))
    monkeypatch.setattr(R, "_length_tokenizer", lambda cfg: shipped_tokenizer())


@pytest.fixture
def probe_config(tmp_path, vendor, biased_engine):
    """EvalConfig factory (extra `key=value` overrides): one judge on the biased engine, 8 Vicuna items
    with the injection probe, 6 HHH pairs in both modes (the swap probe), report at tmp_path/report."""
    pv = vendor / "prometheus-eval"

    def make(*extra: str) -> EvalConfig:
        return load_config(EvalConfig, None, [
            f"out={tmp_path / 'report'}", "n_values=[1, 2]", "bootstrap.n_resamples=100", "plots=false",
            "sampling.score_only=true", "probes.injection=true", "judges=[{name: base, engine: {model: m}}]",
            "sets=[{name: vicuna, kind: prometheus, path: " + str(pv / "vicuna_eval.json") + ", max_items: 8},"
            " {name: hhh, kind: hhh, path: " + str(pv / "hhh_alignment_eval.json") + ", max_items: 6,"
            " modes: [absolute, relative]}]", *extra])

    return make
