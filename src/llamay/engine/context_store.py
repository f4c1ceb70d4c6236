"""ContextStore: the one owner of a model's context state.

It holds the page pool, the KVState (tokens, page tables, the radix tree) and one ContextState record per
context, and it alone changes them, through a closed set of verbs: open, create, extend, append, compute (one
batched forward pass), trim, truncate, rebase, fork, resume, park, set_logits, free, snapshot, restore and
claim. Each verb keeps the invariants of kv/__init__.py and leaves every context as it was when it fails.
The prefix cache's tiers below memory are handed pages and bytes, never the state. Queries (tokens,
describe, pages, view) change nothing. Its LLM's scheduler is the only caller while a server runs
(Scheduler.do / its steps; claim makes any other thread's change an InvariantError).

Every kernel is batch-invariant, so a context's logits are the same whether its tokens came from a cold
prefill, a radix-tree hit, a fork or a restored snapshot."""
from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..kernels.ops import BatchMeta
from ..kv import InvariantError, KVState, OutOfPages
from ..models import Decoder
from ..settings import LOAD, SCHEDULER
from .checkpoints import Checkpoints, turn_starts

PREFILL_MIN = 64  # a pass of at least this many tokens measures prefill speed (disk reads are weighed by it)
EMA = 0.3  # the weight of a new measurement


@dataclass
class ContextState:
    """Everything kept for one context besides its K/V pages (KVState holds those, under the same id),
    including a hybrid model's recurrent state: its slot in the store's StatePool, always the state after
    the context's computed tokens (fork shares it, the first compute copies it, truncate resumes from a
    checkpoint)."""
    lora: tuple = ()  # the LoRA adapters its K/V is computed under: ((name, scale), ...) in name order
    last_logits: np.ndarray | None = None  # after its last computed token
    pending: list[int] = field(default_factory=list)  # sampled tokens whose K/V is not computed yet
    # the grammar matcher of a constrained generation cut off before its end: continued by the context's
    # next generation, cloned by fork, saved in snapshots
    matcher: Any = None
    slot: int | None = None  # its recurrent state slot; None: no computed token (or no recurrent layer)
    stash: tuple | None = None  # (tokens, state) kept before a pass that may be cut back (stash, trim); its
    # buffer stays for the next stash

    def child(self, slot: int | None) -> ContextState:
        """A fork's record (pending tokens are computed before a fork), on the state slot it shares."""
        return ContextState(self.lora, self.last_logits, [], self.matcher.clone() if self.matcher else None, slot)


@dataclass(frozen=True)
class Resumed:
    """A context taken up by a generation (ContextStore.resume)."""
    computed: list[int]  # tokens whose K/V is in its pages
    todo: list[int]  # its pending tokens, then the new ones: to compute
    last_logits: np.ndarray | None  # after computed's last token
    matcher: Any  # a cut-off constrained generation's grammar, handed over (None: none)


@dataclass(frozen=True)
class Image:
    """What a snapshot of a context holds (ContextStore.snapshot): its pages are read from the pool."""
    tokens: list[int]
    pages: list[int]
    last_logits: np.ndarray
    matcher: Any
    lora: tuple
    state: np.ndarray | None  # a hybrid model's recurrent state after the tokens (StatePool.read)


@dataclass(frozen=True)
class PageShare:
    """Contexts that together may hold at most `share` of the pool's pages (a server's named contexts of
    one model): a verb that would grow them past it raises ShareExceeded before changing anything."""
    members: tuple[int, ...]
    share: float


class ShareExceeded(Exception):
    def __init__(self, held: int, new: int, limit: int, total: int):
        super().__init__(f"they hold {held} KV pages and would need {new} more, past their share of {limit} "
                         f"of {total} pages")
        self.held, self.new, self.limit, self.total = held, new, limit, total


class ContextStore:
    def __init__(self, decoder: Decoder, n_pages: int, page_size: int, kv: str, budget_pages: int | None = None,
                 pool=None, tiers=None, states=None, is_control: Callable[[int], bool] | None = None):
        """pool, states: an existing page pool and StatePool of that shape to reuse (their contents are never
        read before being written: a fresh store holds no page or slot). tiers: the prefix cache's tiers below
        memory (cache_tiers.CacheTiers). is_control: the tokenizer's, for where a hybrid's prompt messages
        start (prompt_cuts)."""
        self.decoder, self.page_size = decoder, page_size
        self.pool = pool if pool is not None else decoder.new_pool(n_pages, page_size, kv)
        self.states = states if states is not None else decoder.new_states(LOAD.state_slots, LOAD.state_checkpoints)
        if states is not None:
            states.clear()
        self.checkpoints = Checkpoints(LOAD.state_checkpoints if self.states is not None else LOAD.prompt_logits,
                                       self.states)
        if self.states is not None:  # a context's slot comes before a checkpoint's
            self.states.reclaim = self.checkpoints.evict
        self._tier_slots: Counter = Counter()  # slots the tiers' writer reads, shared until written
        self.is_control = is_control
        self._kv = KVState(n_pages, page_size, budget_pages)
        self._ctxs: dict[int, ContextState] = {}
        self.n_prefilled = 0  # tokens computed by forward passes (prefix hits excluded)
        self.default_lora: tuple = ()  # the adapters of a context opened without a choice
        self._namespaces: dict[tuple, int] = {(): 0}  # adapter choice -> its namespace in the radix tree
        self.tiers = tiers
        self.tier_tokens: dict[str, int] = {}  # tier -> tokens of opened contexts read from it, not computed
        self.prefill_tps: float | None = None  # measured: tokens per second of passes of PREFILL_MIN tokens or more

    # --- queries -------------------------------------------------------------------------------

    def contexts(self) -> list[int]:
        return self._kv.contexts()

    def tokens(self, ctx: int) -> list[int]:
        """Computed tokens plus pending sampled ones."""
        return self._kv.tokens(ctx) + self._get(ctx).pending

    def n_tokens(self, ctx: int) -> int:
        """len(tokens(ctx)) without building the list (checked on every extend)."""
        return self._kv.n_tokens(ctx) + len(self._get(ctx).pending)

    def pages(self, ctx: int) -> list[int]:
        return self._kv.page_table(ctx)

    def last_logits(self, ctx: int) -> np.ndarray | None:
        """The logits after the context's last computed token, where known."""
        return self._get(ctx).last_logits

    def lora(self, ctx: int) -> tuple:
        return self._get(ctx).lora

    def describe(self, ctx: int) -> dict:
        """The context's size: tokens (a pending sampled one included) and pages held."""
        return {"tokens": self.n_tokens(ctx), "pages": len(self._kv.page_table(ctx))}

    def namespace(self, lora: tuple) -> int:
        """The radix tree's namespace of K/V computed under these adapters (0: none)."""
        return self._namespaces.setdefault(lora, len(self._namespaces))

    def continuation(self, ctx: int, tokens: Sequence[int], k: int) -> list[int]:
        """Up to k tokens the radix tree holds after tokens, in ctx's namespace (drafts from other branches)."""
        return self._kv.continuation(tokens, self._kv.namespace(ctx), k)

    @property
    def tree_version(self) -> int:
        return self._kv.tree.version

    @property
    def owner(self) -> threading.Thread | None:
        return self._kv.owner

    def view(self) -> StoreView:
        return StoreView(self)

    def check(self):
        """Raise InvariantError unless every invariant holds: the KV state's, and one record per context."""
        self._kv.check()
        if set(self._ctxs) != set(self._kv.contexts()):
            raise InvariantError(f"records {sorted(self._ctxs)} != contexts {self._kv.contexts()}")
        if self.states is not None:
            self.states.check(Counter(r.slot for r in self._ctxs.values() if r.slot is not None)
                              + self.checkpoints.held() + self._tier_slots)
            for ctx, r in self._ctxs.items():
                if (r.slot is None) != (self._kv.n_tokens(ctx) == 0):
                    raise InvariantError(f"context {ctx}: {self._kv.n_tokens(ctx)} tokens, state slot {r.slot}")

    def _get(self, ctx: int) -> ContextState:
        self._kv.n_tokens(ctx)  # KVError for a context that does not exist
        return self._ctxs[ctx]

    # --- verbs ---------------------------------------------------------------------------------

    def claim(self, thread: threading.Thread | None):
        """From now on only `thread` may change this store (None: any, for a single-threaded caller)."""
        self._kv.claim(thread)

    def open(self, tokens: list[int], lora: tuple | None = None) -> tuple[int, int]:
        """A context of the longest computed prefix of tokens under these adapters (None: the default
        ones), from memory, then the tiers below it -> (ctx_id, n_cached); the rest is not computed. All of
        them when a checkpoint holds the logits after them (last_logits then gives those)."""
        lora = self.default_lora if lora is None else lora
        self.unpin_written()
        ns = self.namespace(lora)
        whole = self.checkpoints.whole(ns, tokens)
        ctx, n_cached = self._kv.create(tokens, ns, whole=whole is not None)
        if whole is not None and n_cached == len(tokens):  # asked before: nothing to compute (a regenerate)
            slot, logits = whole
            held = self.states.share(slot) if slot is not None else None
            self._ctxs[ctx] = ContextState(lora, logits.copy(), slot=held)
            return ctx, n_cached
        self._ctxs[ctx] = ContextState(lora)  # (a whole match cut short holds what a plain one would)
        if self.tiers is not None:
            n_cached = self._read_tiers(ctx, lora, tokens, n_cached)
        if self.states is not None:
            n_cached = self._resume_state(ctx, tokens, n_cached, tiers=True)
        return ctx, n_cached

    def _resume_state(self, ctx: int, tokens: Sequence[int], n: int, tiers: bool = False) -> int:
        """A hybrid context holding tokens[:n]'s K/V keeps only what the deepest state checkpoint at or
        below n covers, in memory or (tiers) in the tiers below it, on a slot holding that state -> the
        tokens it now holds."""
        c, slot = self.checkpoints.find(self._kv.namespace(ctx), tokens, n)
        held = self.states.share(slot) if slot is not None else None  # the tier read's alloc may reclaim it
        if tiers and self.tiers is not None and self.tiers.states:
            got = self._read_state_tier(ctx, tokens, c, n)
            if got:
                if held is not None:
                    self.states.release(held)
                return got
        if self._kv.n_tokens(ctx) > c:
            self._kv.truncate(ctx, c)
        self._ctxs[ctx].slot = held
        return c

    def _read_state_tier(self, ctx: int, tokens: Sequence[int], c: int, n: int) -> int:
        """The deepest state record past c the tiers hold whose full pages the context has (it holds
        tokens[:n]): its partial page and state read into the context -> the tokens it then holds (0:
        none found or read)."""
        kv, ps, lora = self._kv, self.page_size, self._ctxs[ctx].lora
        found = self.tiers.find_state(lora, tokens, c, min(len(tokens) - 1, n // ps * ps + ps - 1))
        if found is None:
            return 0
        p, tier = found
        slot, page = self.states.alloc(zero=False), np.empty(self.pool.bytes_per_page, np.uint8)
        # the state straight into its slot (a 19 MB record read into a buffer, then copied, took 0.13 s)
        if not self.tiers.read_state(lora, tokens, p, tier, self.states.buffers(slot) + [memoryview(page)]):
            self.states.release(slot)
            return 0
        base = p // ps * ps
        kv.truncate(ctx, base)
        try:
            for src, dst in kv.apply(kv.plan_append(ctx, p - base)):
                self.pool.copy_page(src, dst)
        except OutOfPages:
            self.states.release(slot)
            return 0
        if p > base:
            at = 0
            for buf in self.pool.page_buffers(kv.page_table(ctx)[-1]):
                buf[:] = page[at:at + len(buf)]
                at += len(buf)
        kv.commit(ctx, list(tokens[base:p]))
        rec = self._ctxs[ctx]
        rec.slot = slot
        self.tier_tokens[tier] = self.tier_tokens.get(tier, 0) + p - base  # the record's partial page
        return p

    def create(self, tokens: list[int], lora: tuple | None = None,
               share: PageShare | None = None) -> tuple[int, int]:
        """A context holding tokens, computing only what the prefix cache does not have (under these
        adapters; None: the default ones) -> (ctx_id, n_cached)."""
        if not tokens:
            raise ValueError("a context needs at least one token")
        if share is not None:
            self.check_share(share, len(tokens))
        ctx, n_cached = self.open(tokens, lora)
        try:
            self.extend(ctx, tokens[n_cached:])
        except BaseException:
            self.free(ctx)
            raise
        return ctx, n_cached

    def prompt_cuts(self, tokens: Sequence[int]) -> list[int]:
        """Offsets in tokens about to be computed where a hybrid's state is checkpointed besides a pass's
        end: the starts of its last messages, where an edit or a branch starts again ([] for other models)."""
        if self.states is None or self.is_control is None:
            return []
        return turn_starts(tokens, self.is_control, LOAD.turn_checkpoints)

    def extend(self, ctx: int, tokens: list[int], all_logits: bool = False) -> np.ndarray:
        """Compute pending tokens and then tokens after the context's end -> logits of the last one
        (of every one if all_logits). A hybrid's state is checkpointed at prompt_cuts on the way."""
        rec = self._get(ctx)
        tokens, rec.pending = rec.pending + list(tokens), []
        if not tokens:
            return rec.last_logits
        cuts = set(self.prompt_cuts(tokens))
        outs, lo = [], 0
        for hi in sorted(cuts | set(range(SCHEDULER.batch, len(tokens), SCHEDULER.batch)) | {len(tokens)}):
            part, last = tokens[lo:hi], hi == len(tokens)
            rows = None if all_logits else np.arange(len(part) - 1, len(part)) if last else np.zeros(0, np.int64)
            outs.append(self.compute([(ctx, part)], rows))
            if hi in cuts:
                self.checkpoint(ctx)
            lo = hi
        out = np.concatenate(outs) if all_logits else outs[-1]
        rec.last_logits = out[-1]
        return out if all_logits else out[-1]

    def append(self, ctx: int, tokens: list[int]) -> np.ndarray:
        """extend with tokens from outside the context's generations: a cut-off grammar no longer applies."""
        self._get(ctx).matcher = None
        return self.extend(ctx, tokens)

    def compute(self, items: list[tuple[int, list[int]]], rows: np.ndarray | None) -> np.ndarray:
        """One forward pass over several contexts at once: items are (ctx_id, tokens to append), each
        context at most once. -> logits of the batch rows `rows` (None: all rows), rows numbered over the
        concatenated tokens. Appends are planned and applied one context at a time (a plan is valid for
        one state version); on any failure every applied slot is released and no context changes."""
        st, applied = self._kv, []
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
            meta = BatchMeta(np.concatenate(pos), np.concatenate(seq), table, self.page_size, self._slots(items))
            ids = np.asarray([t for _, tokens in items for t in tokens], np.int32)
            t = time.perf_counter()
            out = self.decoder.forward(ids, meta, self.pool, rows, lora=self._lora_scales(items, len(ids)),
                                       states=self.states)
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

    def _slots(self, items) -> np.ndarray | None:
        """Each context's recurrent state slot for a pass that appends to it: its own (a fresh one of zeros
        at its first token; a copy when a fork still shares it)."""
        if self.states is None:
            return None
        for ctx, _ in items:
            rec = self._ctxs[ctx]
            rec.slot = self.states.alloc() if rec.slot is None else self.states.writable(rec.slot)
        return np.asarray([self._ctxs[ctx].slot for ctx, _ in items], np.int32)

    def _lora_scales(self, items, n: int) -> dict | None:
        """adapter -> each token's scale for it (0 where its sequence does not use it)."""
        out, at = {}, 0
        for ctx, tokens in items:
            for name, scale in self._ctxs[ctx].lora:
                out.setdefault(name, np.zeros(n, np.float32))[at:at + len(tokens)] = scale
            at += len(tokens)
        return out or None

    def stash(self, ctx: int):
        """Before a pass that computes a draft: keep a hybrid context's state, which trim rolls back to."""
        rec = self._get(ctx)
        if self.states is not None and rec.slot is not None:
            buf = rec.stash[1] if rec.stash is not None else None  # its buffer, reused step to step
            rec.stash = (self._kv.n_tokens(ctx), self.states.read(rec.slot, buf))

    def trim(self, ctx: int, n: int) -> int:
        """Cut computed K/V past the first n tokens (draft tokens a pass computed and sampling rejected):
        pages released, nothing copied; the last logits stay as set_logits left them -> the tokens still
        computed. A hybrid context goes back to its stash (the state before the pass): the tokens between
        it and n are the caller's to compute again."""
        kv, rec = self._kv, self._get(ctx)
        if kv.n_tokens(ctx) > n:
            if self.states is not None:
                if rec.stash is None or rec.stash[0] is None or rec.stash[0] > n:
                    raise InvariantError(f"context {ctx}: a recurrent state cut back to {n} tokens without a stash")
                n, state = rec.stash
                rec.slot = self.states.writable(rec.slot)
                self.states.write(rec.slot, state)
            kv.truncate(ctx, n)
        if rec.stash is not None:
            rec.stash = (None, rec.stash[1])  # used up; the buffer is kept
        return kv.n_tokens(ctx)

    def truncate(self, ctx: int, n: int):
        """Keep the context's first n tokens (a pending sampled token counts as one)."""
        rec = self._get(ctx)
        committed, pending = self._kv.n_tokens(ctx), rec.pending
        if n < committed + len(pending):
            rec.matcher = None  # its position is past the cut
        rec.pending = pending[:max(0, n - committed)]
        if n < committed:
            rec.last_logits = None
            if self.states is not None:  # the state resumes from a checkpoint; the rest is computed again
                tokens = self._kv.tokens(ctx)
                self._free_state(rec)
                rec.pending = tokens[self._resume_state(ctx, tokens, n):n]
            else:
                self._kv.truncate(ctx, n)

    def rebase(self, ctx: int, ids: list[int], share: PageShare | None = None) -> tuple[list[int], int]:
        """Make the context a prefix of ids: keep what they share (less one token, computed again for its
        logits), cut the rest -> (the ids still to append, tokens kept). share: checked for the growth."""
        have = self.tokens(ctx)
        keep = next((i for i, (a, b) in enumerate(zip(have, ids)) if a != b), min(len(have), len(ids)))
        keep = min(keep, len(ids) - 1)
        if share is not None:
            self.check_share(share, max(0, len(ids) - len(have)), ctx)
        self.truncate(ctx, keep)
        return ids[keep:], keep

    def fork(self, ctx: int, n: int) -> list[int]:
        """n contexts sharing ctx's pages (pending tokens computed first): zero pages allocated. A hybrid's
        state at the branch point is checkpointed (another request over that prefix resumes there)."""
        self.extend(ctx, [])
        self.checkpoint(ctx)
        kids, rec = self._kv.fork(ctx, n), self._ctxs[ctx]
        for k in kids:
            self._ctxs[k] = rec.child(self.states.share(rec.slot) if rec.slot is not None else None)
        return kids

    def resume(self, ctx: int, more: list[int]) -> Resumed:
        """A generation takes up the context, to append more: its pending tokens join more, and a cut-off
        grammar is handed over (the generation continues under it or drops it)."""
        rec = self._get(ctx)
        out = Resumed(self._kv.tokens(ctx), rec.pending + list(more), rec.last_logits, rec.matcher)
        rec.pending, rec.matcher = [], None
        return out

    def checkpoint(self, ctx: int, logits: np.ndarray | None = None):
        """Keep a hybrid context's recurrent state after its computed tokens for the prefix cache (where a
        later prompt over the same prefix resumes): its slot shared, nothing copied. logits: those after
        its last token, at a prompt's end (a prompt asked again starts sampling at once: a dense model keeps
        those alone)."""
        rec = self._get(ctx)
        if rec.slot is None and (self.states is not None or logits is None):
            return
        kv = self._kv
        tokens, n = kv.tokens(ctx), kv.n_tokens(ctx)
        held = self.checkpoints.put(kv.namespace(ctx), tokens, n, rec.slot, logits)
        if not held and rec.slot is not None and self.tiers is not None and self.tiers.states:  # with the page of its last n % page_size tokens
            page = kv.page_table(ctx)[n // self.page_size] if n % self.page_size else None
            kv_bytes = (b"".join(bytes(b) for b in self.pool.page_buffers(page)) if page is not None
                        else bytes(self.pool.bytes_per_page))
            self._tier_slots[self.states.share(rec.slot)] += 1
            self.tiers.save_state(self, rec.lora, tokens, n, self.states, rec.slot, kv_bytes)

    def set_logits(self, ctx: int, logits: np.ndarray):
        """A generation's pass computed the logits after the context's last token."""
        self._get(ctx).last_logits = logits

    def park(self, ctx: int, pending: list[int], matcher=None):
        """A generation leaves a context it does not own: its last sampled token, not computed yet, and the
        grammar of a constrained generation cut off before its end, for the context's next generation."""
        rec = self._get(ctx)
        rec.pending, rec.matcher = list(pending), matcher

    def watch(self, sink):
        """From now on the radix tree's full pages entering and leaving it go to sink (server/kv_events.py
        ModelEvents.listener: KV-cache events), each with the adapters its K/V was computed under."""
        by_ns = lambda ns: next(lora for lora, n in self._namespaces.items() if n == ns)  # noqa: E731
        self._kv.listener = sink.listener(by_ns)

    def flush_cache(self) -> int:
        """The prefix cache's pages in memory that no context holds, freed -> how many (those the tiers'
        writer still reads stay: pinned)."""
        self.unpin_written()
        return self._kv.evict_unused()

    def free(self, ctx: int, cache: bool = True):
        """Drop a context; with cache, its tokens stay findable in the radix tree (until evicted) and its
        full pages go to the tiers below memory."""
        kv, rec = self._kv, self._ctxs.get(ctx)
        if cache and kv.n_tokens(ctx):
            kv.cache(ctx)
            if self.tiers is not None:
                self._write_tiers(ctx)
            if rec is not None:  # where the next turn or a branch starts
                self.checkpoint(ctx)
        kv.free(ctx)
        if rec is not None:
            self._free_state(rec)
        self._ctxs.pop(ctx, None)

    def _free_state(self, rec: ContextState):
        if rec.slot is not None:
            self.states.release(rec.slot)
            rec.slot = None

    def snapshot(self, ctx: int) -> Image:
        """What a snapshot holds (pending tokens computed first)."""
        logits = self.extend(ctx, [])
        rec = self._ctxs[ctx]
        state = self.states.read(rec.slot) if rec.slot is not None else None
        return Image(self._kv.tokens(ctx), self._kv.page_table(ctx), logits, rec.matcher, rec.lora, state)

    def restore(self, tokens: list[int], lora: tuple, fill: Callable[[list[int]], np.ndarray],
                matcher=None, share: PageShare | None = None,
                state: Callable[[], np.ndarray] | None = None) -> int:
        """A context of tokens on fresh pages: fill(pages) writes their K/V into the pool (page_table
        order) and returns the logits after the last token; then state() gives a hybrid model's recurrent
        state after the tokens (required there, refused elsewhere: ValueError before anything changes).
        A failure in either frees what was taken."""
        if (state is None) != (self.states is None):
            raise ValueError("it holds no recurrent state, and this hybrid model needs one" if state is None
                             else "it holds a recurrent state, and this model has no recurrent layer")
        if share is not None:
            self.check_share(share, len(tokens))
        slot = self.states.alloc(zero=False) if state is not None else None
        try:
            ctx, pages = self._kv.restore(tokens, self.namespace(lora))
        except BaseException:
            if slot is not None:
                self.states.release(slot)
            raise
        try:
            logits = fill(pages)
            if slot is not None:
                self.states.write(slot, state())
        except BaseException:
            self._kv.free(ctx)
            if slot is not None:
                self.states.release(slot)
            raise
        self._ctxs[ctx] = ContextState(lora, logits, [], matcher, slot)
        return ctx

    def check_share(self, share: PageShare, n_new_tokens: int, extends: int | None = None):
        """ShareExceeded if share's contexts would hold more than their share of the pages once one of them
        (extends; None: a new one) gains n_new_tokens."""
        held = len({p for ctx in share.members for p in self._kv.page_table(ctx)})
        start = self._kv.n_tokens(extends) if extends is not None else 0
        ps = self.page_size
        new = -(-(start + n_new_tokens) // ps) - -(-start // ps)  # pages added, ceil division
        limit = int(share.share * self._kv.n_total)
        if held + new > limit:
            raise ShareExceeded(held, new, limit, self._kv.n_total)

    # --- the tiers below memory ----------------------------------------------------------------

    def _read_tiers(self, ctx: int, lora: tuple, tokens: list[int], n_cached: int) -> int:
        """Extend the context (holding tokens[:n_cached]) with the pages of tokens the tiers hold, up to the
        last full page before the last token -> the tokens it now holds."""
        kv, ps = self._kv, self.page_size
        found = self.tiers.find(lora, tokens, n_cached, self.prefill_tps)
        if found is None:
            return n_cached
        start = found.start
        try:
            if n_cached > start * ps:
                kv.truncate(ctx, start * ps)  # a partly matched page: its full version is in a tier
            for src, dst in kv.apply(kv.plan_append(ctx, found.n_pages * ps)):
                self.pool.copy_page(src, dst)
        except OutOfPages:
            return kv.n_tokens(ctx)
        pages = kv.page_table(ctx)[start:start + found.n_pages]
        good, read = self.tiers.read(found, [self.pool.page_buffers(p) for p in pages])
        kv.commit(ctx, tokens[start * ps:(start + good) * ps])
        if good:
            kv.cache(ctx)  # in the tree now: another request of this prefix finds it in memory
        for name, n in read.items():
            self.tier_tokens[name] = self.tier_tokens.get(name, 0) + n
        return kv.n_tokens(ctx)

    def _write_tiers(self, ctx: int):
        """Queue the context's full pages for the tiers, pinned (not evicted) until written."""
        self.unpin_written()
        kv = self._kv
        tokens = kv.tokens(ctx)
        n_full = len(tokens) // self.page_size
        if not n_full:
            return
        pages = kv.page_table(ctx)[:n_full]
        kv.pin(pages)
        self.tiers.save(self, self.pool, self._ctxs[ctx].lora, tokens[:n_full * self.page_size], pages)

    def unpin_written(self):
        """Release the pages and state slots the tiers' writer is through with."""
        if self.tiers is not None:
            for done in self.tiers.written(self):
                if isinstance(done, int):  # a state record's slot
                    self._tier_slots[done] -= 1
                    if not self._tier_slots[done]:
                        del self._tier_slots[done]
                    self.states.release(done)
                else:
                    self._kv.unpin(done)


class StoreView:
    """Read-only queries of a store (the Studio's views, metrics, `llamay ctx`): nothing here changes it.
    Taken on the scheduler's thread for a consistent reading; counters may be read anywhere."""

    def __init__(self, store: ContextStore):
        self._store, self._kv = store, store._kv

    def n_tokens(self, ctx: int) -> int:
        return self._store.n_tokens(ctx)

    def pages(self, ctx: int) -> list[int]:
        return self._store.pages(ctx)

    @property
    def n_total(self) -> int:
        return self._kv.n_total

    @property
    def n_free(self) -> int:
        return self._kv.n_free

    @property
    def stats(self):
        """KVStats: pages allocated, copied, evicted; tokens matched."""
        return self._kv.stats

    @property
    def page_size(self) -> int:
        return self._store.page_size

    @property
    def bytes_per_page(self) -> int:
        return self._store.pool.bytes_per_page

    @property
    def n_cached_pages(self) -> int:
        """Pages the radix tree holds."""
        return len(self._kv.tree)

    @property
    def state(self) -> dict:
        """A hybrid model's recurrent state: slots held and in all, checkpoints kept and their bytes ({}:
        no recurrent layer)."""
        s = self._store
        if s.states is None:
            return {}
        return {"state_slots_used": s.states.n_slots - s.states.n_free, "state_slots_total": s.states.n_slots,
                "state_bytes_per_context": s.states.bytes_per_slot, "state_checkpoints": len(s.checkpoints),
                "state_checkpoint_bytes": s.checkpoints.bytes}

    def common_prefix(self, a: int, b: int) -> int:
        return self._kv.common_prefix(a, b)

    def sequences(self, head: int) -> list[tuple[int, tuple[int, ...], int, int, int]]:
        return self._kv.sequences(head)
