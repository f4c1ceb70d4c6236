"""The page pool: K and V for every layer, page_size token slots per page. Slot = page * page_size + i.

The pool owns the arrays; which pages a sequence holds is bookkeeping kept elsewhere (page tables).
Each layer's K (and V) is one uint8 array [n_slots, n_kv_head * head_bytes] in its KV element type."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.kvtypes import KV_CODES
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

    @property
    def codes(self) -> int:
        """k | v << 8, as the attention kernel takes them."""
        return KV_CODES[self.k] | KV_CODES[self.v] << 8


KV_TYPES = {"f32": KVType("f32", "f32", "f32"), "f16": KVType("f16", "f16", "f16"),
            "q8": KVType("q8", "q8", "q8"),
            "vq8": KVType("vq8", "f16", "q8")}  # keys as exact as the default, int8 values


def kv_type(name: str, head_dim: int) -> KVType:
    if name not in KV_TYPES:
        raise ValueError(f"unknown KV type {name!r} (choose from {', '.join(KV_TYPES)})")
    t = KV_TYPES[name]
    if "q8" in (t.k, t.v) and head_dim % Q8_BLOCK:
        raise ValueError(f"KV type {name} needs head_dim divisible by {Q8_BLOCK}, the model has {head_dim}")
    return t


def page_bytes(n_layer: int, page_size: int, n_kv_head: int, head_dim: int, kv: KVType) -> int:
    """Bytes of one page: K and V of every layer."""
    return n_layer * page_size * n_kv_head * (kv.head_bytes("k", head_dim) + kv.head_bytes("v", head_dim))


class PagePool:
    def __init__(self, n_layer: int, n_pages: int, page_size: int, n_kv_head: int, head_dim: int,
                 kv: KVType = KV_TYPES[LOAD.kv]):
        self.n_pages, self.page_size, self.kv = n_pages, page_size, kv
        self.n_kv_head, self.head_dim = n_kv_head, head_dim
        n_slots = n_pages * page_size
        # np.zeros maps zero pages lazily: memory is only touched as slots are written
        self.k = [np.zeros((n_slots, n_kv_head * kv.head_bytes("k", head_dim)), np.uint8) for _ in range(n_layer)]
        self.v = [np.zeros((n_slots, n_kv_head * kv.head_bytes("v", head_dim)), np.uint8) for _ in range(n_layer)]

    @property
    def bytes_per_page(self) -> int:
        return page_bytes(len(self.k), self.page_size, self.n_kv_head, self.head_dim, self.kv)

    def page_view(self, arr: np.ndarray) -> np.ndarray:
        """[n_pages, page_size, row_bytes] view of one layer's K or V."""
        return arr.reshape(self.n_pages, self.page_size, -1)

    def copy_page(self, src: int, dst: int):
        """Copy-on-write: the only copy of KV data there is."""
        for a in self.k + self.v:
            v = self.page_view(a)
            v[dst] = v[src]
