"""The decoder's forward pass for a given batch size, described once through the backend's typed ops
(kernels/builder.py) and rerun with one foreign call per pass. Shapes in comments: n = tokens in the batch."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..kernels.builder import Builder
from ..kernels.matmul import QWeight
from .spec import ArchSpec


class ForwardGraph:
    """Layers for n tokens: `x` in (embeddings; scaled inside), `x` out (final residual stream); with
    per-layer inputs also `ple` in [n_layer, n, width] (their token rows, scaled)."""

    def __init__(self, spec: ArchSpec, layers, pool, n: int, fuse: bool = True, rope_factors=None, ple=None,
                 lora=None):
        """lora: layer -> Layer field -> [(adapter, A, B, alpha, rank)] (models/lora.py layer_terms), or None;
        then `lora_scale` in: adapter -> float32 [n], each token's scale for it."""
        s, b = spec, Builder(fuse)
        self.n, self.b, self.batch = n, b, b.batch(n)
        self.pool = pool  # held: while this plan lives, id(pool) cannot name another pool
        self.x = x = b.tensor(n, s.n_embd)
        if s.embed_scale != 1.0:
            b.scale(x, s.embed_scale)
        self.ple = b.tensor(s.n_layer, n, s.n_embd_per_layer) if ple is not None else None
        per_layer = _per_layer_inputs(b, s, x, ple, self.ple) if ple is not None else None
        h = b.tensor(n, s.n_embd)
        ones = {}  # the weight of an RMSNorm without one, per size
        names = sorted({t[0] for fields in (lora or {}).values() for terms in fields.values() for t in terms})
        self.lora_scale = {name: np.zeros(n, np.float32) for name in names}
        for il, L in enumerate(layers):
            mm = _Proj(b, (lora or {}).get(il, {}), self.lora_scale)
            inp = _norm(b, s, x, L.attn_norm, L.attn_norm_b, h) if s.pre_norm else x
            hd, n_rot, kv_layer = s.layer_head_dim(il), s.layer_n_rot(il), s.kv_index(il)
            q = mm(inp, L, "q")
            k = mm(inp, L, "k") if L.k is not None else None
            v = mm(inp, L, "v") if L.v is not None else None
            if k is not None and s.v_norm:  # unweighted; from the keys before their norm when v_from_k
                one = ones.setdefault(hd, np.ones(hd, np.float32))
                v = b.rmsnorm(k if v is None else v, one, s.norm_eps, out=v)
            if s.qk_norm:
                b.rmsnorm(q, L.q_norm, s.norm_eps, out=q)
                if k is not None:
                    b.rmsnorm(k, L.k_norm, s.norm_eps, out=k)
            scaled = s.layer_rope_scaled(il)
            rope = dict(base=s.layer_rope_base(il), neox=s.rope_neox, linear=s.layer_rope_linear(il),
                        factors=rope_factors if scaled else None, mscale=s.rope_mscale if scaled else 1.0)
            if s.layer_rope(il):
                b.rope(q, self.batch, s.n_head, hd, n_rot, **rope)
                if k is not None:
                    b.rope(k, self.batch, s.layer_n_head_kv(il), hd, n_rot, **rope)
            if s.attn_temp_scale:
                b.position_scale(q, self.batch, s.attn_temp_scale, s.attn_temp_floor)
            if k is not None:
                b.kv_write(pool, kv_layer, k, v, self.batch)
            attn = b.attention(q, pool, kv_layer, self.batch, s.n_head, s.layer_scale(il),
                               s.layer_window(il), s.attn_logit_softcap, sinks=L.sinks)
            if s.parallel_block:  # x + (attn + ffn), the FFN reading the same normed input
                o = mm(attn, L, "o")
                mm(_ffn(b, s, L, inp, mm), L, "down", residual=o)
                b.add(x, o)
                continue
            _residual(b, s, x, mm(attn, L, "o", fusable=True), L.post_attn_norm)
            inp = _norm(b, s, x, L.ffn_norm, L.ffn_norm_b, h) if s.pre_norm else x
            if s.moe_dense:  # post_norm(norm_1(MLP) + norm_2(experts)), the experts reading their own norm
                mlp = mm(_ffn(b, s, L, inp, mm), L, "down")
                b.rmsnorm(mlp, L.post_ffn_norm_1, s.norm_eps, out=mlp)
                experts = _moe(b, s, L, b.rmsnorm(x, L.pre_ffn_norm_2, s.norm_eps), router_in=_router_in(b, s, L, x))
                b.add(mlp, b.rmsnorm(experts, L.post_ffn_norm_2, s.norm_eps, out=experts))
                _add_block(b, s, x, mlp, L.post_ffn_norm)
            elif s.n_expert:
                _add_block(b, s, x, _moe(b, s, L, inp), L.post_ffn_norm)
            else:
                _residual(b, s, x, mm(_ffn(b, s, L, inp, mm), L, "down", fusable=True), L.post_ffn_norm)
            if per_layer is not None:  # x += norm(proj(act(gate(x)) * this layer's input))
                g = b.gated(b.matmul(x, L.ple_gate), per_layer[il], s.act)
                p = b.matmul(g, L.ple_proj)
                b.add(x, b.rmsnorm(p, L.ple_norm, s.norm_eps, out=p))
            if L.out_scale is not None:
                b.scale(x, float(L.out_scale[0]))

    def run(self, meta, nthreads: int):
        """meta: BatchMeta for these n tokens (positions also feed RoPE)."""
        self.batch.fill(meta)
        self.b.run(nthreads)


def _per_layer_inputs(b: Builder, s: ArchSpec, x, ple, rows) -> list:
    """Each layer's input [n, width]: (norm(x . proj_l / sqrt(n_embd)) + its token rows) / sqrt(2), from
    the scaled embeddings x before any layer runs (ref: HF Gemma4TextModel.project_per_layer_inputs)."""
    w, out = s.n_embd_per_layer, []
    for il in range(s.n_layer):
        p = b.matmul(x, ple.proj.rows(il * w, (il + 1) * w))
        b.scale(p, 1.0 / math.sqrt(s.n_embd))
        b.rmsnorm(p, ple.norm, s.norm_eps, out=p)
        out.append(b.scale(b.add(p, rows[il]), 2.0 ** -0.5))
    return out


def _router_in(b: Builder, s: ArchSpec, L, x):
    """The router's input beside a dense MLP: x's unweighted RMSNorm times scale / sqrt(n_embd)."""
    return b.rmsnorm(x, (L.router_scale * np.float32(s.n_embd ** -0.5)).astype(np.float32), s.norm_eps)


class _Proj:
    """One layer's projections: x . W^T (+ bias), plus each LoRA term's (x . A^T) . B^T times each token's
    scale * alpha / rank, in adapter order."""

    def __init__(self, b: Builder, terms: dict, scales: dict):
        self.b, self.terms, self.scales = b, terms, scales

    def __call__(self, x, L, field: str, residual=None, fusable: bool = False):
        """The projection; with residual, added to it instead; fusable: a pending projection for _residual
        (added inside the matmul's chunks when it has no LoRA term)."""
        w, bias, terms = getattr(L, field), getattr(L, field + "_bias", None), self.terms.get(field, ())
        pending = _Pending(self, x, w, bias, terms)
        if fusable:
            return pending
        if residual is not None:
            return pending.add_to(residual)
        return pending.compute()


@dataclass
class _Pending:
    proj: _Proj
    x: np.ndarray
    w: QWeight
    bias: np.ndarray | None
    terms: tuple

    def add_to(self, residual):
        """residual += the projection (fused into the matmul when nothing else is added)."""
        b = self.proj.b
        if not self.terms:
            b.matmul(self.x, self.w, bias=self.bias, residual=residual)
            return
        b.add(residual, self.compute())

    def compute(self):
        b, out = self.proj.b, self.proj.b.matmul(self.x, self.w, bias=self.bias)
        for name, a, lb, alpha, rank in self.terms:
            b.add(out, b.row_scale(b.matmul(b.matmul(self.x, a), lb), self.proj.scales[name], alpha, rank))
        return out


def _ffn(b: Builder, s: ArchSpec, L, inp, mm):
    """act(gate) * up, or act(up) for a plain MLP: the input of the down projection."""
    up = mm(inp, L, "up")
    return b.gated(mm(inp, L, "gate"), up, s.act) if s.gated_ffn else b.activation(up, s.act)


def _moe(b: Builder, s: ArchSpec, L, inp, router_in=None):
    """The experts' FFN [n, n_embd]: each token's k experts from the router (reading router_in, else inp),
    their rows gathered into one batch per expert, act(gate) * up, down, and the weighted sum of the
    token's k rows."""
    logits = b.matmul(inp if router_in is None else router_in, L.router, bias=L.router_bias)
    route = b.moe_route(logits, s.n_expert_used, s.moe_gating, s.moe_norm, expert_scale=L.down_exps_scale)
    xg = b.gather(inp, route)
    up = b.matmul_experts(xg, L.up_exps, route, bias=L.up_exps_bias)
    hg = b.gated(b.matmul_experts(xg, L.gate_exps, route, bias=L.gate_exps_bias), up, s.act)
    out = b.moe_combine(b.matmul_experts(hg, L.down_exps, route, bias=L.down_exps_bias), route)
    if L.up_shexp is not None:  # + sigmoid(inp . g) * the shared expert's FFN
        shared = b.gated(b.matmul(inp, L.gate_shexp), b.matmul(inp, L.up_shexp), s.act)
        b.add(out, b.sigmoid_scale(b.matmul(shared, L.down_shexp), b.matmul(inp, L.shexp_gate_inp)))
    return out


def _norm(b: Builder, s: ArchSpec, x, w, bias, out):
    return b.layernorm(x, w, bias, s.norm_eps, out=out) if s.layer_norm else b.rmsnorm(x, w, s.norm_eps, out=out)


def _residual(b: Builder, s: ArchSpec, x, proj: _Pending, post_norm):
    """x += post_norm(proj) * residual_scale; inside the matmul's chunks when there is neither."""
    if post_norm is None and s.residual_scale == 1.0:
        proj.add_to(x)
        return
    _add_block(b, s, x, proj.compute(), post_norm)


def _add_block(b: Builder, s: ArchSpec, x, o, post_norm):
    """x += post_norm(o) * residual_scale"""
    if post_norm is not None:
        b.rmsnorm(o, post_norm, s.norm_eps, out=o)
    if s.residual_scale != 1.0:
        b.scale(o, s.residual_scale)
    b.add(x, o)


class Head:
    """Output norm, projection and final softcap for n_out rows: `x` in [n_out, n_embd], `logits` out."""

    def __init__(self, spec: ArchSpec, output_norm: np.ndarray, output_norm_b: np.ndarray | None, output: QWeight,
                 output_b: np.ndarray | None, n_out: int):
        b = self.b = Builder()
        self.x = b.tensor(n_out, spec.n_embd)
        self.logits = b.matmul(_norm(b, spec, self.x, output_norm, output_norm_b, None), output, bias=output_b)
        if spec.logit_scale != 1.0:
            b.scale(self.logits, 1.0 / spec.logit_scale)
        if spec.final_logit_softcap:
            b.softcap(self.logits, spec.final_logit_softcap)

    def run(self, nthreads: int) -> np.ndarray:
        self.b.run(nthreads)
        return self.logits
