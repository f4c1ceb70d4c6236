"""LLAMAY_KERNELS=auto: the kernel path chosen by measurement, not by the order of CPU flags. Every path
gives the same bits (the tests assert it), so the choice is speed alone, and flags do not measure speed:
AVX-512 is not the faster path on every CPU that has it (frequency licences, split 512-bit units).

At a process's first model load, each path this CPU runs (portable aside: it is never faster) times the
same matmuls on the model's own weight types: one token (decode) and a tile of tokens (prefill), paths
interleaved, best of several. The path with the lowest mean log time relative to the best for each
(type, tokens) is used from then on; `choice()` says what was measured (the benchmarks print it)."""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

import numpy as np

from . import _lib
from .matmul import QWeight, act_block, matmul, quantize_act
from .quantize import SUPPORTED, quantize_rows

ROWS, COLS = 1024, 2048  # a matrix that stays in L2: the tiles' own speed, not the memory's
TOKENS = (1, 32)         # decode, a prefill tile
REPS = 5                 # rounds over the paths; each (path, type, tokens) keeps its best
MAX_TYPES = 3            # the model's types that hold the most bytes

_choice: dict | None = None


def choice() -> dict | None:
    """{"path": chosen, "score": {path: mean log time relative to the best}} after a measured choice;
    None when none was made (LLAMAY_KERNELS named a path, or no model was loaded, or one path runs)."""
    return _choice


def relative_times() -> dict[str, float] | None:
    """path -> its time relative to the fastest (geometric mean over what was timed), after a choice."""
    return {p: round(math.exp(s), 3) for p, s in _choice["score"].items()} if _choice else None


def _timer(path: str, types: list[str]) -> dict[tuple[str, int], Callable[[], float]]:
    """(type, tokens) -> a function timing one matmul under path (1 thread), its inputs built once."""
    rng = np.random.default_rng(0)
    out = {}
    with _lib.using(path):
        for name in types:
            rows = quantize_rows(rng.standard_normal((16, COLS), dtype=np.float32), name)  # repeated: speed
            w = QWeight(np.tile(rows, ROWS // 16), name, ROWS, COLS).repacked(1)            # is not in values
            for n in TOKENS:
                x = rng.standard_normal((n, COLS), dtype=np.float32)
                a = quantize_act(x, 1, act_block(w.qtype)) if not w.is_float else x
                y = np.empty((n, ROWS), np.float32)

                def run(w=w, a=a, y=y):
                    t = time.perf_counter()
                    matmul(a, w, out=y, n_threads=1)
                    return time.perf_counter() - t
                out[(name, n)] = run
    return out


def score(best: dict[str, dict]) -> dict[str, float]:
    """path -> mean over the keys timed of log(its best time / the best path's): 0 for a path fastest
    everywhere. best: path -> key -> seconds."""
    keys = list(next(iter(best.values())))
    low = {key: min(t[key] for t in best.values()) for key in keys}
    return {p: sum(math.log(t[key] / low[key]) for key in keys) / max(len(keys), 1) for p, t in best.items()}


def measure(paths: Iterable[str], types: Iterable[str], timer=_timer) -> dict[str, float]:
    """score() of each path's best of REPS interleaved rounds over (type, tokens)."""
    paths, types = list(paths), [t for t in types if t in SUPPORTED]
    timers = {p: timer(p, types) for p in paths}
    best = {p: dict.fromkeys(timers[p], math.inf) for p in paths}
    for _ in range(REPS):
        for p in paths:
            with _lib.using(p):
                for key, run in timers[p].items():
                    best[p][key] = min(best[p][key], run())
    return score(best)


def choose(type_bytes: dict[str, int], measure_fn=measure) -> str:
    """At the first model load with LLAMAY_KERNELS=auto (and no path set since): measure the paths on the
    model's types (type name -> bytes of its matrices) and switch to the fastest. Returns the path in use."""
    global _choice
    candidates = [p for p in _lib.available() if p != "portable"]
    if not _lib.auto_pending() or len(candidates) < 2:
        return _lib.current()
    types = sorted((t for t in type_bytes if t in SUPPORTED), key=lambda t: -type_bytes[t])[:MAX_TYPES]
    if not types:
        return _lib.current()
    score = measure_fn(candidates, types)
    path = min(candidates, key=lambda p: (score[p], -candidates.index(p)))  # a tie: the later (wider) path
    _lib.set_path(path)
    _choice = {"path": path, "score": score, "types": types}
    return path
