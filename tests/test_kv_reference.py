"""KVState in lockstep with a naive reference model under random operation sequences (STYLE.md rule 10).

The reference shares nothing with llamay.kv: no free list, no refcounts, no tree. A context is a token list
plus one abstract page identity per page (fresh ints, never reused), kept only to count memory exactly;
the cache is a dict from token prefix (cut at a page end or the sequence end) to [identity, LRU stamp], and
every query scans everything. Fake K/V: each pool slot holds the token written there, so every context's
visible slots must equal its tokens and every cached page its prefix (this catches copy-on-write bugs).

CI runs >= 10^4 steps; LLAMAY_KV_SOAK_STEPS=1000000 runs a long soak. On failure hypothesis prints the
steps and a @reproduce_failure blob."""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict

from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)

from llamay.kv.allocator import OutOfPages
from llamay.kv.state import KVState

STEP_COUNT = 100
TOTAL_STEPS = int(os.environ.get("LLAMAY_KV_SOAK_STEPS", "10000"))
TOKENS = st.lists(st.integers(0, 2), max_size=10)  # 3-token vocabulary: prefixes collide constantly
PICK = st.integers(0, 63)  # index into the live contexts
MAX_LIVE = 4
EVENTS = ("out of pages", "copy-on-write", "evictions", "evictions with a choice", "mid-page matches")


def _pages(n_tokens: int, page_size: int) -> int:
    return (n_tokens + page_size - 1) // page_size


def _lcp(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class RefKV:
    def __init__(self, page_size: int, budget: int):
        self.ps, self.budget = page_size, budget
        self.ctxs: dict[int, tuple[list[int], list[int]]] = {}  # id -> (tokens, page identities)
        self.cache: dict[tuple[int, ...], list[int]] = {}  # prefix -> [identity, stamp]
        self.clock = self.last_ident = 0
        self.stats = dict(pages_allocated=0, pages_copied=0, evictions=0, matched_tokens=0)

    def _fresh(self) -> int:
        self.last_ident += 1
        return self.last_ident

    def _held(self, cache) -> int:
        return len({i for _, ids in self.ctxs.values() for i in ids} | {e[0] for e in cache.values()})

    def n_free(self) -> int:
        return self.budget - self._held(self.cache)

    def _holders(self, ident: int) -> int:
        return (sum(ids.count(ident) for _, ids in self.ctxs.values())
                + sum(e[0] == ident for e in self.cache.values()))

    def create(self, ctx_id: int, tokens: list[int]) -> int:
        q = tokens[:max(len(tokens) - 1, 0)]
        n = max((_lcp(p, q) for p in self.cache), default=0)
        self.clock += 1
        ids = []
        for k in range(_pages(n, self.ps)):
            lo, hi = k * self.ps, (k + 1) * self.ps
            if hi <= n:
                p = tuple(q[:hi])
            else:  # the page the match ends in: longest common prefix, ties to the most recent
                p = max((e for e in self.cache if lo < len(e) <= hi and _lcp(e, q) == n),
                        key=lambda e: self.cache[e][1])
            self.cache[p][1] = self.clock
            ids.append(self.cache[p][0])
        self.ctxs[ctx_id] = (list(q[:n]), ids)
        self.stats["matched_tokens"] += n
        return n

    def _make_room(self, need: int) -> bool:
        """Evict the oldest unused entry that no other entry extends until need pages fit; all or nothing."""
        cache, evicted = dict(self.cache), 0
        in_use = {i for _, ids in self.ctxs.values() for i in ids}
        while self.budget - self._held(cache) < need:
            leaves = [p for p in cache if cache[p][0] not in in_use
                      and not any(len(o) > len(p) and o[:len(p)] == p for o in cache)]
            if not leaves:
                return False
            del cache[min(leaves, key=lambda p: cache[p][1])]
            evicted += 1
        self.cache = cache
        self.stats["evictions"] += evicted
        return True

    def append(self, ctx_id: int, new: list[int], n_commit: int) -> bool:
        tokens, ids = self.ctxs[ctx_id]
        cow = bool(new) and len(tokens) % self.ps != 0 and self._holders(ids[-1]) > 1
        n_fresh = _pages(len(tokens) + len(new), self.ps) - len(ids)
        if not self._make_room(cow + n_fresh):
            return False
        if cow:
            ids[-1] = self._fresh()
        ids += [self._fresh() for _ in range(n_fresh)]
        self.stats["pages_copied"] += cow
        self.stats["pages_allocated"] += cow + n_fresh
        tokens += new[:n_commit]
        del ids[_pages(len(tokens), self.ps):]
        return True

    def fork(self, ctx_id: int, new_ids: list[int]):
        tokens, ids = self.ctxs[ctx_id]
        for c in new_ids:
            self.ctxs[c] = (list(tokens), list(ids))

    def truncate(self, ctx_id: int, n: int):
        tokens, ids = self.ctxs[ctx_id]
        del tokens[n:]
        del ids[_pages(n, self.ps):]

    def cache_ctx(self, ctx_id: int):
        tokens, ids = self.ctxs[ctx_id]
        self.clock += 1
        for k, ident in enumerate(ids):
            p = tuple(tokens[:(k + 1) * self.ps])
            if p in self.cache:
                self.cache[p][1] = self.clock
                continue
            if any(len(e) > len(p) and e[:len(p)] == p for e in self.cache):
                break  # a longer cached page already holds this partial one
            for e in [e for e in self.cache if k * self.ps < len(e) < len(p) and p[:len(e)] == e]:
                del self.cache[e]
            self.cache[p] = [ident, self.clock]

    def restore(self, ctx_id: int, tokens: list[int]) -> bool:
        need = _pages(len(tokens), self.ps)
        if not self._make_room(need):
            return False
        self.ctxs[ctx_id] = (list(tokens), [self._fresh() for _ in range(need)])
        self.stats["pages_allocated"] += need
        return True


class KVMachine(RuleBasedStateMachine):
    steps = 0  # rules run, over all examples
    events: Counter = Counter()  # how often the interesting cases came up

    @initialize(page_size=st.integers(1, 4), pool=st.integers(1, 4), cut=st.none() | st.integers(0, 8))
    def setup(self, page_size, pool, cut):
        n_pages = pool * _pages(10, page_size)  # a pool of 1 to 4 contexts of 10 tokens
        budget = None if cut is None else max(1, n_pages - cut)
        self.ps = page_size
        self.real = KVState(n_pages, page_size, budget)
        self.ref = RefKV(page_size, budget or n_pages)
        self.slots = [None] * (n_pages * page_size)  # fake K/V: the token written in each slot

    def _pick(self, i: int) -> int:
        live = self.real.contexts()
        return live[i % len(live)]

    def _has_ctx(self) -> bool:
        return bool(self.real.contexts())

    def _room(self) -> bool:  # few live contexts, so memory goes to the cache and eviction comes up often
        return len(self.real.contexts()) < MAX_LIVE

    def _resumable(self) -> bool:
        return self._room() and bool(self.real.cached())

    def _observe(self):
        ctxs = {c: (self.real.tokens(c), self.real.page_table(c)) for c in self.real.contexts()}
        return self.real.n_free, ctxs, sorted(self.real.cached()), asdict(self.real.stats)

    def _step(self):
        KVMachine.steps += 1

    def _write(self, ctx: int, start: int, new: list[int]):
        table = self.real.page_table(ctx)
        for pos, token in enumerate(new, start):
            self.slots[table[pos // self.ps] * self.ps + pos % self.ps] = token

    def _append(self, ctx: int, new: list[int], n_commit: int):
        before = self._observe()
        try:
            plan = self.real.plan_append(ctx, len(new))
        except OutOfPages:
            KVMachine.events["out of pages"] += 1
            assert not self.ref.append(ctx, new, n_commit), "real ran out of pages, reference did not"
            assert self._observe() == before, "a failed plan changed the state"
            return
        assert self._observe() == before, "plan_append changed the state"
        assert self.ref.append(ctx, new, n_commit), "reference ran out of pages, real did not"
        self._count_plan(plan)
        start = len(self.real.tokens(ctx))
        for src, dst in self.real.apply(plan):
            self.slots[dst * self.ps:(dst + 1) * self.ps] = self.slots[src * self.ps:(src + 1) * self.ps]
        self._write(ctx, start, new)  # K/V of every applied slot, even those not committed
        self.real.commit(ctx, new[:n_commit])

    def _held_elsewhere(self, page: int) -> bool:
        return self.real.alloc.refcount[page] > 1

    def _count_plan(self, plan):
        n_evictable = len(self.real.tree.eviction_order(self.real.n_total, self._held_elsewhere))
        KVMachine.events["copy-on-write"] += len(plan.copies)
        KVMachine.events["evictions"] += len(plan.evict)
        KVMachine.events["evictions with a choice"] += bool(plan.evict) and n_evictable > len(plan.evict)

    @precondition(_room)
    @rule(tokens=TOKENS, prefill=st.booleans())
    def create(self, tokens, prefill):
        self._step()
        self._create(tokens, prefill)

    @precondition(_resumable)
    @rule(j=PICK, suffix=TOKENS, prefill=st.booleans())
    def resume(self, j, suffix, prefill):
        """The next turn of a conversation: a cached prefix plus new tokens."""
        self._step()
        cached = sorted(p for p, _ in self.real.cached())
        self._create(list(cached[j % len(cached)]) + suffix, prefill)

    def _create(self, tokens, prefill):
        ctx, n_cached = self.real.create(tokens)
        assert n_cached == self.ref.create(ctx, tokens), "matched prefix differs"
        KVMachine.events["mid-page matches"] += n_cached % self.ps != 0
        if prefill:  # else it waits holding the matched pages, as an admitted request does
            self._append(ctx, tokens[n_cached:], len(tokens) - n_cached)

    @precondition(_has_ctx)
    @rule(i=PICK, new=st.lists(st.integers(0, 2), max_size=4), n_uncommitted=st.integers(0, 2))
    def extend(self, i, new, n_uncommitted):
        self._step()
        self._append(self._pick(i), new, max(0, len(new) - n_uncommitted))

    @precondition(lambda self: self._has_ctx() and self._room())
    @rule(i=PICK, n=st.integers(1, 2))
    def fork(self, i, n):
        self._step()
        ctx, allocated, n_free = self._pick(i), self.real.stats.pages_allocated, self.real.n_free
        new_ids = self.real.fork(ctx, n)
        assert (self.real.stats.pages_allocated, self.real.n_free) == (allocated, n_free), "fork allocated"
        self.ref.fork(ctx, new_ids)

    @precondition(_has_ctx)
    @rule(i=PICK, n=st.integers(0, 20))
    def truncate(self, i, n):
        self._step()
        ctx = self._pick(i)
        n = min(n, len(self.real.tokens(ctx)))
        self.real.truncate(ctx, n)
        self.ref.truncate(ctx, n)

    @precondition(_has_ctx)
    @rule(i=PICK, cache=st.booleans())
    def free(self, i, cache):
        self._step()
        ctx = self._pick(i)
        if cache:  # what the engine does when a request ends
            self.real.cache(ctx)
            self.ref.cache_ctx(ctx)
        self.real.free(ctx)
        del self.ref.ctxs[ctx]

    @precondition(_has_ctx)
    @rule(i=PICK)
    def cache(self, i):
        self._step()
        ctx = self._pick(i)
        self.real.cache(ctx)
        self.ref.cache_ctx(ctx)

    @precondition(lambda self: self._has_ctx() and self._room())
    @rule(i=PICK)
    def snapshot_restore(self, i):
        self._step()
        ctx = self._pick(i)
        tokens, table = self.real.tokens(ctx), self.real.page_table(ctx)
        pages = [self.slots[p * self.ps:(p + 1) * self.ps] for p in table]  # what a snapshot stores
        before = self._observe()
        try:
            new_ctx, fresh = self.real.restore(tokens)
        except OutOfPages:
            assert not self.ref.restore(-1, tokens), "real ran out of pages, reference did not"
            assert self._observe() == before, "a failed restore changed the state"
            return
        assert self.ref.restore(new_ctx, tokens), "reference ran out of pages, real did not"
        assert fresh == self.real.page_table(new_ctx) and len(fresh) == len(table)
        others = {p for c in self.real.contexts() if c != new_ctx for p in self.real.page_table(c)}
        assert not others & set(fresh) and not {p for _, p in self.real.cached()} & set(fresh)
        for page, content in zip(fresh, pages):
            self.slots[page * self.ps:(page + 1) * self.ps] = content

    @invariant()
    def agree(self):
        self.real.check()
        assert self.real.contexts() == sorted(self.ref.ctxs)
        assert 0 <= self.real.n_free == self.ref.n_free() <= self.real.n_total
        assert asdict(self.real.stats) == self.ref.stats
        cached = self.real.cached()
        assert sorted(p for p, _ in cached) == sorted(self.ref.cache), "cached prefixes differ"
        self._agree_pages(cached)

    def _agree_pages(self, cached):
        """Visible K/V equals tokens; real pages and reference identities correspond one to one."""
        to_ref, to_real = {}, {}

        def same(page, ident):
            assert to_ref.setdefault(page, ident) == ident and to_real.setdefault(ident, page) == page, \
                f"page {page} / identity {ident}: sharing differs from the reference"

        for c in self.real.contexts():
            tokens, table = self.real.tokens(c), self.real.page_table(c)
            ref_tokens, ref_ids = self.ref.ctxs[c]
            assert tokens == ref_tokens and self.real.n_tokens(c) == len(tokens), f"context {c}: tokens differ"
            seen = [self.slots[table[i // self.ps] * self.ps + i % self.ps] for i in range(len(tokens))]
            assert seen == tokens, f"context {c}: visible K/V {seen} != tokens {tokens}"
            for page, ident in zip(table, ref_ids, strict=True):
                same(page, ident)
        for prefix, page in cached:
            start = (len(prefix) - 1) // self.ps * self.ps
            assert self.slots[page * self.ps:page * self.ps + len(prefix) - start] == list(prefix[start:])
            same(page, self.ref.cache[prefix][0])


def test_kv_state_matches_reference():
    KVMachine.steps, KVMachine.events = 0, Counter()
    config = settings(max_examples=20, stateful_step_count=STEP_COUNT, deadline=None, database=None,
                      print_blob=True, suppress_health_check=list(HealthCheck))
    while KVMachine.steps < TOTAL_STEPS:  # hypothesis runs fewer steps than the maximum; each run reseeds
        run_state_machine_as_test(KVMachine, settings=config)
    print(f"lockstep steps run: {KVMachine.steps}, {dict(KVMachine.events)}")
    assert all(KVMachine.events[e] >= KVMachine.steps // 1000 for e in EVENTS), "the generator stopped reaching cases"
