"""Scenario tests pinning KVState's exact behaviour: forks, copy-on-write, multi-turn reuse, eviction order,
clean failures, and a check() that catches corruption. Expected values follow from DESIGN.md §6."""
from __future__ import annotations

import random
from dataclasses import asdict

import pytest

from llamay.kv.allocator import InvariantError, KVError, OutOfPages, StalePlan
from llamay.kv.radix import Node
from llamay.kv.state import KVState


def append(s: KVState, ctx: int, tokens: list[int]) -> list[tuple[int, int]]:
    """What the engine does to compute tokens: plan, apply (the copies would run here), commit."""
    copies = s.apply(s.plan_append(ctx, len(tokens)))
    s.commit(ctx, tokens)
    return copies


def prefill(s: KVState, tokens: list[int]) -> tuple[int, int]:
    ctx, n_cached = s.create(tokens)
    append(s, ctx, tokens[n_cached:])
    return ctx, n_cached


def observe(s: KVState):
    ctxs = {c: (s.tokens(c), s.page_table(c)) for c in s.contexts()}
    return s.n_free, ctxs, sorted(s.cached()), asdict(s.stats)


def test_fork_8_ways_of_a_32_page_context_allocates_no_page():
    s = KVState(64, 4)
    ctx, _ = prefill(s, list(range(128)))
    table = s.page_table(ctx)
    assert len(table) == 32
    allocated, n_free = s.stats.pages_allocated, s.n_free
    forks = s.fork(ctx, 8)
    assert len(set(forks) | {ctx}) == 9
    assert (s.stats.pages_allocated, s.n_free) == (allocated, n_free)
    assert all(s.page_table(f) == table and s.tokens(f) == list(range(128)) for f in forks)
    assert all(s.alloc.refcount[p] == 9 for p in table)
    s.check()


def test_a_write_into_a_shared_page_clones_exactly_that_page():
    s = KVState(16, 4)
    a, _ = prefill(s, [1, 2, 3, 4, 5, 6])
    b, = s.fork(a)
    table = s.page_table(a)
    plan = s.plan_append(b, 1)
    (src, dst), = plan.copies
    assert (src, plan.new_pages, plan.evict) == (table[1], (), ())
    assert dst not in table
    assert s.apply(plan) == [(table[1], dst)]
    s.commit(b, [7])
    assert s.page_table(b) == [table[0], dst] and s.page_table(a) == table
    assert s.stats.pages_copied == 1
    assert append(s, a, [8, 9]) == []  # a holds its last page alone now: written in place
    c, = s.fork(a)
    plan = s.plan_append(c, 1)  # every page shared, but the write starts a fresh page
    assert plan.copies == () and len(plan.new_pages) == 1
    assert s.stats.pages_copied == 1
    s.check()


def test_multi_turn_chat_reprefills_only_each_new_turn_plus_one_token():
    s, ps, rng = KVState(64, 4), 4, random.Random(7)
    history: list[int] = []
    matched = 0
    for turn in range(10):
        user = [rng.randrange(100, 200) for _ in range(rng.randint(3, 9))]
        prompt = history + user
        ctx, n_cached = s.create(prompt)
        assert n_cached == max(len(history) - 1, 0)  # the last reply token was sampled, never fed
        matched += n_cached
        assert len(prompt) - n_cached == len(user) + (turn > 0)
        copied = s.stats.pages_copied
        append(s, ctx, prompt[n_cached:])
        reply = [rng.randrange(200, 300) for _ in range(rng.randint(2, 7))]
        for token in reply[:-1]:  # decode: each sampled token is fed back, except the last
            append(s, ctx, [token])
        assert s.stats.pages_copied - copied == (n_cached % ps != 0)  # only the page the match ended in
        s.cache(ctx)
        s.free(ctx)
        s.check()
        history = prompt + reply
        n_pages = -(-(len(history) - 1) // ps)
        assert len(s.cached()) == n_pages and s.n_free == 64 - n_pages  # superseded partial pages went
    assert s.stats.matched_tokens == matched and s.stats.evictions == 0


def test_matched_tokens_counts_what_create_found():
    s = KVState(16, 4)
    a, _ = prefill(s, [1, 2, 3, 4, 5, 6])
    s.cache(a)
    _, n1 = s.create([1, 2, 3, 4, 5, 9])
    _, n2 = s.create([1, 2, 7])
    assert (n1, n2) == (5, 2)
    assert s.stats.matched_tokens == 7


def test_lru_eviction_order_under_a_budget():
    s = KVState(32, 2, budget_pages=6)
    pages = {}
    for name, seq in (("A", [1, 1, 1, 1]), ("B", [2, 2, 2, 2]), ("C", [3, 3, 3, 3])):
        ctx, _ = prefill(s, seq)
        pages[name] = s.page_table(ctx)
        s.cache(ctx)
        s.free(ctx)
    assert s.n_free == 0 and len(s.cached()) == 6
    a, n = s.create([1, 1, 1, 1, 9])  # A is used again: B is now the least recently used
    assert n == 4
    s.free(a)
    d, _ = s.create([4, 4, 4])
    plan = s.plan_append(d, 3)
    assert plan.evict == (pages["B"][1], pages["B"][0])  # B's leaf, then its parent, now a leaf
    assert sorted(plan.new_pages) == sorted(pages["B"])
    s.apply(plan)
    s.commit(d, [4, 4, 4])
    assert s.stats.evictions == 2
    assert sorted(p for p, _ in s.cached()) == [(1, 1), (1, 1, 1, 1), (3, 3), (3, 3, 3, 3)]
    c, n = s.create([3, 3, 3, 3, 9])  # held: C's prefix is in use and must survive
    assert n == 4
    e, _ = s.create([5, 5])
    plan = s.plan_append(e, 2)
    assert plan.evict == (pages["A"][1],)  # least recently used, not in use; only one page needed
    s.apply(plan)
    s.commit(e, [5, 5])
    f, _ = s.create([6])
    plan = s.plan_append(f, 2)
    assert plan.evict == (pages["A"][0],)
    s.apply(plan)
    s.commit(f, [6, 6])
    g, _ = s.create([7])
    with pytest.raises(OutOfPages, match="need 1 pages: 0 free, 0 evictable, 6 in the budget"):
        s.plan_append(g, 1)  # only C is left in the tree, and a context uses it
    assert sorted(p for p, _ in s.cached()) == [(3, 3), (3, 3, 3, 3)]
    s.free(c)
    assert s.plan_append(g, 1).evict == (pages["C"][1],)
    s.check()


def test_out_of_pages_leaves_the_state_unchanged():
    s = KVState(4, 2)
    a, _ = prefill(s, [1, 2, 3])
    s.cache(a)
    b, _ = prefill(s, [4, 5, 6])
    before = observe(s)
    with pytest.raises(OutOfPages, match="need 1 pages: 0 free, 0 evictable"):
        s.plan_append(b, 3)
    with pytest.raises(OutOfPages):
        s.restore([7, 8])
    assert observe(s) == before
    s.check()
    s.free(a)  # its tree pages become evictable
    plan = s.plan_append(b, 3)
    assert plan.evict == (s.cached()[-1][1],) and len(plan.new_pages) == 1


def test_a_plan_made_before_a_change_is_refused():
    s = KVState(8, 2)
    a, _ = prefill(s, [1, 2, 3])
    plan = s.plan_append(a, 1)
    s.fork(a)
    before = observe(s)
    with pytest.raises(StalePlan):
        s.apply(plan)
    assert observe(s) == before


def test_commit_of_fewer_tokens_than_applied_releases_the_rest():
    s = KVState(8, 2)
    a, _ = s.create([])
    s.apply(s.plan_append(a, 5))
    assert len(s.page_table(a)) == 3 and s.n_free == 5
    s.commit(a, [1, 2])
    assert s.tokens(a) == [1, 2] and len(s.page_table(a)) == 1 and s.n_free == 7
    s.check()


def test_truncate_releases_pages_and_the_next_write_clones_a_shared_page():
    s = KVState(8, 2)
    a, _ = prefill(s, [1, 2, 3, 4, 5])
    b, = s.fork(a)
    s.truncate(b, 3)
    assert s.tokens(b) == [1, 2, 3] and s.page_table(b) == s.page_table(a)[:2]
    copies = append(s, b, [9])
    assert [src for src, _ in copies] == [s.page_table(a)[1]]
    s.free(a)
    assert s.n_free == 8 - 2
    s.check()


def test_cache_replaces_a_partial_page_it_extends():
    s = KVState(16, 2)
    a, _ = prefill(s, [1, 2, 3])
    s.cache(a)
    b, n = s.create([1, 2, 3, 4, 5, 6])
    assert n == 3 and s.page_table(b) == s.page_table(a)
    append(s, b, [4, 5, 6])
    assert s.cache(b) == 2
    assert sorted(p for p, _ in s.cached()) == [(1, 2), (1, 2, 3, 4), (1, 2, 3, 4, 5, 6)]
    assert s.cache(a) == 0  # (1, 2, 3) is covered by (1, 2, 3, 4)
    assert s.alloc.refcount[s.page_table(a)[1]] == 1
    s.check()


def test_restore_allocates_fresh_pages():
    s = KVState(8, 2)
    a, _ = prefill(s, [1, 2, 3])
    s.cache(a)
    r, pages = s.restore(s.tokens(a))
    assert s.tokens(r) == [1, 2, 3] and s.page_table(r) == pages
    assert not set(pages) & set(s.page_table(a)) and s.n_free == 8 - 4
    assert s.stats.matched_tokens == 0
    s.check()


def _ctx_with_cache():
    s = KVState(8, 2)
    a, _ = prefill(s, [1, 2, 3])
    s.cache(a)
    return s, a


def _refcount(s, a):
    s.alloc.refcount[s.page_table(a)[0]] += 1


def _free_page_in_table(s, a):
    s._ctxs[a].pages[0] = s.alloc.free_pages()[-1]


def _page_in_two_nodes(s, a):
    page = s.page_table(a)[0]
    s.tree.root.children[(9, 9)] = Node((9, 9), page, s.tree.root, 0)
    s.alloc.refcount[page] += 1


def _tokens_without_pages(s, a):
    del s._ctxs[a].tokens[-2:]


def _free_twice(s, a):
    s.alloc._free.append(s.alloc._free[-1])


@pytest.mark.parametrize("corrupt", [_refcount, _free_page_in_table, _page_in_two_nodes, _tokens_without_pages,
                                     _free_twice])
def test_check_detects_corruption(corrupt):
    s, a = _ctx_with_cache()
    s.check()
    corrupt(s, a)
    with pytest.raises(InvariantError):
        s.check()


def test_misuse_is_refused():
    s = KVState(8, 2)
    a, _ = s.create([1, 2])
    with pytest.raises(KVError, match="no context 99"):
        s.tokens(99)
    s.apply(s.plan_append(a, 2))
    with pytest.raises(KVError, match="not committed"):
        s.plan_append(a, 1)
    with pytest.raises(KVError, match="commit of 3 tokens, 2 slots applied"):
        s.commit(a, [1, 2, 3])
    with pytest.raises(KVError, match="bad geometry"):
        KVState(4, 2, budget_pages=5)


def test_common_prefix_and_sequences_equal_what_the_tokens_say():
    rng = random.Random(7)
    s = KVState(n_pages=256, page_size=4)
    base = [rng.randrange(50) for _ in range(37)]
    root, _ = prefill(s, base)
    ctxs = [root]
    for _ in range(12):  # forks cut back at random points and grown differently
        parent = rng.choice(ctxs)
        kid = s.fork(parent)[0]
        keep = rng.randrange(1, s.n_tokens(kid) + 1)
        s.truncate(kid, keep)
        append(s, kid, [rng.randrange(50) for _ in range(rng.randrange(0, 9))])
        ctxs.append(kid)
    for a in ctxs:
        for b in ctxs:
            ta, tb = s.tokens(a), s.tokens(b)
            want = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
            assert s.common_prefix(a, b) == want
    for c in ctxs:
        s.free(c)  # their tokens go to the tree
    entries = s.cached()
    leaves = [k for k, _ in entries if not any(len(o) > len(k) and o[:len(k)] == k for o, _ in entries)]
    got = s.sequences(6)
    assert sorted((n, first) for n, first, *_ in got) == sorted((len(k), k[:6]) for k in leaves)
    assert all(pages == -(-n // 4) for n, _, pages, *_ in got)
