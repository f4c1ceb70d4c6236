"""Drafting for speculative decoding: guesses of a sequence's next tokens, which the scheduler checks in one
forward pass. A guess never changes what is emitted, only how many tokens a pass emits.

N-gram lookup (prompt lookup): the sequence's last n tokens (n = ngram_max down to 1) are looked up among
everything before them, prompt and output, and what followed their latest occurrence is the draft. An index
from each n-gram to where it last ended makes a step O(ngram_max + draft length), however long the sequence.

The draft length (1, 3, 7 or 15: steps of 2, 4, 8, 16 tokens) is chosen per step to maximise the tokens
expected per unit of cost: with p the chance that a draft token is right (estimated per match length n from
this sequence's own outcomes, recent ones weighing more), a draft of k tokens emits 1 + p + ... + p^k tokens
in a step costing SPEC.step_cost plain steps. Where no length pays, nothing is sent and the guess is only
compared with the token that follows (free)."""
from __future__ import annotations

from ..settings import SPEC

MODES = ("none", "ngram")
PRIOR = (0.3, 1.0)  # (right, tried) before any outcome: p = 0.3, outweighed by the first few outcomes
DECAY = 0.9  # per outcome, the weight left to the older ones


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"spec must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def new_drafter(mode: str) -> NgramDrafter | None:
    """A sequence's drafter for mode (None: no speculation); ValueError for a mode not in MODES."""
    return NgramDrafter() if check_mode(mode) == "ngram" else None


class NgramDrafter:
    def __init__(self, ngram_max: int = SPEC.ngram_max, step_cost: tuple[float, ...] = SPEC.step_cost):
        """step_cost[i]: a step of 2^(i+1) tokens (a draft of 2^(i+1) - 1) relative to a plain step."""
        self.ngram_max = ngram_max
        self._cost = {2 ** (i + 1) - 1: cost for i, cost in enumerate(step_cost)}
        self.tokens: list[int] = []  # the sequence as far as seen: a prefix of what propose is given
        self._after: dict[tuple[int, ...], int] = {}  # n-gram -> index of the token after its latest occurrence
        self._outcomes: dict[int, tuple[float, float]] = {}  # match length -> (right, tried), decayed
        self._order = 0  # the match length of the last proposal
        self._guess: tuple[int, int] | None = None  # (index it guessed, token) of a proposal not sent

    def propose(self, history: list[int], next_tok: int, limit: int) -> list[int]:
        """The sequence is history + [next_tok] (it only grows between calls) -> at most limit draft tokens
        to follow it (maybe none)."""
        self._extend(history, next_tok)
        if self._guess is not None:
            at, tok = self._guess
            self._learn(int(self.tokens[at] == tok), 1)
            self._guess = None
        draft, self._order = self._lookup(max(self._cost))
        k = self._best_length(limit) if draft else 0
        if draft and not k:
            self._guess = (len(self.tokens), draft[0])
        return draft[:k]

    def verified(self, n_sent: int, n_accepted: int):
        """The last draft's outcome: n_accepted of its n_sent tokens were emitted."""
        self._learn(n_accepted, n_accepted + (n_accepted < n_sent))

    def _p_right(self) -> float:
        """The chance that a token of a draft found by a match of the last proposal's length is right."""
        right, tried = self._outcomes.get(self._order, (0.0, 0.0))
        return (right + PRIOR[0]) / (tried + PRIOR[1])

    def _learn(self, right: int, tried: int):
        old_right, old_tried = self._outcomes.get(self._order, (0.0, 0.0))
        self._outcomes[self._order] = (DECAY * old_right + right, DECAY * old_tried + tried)

    def _best_length(self, limit: int) -> int:
        p = min(self._p_right(), 0.999)
        best, best_k = 1.0, 0
        for k, cost in self._cost.items():
            value = (1 + p * (1 - p ** k) / (1 - p)) / cost  # tokens expected per plain step's cost
            if k <= limit and value > best:
                best, best_k = value, k
        return best_k

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
