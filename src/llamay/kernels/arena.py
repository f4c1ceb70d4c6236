"""One scratch buffer for a model's graphs. A graph's activations live only from the node that first writes
them to the last that reads them, and one graph runs at a time: so its buffers are laid out by lifetime
(layout, as llama.cpp's allocator does), and every graph of a model shares one arena. A 512-token pass of a
1B model held 0.96 GB of buffers of its own, and the cached plans of each prompt length added theirs."""
from __future__ import annotations

import threading

import numpy as np

ALIGN = 64  # bytes: a cache line, and every SIMD load's alignment
POISON = 0xFF  # a new arena's bytes: NaN as float32, so a buffer read before it is written shows


def layout(sizes: list[int], first: list[int], last: list[int], ready: list[int]) -> tuple[list[int], int]:
    """Offsets for buffers of `sizes` bytes used from node first[i] to node last[i] (inclusive) -> (offsets,
    bytes in all). Buffer i takes bytes another buffer j held only when last[j] <= ready[i] (the nodes node
    first[i] waits for anyway: it then waits for nothing more); so two buffers in use at once never share a
    byte. Placed in order of first use, each in the smallest such free gap that holds it, else in new bytes
    at the end."""
    offsets, total = [0] * len(sizes), 0
    live: list[tuple[int, int, int]] = []  # (last node, offset, size) of buffers placed and still in use
    free: list[tuple[int, int, int]] = []  # (offset, size, latest last node of what it held), by offset
    for i in sorted(range(len(sizes)), key=lambda i: (first[i], i)):
        for last_node, off, size in [b for b in live if b[0] < first[i]]:
            free = _give_back(free, off, size, last_node)
        live = [b for b in live if b[0] >= first[i]]
        size = -(-sizes[i] // ALIGN) * ALIGN
        fits = [g for g in free if g[1] >= size and g[2] <= ready[i]]
        if fits:
            gap = min(fits, key=lambda g: (g[1], g[0]))
            free.remove(gap)
            if gap[1] > size:
                free = _give_back(free, gap[0] + size, gap[1] - size, gap[2])
            offsets[i] = gap[0]
        else:
            offsets[i], total = total, total + size
        live.append((last[i], offsets[i], size))
    return offsets, total


def _give_back(free: list[tuple[int, int, int]], off: int, size: int, held: int) -> list[tuple[int, int, int]]:
    """free with [off, off + size) added (its bytes' latest user `held`), neighbours merged (the later user
    kept: a buffer placed in the gap comes after everything it held), sorted by offset."""
    out: list[tuple[int, int, int]] = []
    for g in sorted(free + [(off, size, held)]):
        if out and out[-1][0] + out[-1][1] == g[0]:
            out[-1] = (out[-1][0], out[-1][1] + g[1], max(out[-1][2], g[2]))
        else:
            out.append(g)
    return out


class Arena:
    """The shared scratch of a model's graphs. buffer(n) gives an array of at least n bytes: the current
    one, or (too small) a new one that later graphs share, the old one kept alive by the graphs laid out in
    it until they go. `lock` is held while a graph runs: graphs sharing bytes never run at once."""

    def __init__(self):
        self._buf = np.empty(0, np.uint8)
        self.lock = threading.Lock()

    def buffer(self, nbytes: int) -> np.ndarray:
        if nbytes > self._buf.size:  # grown by half at least: a few arenas live at once, not one per size
            self._buf = np.full(max(nbytes, self._buf.size * 3 // 2), POISON, np.uint8)  # faulted in now
        return self._buf
