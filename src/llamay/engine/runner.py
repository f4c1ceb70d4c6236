"""The runner: the engine's interface to KV state (create, extend, fork, rebase, truncate, free, describe;
snapshots save and restore through it). It owns the decoder, the page pool, the KVState and one record per
context, and turns "compute these tokens of that context" into plan -> apply (page copies) -> forward ->
commit. It is called only through the LLM's scheduler (Scheduler.do / its steps).

Every kernel is batch-invariant, so a context's logits are the same whether its tokens came from a cold
prefill, a radix-tree hit, a fork or a restored snapshot."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..kernels.ops import BatchMeta
from ..kv import KVState
from ..models import Decoder
from ..settings import SCHEDULER

PREFILL_MIN = 64  # a pass of at least this many tokens measures prefill speed (disk reads are weighed by it)
EMA = 0.3  # the weight of a new measurement


@dataclass
class CtxRecord:
    """What the engine keeps for one context besides its pages."""
    last_logits: np.ndarray | None = None  # after its last computed token
    pending: list[int] = field(default_factory=list)  # sampled tokens whose K/V is not computed yet
    # the grammar matcher of a constrained generation cut off before its end: continued by the context's
    # next generation, cloned by fork, saved in snapshots
    matcher: Any = None
    lora: tuple = ()  # the LoRA adapters its K/V is computed under: ((name, scale), ...) in name order


class Runner:
    def __init__(self, decoder: Decoder, n_pages: int, page_size: int, kv: str, budget_pages: int | None = None,
                 pool=None, tiers=None):
        """pool: an existing page pool of that shape to reuse (its contents are never read before being
        written: a fresh KVState holds no page). tiers: the prefix cache's tiers below memory
        (cache_tiers.CacheTiers)."""
        self.decoder, self.page_size = decoder, page_size
        self.pool = pool if pool is not None else decoder.new_pool(n_pages, page_size, kv)
        self.state = KVState(n_pages, page_size, budget_pages)
        self.records: dict[int, CtxRecord] = {}
        self.n_prefilled = 0  # tokens computed by forward passes (prefix hits excluded)
        self.default_lora: tuple = ()  # the adapters of a context opened without a choice
        self._namespaces: dict[tuple, int] = {(): 0}  # adapter choice -> its namespace in the radix tree
        self.tiers = tiers
        self.tier_tokens: dict[str, int] = {}  # tier -> tokens of opened contexts read from it, not computed
        self.prefill_tps: float | None = None  # measured: tokens per second of passes of PREFILL_MIN tokens or more

    def namespace(self, lora: tuple) -> int:
        """The radix tree's namespace of K/V computed under these adapters (0: none)."""
        return self._namespaces.setdefault(lora, len(self._namespaces))

    def open(self, tokens: list[int], lora: tuple | None = None) -> tuple[int, int]:
        """A context of the longest computed prefix of tokens under these adapters (None: the default
        ones) -> (ctx_id, n_cached); the rest is not computed."""
        lora = self.default_lora if lora is None else lora
        ctx, n_cached = self.state.create(tokens, self.namespace(lora))
        self.record(ctx).lora = lora
        if self.tiers is not None:
            read = self.tiers.load(self, ctx, tokens, n_cached, self.prefill_tps)
            for name, n in read.items():
                self.tier_tokens[name] = self.tier_tokens.get(name, 0) + n
            n_cached = self.state.n_tokens(ctx)
        return ctx, n_cached

    def create(self, tokens: list[int], lora: tuple | None = None) -> tuple[int, int]:
        """A context holding tokens, computing only what the radix tree does not have (under these
        adapters; None: the default ones). -> (ctx_id, n_cached); its last logits are in record(ctx_id)."""
        if not tokens:
            raise ValueError("a context needs at least one token")
        ctx, n_cached = self.open(tokens, lora)
        try:
            self.extend(ctx, tokens[n_cached:])
        except BaseException:
            self.free(ctx)
            raise
        return ctx, n_cached

    def record(self, ctx: int) -> CtxRecord:
        return self.records.setdefault(ctx, CtxRecord())

    def tokens(self, ctx: int) -> list[int]:
        rec = self.records.get(ctx)
        return self.state.tokens(ctx) + (rec.pending if rec else [])

    def n_tokens(self, ctx: int) -> int:
        """len(tokens(ctx)) without building the list (checked on every extend)."""
        rec = self.records.get(ctx)
        return self.state.n_tokens(ctx) + (len(rec.pending) if rec else 0)

    def describe(self, ctx: int) -> dict:
        """The context's size: tokens (a pending sampled one included) and pages held."""
        return {"tokens": self.n_tokens(ctx), "pages": len(self.state.page_table(ctx))}

    def extend(self, ctx: int, tokens: list[int], all_logits: bool = False) -> np.ndarray:
        """Compute pending tokens and then tokens after the context's end -> logits of the last one
        (of every one if all_logits)."""
        rec = self.record(ctx)
        tokens, rec.pending = rec.pending + list(tokens), []
        outs = []
        for lo in range(0, len(tokens), SCHEDULER.batch):
            part = tokens[lo:lo + SCHEDULER.batch]
            last = lo + SCHEDULER.batch >= len(tokens)
            rows = None if all_logits else np.arange(len(part) - 1, len(part)) if last else np.zeros(0, np.int64)
            outs.append(self._chunk(ctx, part, rows))
        if not outs:
            return rec.last_logits
        out = np.concatenate(outs) if all_logits else outs[-1]
        rec.last_logits = out[-1]
        return out if all_logits else out[-1]

    def _chunk(self, ctx: int, tokens: list[int], rows: np.ndarray | None) -> np.ndarray:
        return self.forward_batch([(ctx, tokens)], rows)

    def forward_batch(self, items: list[tuple[int, list[int]]], rows: np.ndarray | None) -> np.ndarray:
        """One forward pass over several contexts at once: items are (ctx_id, tokens to append), each
        context at most once. -> logits of the batch rows `rows` (None: all rows), rows numbered over the
        concatenated tokens. Appends are planned and applied one context at a time (a plan is valid for
        one state version); on any failure every applied slot is released and no context changes."""
        st, applied = self.state, []
        try:
            for ctx, tokens in items:
                for src, dst in st.apply(st.plan_append(ctx, len(tokens))):
                    self.pool.copy_page(src, dst)
                applied.append(ctx)
            pos, seq = [], []
            for i, (ctx, tokens) in enumerate(items):
                start = st.n_tokens(ctx)
                pos.append(np.arange(start, start + len(tokens), dtype=np.int32))
                seq.append(np.full(len(tokens), i, np.int32))
            tables = [st.page_table(ctx) for ctx, _ in items]
            table = np.zeros((len(items), max(map(len, tables))), np.int32)
            for i, t in enumerate(tables):
                table[i, :len(t)] = t
            meta = BatchMeta(np.concatenate(pos), np.concatenate(seq), table, self.page_size)
            ids = np.asarray([t for _, tokens in items for t in tokens], np.int32)
            t = time.perf_counter()
            out = self.decoder.forward(ids, meta, self.pool, rows, lora=self._lora_scales(items, len(ids)))
            if len(ids) >= PREFILL_MIN:
                tps = len(ids) / max(time.perf_counter() - t, 1e-9)
                self.prefill_tps = tps if self.prefill_tps is None else (1 - EMA) * self.prefill_tps + EMA * tps
        except BaseException:
            for ctx in applied:
                st.commit(ctx, [])  # the applied slots are released; the context is unchanged
            raise
        for ctx, tokens in items:
            st.commit(ctx, tokens)
            self.n_prefilled += len(tokens)
        return out

    def _lora_scales(self, items, n: int) -> dict | None:
        """adapter -> each token's scale for it (0 where its sequence does not use it)."""
        out, at = {}, 0
        for ctx, tokens in items:
            for name, scale in self.record(ctx).lora:
                out.setdefault(name, np.zeros(n, np.float32))[at:at + len(tokens)] = scale
            at += len(tokens)
        return out or None

    def fork(self, ctx: int, n: int) -> list[int]:
        self.extend(ctx, [])
        kids, rec = self.state.fork(ctx, n), self.records[ctx]
        for k in kids:
            self.records[k] = CtxRecord(rec.last_logits, [], rec.matcher.clone() if rec.matcher else None, rec.lora)
        return kids

    def truncate(self, ctx: int, n: int):
        """Keep the context's first n tokens (a pending sampled token counts as one)."""
        rec = self.record(ctx)
        committed, pending = self.state.n_tokens(ctx), rec.pending
        if n < committed + len(pending):
            rec.matcher = None  # its position is past the cut
        rec.pending = pending[:max(0, n - committed)]
        if n < committed:
            self.state.truncate(ctx, n)
            rec.last_logits = None

    def rebase(self, ctx: int, ids: list[int]) -> tuple[list[int], int]:
        """Make the context a prefix of ids: keep what they share (less one token, computed again for its
        logits), cut the rest -> (the ids still to append, tokens kept)."""
        have = self.tokens(ctx)
        keep = next((i for i, (a, b) in enumerate(zip(have, ids)) if a != b), min(len(have), len(ids)))
        keep = min(keep, len(ids) - 1)
        self.truncate(ctx, keep)
        return ids[keep:], keep

    def free(self, ctx: int, cache: bool = True):
        """Drop a context; with cache, its tokens stay findable in the radix tree (until evicted) and its
        full pages go to the tiers below memory."""
        if cache and self.state.n_tokens(ctx):
            self.state.cache(ctx)
            if self.tiers is not None:
                self.tiers.save(self, ctx)
        self.state.free(ctx)
        self.records.pop(ctx, None)
