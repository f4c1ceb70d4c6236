"""Prefill and decode throughput, medians over repeated runs, the way llama-bench measures them:
pp = evaluate N prompt tokens from an empty context; tg = generate N tokens one at a time."""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class BenchResult:
    model: str
    threads: int
    n_prefill: int
    n_decode: int
    prefill_tok_s: float
    decode_tok_s: float
    prefill_runs_s: list[float]
    decode_runs_s: list[float]
    load_s: float
    first_token_s: float

    def as_dict(self) -> dict:
        return asdict(self)


def bench_tokens(n_vocab: int, n: int, seed: int = 0) -> list[int]:
    """Fixed pseudo-random ids (llama-bench also uses random tokens)."""
    return np.random.default_rng(seed).integers(100, n_vocab - 100, n).tolist()


def time_prefill(llm, ids: list[int]) -> float:
    llm.reset()
    t = time.perf_counter()
    llm.eval_last(ids)
    return time.perf_counter() - t


def time_decode(llm, n: int, prompt: list[int]) -> float:
    """n greedy single-token steps of a context holding prompt (argmax only, no sampler)."""
    llm.reset()
    ctx = llm.create_context(prompt)
    logits = ctx.logits
    t = time.perf_counter()
    for _ in range(n):
        logits = ctx.extend([int(np.argmax(logits))])
    dt = time.perf_counter() - t
    ctx.delete(cache=False)
    return dt


def run_bench(path: str, threads: int | None, n_prefill: int = 512, n_decode: int = 128,
              reps: int = 3, kv: str = "f16", progress=None) -> BenchResult:
    """progress(runs done, runs in all): the first token, then each timed prefill and decode."""
    from .. import load
    total, done = 1 + 2 * reps, [0]

    def timed(fn, *a):
        out = fn(*a)
        done[0] += 1
        if progress:
            progress(done[0], total)
        return out
    t0 = time.perf_counter()
    llm = load(path, threads=threads, n_ctx=max(n_prefill, n_decode + 1) + 1, kv=kv)
    load_s = time.perf_counter() - t0
    timed(lambda: next(iter(llm.generate("Hello", max_tokens=1, temperature=0)), None))
    first_token_s = time.perf_counter() - t0
    ids = bench_tokens(llm.n_vocab, n_prefill)
    pp = [timed(time_prefill, llm, ids) for _ in range(reps)]
    tg = [timed(time_decode, llm, n_decode, ids[:1]) for _ in range(reps)]
    return BenchResult(path, llm.threads, n_prefill, n_decode, n_prefill / statistics.median(pp),
                       n_decode / statistics.median(tg), pp, tg, load_s, first_token_s)
