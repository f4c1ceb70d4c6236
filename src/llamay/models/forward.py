"""The decoder's forward pass for a given batch size, described once through the backend's typed ops
(kernels/builder.py) and rerun with one foreign call per pass. Shapes in comments: n = tokens in the batch."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..kernels.arena import Arena
from ..kernels.builder import Builder
from ..kernels.matmul import QWeight
from .arch import ArchSpec
from .parts import Norms
from .plan import LayerPlan
from . import latent
from .recurrent import MIXERS


class ForwardGraph:
    """Layers for n tokens: `x` in (embeddings; scaled inside), `x` out (final residual stream); with
    per-layer inputs also `ple` in [n_layer, n, width] (their token rows, scaled)."""

    def __init__(self, spec: ArchSpec, layers, pool, n: int, fuse: bool = True, rope_factors=None, ple=None,
                 lora=None, states=None, arena: Arena | None = None):
        """lora: layer -> Layer field -> [(adapter, A, B, alpha, rank)] (models/lora.py layer_terms), or None;
        then `lora_scale` in: adapter -> float32 [n], each token's scale for it. states: the recurrent layers'
        StatePool (kv/state_pool.py), when the spec has such layers. arena: the scratch this plan shares with
        the model's others (kernels/arena.py; None: buffers of its own)."""
        s, b = spec, Builder(fuse, arena)
        self.n, self.b, self.batch = n, b, b.batch(n)
        self.pool, self.states = pool, states  # held: while this plan lives, their ids name no other
        self.x = x = b.tensor(n, s.n_embd, io=True)
        if s.embed_scale != 1.0:
            b.scale(x, s.embed_scale)
        self.ple = b.tensor(s.n_layer, n, s.n_embd_per_layer, io=True) if ple is not None else None
        per_layer = _per_layer_inputs(b, s, x, ple, self.ple) if ple is not None else None
        h = b.tensor(n, s.n_embd)
        ones = {}  # the weight of an RMSNorm without one, per size
        names = sorted({t[0] for fields in (lora or {}).values() for terms in fields.values() for t in terms})
        self.lora_scale = {name: np.zeros(n, np.float32) for name in names}
        for P, L in zip(s.layers, layers):
            mm = _Proj(b, (lora or {}).get(P.index, {}), self.lora_scale)
            if P.mixer == "none":
                mixer = None
            elif P.recurrent is None:
                def mixer(inp, P=P, L=L, mm=mm):
                    return _attention(b, self.batch, pool, P, L, inp, mm, rope_factors, ones)
            else:
                def mixer(inp, P=P, L=L, mm=mm):
                    y = MIXERS[P.mixer].build(b, self.batch, states.layers[P.index], P, L, inp, mm)
                    if not P.writes_kv:
                        return y
                    b.matmul(y, L.mix["out"], residual=x)  # x += out(y), then the attention beside it
                    return _attention(b, self.batch, pool, P, L, inp, mm, rope_factors, ones)
            _layer(b, P, L, x, h, mm, mixer, per_layer[P.index] if per_layer is not None else None)
        b.finish()

    def run(self, meta, nthreads: int):
        """meta: BatchMeta for these n tokens (positions also feed RoPE)."""
        self.batch.fill(meta)
        self.b.run(nthreads)


def _layer(b: Builder, P: LayerPlan, L, x, h, mm, mixer, per_layer_in):
    """x += one layer of plan P with weights L; h: scratch for the normed input; mixer(normed input): its
    attention or recurrent mixer's output before the output projection (None: no mixer block); per_layer_in:
    its per-layer input or None."""
    nm = P.norms
    if P.parallel:  # x + (attn + ffn), the FFN reading the same normed input
        inp = _norm(b, nm, x, L.attn_norm, L.attn_norm_b, h) if nm.pre else x
        o = mm(mixer(inp), L, "o")
        mm(_ffn(b, P, L, inp, mm), L, "down", residual=o)
        b.add(x, o)
        return
    if mixer is not None:
        inp = _norm(b, nm, x, L.attn_norm, L.attn_norm_b, h) if nm.pre else x
        _residual(b, P, x, mm(mixer(inp), L, "o", fusable=True), L.post_attn_norm)
    inp = _norm(b, nm, x, L.ffn_norm, L.ffn_norm_b, h) if nm.pre and P.ffn_kind != "none" else x
    if P.ffn_kind == "dense+moe":  # post_norm(norm_1(MLP) + norm_2(experts)), the experts on their own norm
        mlp = mm(_ffn(b, P, L, inp, mm), L, "down")
        b.rmsnorm(mlp, L.post_ffn_norm_1, nm.eps, out=mlp)
        experts = _moe(b, P, L, b.rmsnorm(x, L.pre_ffn_norm_2, nm.eps), router_in=_router_in(b, P, L, x))
        b.add(mlp, b.rmsnorm(experts, L.post_ffn_norm_2, nm.eps, out=experts))
        _add_block(b, P, x, mlp, L.post_ffn_norm)
    elif P.ffn_kind == "moe":
        _add_block(b, P, x, _moe(b, P, L, inp), L.post_ffn_norm)
    elif P.ffn_kind == "dense":  # ('none': the layer has no FFN)
        _residual(b, P, x, mm(_ffn(b, P, L, inp, mm), L, "down", fusable=True), L.post_ffn_norm)
    if per_layer_in is not None:  # x += norm(proj(act(gate(x)) * this layer's input))
        g = b.gated(b.matmul(x, L.ple_gate), per_layer_in, P.ffn.act)
        p = b.matmul(g, L.ple_proj)
        b.add(x, b.rmsnorm(p, L.ple_norm, nm.eps, out=p))
    if L.out_scale is not None:
        b.scale(x, float(L.out_scale[0]))


def _attention(b: Builder, batch, pool, P: LayerPlan, L, inp, mm, rope_factors, ones: dict):
    """The attention of layer P over its pool layer [n, n_head * head_dim], before the output projection;
    writes the layer's K/V when it has its own."""
    a, hd = P.attn, P.head_dim
    if a.kv_lora:
        return latent.build(b, batch, pool, P, L, inp, mm)
    q = mm(inp, L, "q")
    k = mm(inp, L, "k") if L.k is not None else None
    v = mm(inp, L, "v") if L.v is not None else None
    if k is not None and a.v_norm:  # unweighted; from the keys before their norm when v_from_k
        one = ones.setdefault(hd, np.ones(hd, np.float32))
        v = b.rmsnorm(k if v is None else v, one, P.norms.eps, out=v)
    if a.qk_norm:
        b.rmsnorm(q, L.q_norm, P.norms.eps, out=q)
        if k is not None:
            b.rmsnorm(k, L.k_norm, P.norms.eps, out=k)
    r = P.rope
    if r is not None:
        rope = dict(base=r.base, neox=r.neox, linear=r.linear, factors=rope_factors if r.scaled else None,
                    mscale=r.mscale)
        b.rope(q, batch, P.n_head, hd, r.n_rot, **rope)
        if k is not None:
            b.rope(k, batch, P.n_head_kv, hd, r.n_rot, **rope)
    if a.temp_scale:
        b.position_scale(q, batch, a.temp_scale, a.temp_floor)
    if k is not None:
        b.kv_write(pool, P.kv_index, k, v, batch)
    out = b.attention(q, pool, P.kv_index, batch, P.n_head, P.scale, P.window, a.logit_softcap, sinks=L.sinks)
    return b.gated(mm(inp, L, "q_gate"), out, "sigmoid") if a.out_gate else out


def _per_layer_inputs(b: Builder, s: ArchSpec, x, ple, rows) -> list:
    """Each layer's input [n, width]: (norm(x . proj_l / sqrt(n_embd)) + its token rows) / sqrt(2), from
    the scaled embeddings x before any layer runs (ref: HF Gemma4TextModel.project_per_layer_inputs)."""
    w, out = s.n_embd_per_layer, []
    for il in range(s.n_layer):
        p = b.matmul(x, ple.proj.rows(il * w, (il + 1) * w))
        b.scale(p, 1.0 / math.sqrt(s.n_embd))
        b.rmsnorm(p, ple.norm, s.norms.eps, out=p)
        out.append(b.scale(b.add(p, rows[il]), 2.0 ** -0.5))
    return out


def _router_in(b: Builder, P: LayerPlan, L, x):
    """The router's input beside a dense MLP: x's unweighted RMSNorm times scale / sqrt(n_embd)."""
    n_embd = len(L.router_scale)
    return b.rmsnorm(x, (L.router_scale * np.float32(n_embd ** -0.5)).astype(np.float32), P.norms.eps)


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


def _ffn(b: Builder, P: LayerPlan, L, inp, mm):
    """act(gate) * up, or act(up) for a plain MLP: the input of the down projection."""
    f, up = P.ffn, mm(inp, L, "up")
    return b.gated(mm(inp, L, "gate"), up, f.act) if f.gated else b.activation(up, f.act)


def _moe(b: Builder, P: LayerPlan, L, inp, router_in=None):
    """The experts' FFN [n, n_embd]: each token's k experts from the router (reading router_in, else inp),
    their rows gathered into one batch per expert, act(gate) * up, down, and the weighted sum of the
    token's k rows."""
    logits = b.matmul(inp if router_in is None else router_in, L.router, bias=L.router_bias)
    x, act, gated = P.moe, P.ffn.act, P.ffn.gated
    route = b.moe_route(logits, x.n_used, x.gating, x.norm, x.scale, expert_scale=L.down_exps_scale,
                        select_bias=L.router_select_bias)
    xg = b.gather(inp, route)
    up = b.matmul_experts(xg, L.up_exps, route, bias=L.up_exps_bias)
    hg = (b.gated(b.matmul_experts(xg, L.gate_exps, route, bias=L.gate_exps_bias), up, act) if gated
          else b.activation(up, act))
    out = b.moe_combine(b.matmul_experts(hg, L.down_exps, route, bias=L.down_exps_bias), route)
    if L.up_shexp is not None:  # + sigmoid(inp . g) * the shared expert's FFN (no gate: as is)
        up_sh = b.matmul(inp, L.up_shexp)
        shared = b.matmul(b.gated(b.matmul(inp, L.gate_shexp), up_sh, act) if gated else b.activation(up_sh, act),
                          L.down_shexp)
        if L.shexp_gate_inp is not None:
            b.sigmoid_scale(shared, b.matmul(inp, L.shexp_gate_inp))
        b.add(out, shared)
    return out


def _norm(b: Builder, nm: Norms, x, w, bias, out):
    return b.layernorm(x, w, bias, nm.eps, out=out) if nm.layer_norm else b.rmsnorm(x, w, nm.eps, out=out)


def _residual(b: Builder, P: LayerPlan, x, proj: _Pending, post_norm):
    """x += post_norm(proj) * residual_scale; inside the matmul's chunks when there is neither."""
    if post_norm is None and P.residual_scale == 1.0:
        proj.add_to(x)
        return
    _add_block(b, P, x, proj.compute(), post_norm)


def _add_block(b: Builder, P: LayerPlan, x, o, post_norm):
    """x += post_norm(o) * residual_scale"""
    if post_norm is not None:
        b.rmsnorm(o, post_norm, P.norms.eps, out=o)
    if P.residual_scale != 1.0:
        b.scale(o, P.residual_scale)
    b.add(x, o)


class Head:
    """Output norm, projection and final softcap for n_out rows: `x` in [n_out, n_embd], `logits` out."""

    def __init__(self, spec: ArchSpec, output_norm: np.ndarray, output_norm_b: np.ndarray | None, output: QWeight,
                 output_b: np.ndarray | None, n_out: int):
        b = self.b = Builder()
        self.x = b.tensor(n_out, spec.n_embd)
        self.logits = b.matmul(_norm(b, spec.norms, self.x, output_norm, output_norm_b, None), output, bias=output_b)
        if spec.logit_scale != 1.0:
            b.scale(self.logits, 1.0 / spec.logit_scale)
        if spec.final_logit_softcap:
            b.softcap(self.logits, spec.final_logit_softcap)

    def run(self, nthreads: int) -> np.ndarray:
        self.b.run(nthreads)
        return self.logits
