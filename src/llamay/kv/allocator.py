"""Page ids with refcounts, and the errors of the KV bookkeeping.

A page is free iff its refcount is 0. Free pages form a stack: the most recently freed page is handed out
first, and a never-used page only when no used one is free, so page ids stay below the largest number of
pages ever held at once (pool pages past it are never touched, hence never mapped)."""
from __future__ import annotations


class KVError(Exception):
    """The KV interface was used against its contract (unknown context, pending writes, stale plan...)."""


class OutOfPages(KVError):
    """Not enough free or evictable pages; raised before anything changed."""


class StalePlan(KVError):
    """A plan applied after the state changed since it was made."""


class InvariantError(KVError):
    """check() found the bookkeeping inconsistent: a bug, never a user error."""


class PageAllocator:
    def __init__(self, n_pages: int):
        if n_pages < 1:
            raise KVError(f"need at least one page, got {n_pages}")
        self.n_total = n_pages
        self.refcount = [0] * n_pages
        self._free = list(range(n_pages - 1, -1, -1))  # stack: pop() gives the lowest never-used id first

    @property
    def n_free(self) -> int:
        return len(self._free)

    def free_pages(self) -> list[int]:
        return list(self._free)

    def peek(self, n: int, returned: list[int]) -> list[int]:
        """The ids the next n alloc() calls return once `returned` pages (refcount 1) were released in order."""
        if n > len(self._free) + len(returned):
            raise OutOfPages(f"need {n} pages, {len(self._free) + len(returned)} free")
        first = returned[::-1][:n]  # released last, handed out first
        rest = n - len(first)
        return first + self._free[len(self._free) - rest:][::-1]

    def alloc(self) -> int:
        if not self._free:
            raise OutOfPages("no free page")
        page = self._free.pop()
        self.refcount[page] = 1
        return page

    def incref(self, page: int):
        if self.refcount[page] < 1:
            raise KVError(f"incref of free page {page}")
        self.refcount[page] += 1

    def decref(self, page: int):
        if self.refcount[page] < 1:
            raise KVError(f"decref of free page {page}")
        self.refcount[page] -= 1
        if self.refcount[page] == 0:
            self._free.append(page)
