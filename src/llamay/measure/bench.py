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
    kernels: str  # the kernel path that ran (LLAMAY_KERNELS, else the best this CPU runs)
    n_prefill: int
    n_decode: int
    prefill_tok_s: float
    decode_tok_s: float
    prefill_runs_s: list[float]
    decode_runs_s: list[float]
    load_s: float
    first_token_s: float
    kernels_measured: dict[str, float] | None = None  # path -> time relative to the fastest (pathpick.py)

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


def _greedy_steps(ctx, n: int) -> float:
    """Seconds for n greedy single-token steps of ctx (argmax only, no sampler); ctx is deleted after."""
    logits = ctx.logits
    t = time.perf_counter()
    for _ in range(n):
        logits = ctx.extend([int(np.argmax(logits))])
    dt = time.perf_counter() - t
    ctx.delete(cache=False)
    return dt


def time_decode(llm, n: int, prompt: list[int]) -> float:
    """n greedy single-token steps of a context holding prompt."""
    llm.reset()
    return _greedy_steps(llm.create_context(prompt), n)


def time_decode_at(ctx, n: int) -> float:
    """n greedy single-token steps on a fork of ctx (a context holding a long prompt, computed once):
    decode at that depth, the prompt not recomputed between runs."""
    return _greedy_steps(ctx.fork()[0], n)


def run_bench(path: str, threads: int | None, n_prefill: int = 512, n_decode: int = 128,
              reps: int = 3, kv: str = "f16", progress=None) -> BenchResult:
    """progress(runs done, runs in all): the first token, then each timed prefill and decode."""
    from .. import load
    from ..kernels import _lib, pathpick
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
    return BenchResult(path, llm.threads, _lib.current(), n_prefill, n_decode, n_prefill / statistics.median(pp),
                       n_decode / statistics.median(tg), pp, tg, load_s, first_token_s, pathpick.relative_times())


@dataclass
class SpecBenchResult:
    model: str
    threads: int
    mode: str
    task: str
    n_decode: int
    plain_tok_s: float  # decode tok/s with spec none
    spec_tok_s: float  # decode tok/s with the mode
    drafted_tokens: int  # of the median speculative run
    accepted_tokens: int
    draft_steps: int  # passes that verified a draft
    decode_passes: int  # every decode pass: generated tokens - 1 - accepted ones

    @property
    def tokens_per_pass(self) -> float:
        return (self.n_decode - 1) / max(1, self.decode_passes)

    def as_dict(self) -> dict:
        return {**asdict(self), "tokens_per_pass": self.tokens_per_pass}


def run_spec_bench(path: str, threads: int | None, mode: str, task: str = "code", n_decode: int = 128,
                   reps: int = 3, kv: str = "f16", draft_model: str | None = None, progress=None) -> SpecBenchResult:
    """A task of tools/spec_tasks.py decoded with spec none and with mode, interleaved, medians. A run is
    from an empty cache (the tree mode's second run of the same prompt is what a re-run turn gets)."""
    from .. import load
    from .spec_tasks import TASKS
    prompt, sampling = TASKS[task]
    llm = load(path, threads=threads, n_ctx=2048, kv=kv, draft_model=draft_model, spec=mode)
    if mode == "none":
        raise ValueError("spec none is the baseline: bench a mode that drafts")
    runs, done = {"none": [], mode: []}, 0

    def once(spec: str, keep: bool = False):
        llm.reset()
        if keep:  # the tree: a branch of this prompt computed before, as a re-run turn finds it
            list(llm.generate(prompt, max_tokens=n_decode, spec="none", **sampling))
        list(llm.generate(prompt, max_tokens=n_decode, spec=spec, **sampling))
        st = llm.stats
        return (st.generated_tokens - 1) / st.decode_s, st
    for i in range(reps + 1):  # the first pair warms up (graphs built)
        for spec in ("none", mode) if i % 2 else (mode, "none"):
            out = once(spec, keep=spec == "tree")
            if i:
                runs[spec].append(out)
            done += 1
            if progress:
                progress(done, 2 * reps + 2)
    med = {spec: sorted(v, key=lambda r: r[0])[len(v) // 2] for spec, v in runs.items()}
    st = med[mode][1]
    return SpecBenchResult(path, llm.threads, mode, task, st.generated_tokens, med["none"][0], med[mode][0],
                           st.drafted_tokens, st.accepted_tokens, st.draft_steps,
                           st.generated_tokens - 1 - st.accepted_tokens)
