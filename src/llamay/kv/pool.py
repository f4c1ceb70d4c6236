"""The page pool: K and V for every layer, page_size token slots per page. Slot = page * page_size + i.

The pool owns the arrays; which pages a sequence holds is bookkeeping kept elsewhere (page tables)."""
from __future__ import annotations

import numpy as np


class PagePool:
    def __init__(self, n_layer: int, n_pages: int, page_size: int, n_kv_head: int, head_dim: int):
        self.n_pages, self.page_size = n_pages, page_size
        shape = (n_pages * page_size, n_kv_head, head_dim)
        # np.zeros maps zero pages lazily: memory is only touched as slots are written
        self.k = [np.zeros(shape, np.float16) for _ in range(n_layer)]  # [n_slots, n_kv_head, head_dim]
        self.v = [np.zeros(shape, np.float16) for _ in range(n_layer)]

    @property
    def bytes_per_page(self) -> int:
        return sum(a[:self.page_size].nbytes for a in self.k + self.v)

    def copy_page(self, src: int, dst: int):
        """Copy-on-write: the only copy of KV data there is."""
        ps = self.page_size
        for a in self.k + self.v:
            a[dst * ps:(dst + 1) * ps] = a[src * ps:(src + 1) * ps]
