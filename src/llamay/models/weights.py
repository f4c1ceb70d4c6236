"""Loading is a walk over a table of GGUF tensor names with strict errors: every expected tensor must be
present, every tensor in the file expected, each of the shape and type its entry says (checks.py), before
any kernel sees it. Matrices stay as block bytes mapped from the file."""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field, fields, replace

import numpy as np

from ..gguf import GGUFReader, dequantize
from ..kernels.matmul import IQ_TYPES, QExperts, QWeight, iq_dequantize
from .checks import (HEADS, MATRIX, TABLE, TIED, VECTOR, Expect, ModelFileError, check_block_count, check_tensors,
                     file_shape)
from .rope import yarn_factors
from .arch import ArchSpec
from .plan import LayerPlan
from .recurrent import MIXERS


def _vec(n: int) -> Expect:
    return Expect((n,), VECTOR)


def _mat(k: int, m: int) -> Expect:
    return Expect((k, m), MATRIX)  # m rows of k values


def layer_tensors(s: ArchSpec, il: int) -> dict[str, tuple[str, Expect]]:
    """Layer field -> (GGUF name within block il, after 'blk.{il}.'; what that tensor must be), from the
    layer's plan."""
    p = s.layers[il]
    mixer = {} if p.mixer == "none" else _attention(s.n_embd, p) if p.recurrent is None else _recurrent(s, p)
    if p.recurrent is not None and p.writes_kv:  # attention beside: its projections, the mixer's output "out"
        mixer = {**_attention(s.n_embd, p), **{MIX + "out" if f == "o" else f: t for f, t in mixer.items()}}
    return {**mixer, **_ffn(s.n_embd, p), **_norms(s.n_embd, p), **_layer_extras(s, p)}


MIX = "mix."  # a field of Layer.mix: a recurrent mixer's own weights


def _recurrent(s: ArchSpec, p: LayerPlan) -> dict:
    return {f if f == "o" else MIX + f: t for f, t in MIXERS[p.mixer].tensors(s, p).items()}


def _attention(d: int, p: LayerPlan) -> dict:
    a, hd = p.attn, p.head_dim
    if a.kv_lora:
        return _latent(d, p)
    q, kv = p.n_head * hd, p.n_head_kv * hd
    t = {"o": ("attn_output.weight", _mat(q, d))}
    if a.fused_qkv:
        t["qkv"] = ("attn_qkv.weight", _mat(d, q + 2 * kv))
    else:
        t["q"] = ("attn_q.weight", _mat(d, 2 * q if a.out_gate else q))
        if p.writes_kv:
            t.update(k=("attn_k.weight", _mat(d, kv)),
                     v=("attn_v.weight", Expect((d, kv), MATRIX, required=not a.v_from_k)))
    if a.sinks:
        t["sinks"] = ("attn_sinks.weight", _vec(p.n_head))
    if a.o_bias:
        t["o_bias"] = ("attn_output.bias", _vec(d))
    if a.qkv_bias and a.fused_qkv:
        t["qkv_bias"] = ("attn_qkv.bias", _vec(q + 2 * kv))
    elif a.qkv_bias:
        t.update(q_bias=("attn_q.bias", _vec(q)), k_bias=("attn_k.bias", _vec(kv)), v_bias=("attn_v.bias", _vec(kv)))
    if a.qk_norm:
        qn, kn = (q, kv) if a.qk_norm_full else (hd, hd)
        t["q_norm"] = ("attn_q_norm.weight", _vec(qn))
        if p.writes_kv:
            t["k_norm"] = ("attn_k_norm.weight", _vec(kn))
    return t


def _latent(d: int, p: LayerPlan) -> dict:
    """Multi-head latent attention's tensors (models/latent.py), as llama.cpp's converter writes them."""
    a, h = p.attn, p.n_head
    rot = p.head_dim - a.kv_lora
    qd = h * (a.nope + rot)
    t = {"o": ("attn_output.weight", _mat(h * a.v_dim, d)), "kv_a": ("attn_kv_a_mqa.weight", _mat(d, p.head_dim)),
         "kv_a_norm": ("attn_kv_a_norm.weight", _vec(a.kv_lora)),
         "k_b": ("attn_k_b.weight", Expect((a.nope, a.kv_lora, h), HEADS)),
         "v_b": ("attn_v_b.weight", Expect((a.kv_lora, a.v_dim, h), HEADS))}
    if a.q_lora:
        t.update(q_a=("attn_q_a.weight", _mat(d, a.q_lora)), q_a_norm=("attn_q_a_norm.weight", _vec(a.q_lora)),
                 q_b=("attn_q_b.weight", _mat(a.q_lora, qd)))
    else:
        t["q"] = ("attn_q.weight", _mat(d, qd))
    return t


def _ffn(d: int, p: LayerPlan) -> dict:
    """The dense MLP (n_ff > 0) and the experts (moe)."""
    f, ff, t = p.ffn, p.n_ff, {}
    if ff:
        t.update(up=("ffn_up.weight", _mat(d, 2 * ff if f.fused_gate_up else ff)),
                 down=("ffn_down.weight", _mat(ff, d)))
        if f.gated and not f.fused_gate_up:
            t["gate"] = ("ffn_gate.weight", _mat(d, ff))
        if f.bias:
            t.update(up_bias=("ffn_up.bias", _vec(ff)), down_bias=("ffn_down.bias", _vec(d)))
    x = p.moe
    if x is None:
        return t
    fe, e = x.n_ff, x.n_expert
    t.update(router=("ffn_gate_inp.weight", _mat(d, e)), down_exps=("ffn_down_exps.weight", Expect((fe, d, e), MATRIX)))
    if x.select_bias:  # as llama.cpp's converter writes LFM2-MoE's expert_bias
        t["router_select_bias"] = ("exp_probs_b.bias", _vec(e))
    if x.beside_dense:  # as llama.cpp's converter writes Gemma 4: gate and up fused, the router's scales
        t.update(gate_up_exps=("ffn_gate_up_exps.weight", Expect((d, 2 * fe, e), MATRIX)),
                 router_scale=("ffn_gate_inp.scale", _vec(d)), down_exps_scale=("ffn_down_exps.scale", _vec(e)),
                 pre_ffn_norm_2=("pre_ffw_norm_2.weight", _vec(d)), post_ffn_norm_1=("post_ffw_norm_1.weight", _vec(d)),
                 post_ffn_norm_2=("post_ffw_norm_2.weight", _vec(d)))
    else:
        t["up_exps"] = ("ffn_up_exps.weight", Expect((d, fe, e), MATRIX))
        if f.gated:  # ungated experts: down(act(up)) (Nemotron-H's squared ReLU)
            t["gate_exps"] = ("ffn_gate_exps.weight", Expect((d, fe, e), MATRIX))
    if x.n_ff_shared:
        sh = x.n_ff_shared
        if x.shared_gate:
            t["shexp_gate_inp"] = ("ffn_gate_inp_shexp.weight", _mat(d, 1))  # as llama.cpp's converter writes it
        t.update(up_shexp=("ffn_up_shexp.weight", _mat(d, sh)), down_shexp=("ffn_down_shexp.weight", _mat(sh, d)))
        if f.gated:
            t["gate_shexp"] = ("ffn_gate_shexp.weight", _mat(d, sh))
    if x.bias:
        t.update(router_bias=("ffn_gate_inp.bias", _vec(e)), up_exps_bias=("ffn_up_exps.bias", Expect((fe, e), VECTOR)),
                 gate_exps_bias=("ffn_gate_exps.bias", Expect((fe, e), VECTOR)),
                 down_exps_bias=("ffn_down_exps.bias", Expect((d, e), VECTOR)))
    return t


def _norms(d: int, p: LayerPlan) -> dict:
    nm, t = p.norms, {}
    pre = {"attn_norm": "attn_norm"} if p.parallel else {"attn_norm": "attn_norm", "ffn_norm": nm.ffn_name}
    if p.mixer == "none":  # the layer is its FFN alone
        del pre["attn_norm"]
    if p.ffn_kind == "none":
        pre.pop("ffn_norm", None)
    for n, gguf_name in pre.items() if nm.pre else ():  # a parallel block has one
        t[n] = (gguf_name if n == "ffn_norm" and nm.bare_ffn_norm else f"{gguf_name}.weight", _vec(d))
        if nm.layer_norm and nm.bias:
            t[n + "_b"] = (f"{gguf_name}.bias", _vec(d))
    if nm.post_attn:
        t["post_attn_norm"] = ("post_attention_norm.weight", _vec(d))
    if nm.post_ffn:
        t["post_ffn_norm"] = ("post_ffw_norm.weight", _vec(d))
    return t


def _layer_extras(s: ArchSpec, p: LayerPlan) -> dict:
    """Per-layer inputs and the output scale."""
    t, d = {}, s.n_embd
    if s.n_embd_per_layer:
        t.update(ple_gate=("inp_gate.weight", _mat(d, s.n_embd_per_layer)),
                 ple_proj=("proj.weight", _mat(s.n_embd_per_layer, d)), ple_norm=("post_norm.weight", _vec(d)))
    if p.out_scale:
        t["out_scale"] = ("layer_output_scale.weight", Expect((1,), VECTOR, required=False))
    return t


def tensor_table(s: ArchSpec, tied: bool) -> dict[str, Expect]:
    """Every tensor of a decoder file: GGUF name -> what it must be. tied: output.weight is absent and
    token_embd is also the output projection."""
    table = {f"blk.{i}.{name}": e for i in range(s.n_layer) for name, e in layer_tensors(s, i).values()}
    table["token_embd.weight"] = Expect((s.n_embd, s.n_vocab), TIED if tied else TABLE)
    table[f"{s.output_norm}.weight"] = _vec(s.n_embd)
    if s.norms.layer_norm and s.norms.bias:
        table[f"{s.output_norm}.bias"] = _vec(s.n_embd)
    table["output.weight"] = Expect((s.n_embd, s.n_vocab), MATRIX, required=False)
    if s.output_bias:
        table["output.bias"] = _vec(s.n_vocab)
    if s.rope.freqs:
        table["rope_freqs.weight"] = Expect((s.rope.n_rot // 2,), VECTOR, required=False)
    if s.rope.long_short:
        for name in ("rope_factors_long.weight", "rope_factors_short.weight"):
            table[name] = Expect((s.rope.n_rot // 2,), VECTOR, required=False)
    if s.learned_pos:
        table["position_embd.weight"] = Expect((s.n_embd, s.n_ctx_train), TABLE)
    if s.n_embd_per_layer:
        n = s.n_embd_per_layer * s.n_layer
        table.update({"per_layer_token_embd.weight": Expect((n, s.n_vocab), TABLE),
                      "per_layer_model_proj.weight": Expect((s.n_embd, n), MATRIX),
                      "per_layer_proj_norm.weight": _vec(s.n_embd_per_layer)})
    return table


def row_parts(s: ArchSpec, il: int, field: str) -> list[tuple[str, int, int]]:
    """The Layer fields a weight's rows become, (field, first row, end row): a fused weight's parts (qkv:
    q, k, v; up with fused_gate_up: gate, up; gate_up_exps: gate_exps, up_exps), else the field whole."""
    p = s.layers[il]
    ff, q, kv = p.n_ff, p.n_head * p.head_dim, p.n_head_kv * p.head_dim
    if field == "qkv":
        return [("q", 0, q), ("k", q, q + kv), ("v", q + kv, q + 2 * kv)]
    if field == "up" and p.ffn.fused_gate_up:
        return [("gate", 0, ff), ("up", ff, 2 * ff)]
    if field == "gate_up_exps":
        return [("gate_exps", 0, p.moe.n_ff), ("up_exps", p.moe.n_ff, 2 * p.moe.n_ff)]
    if field == "kv_a":  # multi-head latent attention's: the latent, then the rotary key
        return [("kv_c", 0, p.attn.kv_lora), ("k_rope", p.attn.kv_lora, p.head_dim)]
    return [(field, 0, {"q": q, "k": kv, "v": kv, "o": s.n_embd, "down": s.n_embd}.get(field, ff))]


def _unfuse(s: ArchSpec, f: dict, il: int) -> dict:
    """Fused projections as views of their parts' rows (row_parts)."""
    for fused in ("qkv", "up", "gate_up_exps", "kv_a"):
        if fused in f and (fused != "up" or s.ffn.fused_gate_up):
            w = f.pop(fused)
            f.update({name: w.rows(lo, hi) for name, lo, hi in row_parts(s, il, fused)})
    p = s.layers[il]
    if p.attn.out_gate and "q" in f:
        f["q"], f["q_gate"] = _split_heads(f["q"], p.n_head, p.head_dim)
    if "qkv_bias" in f:
        b = f.pop("qkv_bias")
        f.update({name + "_bias": np.ascontiguousarray(b[lo:hi]) for name, lo, hi in row_parts(s, il, "qkv")})
    if s.norms.layer_norm and not s.norms.bias:
        for n in ("attn_norm", "ffn_norm"):
            if n in f:
                f[n + "_b"] = np.zeros_like(f[n])
    return f


def _split_heads(w: QWeight, n_head: int, hd: int) -> tuple[QWeight, QWeight]:
    """A gated attention's attn_q (per head, hd query rows then hd gate rows) as (queries, gates): copies."""
    raw = w.raw.reshape(n_head, 2, hd * w.row_bytes)
    return tuple(QWeight(np.ascontiguousarray(raw[:, i]).reshape(-1), w.qtype, n_head * hd, w.k) for i in (0, 1))


@dataclass(frozen=True)
class Layer:
    o: QWeight | None = None  # the mixer's output projection (None: the layer has no mixer)
    q: QWeight | None = None  # attention's; None in a recurrent layer
    q_gate: QWeight | None = None  # the output gate's projection (Attention.out_gate)
    mix: dict = field(default_factory=dict)  # a recurrent mixer's weights (models/recurrent.py)
    k: QWeight | None = None  # None: the layer reuses an earlier layer's K/V
    v: QWeight | None = None  # None as well when the values are the keys (Attention.v_from_k)
    up: QWeight | None = None  # a dense FFN, or
    down: QWeight | None = None
    gate: QWeight | None = None
    router: QWeight | None = None  # a mixture of experts
    up_exps: QExperts | None = None
    gate_exps: QExperts | None = None
    down_exps: QExperts | None = None
    router_bias: np.ndarray | None = None
    router_select_bias: np.ndarray | None = None  # [n_expert]: added to the scores that choose (MoE.select_bias)
    up_exps_bias: np.ndarray | None = None  # [n_expert, n_ff]
    gate_exps_bias: np.ndarray | None = None
    down_exps_bias: np.ndarray | None = None  # [n_expert, n_embd]
    sinks: np.ndarray | None = None  # [n_head]
    shexp_gate_inp: QWeight | None = None  # a shared expert: its gate's logit (a matrix of one row), its FFN
    gate_shexp: QWeight | None = None
    up_shexp: QWeight | None = None
    down_shexp: QWeight | None = None
    attn_norm: np.ndarray | None = None
    ffn_norm: np.ndarray | None = None
    attn_norm_b: np.ndarray | None = None
    ffn_norm_b: np.ndarray | None = None
    o_bias: np.ndarray | None = None
    up_bias: np.ndarray | None = None
    down_bias: np.ndarray | None = None
    q_bias: np.ndarray | None = None
    k_bias: np.ndarray | None = None
    v_bias: np.ndarray | None = None
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None
    post_ffn_norm: np.ndarray | None = None
    router_scale: np.ndarray | None = None  # experts beside a dense MLP (MoE.beside_dense)
    down_exps_scale: np.ndarray | None = None  # [n_expert]: each expert's weight times it
    pre_ffn_norm_2: np.ndarray | None = None
    post_ffn_norm_1: np.ndarray | None = None
    post_ffn_norm_2: np.ndarray | None = None
    ple_gate: QWeight | None = None  # per-layer inputs: gate [n_embd -> width], projection back, its norm
    ple_proj: QWeight | None = None
    ple_norm: np.ndarray | None = None
    out_scale: np.ndarray | None = None  # [1]: the layer's output times it
    q_a: QWeight | None = None  # multi-head latent attention (models/latent.py): the queries' low-rank pair,
    q_a_norm: np.ndarray | None = None
    q_b: QWeight | None = None
    kv_c: QWeight | None = None  # the latent's projection and norm, the rotary key's projection,
    kv_a_norm: np.ndarray | None = None
    k_rope: QWeight | None = None
    k_b: np.ndarray | None = None  # float32 [H, kv_lora, nope]: each head's queries into the latent
    v_b: np.ndarray | None = None  # float32 [H, v_dim, kv_lora]: each head's output out of it


def matrices(items) -> list[QWeight]:
    """The QWeights among items (QWeights and Layers, with their mixers' matrices)."""
    out = []
    for it in items:
        if isinstance(it, QWeight):
            out.append(it)
        elif isinstance(it, Layer):
            out += [w for w in [getattr(it, f.name) for f in fields(it)] + list(it.mix.values())
                    if isinstance(w, QWeight)]
    return out


# (file identity, byte offset of the tensor) -> its regrouped matrix, while any model holds it: models of
# one file in a process (tests, a server's reloads, a draft beside its target) share one copy
_REGROUPED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def regrouped(w: QWeight, reader: GGUFReader, n_threads: int) -> QWeight:
    """w as QWeight.repacked makes it, the copy shared with any other model of the same file."""
    key = reader.locate(w.raw)
    hit = _REGROUPED.get(key) if key else None
    if hit is not None and (hit.qtype, hit.m, hit.k) == (w.qtype, w.m, w.k):
        return hit
    new = w.repacked(n_threads)
    if key and new.x16:
        _REGROUPED[key] = new
    return new


def repacked(layer: Layer, reader: GGUFReader, n_threads: int) -> Layer:
    """The layer with each of its matrices (its mixer's too) regrouped (regrouped())."""
    def one(w):
        return regrouped(w, reader, n_threads) if isinstance(w, QWeight) else w
    new = {f.name: one(getattr(layer, f.name)) for f in fields(layer) if isinstance(getattr(layer, f.name), QWeight)}
    return replace(layer, **new, mix={k: one(w) for k, w in layer.mix.items()})


class Embedding:
    """token_embd rows dequantized on lookup; the table stays mapped, never dequantized whole."""

    def __init__(self, reader: GGUFReader, name: str):
        t = reader.tensors[name]
        self.qtype, self.n_embd = t.qtype, t.shape[0]
        self.rows = reader.data(name).reshape(t.shape[1], -1)  # [n_vocab, row_bytes]

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        if self.qtype.name in IQ_TYPES:  # the codebook formats decode in C (bit-equal to gguf-py)
            return iq_dequantize(self.rows[ids], self.qtype).reshape(len(ids), self.n_embd)
        return dequantize(self.rows[ids], self.qtype, (self.n_embd, len(ids)))  # [n, n_embd]


@dataclass(frozen=True)
class PerLayerInputs:
    """Gemma 4's per-layer inputs: each token's rows of `table` [n_layer * width] plus a projection of its
    embedding through `proj`, normed per layer by `norm` [width]."""
    table: Embedding
    proj: QWeight
    norm: np.ndarray


def load_weights(reader: GGUFReader, spec: ArchSpec, n_ctx: int):
    """(layers, embedding, output norm (weight, bias or None), output projection (weight, bias or None),
    RoPE frequency factors for a context of n_ctx tokens or None, PerLayerInputs or None), after every
    tensor is checked against tensor_table (ModelFileError otherwise)."""
    check_block_count(reader.tensors, spec.n_layer, f"{spec.arch}.block_count")
    tied = "output.weight" not in reader.tensors
    check_tensors(reader.tensors, tensor_table(spec, tied), reader.path, spec.arch)

    def vec(name):
        return np.ascontiguousarray(dequantize(reader.data(name), reader.tensors[name].qtype,
                                               reader.tensors[name].shape))

    def load(name, e: Expect):
        if e.role in (VECTOR, HEADS):  # float32 in the expected shape (numpy's order), the file's trailing 1s too
            return vec(name).reshape(tuple(reversed(file_shape(reader.tensors[name], e))))
        return (QExperts if len(e.shape) == 3 else QWeight).from_gguf(reader, name)

    def layer(i: int) -> Layer:
        f = _unfuse(spec, {f: load(f"blk.{i}.{name}", e) for f, (name, e) in layer_tensors(spec, i).items()
                           if f"blk.{i}.{name}" in reader.tensors}, i)
        mix = {k[len(MIX):]: f.pop(k) for k in [k for k in f if k.startswith(MIX)]}
        prepare = getattr(MIXERS.get(spec.layers[i].mixer), "prepare", None)  # a mixer's own repacking
        return Layer(**f, mix=prepare(spec.layers[i], mix) if prepare else mix)

    layers = [layer(i) for i in range(spec.n_layer)]
    output = QWeight.from_gguf(reader, "token_embd.weight" if tied else "output.weight")
    name = ("rope_freqs.weight" if "rope_freqs.weight" in reader.tensors
            else f"rope_factors_{spec.long_short(n_ctx)}.weight")
    factors = vec(name).astype(np.float32) if name in reader.tensors else None
    if factors is not None and not (np.isfinite(factors).all() and (factors > 0).all()):
        raise ModelFileError(f"{reader.path}: {name} must hold finite factors > 0")
    r = spec.rope
    if r.yarn:
        if factors is not None:
            raise ModelFileError(f"{reader.path}: YaRN RoPE scaling and {name} together")
        factors = yarn_factors(r.n_rot, r.base, r.yarn, r.n_ctx_orig, r.yarn_beta_fast, r.yarn_beta_slow,
                               r.yarn_truncate)
    zeros = np.zeros(spec.n_embd, np.float32)  # the bias of a LayerNorm without one
    norm_b = (vec(f"{spec.output_norm}.bias") if spec.norms.bias else zeros) if spec.norms.layer_norm else None
    out_b = vec("output.bias") if spec.output_bias else None
    ple = (PerLayerInputs(Embedding(reader, "per_layer_token_embd.weight"),
                          QWeight.from_gguf(reader, "per_layer_model_proj.weight"), vec("per_layer_proj_norm.weight"))
           if spec.n_embd_per_layer else None)
    return (layers, Embedding(reader, "token_embd.weight"), (vec(f"{spec.output_norm}.weight"), norm_b), (output, out_b),
            factors, ple)
