"""Contexts as objects: a named, forkable KV state, changed only through the LLM's scheduler."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from .sampling import SamplingParams, sampling_params
from .job import Job
from .stops import stop_list


@dataclass
class GenerationStats:
    """Counts and timings of the last generation (seconds)."""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    finish_reason: str = ""
    token_ids: list[int] = field(default_factory=list)
    drafted_tokens: int = 0  # speculative decoding: draft tokens verified
    accepted_tokens: int = 0  # of them, emitted (each saved a forward pass)
    draft_steps: int = 0  # forward passes that verified a draft
    disk_tokens: int = 0  # of cached_tokens, read from the disk tier (the rest were in memory)
    shared_tokens: int = 0  # of cached_tokens, read from the shared tier (Redis / Valkey)


class Context:
    """A handle on one context of an LLM: tokens plus the pages holding their K/V. Every change goes
    through the LLM's scheduler (llm.scheduler.do), so only its thread mutates KV state while a server runs."""

    def __init__(self, llm, ctx_id: int, n_cached: int):
        self.llm, self.id, self.n_cached = llm, ctx_id, n_cached

    def _do(self, fn):  # fn(store): on the scheduler's thread
        return self.llm.scheduler.do(fn)

    @property
    def tokens(self) -> list[int]:
        """Computed tokens plus the last sampled one if it is not computed yet."""
        return self._do(lambda store: store.tokens(self.id))

    @property
    def n_pages(self) -> int:
        return self._do(lambda store: len(store.pages(self.id)))

    @property
    def logits(self) -> np.ndarray:
        """Logits after the context's last token [n_vocab]."""
        return self._do(lambda store: store.extend(self.id, []))

    def extend(self, more: str | list[int]) -> np.ndarray:
        """Append text (tokenized without BOS, special tokens parsed) or ids -> the new last logits."""
        ids = self.llm.tokenize(more, add_special=False, parse_special=True) if isinstance(more, str) else list(more)
        self.llm.check_ids(ids, extra=self._do(lambda store: store.n_tokens(self.id)))
        return self._do(lambda store: store.append(self.id, ids))

    def generate(self, max_tokens: int = 128, stop: str | list[str] | None = None, grammar=None,
                 params: SamplingParams | None = None, spec: str | None = None, **sampling) -> Iterator[str]:
        """Continue this context (generated tokens are appended to it; the last one is computed by the
        next extend or generate). grammar: a llamay.grammar.Grammar the output must follow. A constrained
        generation cut off by max_tokens keeps its grammar position with the context: the next generate()
        (without a grammar) continues under it, fork() gives each child a copy, save() writes it into the
        snapshot. params, spec and sampling as for LLM.generate."""
        params = sampling_params(params, sampling, self.llm.n_vocab)
        return self.llm.drive(Job([], params, None, max_tokens, stop_list(stop), ctx=self.id, grammar=grammar,
                                  spec=spec))

    def fork(self, n: int = 1) -> list["Context"]:
        """n contexts sharing this one's pages (zero pages allocated; copy-on-write on divergence)."""
        n_tokens = self._do(lambda store: store.n_tokens(self.id))
        return [Context(self.llm, c, n_tokens) for c in self._do(lambda store: store.fork(self.id, n))]

    def save(self, path: str):
        """Write this context (tokens, pages, last logits) to a .llamayctx snapshot, atomically."""
        from .snapshots import save
        self._do(lambda store: save(self.llm, self.id, path))

    def delete(self, cache: bool = True):
        """Free the context; with cache its tokens stay findable as a prefix until evicted."""
        self._do(lambda store: store.free(self.id, cache))

    def __repr__(self):
        return f"Context(id={self.id}, tokens={len(self.tokens)}, pages={self.n_pages})"
