"""The decoder's forward pass as a C graph for a given batch size: buffers allocated once, nodes
built once, one foreign call per pass (kernels/graph.py). Shapes in comments: n = tokens in the batch."""
from __future__ import annotations

import numpy as np

from ..kernels.graph import Batch, Graph
from ..kernels.matmul import QWeight, _ActStruct
from ..kernels.ops import ACTS
from .spec import ArchSpec


class Act:
    """A matmul input x [n, k] and its canonical Q8 activations (filled by a quant node)."""

    def __init__(self, x: np.ndarray):
        n, k = x.shape
        self.x = x
        self.q = np.zeros((n, k), np.int8)
        self.d = np.zeros((n, k // 32), np.float32)
        self.s16 = np.zeros((n, k // 16), np.int32)
        self.struct = s = _ActStruct()
        s.x, s.q, s.d, s.s16, s.k = x.ctypes.data, self.q.ctypes.data, self.d.ctypes.data, self.s16.ctypes.data, k


class Plan:
    """Layers for n tokens: `x` in (embeddings), `x` out (final residual stream, before the output norm)."""

    def __init__(self, spec: ArchSpec, layers, pool, n: int):
        s = spec
        self.n, self.g, self.batch = n, Graph(), Batch()
        self.pool = pool  # held: while this plan lives, id(pool) cannot name another pool
        f = lambda *shape: np.zeros(shape, np.float32)  # noqa: E731
        self.x, h = f(n, s.n_embd), f(n, s.n_embd)
        q, k, v = f(n, s.n_head * s.head_dim), f(n, s.kv_dim), f(n, s.kv_dim)
        attn, o, gate, up, down = f(n, s.n_head * s.head_dim), f(n, s.n_embd), f(n, s.n_ff), f(n, s.n_ff), f(n, s.n_embd)
        self.pos = np.zeros(n, np.int32)
        act_h, act_a, act_g = Act(h), Act(attn), Act(gate)
        for il, L in enumerate(layers):
            self._norm(self.x, L.attn_norm, h, s)
            self._quant(act_h)
            self._linear(act_h, L.q, q, L.q_bias)
            self._linear(act_h, L.k, k, L.k_bias)
            self._linear(act_h, L.v, v, L.v_bias)
            if s.qk_norm:
                self._norm(q, L.q_norm, q, s, rows=n * s.n_head)
                self._norm(k, L.k_norm, k, s, rows=n * s.n_head_kv)
            base = s.layer_rope_base(il)
            for t, heads in ((q, s.n_head), (k, s.n_head_kv)):
                self.g.add("rope", (t, self.pos), (n, heads, s.head_dim, s.n_rot, int(s.rope_neox)), (base,))
            kv = pool.kv
            self.g.add("kv_write", (pool.k[il], k, self.batch), (s.n_head_kv, s.head_dim, kv.codes & 0xff))
            self.g.add("kv_write", (pool.v[il], v, self.batch), (s.n_head_kv, s.head_dim, kv.codes >> 8))
            self.g.add("attention", (q, attn, pool.k[il], pool.v[il], self.batch),
                       (s.n_head, s.n_head_kv, s.head_dim, s.layer_window(il), kv.codes),
                       (s.scale, s.attn_logit_softcap))
            self._quant(act_a)
            self._linear(act_a, L.o, o)
            if s.post_attn_norm:
                self._norm(o, L.post_attn_norm, o, s)
            self.g.add("add", (self.x, o), (self.x.size,))
            self._norm(self.x, L.ffn_norm, h, s)
            self._quant(act_h)
            self._linear(act_h, L.gate, gate)
            self._linear(act_h, L.up, up)
            self.g.add("gated", (gate, up), (gate.size, ACTS[s.act]))
            self._quant(act_g)
            self._linear(act_g, L.down, down)
            if s.post_ffn_norm:
                self._norm(down, L.post_ffn_norm, down, s)
            self.g.add("add", (self.x, down), (self.x.size,))
        self._keep = (act_h, act_a, act_g, h, q, k, v, attn, o, gate, up, down)

    def _norm(self, x, w, y, s: ArchSpec, rows: int | None = None):
        d = w.shape[0]
        self.g.add("rmsnorm", (x, w, y), (rows or x.size // d, d), (s.norm_eps,))

    def _quant(self, act: Act):
        self.g.add("quant", (act.struct,), (act.x.shape[0],))

    def _linear(self, act: Act, w: QWeight, y: np.ndarray, bias=None):
        self.g.add("matmul", (w.raw, act.struct, y), (w.row_bytes, w.qtype.id, w.m, y.shape[0]))
        if bias is not None:
            self.g.add("bias", (y, bias), (y.shape[0], y.shape[1]))

    def run(self, meta, nthreads: int):
        """meta: BatchMeta for these n tokens (positions also feed RoPE)."""
        self.pos[:] = meta.tok_pos
        meta.fill(self.batch)
        self.g.run(nthreads)


class Head:
    """Output norm and projection for n_out rows: `x` in [n_out, n_embd], `logits` out [n_out, n_vocab]."""

    def __init__(self, spec: ArchSpec, output_norm: np.ndarray, output: QWeight, n_out: int):
        self.g = Graph()
        self.x = np.zeros((n_out, spec.n_embd), np.float32)
        self.logits = np.zeros((n_out, output.m), np.float32)
        act = Act(np.zeros_like(self.x))
        self.g.add("rmsnorm", (self.x, output_norm, act.x), (n_out, spec.n_embd), (spec.norm_eps,))
        self.g.add("quant", (act.struct,), (n_out,))
        self.g.add("matmul", (output.raw, act.struct, self.logits), (output.row_bytes, output.qtype.id, output.m, n_out))
        self._keep = act

    def run(self, nthreads: int) -> np.ndarray:
        self.g.run(nthreads)
        return self.logits
