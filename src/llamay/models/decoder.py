"""One generic decoder for every ArchSpec: embeddings, N pre-norm blocks, output head.

A forward pass takes a batch of tokens (any mix of sequences, described by BatchMeta), writes their K/V
into the page pool, and returns logits for the requested rows. Every op is canonical (kernels/), so a
token's logits do not depend on how the batch was split."""
from __future__ import annotations

import numpy as np

from ..gguf import GGUFReader
from ..kernels import ops
from ..kernels.matmul import matmul, quantize_act
from ..kv import PagePool
from .spec import ArchSpec
from .weights import load_weights


class Decoder:
    def __init__(self, reader: GGUFReader, spec: ArchSpec, nthreads: int):
        self.spec, self.nthreads = spec, nthreads
        self.layers, self.embed, self.output_norm, self.output = load_weights(reader, spec)

    def new_pool(self, n_pages: int, page_size: int) -> PagePool:
        s = self.spec
        return PagePool(s.n_layer, n_pages, page_size, s.n_head_kv, s.head_dim)

    def _linear(self, x, w, bias=None):
        """x: float32 [n, k] or its quantized activations (quantize once, use for several weights)."""
        y = matmul(x, w, n_threads=self.nthreads)
        return y if bias is None else np.add(y, bias, out=y)

    def _norm(self, x, w, out=None):
        return ops.rmsnorm(x, w, self.spec.norm_eps, self.nthreads, out)

    def forward(self, tokens: np.ndarray, meta: ops.BatchMeta, pool: PagePool,
                out_rows: np.ndarray | None = None) -> np.ndarray:
        """tokens int32 [n]; returns float32 logits [len(out_rows), n_vocab] (all rows when None)."""
        s, nt = self.spec, self.nthreads
        n = len(tokens)
        x = self.embed(tokens)  # [n, n_embd]
        if s.embed_scale != 1.0:
            x *= np.float32(s.embed_scale)
        for il, L in enumerate(self.layers):
            h = quantize_act(self._norm(x, L.attn_norm), nt)
            q = self._linear(h, L.q, L.q_bias).reshape(n, s.n_head, s.head_dim)
            k = self._linear(h, L.k, L.k_bias).reshape(n, s.n_head_kv, s.head_dim)
            v = self._linear(h, L.v, L.v_bias)
            if s.qk_norm:
                self._norm(q, L.q_norm, out=q)
                self._norm(k, L.k_norm, out=k)
            base = s.layer_rope_base(il)
            ops.rope(q, meta.tok_pos, s.n_rot, base, s.rope_neox, nt)
            ops.rope(k, meta.tok_pos, s.n_rot, base, s.rope_neox, nt)
            ops.kv_write(pool.k[il].reshape(-1, s.kv_dim), k.reshape(n, s.kv_dim), meta)
            ops.kv_write(pool.v[il].reshape(-1, s.kv_dim), v, meta)
            a = ops.attention(q, pool.k[il], pool.v[il], meta, s.scale, s.layer_window(il),
                              s.attn_logit_softcap, nt)
            o = self._linear(a.reshape(n, -1), L.o)
            if s.post_attn_norm:
                self._norm(o, L.post_attn_norm, out=o)
            x += o
            h = quantize_act(self._norm(x, L.ffn_norm), nt)
            g = ops.gated_act(self._linear(h, L.gate), self._linear(h, L.up), s.act, nt)
            d = self._linear(g, L.down)
            if s.post_ffn_norm:
                self._norm(d, L.post_ffn_norm, out=d)
            x += d
        if out_rows is not None:
            x = np.ascontiguousarray(x[out_rows])
        logits = self._linear(self._norm(x, self.output_norm), self.output)
        if s.final_logit_softcap:
            c = np.float32(s.final_logit_softcap)
            logits = np.tanh(logits / c) * c
        return logits
