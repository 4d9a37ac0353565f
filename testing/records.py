"""Synthetic prediction records (eval's predictions.jsonl layout) for tests, docs and demos, and judgment
stores for the store's fault tests (`fill_store`, `corrupt_pages`).

`synthetic_predictions` draws items whose local judge is right more often when it is confident:
item i gets a confidence c_i ~ U(lo, 1); the judge's vote equals GPT-4's first judgment with
probability c_i ** sharpness, else it is one point off. Each recorded sample writes the vote and
carries a completed distribution with mass c_i on it, so Grade.confidence == c_i.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from judgeforge.judge.parsing import ParseResult
from judgeforge.judge.scores import Judged


def _sample(vote: int, conf: float, values: list[int]) -> dict:
    rest = (1.0 - conf) / (len(values) - 1)
    probs = {str(v): (conf if v == vote else rest) for v in values}
    return Judged(ParseResult(score=vote, feedback="Feedback."), probs, f"Feedback. [RESULT] {vote}",
                  finish_reason="stop", n_tokens=5).to_record()


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


def store_record(i: int, *, teacher: bool = True, tag: str = "item", text_words: int = 60):
    """Item i's grading as a store record: about 1 KB of request text (so 400 rows span ~200 pages),
    escalated with the teacher's judgment when `teacher`."""
    from judgeforge.data.store import LocalResult, Record, Request, TeacherResult

    req = Request("absolute", f"[{tag} {i}] Explain step {i}. " + "explain " * 20, (f"answer {i} " * text_words,),
                  {"criteria": "Is it helpful?"}, None, (1, 5))
    local = LocalResult("fake-judge", 4, 0.69, {"3": 0.31, "4": 0.69}, {"4": 1}, "Good.")
    judgment = TeacherResult("gpt-4", f"Feedback on answer {i}: clear and right.", i % 5 + 1, 1.0) if teacher else None
    return Record(req, local, escalated=teacher, teacher=judgment, meta={"response_model": "model-x"})


def fill_store(path, n: int, **kw) -> None:
    """A judgment store of n gradings (`store_record`), closed cleanly."""
    from judgeforge.data.store import JudgmentStore

    with JudgmentStore(path) as store:
        for i in range(n):
            store.put(store_record(i, **kw))


PAGE = 4096  # SQLite's default page size, the stores' page size


def corrupt_pages(path, n_pages: int, seed: int = 18) -> list[int]:
    """Overwrite n_pages random pages from the middle half of the file with random bytes (seeded), as
    a failing disk or a stray writer would: the pages' numbers (0-based)."""
    rng, path = random.Random(seed), Path(path)
    total = path.stat().st_size // PAGE
    pages = sorted(rng.sample(range(total // 4, 3 * total // 4), min(n_pages, total // 2)))
    with open(path, "r+b") as f:
        for page in pages:
            f.seek(page * PAGE)
            f.write(rng.randbytes(PAGE))
    return pages


def all_floats(obj):
    """Every number in a metrics.json tree (bools aside): what a report's text may print."""
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        yield float(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from all_floats(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from all_floats(v)
