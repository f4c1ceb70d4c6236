"""The per-layer plan: a spec's parts (parts.py) resolved once into one frozen LayerPlan per layer, which
weights.py and forward.py read instead of re-deriving a layer's facts from the parts' rules."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .checks import UnsupportedModel
from .parts import FFN, MIXERS, Attention, MoE, Norms

if TYPE_CHECKING:
    from .arch import ArchSpec


@dataclass(frozen=True)
class LayerRope:
    """The RoPE a layer applies."""
    n_rot: int
    base: float
    neox: bool
    linear: float  # frequencies divided by it
    scaled: bool  # takes the frequency factors (file or YaRN) and mscale
    mscale: float


@dataclass(frozen=True)
class LayerPlan:
    index: int
    mixer: str  # one of parts.MIXERS
    norms: Norms
    attn: Attention  # projections, biases, q/k/v norms, softcap, sinks: the same in every attention layer
    n_head: int
    n_head_kv: int
    head_dim: int
    scale: float  # the queries' scale
    window: int  # sliding window in tokens; 0: global
    rope: LayerRope | None  # None: no RoPE here
    kv_source: int  # the layer whose K/V it attends to: itself when it writes K/V; -1: none
    kv_index: int  # the page pool layer it attends over (-1: none)
    ffn: FFN  # activation, gating, biases (the experts take the same activation)
    n_ff: int  # its dense MLP's width; 0: none (experts only)
    moe: MoE | None
    parallel: bool  # attention and FFN read one norm of x: x + (attn + ffn) (Phi-2)
    residual_scale: float  # each block's output scaled before the residual add (Granite)
    out_scale: bool  # the file may carry layer_output_scale: the layer's output times it
    recurrent: Any = None  # the part of a mixer that keeps a recurrent state (None: attention or no mixer); a
    # recurrent layer that writes K/V attends beside it (ArchSpec.attention_beside)

    @property
    def writes_kv(self) -> bool:
        return self.kv_source == self.index

    @property
    def ffn_kind(self) -> str:
        """'dense', 'moe', 'dense+moe' (experts beside the dense MLP), or 'none' (n_ff 0, no experts)."""
        if self.moe is None:
            return "dense" if self.n_ff else "none"
        return "dense+moe" if self.n_ff else "moe"


def _window(a: Attention, il: int) -> int:
    if not a.window:
        return 0
    if a.sliding:
        return a.window if a.sliding[il] else 0
    if a.global_every and il % a.global_every == a.global_every - 1:
        return 0
    return a.window


def _rope(a: Attention, il: int, window: int) -> LayerRope | None:
    r = a.rope
    if (r.none_global and a.window and not window) or (r.none_every and (il + 1) % r.none_every == 0):
        return None
    scaled = r.scaled_local or not window
    return LayerRope(n_rot=r.n_rot_local if r.n_rot_local and window else r.n_rot,
                     base=r.base_local if r.base_local and window else r.base, neox=r.neox,
                     linear=r.linear if scaled else 1.0, scaled=scaled, mscale=r.mscale if scaled else 1.0)


def resolve(s: ArchSpec) -> tuple[LayerPlan, ...]:
    """One LayerPlan per layer. A layer among the last n_kv_shared attends to the K/V of the last earlier
    layer of its kind (sliding or global); the pool holds the layers that write K/V, in order."""
    a, n = s.attn, s.n_layer
    mixers = s.mixers or ("attention",) * n
    if len(mixers) != n or not set(mixers) <= set(MIXERS):
        raise UnsupportedModel(f"{s.arch}: layer mixers {sorted(set(mixers))} (supported: {', '.join(MIXERS)})")
    windows = [_window(a, il) for il in range(n)]
    first = n - a.n_kv_shared

    def source(il: int) -> int:
        if mixers[il] != "attention" and not (s.attention_beside and mixers[il] != "none"):
            return -1
        if il < first:
            return il
        return next((j for j in range(first - 1, -1, -1) if mixers[j] == "attention" and bool(windows[j]) == bool(windows[il])), -1)

    sources = [source(il) for il in range(n)]
    pool = {il: k for k, il in enumerate(il for il in range(n) if sources[il] == il)}

    def moe(il: int):  # the first n_dense_lead layers take the dense MLP instead; moe.layers says which have it
        x = s.moe
        return None if x is None or il < x.n_dense_lead or (x.layers and not x.layers[il]) else x

    out = []
    for il, w in enumerate(windows):
        hd = a.head_dim_local if a.head_dim_local and w else a.head_dim
        out.append(LayerPlan(
            index=il, mixer=mixers[il], norms=s.norms, attn=a, n_head=a.n_head,
            n_head_kv=a.n_head_kv_layers[il] if a.n_head_kv_layers else a.n_head_kv, head_dim=hd,
            scale=a.scale or 1.0 / math.sqrt(hd), window=w, rope=_rope(a, il, w),
            kv_source=sources[il], kv_index=pool.get(sources[il], -1), ffn=s.ffn,
            n_ff=(s.ffn.n_ff_layers[il] if s.ffn.n_ff_layers else s.ffn.n_ff)
            if moe(il) is None or moe(il).beside_dense else 0, moe=moe(il),
            parallel=s.parallel_block, residual_scale=s.residual_scale, out_scale=s.layer_out_scale,
            recurrent=s.recurrent if mixers[il] not in ("attention", "none") else None))
    return tuple(out)
