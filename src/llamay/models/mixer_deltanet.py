"""The gated delta net of Qwen3-Next and Qwen3.5 (ref: HF Qwen3NextGatedDeltaNet; llama.cpp's qwen3next and
qwen35 graphs; tensors and math in tests/hybrid_deltanet.py). attn_qkv gives q, k, v [n, 2 Hk dk + Hv dv],
causally convolved (d_conv taps) then SiLU; b and a per value head give beta = sigmoid(b) and the decay
exp(A softplus(a + dt_bias)) of the delta rule (kernels' delta_rule) over a [dk, dv] state per value
head; its output is RMS-normed per head and times silu(z), z = attn_gate x. State per slot: the
convolution's last d_conv - 1 inputs [d_conv - 1, C] and the rule's [Hv, dk, dv]."""
from __future__ import annotations

import numpy as np

from ..kernels.matmul import QWeight
from .checks import MATRIX, VECTOR, Expect, ModelFileError


def tensors(s, p) -> dict:
    r, d = p.recurrent, s.n_embd
    c, v, legacy = _channels(r), r.n_v_heads * r.d_v, r.fused_ba  # qwen3next files may hold ssm_in instead
    t = {"qkv": ("attn_qkv.weight", Expect((d, c), MATRIX, required=not legacy)),
         "z": ("attn_gate.weight", Expect((d, v), MATRIX, required=not legacy)),
         "conv": ("ssm_conv1d.weight", Expect((r.d_conv, c), VECTOR)),
         "a": ("ssm_a", Expect((r.n_v_heads,), VECTOR)), "dt_bias": ("ssm_dt.bias", Expect((r.n_v_heads,), VECTOR)),
         "norm": ("ssm_norm.weight", Expect((r.d_v,), VECTOR)), "o": ("ssm_out.weight", Expect((v, d), MATRIX))}
    if r.fused_ba:
        t["ba"] = ("ssm_ba.weight", Expect((d, 2 * r.n_v_heads), MATRIX))
        t["qkvz"] = ("ssm_in.weight", Expect((d, c + v), MATRIX, required=False))
    else:
        t.update(beta=("ssm_beta.weight", Expect((d, r.n_v_heads), MATRIX)),
                 alpha=("ssm_alpha.weight", Expect((d, r.n_v_heads), MATRIX)))
    return t


def prepare(p, mix: dict) -> dict:
    """After loading, qwen3next's fused matrices as the parts build reads (row copies): ssm_ba (rows per key
    head: its value heads' b, then their a) as beta and alpha; a legacy file's ssm_in (rows per key head: q,
    k, then its value heads' v and z) as qkv and z."""
    r = p.recurrent
    per = r.n_v_heads // r.n_k_heads
    if "ba" in mix:
        w, rows = mix.pop("ba"), np.arange(2 * r.n_v_heads).reshape(r.n_k_heads, 2, per)
        mix["beta"], mix["alpha"] = _rows(w, rows[:, 0]), _rows(w, rows[:, 1])
    if ("qkvz" in mix) == ("qkv" in mix or "z" in mix) or ("qkv" in mix) != ("z" in mix):
        raise ModelFileError(f"layer {p.index}: a delta net needs attn_qkv and attn_gate, or (legacy) ssm_in")
    if "qkvz" in mix:
        w, sizes = mix.pop("qkvz"), (r.d_k, r.d_k, per * r.d_v, per * r.d_v)
        q, k, v, z = np.split(np.arange(w.m).reshape(r.n_k_heads, sum(sizes)), np.cumsum(sizes)[:-1], axis=1)
        mix["qkv"], mix["z"] = _rows(w, np.concatenate([q.ravel(), k.ravel(), v.ravel()])), _rows(w, z)
    return mix


def _rows(w: QWeight, rows: np.ndarray) -> QWeight:
    """These rows of w (in this order) as a weight of their own."""
    rows = rows.reshape(-1)
    raw = np.ascontiguousarray(w.raw.reshape(w.m, w.row_bytes)[rows]).reshape(-1)
    return QWeight(raw, w.qtype, len(rows), w.k)


def state_shapes(s, p) -> tuple:
    r = p.recurrent
    return ((r.d_conv - 1, _channels(r)), (r.n_v_heads, r.d_k, r.d_v))


def build(b, batch, states, p, L, inp, mm):
    r, w = p.recurrent, L.mix
    qkv = b.matmul(inp, w["qkv"])
    b.activation(b.conv(qkv, w["conv"], states[0], batch, out=qkv), "silu")
    ba = b.tensor(2, inp.shape[0], r.n_v_heads)
    b.matmul(inp, w["beta"], out=ba[0])
    b.matmul(inp, w["alpha"], out=ba[1])
    y = b.delta_rule(qkv, ba, w["a"], w["dt_bias"], states[1], batch, tiled=r.tiled, eps=p.norms.eps)
    b.rmsnorm(y, w["norm"], p.norms.eps, out=y)
    return b.gated(b.matmul(inp, w["z"]), y, "silu")


def _channels(r) -> int:
    return 2 * r.n_k_heads * r.d_k + r.n_v_heads * r.d_v
