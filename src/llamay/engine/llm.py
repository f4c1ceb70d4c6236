"""The Python API: `llamay.load(path)` -> LLM with tokenize, detokenize, logits, generate.

One sequence whose KV stays in the pool between calls: a new prompt that shares a prefix with what was
evaluated last only prefills the new suffix (the last prompt token is always recomputed for its logits).
Because every kernel is batch-invariant, the reused KV is bit-identical to a fresh prefill."""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..gguf import GGUFReader
from ..kernels.matmul import default_threads
from ..kernels.ops import BatchMeta
from ..kv import DEFAULT_KV_TYPE
from ..models import Decoder, arch_spec
from ..tokenizer import IncrementalDecoder, Tokenizer
from .sampling import Sampler, SamplingParams
from .stops import StopMatcher

DEFAULT_N_CTX = 4096
PAGE_SIZE = 256
N_BATCH = 512  # prefill chunk: bounds activation memory, does not change results


class ContextOverflow(ValueError):
    """A prompt longer than the context: an error, never silent truncation."""


@dataclass
class Stats:
    """Counts and timings of the last generate call (seconds)."""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    finish_reason: str = ""
    token_ids: list[int] = field(default_factory=list)


class LLM:
    def __init__(self, path: str | os.PathLike, threads: int | None = None, n_ctx: int | None = None,
                 kv: str = DEFAULT_KV_TYPE):
        self.path = os.fspath(path)
        reader = GGUFReader(self.path)
        self.metadata = reader.metadata
        self.spec = arch_spec(reader.metadata)
        self.tokenizer = Tokenizer.from_gguf(reader)
        self.threads = threads or default_threads()
        self.decoder = Decoder(reader, self.spec, self.threads)
        self.n_ctx = min(n_ctx or DEFAULT_N_CTX, self.spec.n_ctx_train)
        n_pages = -(-self.n_ctx // PAGE_SIZE)
        self.kv = kv
        self._pool = self.decoder.new_pool(n_pages, PAGE_SIZE, kv)
        self._table = np.arange(n_pages, dtype=np.int32)[None, :].copy()
        self._evaluated: list[int] = []  # tokens whose K/V are in the pool, positions 0..len-1
        self.stats = Stats()

    @property
    def n_vocab(self) -> int:
        return self.spec.n_vocab

    @property
    def n_ctx_train(self) -> int:
        return self.spec.n_ctx_train

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    def _check_ids(self, ids: list[int]):
        if not ids:
            raise ValueError("no tokens to evaluate")
        if len(ids) > self.n_ctx:
            raise ContextOverflow(f"{len(ids)} tokens do not fit the context of {self.n_ctx} tokens")
        bad = [t for t in ids if not 0 <= t < self.n_vocab]
        if bad:
            raise ValueError(f"token ids out of range [0, {self.n_vocab}): {bad[:5]}")

    def _eval(self, ids: list[int], start: int, all_logits: bool) -> np.ndarray:
        """Evaluate ids[start:] at positions start.. (K/V of 0..start-1 already in the pool)."""
        outs = []
        for lo in range(start, len(ids), N_BATCH):
            hi = min(lo + N_BATCH, len(ids))
            tokens = np.asarray(ids[lo:hi], np.int32)
            pos = np.arange(lo, hi, dtype=np.int32)
            meta = BatchMeta(pos, np.zeros(hi - lo, np.int32), self._table, PAGE_SIZE)
            rows = None if all_logits else (np.array([hi - lo - 1]) if hi == len(ids) else np.array([], int))
            self._evaluated = ids[:lo]  # if the forward fails, the pool holds at most this prefix
            outs.append(self.decoder.forward(tokens, meta, self._pool, rows))
            self._evaluated = list(ids[:hi])
        return np.concatenate(outs) if len(outs) > 1 else outs[0]

    def reset(self):
        """Forget the evaluated tokens (the next call prefills from scratch)."""
        self._evaluated = []

    def eval_last(self, ids: list[int]) -> np.ndarray:
        """Logits after the last of ids [n_vocab], reusing the evaluated prefix."""
        ids = [int(t) for t in ids]
        self._check_ids(ids)
        return self._prefill(ids)

    def logits(self, ids: list[int]) -> np.ndarray:
        """float32 [len(ids), n_vocab]: the logits after every position, from a fresh evaluation."""
        ids = [int(t) for t in ids]
        self._check_ids(ids)
        return self._eval(ids, 0, all_logits=True)

    def _prefill(self, ids: list[int]) -> np.ndarray:
        """Last-position logits of ids, reusing the longest evaluated prefix (never all of it)."""
        n = 0
        limit = min(len(self._evaluated), len(ids) - 1)
        while n < limit and self._evaluated[n] == ids[n]:
            n += 1
        self.stats.cached_tokens = n
        return self._eval(ids, n, all_logits=False)[-1]

    def generate(self, prompt: str | list[int], max_tokens: int = 128, temperature: float = 0.8,
                 top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0,
                 presence_penalty: float = 0.0, frequency_penalty: float = 0.0, seed: int | None = None,
                 stop: str | list[str] | None = None) -> Iterator[str]:
        """Yields text pieces (never half a UTF-8 character). Ends at an end-of-generation token, a stop
        string (not emitted), max_tokens, or the end of the context; self.stats says which."""
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
                                frequency_penalty=frequency_penalty, seed=seed)
        ids = self.tokenize(prompt, parse_special=True) if isinstance(prompt, str) else [int(t) for t in prompt]
        self._check_ids(ids)
        return self._generate(ids, params, max_tokens, [stop] if isinstance(stop, str) else stop)

    def _generate(self, ids, params, max_tokens, stops) -> Iterator[str]:
        self.stats = Stats(prompt_tokens=len(ids))
        sampler, detok, matcher = Sampler(params), IncrementalDecoder(self.tokenizer), StopMatcher(stops)
        t0 = time.perf_counter()
        logits = self._prefill(ids)
        t1 = time.perf_counter()
        self.stats.prefill_s = t1 - t0
        history, reason = list(ids), "length"
        for _ in range(max_tokens):
            tok = sampler.sample(logits, history)
            if tok in self.tokenizer.eog_ids:
                reason = "stop"
                break
            history.append(tok)
            self.stats.generated_tokens += 1
            self.stats.token_ids.append(tok)
            text = matcher.feed(detok.add(tok))
            if text:
                yield text
            if matcher.stopped:
                reason = "stop"
                break
            if len(history) >= self.n_ctx:
                break
            logits = self._eval(history, len(history) - 1, all_logits=False)[-1]
        tail = matcher.feed(detok.flush()) + matcher.flush()
        if tail:
            yield tail
        self.stats.decode_s = time.perf_counter() - t1
        self.stats.finish_reason = reason


def load(path: str | os.PathLike, threads: int | None = None, n_ctx: int | None = None,
         kv: str = DEFAULT_KV_TYPE) -> LLM:
    """kv: KV cache element type: 'f16' (default), 'f32', 'q8' (int8 keys and values), 'vq8' (int8 values)."""
    return LLM(path, threads=threads, n_ctx=n_ctx, kv=kv)
