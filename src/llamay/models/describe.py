"""A spec's per-layer plan as text (llamay show --arch): the whole model's settings, then one line per kind
of layer (the layers whose plans agree but for their index and K/V source), with its count and layers."""
from __future__ import annotations

import math

from .arch import ArchSpec
from .plan import LayerPlan
from .recurrent import MIXERS


def describe(s: ArchSpec) -> list[str]:
    kinds: dict[str, list[int]] = {}
    for p in s.layers:
        kinds.setdefault(_kind(s, p), []).append(p.index)
    lines = [f"{s.arch}: {s.n_layer} layers, embedding {s.n_embd}, vocab {s.n_vocab}, context {s.n_ctx_train}",
             "blocks: " + ", ".join(_blocks(s))]
    if s.state_layers:
        lines.append(f"recurrent state: {_bytes(state_bytes(s))} per context and per checkpoint (float32)")
    for kind, layers in kinds.items():
        count = f"{len(layers)} layer{'s' if len(layers) > 1 else ''}"
        lines.append(f"  {count} ({_which(layers, s.n_layer)}): {kind}")
    return lines


def state_bytes(s: ArchSpec) -> int:
    """Bytes of one context's recurrent state (a state slot, a checkpoint)."""
    return sum(4 * math.prod(shape) for il in s.state_layers
               for shape in MIXERS[s.layers[il].mixer].state_shapes(s, s.layers[il]))


def _bytes(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _kind(s: ArchSpec, p: LayerPlan) -> str:
    if p.mixer == "none":
        return f"no mixer; {_ffn(p) or 'no ffn'}"
    if p.recurrent is not None:
        part = ", ".join(f"{k} {v}" for k, v in vars(p.recurrent).items())
        beside = f" beside attention {p.n_head} heads x {p.head_dim}, kv {p.n_head_kv}, {_rope(s, p)}" if p.writes_kv else ""
        return f"{p.mixer} ({part}){beside}; {_ffn(p) or 'no ffn'}"
    attn = f"{p.mixer} {p.n_head} heads x {p.head_dim}, kv {p.n_head_kv}"
    attn += ", sigmoid output gate" if p.attn.out_gate else ""
    if not p.writes_kv:
        attn += " reused from an earlier layer"
    return f"{attn}, {_rope(s, p)} | {f'swa {p.window}' if p.window else 'global'}; {_ffn(p) or 'no ffn'}"


def _rope(s: ArchSpec, p: LayerPlan) -> str:
    r = p.rope
    if r is None:
        return "no rope"
    out = f"rope {'neox' if r.neox else 'pairs'} base {_num(r.base)}"
    if r.n_rot != p.head_dim:
        out += f" over {r.n_rot} dims"
    if r.linear != 1.0:
        out += f" linear /{_num(r.linear)}"
    if r.scaled:
        sr = s.rope
        out += (f" yarn x{_num(sr.yarn)}" if sr.yarn else "") + (" longrope" if sr.long_short else "")
        out += " rope_freqs if present" if sr.freqs else ""
        out += f" mscale {_num(r.mscale)}" if r.mscale != 1.0 and not sr.yarn else ""
    return out


def _ffn(p: LayerPlan) -> str:
    f, x = p.ffn, p.moe
    mlp = f"ffn {f.act}{'-gated' if f.gated else ''} {p.n_ff}" if p.n_ff else ""
    if x is None:
        return mlp
    moe = f"moe {x.n_used} of {x.n_expert} experts x {x.n_ff} ({x.gating}{', renormed' if x.norm else ''})"
    if x.n_ff_shared:
        moe += f" + shared {x.n_ff_shared}" + ("" if x.shared_gate else " ungated")
    return f"{mlp} + {moe}" if mlp else moe


def _blocks(s: ArchSpec) -> list[str]:
    """What every layer does alike."""
    nm, a = s.norms, s.attn
    norm = "layernorm" + ("" if nm.bias else " (no bias)") if nm.layer_norm else "rmsnorm"
    places = [w for w, on in (("pre", nm.pre), ("post-attn", nm.post_attn), ("post-ffn", nm.post_ffn)) if on]
    out = [f"{norm} {'+'.join(places)} eps {_num(nm.eps)}"]
    out += [name for name, on in (
        ("parallel attention+ffn", s.parallel_block), ("fused qkv", a.fused_qkv), ("qkv bias", a.qkv_bias),
        ("o bias", a.o_bias), ("q/k norm " + ("whole" if a.qk_norm_full else "per head"), a.qk_norm),
        ("v norm", a.v_norm), ("v from k", a.v_from_k), ("sinks", a.sinks), ("ffn bias", s.ffn.bias),
        ("fused gate+up", s.ffn.fused_gate_up), ("learned positions", s.learned_pos),
        (f"per-layer inputs {s.n_embd_per_layer}", s.n_embd_per_layer), ("layer output scale", s.layer_out_scale),
    ) if on]
    out += [f"{name} {_num(v)}" for name, v, unset in (
        ("query scale", a.scale, 0.0), ("attn softcap", a.logit_softcap, 0.0), ("query temperature", a.temp_scale, 0.0),
        ("embedding scale", s.embed_scale, 1.0), ("residual scale", s.residual_scale, 1.0),
        ("logit scale", s.logit_scale, 1.0), ("final softcap", s.final_logit_softcap, 0.0)) if v != unset]
    return out


def _num(x: float) -> str:
    """Round numbers short: 10000 -> 1e4, 0.125 -> 0.125."""
    if x == int(x) and abs(x) >= 1e4:
        n, e = int(x), 0
        while n % 10 == 0:
            n, e = n // 10, e + 1
        return f"{n}e{e}" if e >= 3 else str(int(x))
    return f"{x:.6g}"


def _which(layers: list[int], n: int) -> str:
    """The layers as ranges, and the rule when there is one: every k-th, or all but every k-th."""
    ranges, start = [], layers[0]
    for a, b in zip(layers, layers[1:] + [None]):
        if b != a + 1:
            ranges.append(f"{start}-{a}" if a > start else str(a))
            start = b
    text = ", ".join(ranges)
    chosen = set(layers)
    others = [i for i in range(n) if i not in chosen]
    for rule, sel in (("every", layers), ("all but every", others)):
        k = sel[0] + 1 if sel else 0
        if k >= 2 and len(sel) >= 2 and sel == list(range(k - 1, n, k)):
            return f"{text}; {rule} {_nth(k)}"
    return text


def _nth(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"
