"""The merge loop shared by BPE (merge ranks) and SPM (token scores).

Reproduces llama.cpp's priority queue: among the current adjacent pairs, the one with the lowest key
merges first, ties going to the leftmost pair; stale queue entries are skipped.
ref: llama.cpp src/llama-vocab.cpp (llm_tokenizer_spm_session, llm_tokenizer_bpe_session)
"""
from __future__ import annotations

import heapq
from typing import Callable

# key(left, right) -> priority (lower merges first) or None when the pair cannot merge
PairKey = Callable[[str, str], "float | int | None"]


def merge_symbols(syms: list[str], key: PairKey) -> list[str]:
    """Merges `syms` (one string per starting symbol) in place of llama.cpp's queue; returns the pieces."""
    n = len(syms)
    if n < 2:
        return syms
    if n <= 8:
        return _merge_short(syms, key)
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prv = list(range(-1, n - 1))
    heap = []
    for i in range(n - 1):
        k = key(syms[i], syms[i + 1])
        if k is not None:
            heap.append((k, i, i + 1, syms[i] + syms[i + 1]))
    heapq.heapify(heap)
    while heap:
        _, i, j, text = heapq.heappop(heap)
        if nxt[i] != j or not syms[i] or not syms[j] or syms[i] + syms[j] != text:
            continue  # stale: one side already merged
        syms[i], syms[j] = text, ""
        nxt[i] = nxt[j]
        if nxt[i] >= 0:
            prv[nxt[i]] = i
        for a, b in ((prv[i], i), (i, nxt[i])):
            if a >= 0 and b >= 0:
                k = key(syms[a], syms[b])
                if k is not None:
                    heapq.heappush(heap, (k, a, b, syms[a] + syms[b]))
    return [s for s in syms if s]


def _merge_short(syms: list[str], key: PairKey) -> list[str]:
    """Same result as the queue for short words: repeatedly merge the best (key, leftmost) pair."""
    syms = list(syms)
    while len(syms) > 1:
        best, best_i = None, -1
        for i in range(len(syms) - 1):
            k = key(syms[i], syms[i + 1])
            if k is not None and (best is None or k < best):
                best, best_i = k, i
        if best_i < 0:
            break
        syms[best_i:best_i + 2] = [syms[best_i] + syms[best_i + 1]]
    return syms
