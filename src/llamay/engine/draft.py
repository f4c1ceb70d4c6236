"""Drafting for speculative decoding: guesses of a sequence's next tokens, which the scheduler checks in one
forward pass. A guess never changes what is emitted, only how many tokens a pass emits.

Modes (MODES): none; ngram (prompt lookup, below); tree (continuations the radix tree holds from other
branches of the same prefix, n-gram lookup where it holds none); draft (a smaller model of the same
vocabulary: draft_model.py).

N-gram lookup: the sequence's last n tokens (n = ngram_max down to 1) are looked up among everything before
them, prompt and output, and what followed their latest occurrence is the draft. An index from each n-gram
to where it last ended makes a step O(ngram_max + draft length), however long the sequence.

The draft length (1, 3, 7 or 15: steps of 2, 4, 8, 16 tokens) is chosen per step to maximise the tokens
expected per unit of cost: with p the chance that a draft token is right (estimated per source, the match
length or the tree, from this sequence's own outcomes, recent ones weighing more), a draft of k tokens emits
1 + p + ... + p^k tokens in a step costing SPEC.step_cost plain steps. Where no length pays, nothing is sent
and the guess is only compared with the token that follows (free): an n-gram match sends nothing until such
guesses have been right, so text with nothing to look up costs a lookup per token and no pass."""
from __future__ import annotations

from collections.abc import Callable

from ..settings import SPEC

MODES = ("none", "ngram", "tree", "draft")
TREE, DRAFT = -1, -2  # the source keys of tree continuations and draft-model drafts (n-gram ones: match length)
# (right, tried) before any outcome, per source; outweighed by the first few. A draft model has no free
# guesses: its steps without a draft decay its outcomes back toward its prior
PRIORS = {TREE: (0.9, 1.0), DRAFT: (0.7, 1.0)}
PRIOR = (0.0, 1.0)  # n-gram matches: p = 0 before a free guess is right; then a length not yet tried starts
# from every length's outcomes pooled
DECAY = 0.9  # per outcome, the weight left to the older ones


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"spec must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def best_length(p: float, cost: dict[int, float], limit: int, per_token: float = 0.0) -> int:
    """The draft length (a key of cost, at most limit; 0: none) with the most tokens expected per plain
    step's cost, each draft token costing per_token more (a draft model's pass)."""
    p = min(p, 0.999)
    best, best_k = 1.0, 0
    for k, step in cost.items():
        value = (1 + p * (1 - p ** k) / (1 - p)) / (step + k * per_token)
        if k <= limit and value > best:
            best, best_k = value, k
    return best_k


def step_costs(step_cost: tuple[float, ...] = SPEC.step_cost) -> dict[int, float]:
    """draft length -> its step's cost: step_cost[i] is a step of 2^(i+1) tokens relative to a plain one."""
    return {2 ** (i + 1) - 1: cost for i, cost in enumerate(step_cost)}


class Outcomes:
    """How often draft tokens were right, per source, recent outcomes weighing more."""

    def __init__(self):
        self._seen: dict[int, tuple[float, float]] = {}  # source -> (right, tried), decayed

    def p(self, source: int) -> float:
        right, tried = self._seen.get(source, (0.0, 0.0))
        prior = PRIORS.get(source) or (self._pooled(), 1.0)
        return (right + prior[0]) / (tried + prior[1])

    def _pooled(self) -> float:
        """p over every n-gram match length's outcomes together."""
        seen = [v for source, v in self._seen.items() if source > 0]
        return (sum(r for r, _ in seen) + PRIOR[0]) / (sum(t for _, t in seen) + PRIOR[1])

    def learn(self, source: int, right: int, tried: int):
        old_right, old_tried = self._seen.get(source, (0.0, 0.0))
        self._seen[source] = (DECAY * old_right + right, DECAY * old_tried + tried)


class NgramDrafter:
    group = None  # drafters that draft together (draft_model.py); None: each on its own

    def __init__(self, ngram_max: int = SPEC.ngram_max, step_cost: tuple[float, ...] = SPEC.step_cost):
        self.ngram_max = ngram_max
        self._cost = step_costs(step_cost)
        self.tokens: list[int] = []  # the sequence as far as seen: a prefix of what propose is given
        self._after: dict[tuple[int, ...], int] = {}  # n-gram -> index of the token after its latest occurrence
        self.outcomes = Outcomes()
        self._source = 0  # where the last proposal came from: its match length, or TREE
        self._guess: tuple[int, int] | None = None  # (index it guessed, token) of a proposal not sent

    def propose(self, history: list[int], next_tok: int, limit: int) -> list[int]:
        """The sequence is history + [next_tok] (it only grows between calls) -> at most limit draft tokens
        to follow it (maybe none)."""
        self._extend(history, next_tok)
        if self._guess is not None:
            at, tok = self._guess
            self.outcomes.learn(self._source, int(self.tokens[at] == tok), 1)
            self._guess = None
        draft, self._source = self._lookup(max(self._cost))
        k = best_length(self.outcomes.p(self._source), self._cost, limit) if draft else 0
        if draft and not k:
            self._guess = (len(self.tokens), draft[0])
        return draft[:k]

    def verified(self, n_sent: int, n_accepted: int):
        """The last draft's outcome: n_accepted of its n_sent tokens were emitted."""
        self.outcomes.learn(self._source, n_accepted, n_accepted + (n_accepted < n_sent))

    def close(self):
        """The sequence ended."""

    def _extend(self, history: list[int], next_tok: int):
        toks = self.tokens
        for tok in history[len(toks):] + [next_tok]:
            j = len(toks)
            toks.append(tok)
            for n in range(1, min(self.ngram_max, j) + 1):
                self._after[tuple(toks[j - n:j])] = j

    def _lookup(self, k: int) -> tuple[list[int], int]:
        """(k tokens that followed the latest earlier occurrence of the longest suffix found, its length);
        a match running into the end continues over its own copy (a repeating loop)."""
        toks, end = self.tokens, len(self.tokens)
        for n in range(min(self.ngram_max, end), 0, -1):
            start = self._after.get(tuple(toks[end - n:]))
            if start is not None:
                out = toks[start:start + k]
                while len(out) < k:
                    out.append(out[len(out) - (end - start)])
                return out, n
        return [], 0


class TreeDrafter(NgramDrafter):
    """What the radix tree holds after the whole sequence (a branch of the same prefix computed before: a
    regenerated answer, an agent re-running a turn), else n-gram lookup. continuation(tokens, k): the tree's
    tokens after tokens (KVState.continuation); version(): the tree's (RadixTree.version), so that a match
    that failed is not tried again before the tree gains nodes."""

    def __init__(self, continuation: Callable[[list[int], int], list[int]], version: Callable[[], int], **kw):
        super().__init__(**kw)
        self._continuation, self._version = continuation, version
        self._missed_at: int | None = None  # the tree's version when the sequence last left it

    def _lookup(self, k: int) -> tuple[list[int], int]:
        version = self._version()
        if version != self._missed_at:
            out = self._continuation(self.tokens, k)
            if out:
                return out, TREE
            self._missed_at = version
        return super()._lookup(k)


def fit(drafts: list[list[int]], n_rows: int, cap: int) -> list[list[int]]:
    """The drafts cut (longest first) so that a step's decode tokens, n_rows plus the drafts, number a power
    of two at most cap, or dropped: a few batch sizes, so a few forward graphs built (models/decoder.py)."""
    lengths = [len(d) for d in drafts]
    total = n_rows + sum(lengths)
    size = 1 << (max(1, min(total, cap)).bit_length() - 1)
    if size <= n_rows:
        return [[] for _ in drafts]
    for _ in range(total - size):
        longest = max(range(len(lengths)), key=lengths.__getitem__)
        lengths[longest] -= 1
    return [d[:n] for d, n in zip(drafts, lengths)]
