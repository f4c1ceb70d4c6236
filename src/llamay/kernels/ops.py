"""Python side of the non-matmul C ops. Each launcher checks dtype, contiguity and shape before calling C."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ._lib import F32, I32, I64, P, declare

_rmsnorm = declare("ly_rmsnorm", P, P, P, I64, I64, F32, I32)
_rope = declare("ly_rope", P, P, I64, I64, I64, I64, F32, I32, I32)
_gated = declare("ly_gated_act", P, P, P, I64, I32, I32)
_kv_write = declare("ly_kv_write", P, P, P, P, P, I64, I64, I64, I64)

ACTS = {"silu": 0, "gelu_tanh": 1}


def _f32(a: np.ndarray, name: str) -> np.ndarray:
    if a.dtype != np.float32 or not a.flags.c_contiguous:
        raise TypeError(f"{name} must be a C-contiguous float32 array, got {a.dtype}")
    return a


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float, nthreads: int, out: np.ndarray | None = None):
    """RMSNorm over the last axis of x [..., d] with weight w [d]; `out` may be x (in place)."""
    _f32(x, "x"), _f32(w, "w")
    d = x.shape[-1]
    assert w.shape == (d,), (w.shape, d)
    out = np.empty_like(x) if out is None else _f32(out, "out")
    _rmsnorm(x.ctypes.data, w.ctypes.data, out.ctypes.data, x.size // d, d, eps, nthreads)
    return out


def rope(x: np.ndarray, pos: np.ndarray, n_rot: int, base: float, neox: bool, nthreads: int):
    """In place on x [n_tokens, n_heads, head_dim]; pos int32 [n_tokens]."""
    _f32(x, "x")
    n, h, d = x.shape
    assert pos.dtype == np.int32 and pos.shape == (n,) and n_rot <= d and n_rot % 2 == 0 and n_rot <= 1024
    _rope(x.ctypes.data, pos.ctypes.data, n, h, d, n_rot, base, int(neox), nthreads)


def gated_act(gate: np.ndarray, up: np.ndarray, act: str, nthreads: int) -> np.ndarray:
    """act(gate) * up, elementwise; result written into gate's buffer."""
    _f32(gate, "gate"), _f32(up, "up")
    assert gate.shape == up.shape
    _gated(gate.ctypes.data, up.ctypes.data, gate.ctypes.data, gate.size, ACTS[act], nthreads)
    return gate


@dataclass(frozen=True)
class BatchMeta:
    """Where each token of a forward batch lives: its position, its sequence's page table row."""
    tok_pos: np.ndarray  # int32 [n_tokens]
    tok_seq: np.ndarray  # int32 [n_tokens], row of page_tables
    page_tables: np.ndarray  # int32 [n_seq, max_pages]
    page_size: int

    def __post_init__(self):
        for a in (self.tok_pos, self.tok_seq, self.page_tables):
            assert a.dtype == np.int32 and a.flags.c_contiguous
        assert self.page_tables.ndim == 2 and self.tok_pos.shape == self.tok_seq.shape


def kv_write(pool: np.ndarray, x: np.ndarray, meta: BatchMeta):
    """x float32 [n_tokens, row] -> pool f16 [n_slots, row] at each token's slot."""
    _f32(x, "x")
    assert pool.dtype == np.float16 and pool.flags.c_contiguous and pool.shape[1] == x.shape[1]
    _kv_write(pool.ctypes.data, x.ctypes.data, meta.tok_pos.ctypes.data, meta.tok_seq.ctypes.data,
              meta.page_tables.ctypes.data, meta.page_tables.shape[1], meta.page_size, x.shape[0],
              x.shape[1])


class _AttnArgs(ctypes.Structure):
    _fields_ = [(n, P) for n in ("q", "out", "k_pool", "v_pool", "tok_pos", "tok_seq", "page_tables")] + \
               [(n, I64) for n in ("n_tokens", "n_head", "n_kv_head", "head_dim", "page_size",
                                   "max_pages", "window")] + [("scale", F32), ("softcap", F32)]


_attention = declare("ly_attention", ctypes.POINTER(_AttnArgs), I32)


def attention(q: np.ndarray, k_pool: np.ndarray, v_pool: np.ndarray, meta: BatchMeta, scale: float,
              window: int = 0, softcap: float = 0.0, nthreads: int = 1) -> np.ndarray:
    """q [n_tokens, n_head, head_dim] float32; pools f16 [n_slots, n_kv_head, head_dim]. -> like q."""
    _f32(q, "q")
    n, n_head, d = q.shape
    assert k_pool.dtype == v_pool.dtype == np.float16 and k_pool.shape == v_pool.shape
    assert k_pool.shape[2] == d and n_head % k_pool.shape[1] == 0 and meta.tok_pos.shape == (n,)
    out = np.empty_like(q)
    args = _AttnArgs(q.ctypes.data, out.ctypes.data, k_pool.ctypes.data, v_pool.ctypes.data,
                     meta.tok_pos.ctypes.data, meta.tok_seq.ctypes.data, meta.page_tables.ctypes.data,
                     n, n_head, k_pool.shape[1], d, meta.page_size, meta.page_tables.shape[1], window,
                     scale, softcap)
    _attention(ctypes.byref(args), nthreads)
    return out
