"""The gated delta net of Qwen3-Next and Qwen3.5 (ref: HF Qwen3NextGatedDeltaNet; llama.cpp's qwen3next and
qwen35 graphs; tensors and math in tests/hybrid_deltanet.py). attn_qkv gives q, k, v [n, 2 Hk dk + Hv dv],
causally convolved (d_conv taps) then SiLU; b and a per value head give beta = sigmoid(b) and the decay
exp(A softplus(a + dt_bias)) of the delta rule (kernels' delta_rule) over a [dk, dv] state per value
head; its output is RMS-normed per head and times silu(z), z = attn_gate x. State per slot: the
convolution's last d_conv - 1 inputs [d_conv - 1, C] and the rule's [Hv, dk, dv]."""
from __future__ import annotations

import numpy as np

from ..kernels.matmul import QWeight
from .checks import MATRIX, VECTOR, Expect


def tensors(s, p) -> dict:
    r, d = p.recurrent, s.n_embd
    c, v = _channels(r), r.n_v_heads * r.d_v
    t = {"qkv": ("attn_qkv.weight", Expect((d, c), MATRIX)), "z": ("attn_gate.weight", Expect((d, v), MATRIX)),
         "conv": ("ssm_conv1d.weight", Expect((r.d_conv, c), VECTOR)),
         "a": ("ssm_a", Expect((r.n_v_heads,), VECTOR)), "dt_bias": ("ssm_dt.bias", Expect((r.n_v_heads,), VECTOR)),
         "norm": ("ssm_norm.weight", Expect((r.d_v,), VECTOR)), "o": ("ssm_out.weight", Expect((v, d), MATRIX))}
    if r.fused_ba:
        t["ba"] = ("ssm_ba.weight", Expect((d, 2 * r.n_v_heads), MATRIX))
    else:
        t.update(beta=("ssm_beta.weight", Expect((d, r.n_v_heads), MATRIX)),
                 alpha=("ssm_alpha.weight", Expect((d, r.n_v_heads), MATRIX)))
    return t


def prepare(p, mix: dict) -> dict:
    """After loading: a fused ssm_ba split into beta and alpha, each in value-head order (a row copy)."""
    if "ba" not in mix:
        return mix
    w, r = mix.pop("ba"), p.recurrent
    per = r.n_v_heads // r.n_k_heads
    rows = np.arange(2 * r.n_v_heads).reshape(r.n_k_heads, 2, per)  # [key head, b | a, its value heads]
    raw = w.raw.reshape(w.m, w.row_bytes)
    for name, part in (("beta", 0), ("alpha", 1)):
        mix[name] = QWeight(np.ascontiguousarray(raw[rows[:, part].reshape(-1)]).reshape(-1), w.qtype, r.n_v_heads, w.k)
    return mix


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
