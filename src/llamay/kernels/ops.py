"""Python side of the non-matmul C ops, one op at a time (the decoder builds whole graphs instead).
Each launcher checks dtype, contiguity and shape before calling C."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .graph import Batch, Graph, addr
from .kvtypes import KV_CODES

ACTS = {"silu": 0, "gelu_tanh": 1, "swiglu_oai": 2, "none": 3, "sigmoid": 4, "relu_sqr": 5}  # csrc/mathfn.h ly_gated_one


def f32(a: np.ndarray, name: str) -> np.ndarray:
    if a.dtype != np.float32 or not a.flags.c_contiguous:
        raise TypeError(f"{name} must be a C-contiguous float32 array, got {a.dtype}")
    return a


def _one(op, ptrs, sizes=(), floats=(), nthreads=1, keep=()):
    g = Graph()
    g.add(op, ptrs, sizes, floats, keep)
    g.run(nthreads)


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float, nthreads: int, out: np.ndarray | None = None):
    """RMSNorm over the last axis of x [..., d] with weight w [d]; `out` may be x (in place)."""
    f32(x, "x"), f32(w, "w")
    d = x.shape[-1]
    assert w.shape == (d,), (w.shape, d)
    out = np.empty_like(x) if out is None else f32(out, "out")
    _one("rmsnorm", (x, w, out), (x.size // d, d), (eps,), nthreads)
    return out


def rope(x: np.ndarray, pos: np.ndarray, n_rot: int, base: float, neox: bool, nthreads: int):
    """In place on x [n_tokens, n_heads, head_dim]; pos int32 [n_tokens]."""
    f32(x, "x")
    n, h, d = x.shape
    assert pos.dtype == np.int32 and pos.shape == (n,) and n_rot <= d and n_rot % 2 == 0 and n_rot <= 1024
    _one("rope", (x, pos, None), (n, h, d, n_rot, int(neox)), (base, 1.0, 1.0), nthreads)


def gated_act(gate: np.ndarray, up: np.ndarray, act: str, nthreads: int) -> np.ndarray:
    """act(gate) * up, elementwise; result written into gate's buffer."""
    f32(gate, "gate"), f32(up, "up")
    assert gate.shape == up.shape
    _one("gated", (gate, up), (gate.size, ACTS[act]), (), nthreads)
    return gate


@dataclass(frozen=True)
class BatchMeta:
    """Where each token of a forward batch lives: its position, its sequence's page table row."""
    tok_pos: np.ndarray  # int32 [n_tokens]
    tok_seq: np.ndarray  # int32 [n_tokens], row of page_tables
    page_tables: np.ndarray  # int32 [n_seq, max_pages]
    page_size: int
    state_slots: np.ndarray | None = None  # int32 [n_seq], each sequence's recurrent state slot

    def __post_init__(self):
        for a in (self.tok_pos, self.tok_seq, self.page_tables):
            assert a.dtype == np.int32 and a.flags.c_contiguous
        s = self.state_slots
        assert s is None or (s.dtype == np.int32 and s.flags.c_contiguous and len(s) == len(self.page_tables))
        assert self.page_tables.ndim == 2 and self.tok_pos.shape == self.tok_seq.shape

    def fill(self, b: Batch) -> Batch:
        """Point a C ly_batch at these arrays (they must outlive its use)."""
        b.tok_pos, b.tok_seq, b.page_tables = addr(self.tok_pos), addr(self.tok_seq), addr(self.page_tables)
        b.n_tokens, b.max_pages, b.page_size = len(self.tok_pos), self.page_tables.shape[1], self.page_size
        b.state_slots = addr(self.state_slots)
        return b


_DTYPE_KV = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}


def kv_write(pool: np.ndarray, x: np.ndarray, meta: BatchMeta, n_kv_head: int = 1, kv: str | None = None):
    """x float32 [n_tokens, n_kv_head * head_dim] -> pool [n_slots, ...] at each token's slot, stored
    as element type kv ('f32', 'f16', 'q8'; default from the pool's dtype)."""
    f32(x, "x")
    kv = kv or _DTYPE_KV[pool.dtype]
    assert pool.flags.c_contiguous and x.shape[1] % n_kv_head == 0
    _one("kv_write", (pool, x, meta.fill(Batch())), (n_kv_head, x.shape[1] // n_kv_head, KV_CODES[kv]),
         keep=(meta,))


def attention(q: np.ndarray, k_pool: np.ndarray, v_pool: np.ndarray, meta: BatchMeta, scale: float,
              window: int = 0, softcap: float = 0.0, nthreads: int = 1, n_kv_head: int | None = None,
              k_kv: str | None = None, v_kv: str | None = None, sinks: np.ndarray | None = None) -> np.ndarray:
    """q [n_tokens, n_head, head_dim] float32; pools [n_slots, n_kv_head, head_dim] f32/f16 (or uint8
    rows of q8 heads, with n_kv_head and the element types given); sinks: float32 [n_head]. -> like q."""
    f32(q, "q")
    n, n_head, d = q.shape
    n_kv_head = n_kv_head or k_pool.shape[1]
    k_kv, v_kv = k_kv or _DTYPE_KV[k_pool.dtype], v_kv or _DTYPE_KV[v_pool.dtype]
    assert n_head % n_kv_head == 0 and meta.tok_pos.shape == (n,)
    assert sinks is None or (sinks.dtype == np.float32 and sinks.shape == (n_head,))
    out = np.empty_like(q)
    codes = KV_CODES[k_kv] | KV_CODES[v_kv] << 8
    _one("attention", (q, out, k_pool, v_pool, meta.fill(Batch()), sinks), (n_head, n_kv_head, d, window, codes),
         (scale, softcap), nthreads, keep=(meta,))
    return out
