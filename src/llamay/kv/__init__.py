"""KV state: the page pool (arrays), page allocation, the radix prefix tree, contexts (fork, copy-on-write).

Bookkeeping (allocator.py, radix.py, state.py) is pure Python and never touches the arrays (pool.py).
KVState is the one façade; only the scheduler calls its mutating methods (a scheduler with a thread claims
the state, and a change from any other thread raises InvariantError). A page holds page_size token
slots; token i of a context lives in page_table[i // page_size], slot i % page_size.

Invariants, checked by KVState.check() (raises InvariantError):
  1. free + held == total (total = the budget): a page is free iff its refcount is 0, never listed twice.
  2. every page's refcount == its holders: the contexts' page tables, the radix tree's nodes and pins.
  3. a page is in at most one tree node; a tree node's page is always held.
  4. no context page table points at a free page (follows from 2, checked as part of it).
  5. a context of n committed tokens with p applied-not-committed slots holds ceil((n + p) / page_size) pages.
  6. tree shape: every node's key has 1..page_size tokens; a partial key (< page_size) is a leaf and is
     never a strict prefix of a sibling's key.
Behaviour the tests pin (tests/test_kv_state.py, tests/test_kv_reference.py):
  - a page whose refcount is above one is cloned before a write into it, and that is the only copy;
    fork() allocates nothing.
  - only leaves that no context holds are evicted, least recently used first (create() and cache() touch
    the path they use), and only when free pages within the budget are too few.
  - plan_append() is pure; a failing plan or restore changes nothing.
"""
from .allocator import InvariantError, KVError, OutOfPages, StalePlan
from .pool import KV_TYPES, KVType, PagePool, kv_type, page_bytes
from .state import KVState, KVStats, Plan

__all__ = ["KV_TYPES", "KVType", "PagePool", "kv_type", "page_bytes",
           "KVState", "KVStats", "Plan", "KVError", "OutOfPages", "StalePlan", "InvariantError"]
