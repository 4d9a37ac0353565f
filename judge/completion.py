"""Score completion: after a judge sample, continue the same sequence with `[RESULT] ` and read the
exact probability of every choice (each score of the scale, or A/B). Pure logic, no frameworks:
an engine supplies the tokenizer's `encode`/`decode` and a way to read next-token log-probabilities
of given token ids after a given prefix; everything else is decided here.

    plan = plan_completion(tok, prompt_ids, gen_ids, text, choices)
    reads = engine_reads(plan.prefix, plan.reads())      # one engine step per read, prefix-cached
    logprobs = plan.combine(reads)                       # {choice: exact log-probability}

Where the continuation starts:
- the model wrote `[RESULT]`: the sequence is cut just before its LAST marker (the generated token
  ids up to there are kept as they are, so the engine's prefix cache covers them) and the marker is
  re-appended; the model's own score token is replaced by the read-out;
- the model ended its turn or hit max_tokens without the marker: the generated text gets
  ` [RESULT]` appended (the training target's form, `feedback [RESULT] n`);
- no feedback at all (score-only mode): the assistant turn starts with `[RESULT]`.

What a choice's probability is: each choice `c` is the token path of `[RESULT] c` after the shared
continuation (the tokenizer's own encoding in context, so " 3", "3" or "1","0" are whatever it would
have written). The probability of `c` is the product of its path's token probabilities; where a
choice's path is a proper prefix of another choice's path (1 and 10 on a 1-10 scale), it is further
multiplied by the probability that the next token neither continues into another choice nor adds a
digit, since "10" read as "1" would be wrong. The engine reads log-probabilities of exactly the token
ids asked for, out of the full vocabulary (never a top-k list that could miss one). A distribution
over the choices is then the renormalisation of these (see judge.scores).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from judgeforge.judge.parsing import last_marker_start
from judgeforge.judge.prompts import RESULT_MARKER


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


Node = tuple[int, ...]
"""Token ids after the plan's prefix at which next-token log-probabilities are read."""


@dataclass
class CompletionPlan:
    prefix: list[int]
    """Prompt ids + kept generated ids + the continuation's tokens shared by every choice."""
    paths: dict[str, list[int]]
    """Choice -> its token ids after `prefix`."""
    breakers: dict[str, list[int]] = field(default_factory=dict)
    """Choice whose path is a proper prefix of another's -> the tokens that would extend it."""
    kept_generated: int = 0
    """How many generated tokens the prefix keeps (the rest were the model's own `[RESULT] n`)."""
    wrote_marker: bool = False

    def reads(self) -> list[tuple[Node, list[int]]]:
        """(node, token ids to read there), in a fixed order: one engine step each."""
        want: dict[Node, set[int]] = {}
        for choice, path in self.paths.items():
            for i, tok in enumerate(path):
                want.setdefault(tuple(path[:i]), set()).add(tok)
            if choice in self.breakers:
                want.setdefault(tuple(path), set()).update(self.breakers[choice])
        return [(node, sorted(toks)) for node, toks in sorted(want.items(), key=lambda kv: (len(kv[0]), kv[0]))]

    def combine(self, reads: Sequence[dict[int, float]]) -> dict[str, float]:
        """Exact log-probability of every choice from the engine's answers to `reads()`."""
        at = {node: got for (node, _), got in zip(self.reads(), reads)}
        out = {}
        for choice, path in self.paths.items():
            lp = sum(at[tuple(path[:i])][tok] for i, tok in enumerate(path))
            if choice in self.breakers:
                node = at[tuple(path)]
                p_more = sum(math.exp(node[t]) for t in set(self.breakers[choice]))
                lp += math.log(max(1.0 - p_more, 1e-300))
            out[choice] = lp
        return out


def _common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    n = min(len(s) for s in seqs)
    for i in range(n):
        if len({s[i] for s in seqs}) > 1:
            return i
    return n


def _kept_tokens(tok: Tokenizer, gen_ids: Sequence[int], keep: str) -> tuple[int, str]:
    """The most generated tokens whose text is a prefix of `keep`, and the text left over."""
    j = len(gen_ids)
    while j > 0:
        head = tok.decode(gen_ids[:j])
        if keep.startswith(head):
            return j, keep[len(head):]
        j -= 1
    return 0, keep


def continuation(text: str, wrote_marker: bool) -> str:
    """Text appended before the choices: the marker, separated as training targets write it."""
    if wrote_marker or not text or text[-1].isspace():
        return RESULT_MARKER
    return " " + RESULT_MARKER


def plan_completion(tok: Tokenizer, prompt_ids: Sequence[int], gen_ids: Sequence[int], text: str,
                    choices: Sequence[str], numeric: bool | None = None) -> CompletionPlan:
    """Where to continue a sample (`gen_ids` decoded to `text`, end-of-turn token excluded)."""
    start = last_marker_start(text)
    keep = text[:start] if start is not None else text
    j, gap = _kept_tokens(tok, gen_ids, keep)
    cont = gap + continuation(keep, start is not None)
    encs = {c: tok.encode(cont + " " + c) for c in choices}
    shared = _common_prefix(list(encs.values()))
    # The last shared token may have been merged with a choice's first characters differently
    # per choice; paths must be non-empty, so back off until every choice keeps a token.
    shared = min(shared, min(len(e) for e in encs.values()) - 1)
    base = encs[choices[0]][:shared]
    paths = {c: e[shared:] for c, e in encs.items()}
    numeric = all(c.isdigit() for c in choices) if numeric is None else numeric
    breakers = {}
    for c, p in paths.items():
        longer = [q[len(p)] for d, q in paths.items() if d != c and len(q) > len(p) and q[:len(p)] == p]
        if longer and numeric:
            digits = []
            for d in "0123456789":
                e = tok.encode(cont + " " + c + d)
                if e[:shared + len(p)] == encs[c] and len(e) > shared + len(p):
                    digits.append(e[shared + len(p)])
            longer += digits
        if longer:
            breakers[c] = sorted(set(longer))
    return CompletionPlan(prefix=[*prompt_ids, *gen_ids[:j], *base], paths=paths, breakers=breakers,
                          kept_generated=j, wrote_marker=start is not None)
