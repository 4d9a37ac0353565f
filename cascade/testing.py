"""Synthetic prediction records (eval's predictions.jsonl layout) for tests, docs and demos.

`synthetic_predictions` draws items whose local judge is right more often when it is confident:
item i gets a confidence c_i ~ U(lo, 1); the judge's vote equals GPT-4's first judgment with
probability c_i ** sharpness, else it is one point off. Each recorded sample writes the vote and
carries a completed distribution with mass c_i on it, so Grade.confidence == c_i.
"""

from __future__ import annotations

import numpy as np


def _sample(vote: int, conf: float, values: list[int]) -> dict:
    rest = (1.0 - conf) / (len(values) - 1)
    probs = {str(v): (conf if v == vote else rest) for v in values}
    return {"text": f"Feedback. [RESULT] {vote}", "score": vote, "verdict": None, "reason": None,
            "probs": probs, "finish_reason": "stop", "n_tokens": 5, "completion": None}


def synthetic_predictions(n: int, *, judge: str = "local", set_name: str = "heldout", seed: int = 0,
                          n_samples: int = 3, lo: float = 0.3, sharpness: float = 1.0,
                          scale: tuple[int, int] = (1, 5)) -> list[dict]:
    rng = np.random.default_rng(seed)
    values = list(range(scale[0], scale[1] + 1))
    out = []
    for i in range(n):
        quality = int(rng.integers(scale[0], scale[1] + 1))
        gpt4 = [int(np.clip(quality + rng.choice([-1, 0, 0, 0, 1]), scale[0], scale[1])) for _ in range(3)]
        conf = float(rng.uniform(lo, 1.0))
        right = rng.random() < conf ** sharpness
        step = 1 if rng.random() < 0.5 else -1  # one point off, staying on the scale
        wrong = gpt4[0] + step if scale[0] <= gpt4[0] + step <= scale[1] else gpt4[0] - step
        vote = gpt4[0] if right else wrong
        out.append({"judge": judge, "set": set_name, "mode": "absolute", "item_id": f"item{i:04d}",
                    "unit": "item", "category": None, "response_model": "m", "ref": sum(gpt4) / 3,
                    "ref_samples": gpt4, "length": None,
                    "samples": [_sample(vote, conf, values) for _ in range(n_samples)]})
    return out
