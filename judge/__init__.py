"""judgeforge.judge: the judge core. Items -> prompt -> engine samples -> completed scores -> votes.

    prompts.py     the prompt contract: Prometheus-2 prompts, `[RESULT]`, Scale, Rubric, presets
    items.py       GradeItem (absolute) / CompareItem (relative): the one place items become messages
    engines/       the engine contract (base.py) and its registry: vllm, transformers, openai
    completion.py  where a sample is continued with `[RESULT] ` and how choice probabilities combine
    parsing.py     what the judge wrote after its last `[RESULT]`
    scores.py      distributions over the scale, one read sample (`Judged`)
    voting.py      self-consistency votes -> Grade / Comparison (score, distribution, confidence)
    judge.py       `Judge`: the one path the API, the client and evaluation grade through
    adapters.py    the `judgeforge.json` metadata of trained adapters and merged judges
    weights.py     model names -> weights (`default`, `default-judge`), adapters merged into their base
    config.py      EngineConfig, SamplingConfig
"""
