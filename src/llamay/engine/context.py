"""Contexts as objects (a context: a named, forkable KV state) and the decode loop that extends one."""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..tokenizer import IncrementalDecoder
from . import constrain
from .sampling import Sampler, SamplingParams, sampling_params
from .stops import StopMatcher


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


class Context:
    """A handle on one context of an LLM: tokens plus the pages holding their K/V."""

    def __init__(self, llm, ctx_id: int, n_cached: int):
        self.llm, self.id, self.n_cached = llm, ctx_id, n_cached

    @property
    def _runner(self):
        return self.llm.runner

    @property
    def tokens(self) -> list[int]:
        """Computed tokens plus the last sampled one if it is not computed yet."""
        return self._runner.tokens(self.id)

    @property
    def n_pages(self) -> int:
        return len(self._runner.state.page_table(self.id))

    @property
    def logits(self) -> np.ndarray:
        """Logits after the context's last token [n_vocab]."""
        return self._runner.extend(self.id, [])

    def extend(self, more: str | list[int]) -> np.ndarray:
        """Append text (tokenized without BOS, special tokens parsed) or ids -> the new last logits."""
        ids = self.llm.tokenize(more, add_special=False, parse_special=True) if isinstance(more, str) else list(more)
        self.llm.check_ids(ids, extra=len(self.tokens))
        self._runner.matchers.pop(self.id, None)  # text from outside: a cut-off grammar no longer applies
        return self._runner.extend(self.id, ids)

    def generate(self, max_tokens: int = 128, stop: str | list[str] | None = None, grammar=None,
                 params: SamplingParams | None = None, **sampling) -> Iterator[str]:
        """Continue this context (generated tokens are appended to it). sampling: SamplingParams fields;
        grammar: a llamay.grammar.Grammar the output must follow. A constrained generation cut off by
        max_tokens keeps its grammar position with the context: the next generate() (without a grammar)
        continues under it, fork() gives each child a copy, save() writes it into the snapshot. params and
        sampling as for LLM.generate."""
        params = sampling_params(params, sampling, self.llm.n_vocab)
        return generate_tokens(self, params, max_tokens, [stop] if isinstance(stop, str) else stop, grammar)

    def fork(self, n: int = 1) -> list["Context"]:
        """n contexts sharing this one's pages (zero pages allocated; copy-on-write on divergence)."""
        return [Context(self.llm, c, len(self.tokens)) for c in self._runner.fork(self.id, n)]

    def save(self, path: str):
        """Write this context (tokens, pages, last logits) to a .llamayctx snapshot, atomically."""
        from .snapshots import save
        save(self.llm, self.id, path)

    def delete(self, cache: bool = True):
        """Free the context; with cache its tokens stay findable as a prefix until evicted."""
        self._runner.free(self.id, cache)

    def __repr__(self):
        return f"Context(id={self.id}, tokens={len(self.tokens)}, pages={self.n_pages})"


def generate_tokens(ctx: Context, params: SamplingParams, max_tokens: int, stop_strings: list[str] | None,
                    grammar=None) -> Iterator[str]:
    """Sample up to max_tokens after ctx, appending them to it. The last sampled token is left pending
    (computed by the next extend) so that a finished generation costs no extra forward pass."""
    llm, runner = ctx.llm, ctx._runner
    history = list(ctx.tokens)
    logits = ctx.logits
    llm.stats = stats = GenerationStats(prompt_tokens=len(history), cached_tokens=ctx.n_cached)
    sampler, detok, stops = Sampler(params), IncrementalDecoder(llm.tokenizer), StopMatcher(stop_strings)
    stats.finish_reason, t0 = "length", time.perf_counter()
    matcher = grammar.matcher() if grammar is not None else runner.matchers.get(ctx.id)
    runner.matchers.pop(ctx.id, None)  # kept again below only if this generation is cut off in sync
    for i in range(max_tokens):
        tok = constrain.sample(sampler, logits, history, matcher)
        if tok in llm.tokenizer.eog_ids:
            stats.finish_reason = "stop"
            break
        complete = constrain.accept(matcher, tok, llm.tokenizer.eog_ids)
        history.append(tok)
        stats.generated_tokens += 1
        stats.token_ids.append(tok)
        text = stops.feed(detok.add(tok))
        if text:
            yield text
        if stops.stopped or complete or i == max_tokens - 1 or len(history) >= llm.n_ctx:
            stats.finish_reason = "stop" if stops.stopped or complete else "length"
            runner.pending[ctx.id] = [tok]
            break
        logits = runner.extend(ctx.id, [tok])
    if matcher is not None and stats.finish_reason == "length" and not matcher.is_done():
        runner.matchers[ctx.id] = matcher
    tail = stops.feed(detok.flush()) + stops.flush()
    if tail:
        yield tail
    stats.decode_s = time.perf_counter() - t0
