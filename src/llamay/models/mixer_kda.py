"""Kimi's delta attention, KDA (ref: HF KimiLinearDeltaAttention; llama.cpp's kimi-linear graph; tensors and
math in tests/hybrid_kda.py): attn_q, attn_k, attn_v [H dk] each causally convolved (d_conv taps, its own
state) then SiLU; beta = sigmoid(ssm_beta x); a decay per state row exp(A_h softplus(f_b f_a x + dt_bias)),
the delta rule (kernels' delta_rule, planar) over a [dk, dk] state per head; its output RMS-normed per
head times sigmoid(g_b g_a x). State per slot: the three convolutions' last d_conv - 1 inputs [d_conv - 1,
H dk] and the rule's [H, dk, dk]."""
from __future__ import annotations

import numpy as np

from .checks import MATRIX, VECTOR, Expect

L2_EPS = 1e-6  # q's and k's l2 norm (HF's and fla's; llama.cpp takes the RMS eps)


def tensors(s, p) -> dict:
    r, d = p.recurrent, s.n_embd
    c, h, dk = r.n_head * r.head_dim, r.n_head, r.head_dim
    t = {x: (f"attn_{x}.weight", Expect((d, c), MATRIX)) for x in "qkv"}
    t.update({f"conv_{x}": (f"ssm_conv1d_{x}.weight", Expect((r.d_conv, 1, c, 1), VECTOR)) for x in "qkv"})
    t.update(f_a=("ssm_f_a.weight", Expect((d, dk), MATRIX)), f_b=("ssm_f_b.weight", Expect((dk, c), MATRIX)),
             g_a=("ssm_g_a.weight", Expect((d, dk), MATRIX)), g_b=("ssm_g_b.weight", Expect((dk, c), MATRIX)),
             beta=("ssm_beta.weight", Expect((d, h), MATRIX)), a=("ssm_a", Expect((1, h, 1, 1), VECTOR)),
             dt_bias=("ssm_dt.bias", Expect((c,), VECTOR)), norm=("ssm_norm.weight", Expect((dk,), VECTOR)),
             o=("attn_output.weight", Expect((c, d), MATRIX)))
    return t


def prepare(p, mix: dict) -> dict:
    """The convolutions' weights as [H dk, d_conv], A as [H]."""
    for x in "qkv":
        w = mix[f"conv_{x}"]
        mix[f"conv_{x}"] = np.ascontiguousarray(w.reshape(-1, w.shape[-1]))
    mix["a"] = np.ascontiguousarray(mix["a"].reshape(-1))
    return mix


def state_shapes(s, p) -> tuple:
    r = p.recurrent
    conv = (r.d_conv - 1, r.n_head * r.head_dim)
    return conv, conv, conv, (r.n_head, r.head_dim, r.head_dim)


def build(b, batch, states, p, L, inp, mm):
    r, w, n = p.recurrent, L.mix, inp.shape[0]
    h, c = r.n_head, r.n_head * r.head_dim
    qkv = b.tensor(3, n, c)
    for i, x in enumerate("qkv"):
        b.matmul(inp, w[x], out=qkv[i])
        b.activation(b.conv(qkv[i], w[f"conv_{x}"], states[i], batch, out=qkv[i]), "silu")
    ba = b.tensor(n * h * (1 + r.head_dim))  # beta's rows [n, H], then the gate's [n, H dk]
    b.matmul(inp, w["beta"], out=ba[:n * h].reshape(n, h))
    b.matmul(b.matmul(inp, w["f_a"]), w["f_b"], out=ba[n * h:].reshape(n, c))
    y = b.delta_rule(qkv, ba, w["a"], w["dt_bias"], states[3], batch, tiled=False, eps=L2_EPS, planar=True)
    b.rmsnorm(y, w["norm"], p.norms.eps, out=y)
    return b.gated(b.matmul(b.matmul(inp, w["g_a"]), w["g_b"]), y, "sigmoid")
