"""The merge loop shared by BPE (merge ranks) and SPM (token scores).

Reproduces llama.cpp's priority queue: among the current adjacent pairs, the one with the lowest key
merges first, ties going to the leftmost pair; stale queue entries are skipped. The queue's live
entries are exactly the current adjacent mergeable pairs (each merge pushes the two pairs it creates),
so taking the leftmost minimum of the list of current pair keys gives the same order. That scan runs
in C (min, index) and beats a Python heap up to ~48 symbols (measured), i.e. on nearly every word.
ref: llama.cpp src/llama-vocab.cpp (llm_tokenizer_spm_session, llm_tokenizer_bpe_session)
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

INF = float("inf")  # the key of a pair that cannot merge
SHORT = 48  # symbols up to which the O(n^2) list scan beats the heap


@dataclass(frozen=True)
class PairTable:
    """The key of merging `left` and `right`: prio[index[left + sep + right]] (lower merges first),
    INF when that text is not in `index`. Keys are finite numbers (ints or floats)."""
    index: dict[str, int]
    sep: str
    prio: Sequence[float]


def merge_symbols(syms: list[str], table: PairTable) -> list[str]:
    """Merges `syms` (one string per starting symbol, modified in place) and returns the pieces."""
    if len(syms) < 2:
        return syms
    if len(syms) <= SHORT:
        return _merge_scan(syms, table)
    return _merge_heap(syms, table)


def _merge_scan(syms: list[str], t: PairTable) -> list[str]:
    get, sep, prio = t.index.get, t.sep, t.prio
    # keys[i]: key of the pair (syms[i], syms[i + 1]); len(keys) == len(syms) - 1 throughout
    keys = [INF if (k := get(a + sep + b)) is None else prio[k] for a, b in zip(syms, syms[1:])]
    while keys:
        best = min(keys)
        if best == INF:
            break
        i = keys.index(best)  # leftmost of equal keys, as llama.cpp's tie-break on the left index
        merged = syms[i] + syms[i + 1]
        syms[i:i + 2] = (merged,)
        del keys[i]
        if i > 0:
            keys[i - 1] = INF if (k := get(syms[i - 1] + sep + merged)) is None else prio[k]
        if i < len(keys):
            keys[i] = INF if (k := get(merged + sep + syms[i + 1])) is None else prio[k]
    return syms


def _merge_heap(syms: list[str], t: PairTable) -> list[str]:
    """O(n log n) for long words: linked symbols and a heap of (key, left, right, text), stale skipped."""
    get, sep, prio = t.index.get, t.sep, t.prio
    n = len(syms)
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prv = list(range(-1, n - 1))

    def push(a: int, b: int) -> None:
        k = get(syms[a] + sep + syms[b])
        if k is not None:
            heapq.heappush(heap, (prio[k], a, b, syms[a] + syms[b]))

    heap: list = []
    for i in range(n - 1):
        push(i, i + 1)
    while heap:
        _, i, j, text = heapq.heappop(heap)
        if nxt[i] != j or not syms[i] or not syms[j] or syms[i] + syms[j] != text:
            continue  # stale: one side already merged
        syms[i], syms[j] = text, ""
        nxt[i] = nxt[j]
        if nxt[i] >= 0:
            prv[nxt[i]] = i
        if prv[i] >= 0:
            push(prv[i], i)
        if nxt[i] >= 0:
            push(i, nxt[i])
    return [s for s in syms if s]
