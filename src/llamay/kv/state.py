"""KVState: the one mutable façade over pages, contexts and the radix tree (invariants: see kv/__init__.py).

A context is a token list plus a page table: token i lives in page_table[i // page_size], slot
i % page_size. Appending is plan (pure, may raise OutOfPages), apply (evicts, allocates, clones; returns the
(src, dst) page copies the engine does before writing K/V), commit (the tokens whose K/V were written)."""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .allocator import InvariantError, KVError, OutOfPages, PageAllocator, StalePlan
from .radix import RadixTree


@dataclass
class _Context:
    tokens: list[int]  # committed: their K/V is in the pages
    pages: list[int]  # ceil((len(tokens) + n_pending) / page_size) page ids
    n_pending: int = 0  # slots applied but not yet committed
    ns: int = 0  # its namespace in the tree: K/V computed under other weights (LoRA adapters) is other K/V


NS_SHIFT = 32  # a namespace's tree keys are its tokens plus ns << NS_SHIFT (token ids are below 2^32)


def _keys(tokens: Sequence[int], ns: int) -> Sequence[int]:
    """The tree's keys for tokens of a namespace: namespace 0 is the tokens themselves."""
    return tokens if not ns else [t + (ns << NS_SHIFT) for t in tokens]


@dataclass(frozen=True)
class Plan:
    ctx_id: int
    n_new: int  # token slots to append
    evict: tuple[int, ...]  # tree pages evicted first, in this order
    copies: tuple[tuple[int, int], ...]  # (src, dst): the shared last page is cloned into dst
    new_pages: tuple[int, ...]  # appended to the page table
    version: int  # the state it was made against


@dataclass
class KVStats:
    pages_allocated: int = 0  # fresh pages handed out, clone destinations included
    pages_copied: int = 0  # copy-on-write clones
    evictions: int = 0  # tree pages evicted for room
    matched_tokens: int = 0  # tokens create() found already computed


def _n_pages(n_tokens: int, page_size: int) -> int:
    return -(-n_tokens // page_size)


class KVState:
    def __init__(self, n_pages: int, page_size: int, budget_pages: int | None = None):
        """budget_pages (<= n_pages) caps the pages held at once; page ids then stay below it."""
        budget = n_pages if budget_pages is None else budget_pages
        if page_size < 1 or not 1 <= budget <= n_pages:
            raise KVError(f"bad geometry: page_size={page_size}, n_pages={n_pages}, budget={budget_pages}")
        self.page_size = page_size
        self.alloc = PageAllocator(budget)
        self.tree = RadixTree(page_size)
        self.stats = KVStats()
        self._ctxs: dict[int, _Context] = {}
        self._next_id = 0
        self._clock = 0  # LRU stamps
        self._version = 0  # bumped by every mutation; a plan is valid for one version
        self.owner: threading.Thread | None = None  # the only thread that may change it (claim)
        self._pins: Counter = Counter()  # page -> pins (pin): holders besides contexts and the tree
        # told of the tree's changes as they happen, on the owner's thread (KV-cache events): full pages
        # entering it, stored(ns, tokens through them, first page index, pages); pages leaving it,
        # removed(pages) (partial ones too: never stored); cleared() when evict_unused empties it
        self.listener = None

    @property
    def n_total(self) -> int:
        return self.alloc.n_total

    @property
    def n_free(self) -> int:
        return self.alloc.n_free

    # --- queries -------------------------------------------------------------------------------

    def contexts(self) -> list[int]:
        return sorted(self._ctxs)

    def tokens(self, ctx_id: int) -> list[int]:
        return list(self._get(ctx_id).tokens)

    def n_tokens(self, ctx_id: int) -> int:
        """Committed tokens, without copying them."""
        return len(self._get(ctx_id).tokens)

    def page_table(self, ctx_id: int) -> list[int]:
        return list(self._get(ctx_id).pages)

    def cached(self) -> list[tuple[tuple[int, ...], int]]:
        """(token prefix, page) of every tree entry: the page holds the prefix's last len % page_size
        (or page_size) tokens. Entries of every namespace, their tokens as given."""
        mask = (1 << NS_SHIFT) - 1
        return [(tuple(t & mask for t in key), page) for key, page in self.tree.entries()]

    def sequences(self, head: int) -> list[tuple[int, tuple[int, ...], int, int, int]]:
        """The tree's cached sequences, most recently used first: RadixTree.sequences, tokens without
        their namespace."""
        mask = (1 << NS_SHIFT) - 1
        out = [(n, tuple(t & mask for t in first), pages, hits, stamp)
               for n, first, pages, hits, stamp in self.tree.sequences(head)]
        return sorted(out, key=lambda e: -e[4])

    def common_prefix(self, a: int, b: int) -> int:
        """Leading tokens contexts a and b share, without copying them: the pages both hold first, then
        token by token (a branch point inside a page its copy-on-write cloned)."""
        ca, cb = self._get(a), self._get(b)
        shared = 0
        for pa, pb in zip(ca.pages, cb.pages):
            if pa != pb:
                break
            shared += 1
        n, i = min(len(ca.tokens), len(cb.tokens)), min(shared * self.page_size, len(ca.tokens), len(cb.tokens))
        while i < n and ca.tokens[i] == cb.tokens[i]:
            i += 1
        return i

    def continuation(self, tokens: Sequence[int], ns: int, k: int) -> list[int]:
        """Up to k tokens the tree holds after tokens in namespace ns (speculative decoding's drafts from other
        branches: RadixTree.continuation); a query, changing nothing."""
        mask = (1 << NS_SHIFT) - 1
        return [t & mask for t in self.tree.continuation(_keys(tokens, ns), k)]

    def namespace(self, ctx_id: int) -> int:
        return self._get(ctx_id).ns

    def claim(self, thread: threading.Thread | None):
        """From now on only `thread` may change this state (None: any, for a single-threaded caller)."""
        self.owner = thread

    def _mutating(self):
        if self.owner is not None and threading.current_thread() is not self.owner:
            raise InvariantError(f"KV state changed on thread {threading.current_thread().name}, not on its "
                                 f"owner {self.owner.name}: every change goes through the scheduler")

    def _get(self, ctx_id: int, settled: bool = False) -> _Context:
        ctx = self._ctxs.get(ctx_id)
        if ctx is None:
            raise KVError(f"no context {ctx_id}")
        if settled and ctx.n_pending:
            raise KVError(f"context {ctx_id} has {ctx.n_pending} applied slots not committed")
        return ctx

    # --- contexts ------------------------------------------------------------------------------

    def create(self, tokens: Sequence[int], ns: int = 0, whole: bool = False) -> tuple[int, int]:
        """-> (ctx_id, n_cached): a context holding the longest computed prefix of tokens[:-1] (whole: of
        tokens, for a caller that holds the logits after them) in the namespace ns (0: the base weights;
        see _Context.ns)."""
        self._mutating()
        path, n_cached = self.tree.match(_keys(tokens if whole else tokens[:max(len(tokens) - 1, 0)], ns))
        self._tick()
        self.tree.touch(path, self._clock)
        pages = [node.page for node in path]
        for page in pages:
            self.alloc.incref(page)
        self.stats.matched_tokens += n_cached
        return self._add(_Context(list(tokens[:n_cached]), pages, ns=ns)), n_cached

    def fork(self, ctx_id: int, n: int = 1) -> list[int]:
        """n contexts sharing ctx_id's pages: zero pages allocated."""
        self._mutating()
        ctx = self._get(ctx_id, settled=True)
        ids = []
        for _ in range(n):
            for page in ctx.pages:
                self.alloc.incref(page)
            ids.append(self._add(_Context(list(ctx.tokens), list(ctx.pages), ns=ctx.ns)))
        return ids

    def free(self, ctx_id: int):
        self._mutating()
        ctx = self._get(ctx_id)
        for page in reversed(ctx.pages):  # the free stack then hands them out again in ascending order
            self.alloc.decref(page)
        del self._ctxs[ctx_id]
        self._version += 1

    def truncate(self, ctx_id: int, n: int):
        """Keep the first n tokens, release the pages past them."""
        self._mutating()
        ctx = self._get(ctx_id, settled=True)
        if not 0 <= n <= len(ctx.tokens):
            raise KVError(f"truncate to {n} of a context of {len(ctx.tokens)} tokens")
        del ctx.tokens[n:]
        self._release_past(ctx, n)

    def cache(self, ctx_id: int) -> int:
        """Insert the context's tokens and pages in the tree (which holds its own references) -> pages added."""
        self._mutating()
        ctx = self._get(ctx_id, settled=True)
        self._tick()
        taken, dropped = self.tree.insert(_keys(ctx.tokens, ctx.ns), ctx.pages, self._clock)
        for page in taken:
            self.alloc.incref(page)
        for page in dropped:
            self.alloc.decref(page)
        if taken and self.listener is not None:
            self._report_stored(ctx, taken)
        return len(taken)

    def _report_stored(self, ctx: _Context, taken: list[int]):
        """The full pages among taken (a run of the context's pages: insert adds nodes from the first new
        one to the end, or to a covered partial page)."""
        first, n_full = ctx.pages.index(taken[0]), len(ctx.tokens) // self.page_size
        end = min(first + len(taken), n_full)
        if end > first:
            self.listener.stored(ctx.ns, ctx.tokens[:end * self.page_size], first, ctx.pages[first:end])

    def pin(self, pages: Sequence[int]):
        """Hold pages (held already) until unpin: not evicted meanwhile, so a reader on another thread (the
        disk tier's writer) may copy a full page's K/V out of the pool."""
        self._mutating()
        for page in pages:
            self.alloc.incref(page)
            self._pins[page] += 1
        self._version += 1

    def unpin(self, pages: Sequence[int]):
        self._mutating()
        for page in pages:
            if self._pins[page] <= 0:
                raise KVError(f"page {page} is not pinned")
            self._pins[page] -= 1
            if not self._pins[page]:
                del self._pins[page]
            self.alloc.decref(page)
        self._version += 1

    def restore(self, tokens: Sequence[int], ns: int = 0) -> tuple[int, list[int]]:
        """-> (ctx_id, pages): a context of tokens (of namespace ns) on fresh pages the caller fills with
        the snapshot's K/V (page_table order) before using it."""
        self._mutating()
        n = _n_pages(len(tokens), self.page_size)
        evict, _ = self._plan_pages(n)
        pages = self._take(evict, n)
        self._version += 1
        return self._add(_Context(list(tokens), pages, ns=ns)), list(pages)

    def _add(self, ctx: _Context) -> int:
        ctx_id, self._next_id = self._next_id, self._next_id + 1
        self._ctxs[ctx_id] = ctx
        self._version += 1
        return ctx_id

    def _tick(self):
        self._clock += 1
        self._version += 1

    def _release_past(self, ctx: _Context, n_tokens: int):
        keep = _n_pages(n_tokens, self.page_size)
        for page in reversed(ctx.pages[keep:]):
            self.alloc.decref(page)
        del ctx.pages[keep:]
        self._version += 1

    # --- appending: plan, apply, commit --------------------------------------------------------

    def plan_append(self, ctx_id: int, n_new: int) -> Plan:
        """Pure: what appending n_new token slots takes. Raises OutOfPages if free + evictable is too few."""
        ctx = self._get(ctx_id, settled=True)
        if n_new < 0:
            raise KVError(f"append of {n_new} tokens")
        n_len, ps = len(ctx.tokens), self.page_size
        cow = n_new > 0 and n_len % ps != 0 and self.alloc.refcount[ctx.pages[-1]] > 1
        n_fresh = _n_pages(n_len + n_new, ps) - len(ctx.pages)
        evict, dst = self._plan_pages(cow + n_fresh)
        copies = ((ctx.pages[-1], dst[0]),) if cow else ()
        return Plan(ctx_id, n_new, tuple(evict), copies, tuple(dst[cow:]), self._version)

    def apply(self, plan: Plan) -> list[tuple[int, int]]:
        """Mutate as planned -> the (src, dst) page copies to do before writing the new K/V."""
        self._mutating()
        if plan.version != self._version:
            raise StalePlan(f"plan made at version {plan.version}, state is at {self._version}")
        ctx = self._get(plan.ctx_id, settled=True)
        pages = self._take(list(plan.evict), len(plan.copies) + len(plan.new_pages))
        if pages != [dst for _, dst in plan.copies] + list(plan.new_pages):
            raise InvariantError(f"allocated {pages}, planned {plan}")
        for src, dst in plan.copies:
            ctx.pages[-1] = dst
            self.alloc.decref(src)  # stays >= 1: it was shared
        ctx.pages += pages[len(plan.copies):]
        ctx.n_pending = plan.n_new
        self.stats.pages_copied += len(plan.copies)
        self._version += 1
        return list(plan.copies)

    def commit(self, ctx_id: int, tokens: Sequence[int]):
        """The engine wrote K/V for tokens at the applied slots. Fewer than applied: the rest is released."""
        self._mutating()
        ctx = self._get(ctx_id)
        if len(tokens) > ctx.n_pending:
            raise KVError(f"commit of {len(tokens)} tokens, {ctx.n_pending} slots applied")
        ctx.tokens += tokens
        ctx.n_pending = 0
        self._release_past(ctx, len(ctx.tokens))

    def evict_unused(self) -> int:
        """Every prefix-cache page no context holds, evicted (SGLang's /flush_cache) -> pages freed."""
        self._mutating()
        evict = self.tree.eviction_order(len(self.alloc.refcount), lambda p: self.alloc.refcount[p] > 1)
        self._take(evict, 0)
        if self.listener is not None and not len(self.tree):
            self.listener.cleared()
        return len(evict)

    def _plan_pages(self, n: int) -> tuple[list[int], list[int]]:
        """Pure -> (tree pages to evict, the n page ids alloc will then hand out), or OutOfPages."""
        short = n - self.alloc.n_free
        evict = self.tree.eviction_order(short, lambda p: self.alloc.refcount[p] > 1) if short > 0 else []
        if len(evict) < short:
            raise OutOfPages(f"need {n} pages: {self.alloc.n_free} free, {len(evict)} evictable, "
                             f"{self.n_total} in the budget")
        return evict, self.alloc.peek(n, evict)

    def _take(self, evict: list[int], n: int) -> list[int]:
        for page in evict:
            self.tree.remove(page)
            self.alloc.decref(page)
        if evict and self.listener is not None:
            self.listener.removed(list(evict))
        self.stats.evictions += len(evict)
        self.stats.pages_allocated += n
        return [self.alloc.alloc() for _ in range(n)]

    # --- integrity -----------------------------------------------------------------------------

    def check(self):
        """Raise InvariantError unless every invariant of kv/__init__.py holds."""
        self.tree.check()
        holders = Counter()
        for ctx_id, ctx in self._ctxs.items():
            want = _n_pages(len(ctx.tokens) + ctx.n_pending, self.page_size)
            if len(ctx.pages) != want:
                raise InvariantError(f"context {ctx_id}: {len(ctx.pages)} pages for "
                                     f"{len(ctx.tokens)}+{ctx.n_pending} tokens, want {want}")
            holders.update(ctx.pages)
        holders.update(page for _, page in self.tree.entries())
        holders.update(self._pins)
        self._check_pages(holders)

    def _check_pages(self, holders: Counter):
        free = self.alloc.free_pages()
        if len(set(free)) != len(free):
            raise InvariantError("a page is on the free stack twice")
        held = [p for p in range(self.n_total) if self.alloc.refcount[p] > 0]
        if len(free) + len(held) != self.n_total or set(free) & set(held):
            raise InvariantError(f"{len(free)} free + {len(held)} held != {self.n_total} total")
        for page in set(holders) | set(held):
            if not 0 <= page < self.n_total or self.alloc.refcount[page] != holders[page]:
                raise InvariantError(f"page {page}: {holders[page]} holders, refcount "
                                     f"{self.alloc.refcount[page] if 0 <= page < self.n_total else None}")
