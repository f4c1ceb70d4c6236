"""The page pool: K and V for every layer, page_size token slots per page. Slot = page * page_size + i.

The pool owns the arrays; which pages a sequence holds is bookkeeping kept elsewhere (page tables).
Each layer's K (and V) is one uint8 array [n_slots, n_kv_head * head_bytes] in its KV element type; layers
may differ in KV heads and head size (dims)."""
from __future__ import annotations

import mmap
from dataclasses import dataclass

import numpy as np

from ..settings import LOAD

Q8_BLOCK, Q8_BYTES = 32, 36  # float32 scale + 32 int8


@dataclass(frozen=True)
class KVType:
    name: str
    k: str  # element type of keys
    v: str  # element type of values

    def head_bytes(self, which: str, head_dim: int) -> int:
        t = self.k if which == "k" else self.v
        return {"f32": head_dim * 4, "f16": head_dim * 2, "q8": head_dim // Q8_BLOCK * Q8_BYTES}[t]


KV_TYPES = {"f32": KVType("f32", "f32", "f32"), "f16": KVType("f16", "f16", "f16"),
            "q8": KVType("q8", "q8", "q8"),
            "vq8": KVType("vq8", "f16", "q8")}  # keys as exact as the default, int8 values


def kv_type(name: str, *head_dims: int) -> KVType:
    """The KV type of that name, checked against every layer's head size."""
    if name not in KV_TYPES:
        raise ValueError(f"unknown KV type {name!r} (choose from {', '.join(KV_TYPES)})")
    t = KV_TYPES[name]
    bad = [d for d in head_dims if d % Q8_BLOCK]
    if "q8" in (t.k, t.v) and bad:
        raise ValueError(f"KV type {name} needs head_dim divisible by {Q8_BLOCK}, the model has {bad[0]}")
    return t


def page_bytes(dims, page_size: int, kv: KVType) -> int:
    """Bytes of one page: K and V of every layer; dims: (KV heads, head size) of each layer."""
    return sum(page_size * h * (kv.head_bytes("k", d) + kv.head_bytes("v", d)) for h, d in dims)


MADV_POPULATE_WRITE = 23  # Linux 5.14+: fault a range in writable as a write would, writing nothing


POPULATE_STEP = 4 << 20  # bytes a call: it holds the process's memory-map lock, which every mmap and
                         # munmap of the serving thread waits for


def madvise_populate(a: np.ndarray, wait=None) -> bool:
    """Fault a C-contiguous array's memory in (Linux 5.14+), POPULATE_STEP bytes a call, each after
    wait(its bytes) returns (engine/llm.py paused_while: while no request runs) -> whether it did."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    page = mmap.PAGESIZE
    lo = a.ctypes.data // page * page
    hi = -(-(a.ctypes.data + a.nbytes) // page) * page
    for at in range(lo, hi, POPULATE_STEP):
        if wait is not None:
            wait(min(POPULATE_STEP, hi - at))
        if libc.madvise(ctypes.c_void_p(at), ctypes.c_size_t(min(POPULATE_STEP, hi - at)), MADV_POPULATE_WRITE):
            return False
    return True


class PagePool:
    def __init__(self, n_layer: int, n_pages: int, page_size: int, n_kv_head: int, head_dim: int,
                 kv: KVType = KV_TYPES[LOAD.kv], dims=None, values_are_keys=()):
        """dims: (KV heads, head size) per layer when they differ (n_kv_head and head_dim are then layer 0's).
        values_are_keys: per layer, whether its values are its keys (latent attention's one head): with one
        element type for both, its V array is its K array (the memory once; the records still carry both)."""
        self.n_pages, self.page_size, self.kv = n_pages, page_size, kv
        self.dims = [tuple(x) for x in dims] if dims is not None else [(n_kv_head, head_dim)] * n_layer
        self.n_kv_head, self.head_dim = self.dims[0] if self.dims else (n_kv_head, head_dim)
        n_slots = n_pages * page_size
        # np.zeros maps zero pages lazily: memory is only touched as slots are written (or prefault)
        self.k = [np.zeros((n_slots, h * kv.head_bytes("k", d)), np.uint8) for h, d in self.dims]
        self.v = [k if same and kv.k == kv.v else np.zeros((n_slots, h * kv.head_bytes("v", d)), np.uint8)
                  for k, (h, d), same in zip(self.k, self.dims, tuple(values_are_keys) or (False,) * len(self.dims))]
        self._pages = [self.page_view(a) for kv_ in zip(self.k, self.v) for a in kv_]  # page_buffers' order

    def _arrays(self) -> list[np.ndarray]:
        """Every K and V array once (a layer whose values are its keys has one)."""
        return self.k + [v for k, v in zip(self.k, self.v) if v is not k]

    @property
    def uniform(self) -> bool:
        """Whether every layer has the same KV heads and head size."""
        return len(set(self.dims)) == 1

    @property
    def bytes_per_page(self) -> int:
        return page_bytes(self.dims, self.page_size, self.kv)

    def page_view(self, arr: np.ndarray) -> np.ndarray:
        """[n_pages, page_size, row_bytes] view of one layer's K or V."""
        return arr.reshape(self.n_pages, self.page_size, -1)

    def page_buffers(self, page: int) -> list[memoryview]:
        """The page's bytes in the tiers' and state records' order: K then V of every layer in turn."""
        return [memoryview(a[page]).cast("B") for a in self._pages]

    def prefault(self, n_pages: int, wait=None) -> bool:
        """Back pages [0, n_pages) with memory now, their bytes unchanged (MADV_POPULATE_WRITE: safe while
        other threads use them) -> whether the system could. The allocator hands out the lowest page ids
        first, so a fresh process's first prompt lands there: its first writes then fault no memory in,
        which costs (transparent huge pages zeroed, memory compacted) 0.1-0.5 s for 60 pages of Gemma 3 270M
        on 2 loaded cores, more than reading them from the disk tier."""
        n = min(n_pages, self.n_pages) * self.page_size
        try:
            for a in self._arrays():
                if a.size and n and not madvise_populate(a[:n], wait):
                    return False
        except (OSError, AttributeError):
            return False
        return True

    def copy_page(self, src: int, dst: int):
        """Copy-on-write: the only copy of KV data there is."""
        for a in self._arrays():
            v = self.page_view(a)
            v[dst] = v[src]
