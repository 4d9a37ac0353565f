"""n-gram decontamination (the benchmark-leakage check): a training text is
contaminated when it shares any word-level n-gram (default 13) with an
evaluation text. n-grams are kept as a set of 64-bit hashes, so a check costs
one normalisation and one hash per word (a hash collision, ~2^-64 per pair,
could only flag a text, never miss one). Texts shorter than n words have no
n-gram and never match.
"""

from __future__ import annotations

import re
from typing import Iterable

_WORD_RE = re.compile(r"\w+")


def normalise(text: str) -> list[str]:
    """Lowercased word tokens, punctuation and whitespace dropped."""
    return _WORD_RE.findall(text.lower())


def ngram_hashes(text: str, n: int) -> set[int]:
    words = normalise(text)
    if len(words) < n:
        return set()
    # zip over n shifted views yields every n-gram as a tuple, in C.
    return set(map(hash, zip(*(words[k:] for k in range(n)))))


class NgramIndex:
    """Hashed n-grams of the evaluation texts; `contaminated(text)` is memoised per distinct text."""

    def __init__(self, texts: Iterable[str], n: int = 13):
        self.n = n
        self.grams: set[int] = set()
        self.texts = 0
        for t in texts:
            self.texts += 1
            self.grams |= ngram_hashes(t, n)
        self._memo: dict[str, bool] = {}

    def contaminated(self, text: str | None) -> bool:
        if not text or not self.grams:
            return False
        hit = self._memo.get(text)
        if hit is None:
            words = normalise(text)
            n = self.n
            grams = self.grams
            hit = len(words) >= n and any(hash(g) in grams for g in zip(*(words[k:] for k in range(n))))
            self._memo[text] = hit
        return hit
