"""Mamba2's mixer (ref: HF Mamba2Mixer.torch_forward; llama.cpp's build_mamba2_layer), for the GGUF
architectures mamba2, granitehybrid, nemotron_h and falcon-h1 (beside attention). Per layer, with
d_inner = n_head * head_dim and
conv_dim = d_inner + 2 * n_group * d_state (GGUF shapes as numpy's, rows first):

    ssm_in.weight      [2 d_inner + 2 n_group d_state + n_head, n_embd]  rows: z, then x B C, then dt
    ssm_conv1d.weight  [conv_dim, d_conv]    ssm_conv1d.bias [conv_dim] (optional)
    ssm_dt.bias        [n_head]              ssm_a [n_head, 1] (A = -exp(A_log), by the converter)
    ssm_d              [n_head, 1]           ssm_norm.weight [n_group, d_inner / n_group] (optional)
    ssm_out.weight     [n_embd, d_inner]

    xBC = SiLU(conv(x B C) + bias); y = scan(xBC, dt) (graph.h SSM_SCAN: softplus(dt + dt_bias), D x added)
    y = rmsnorm_per_group(y * SiLU(z)) * ssm_norm   (groups of d_inner / n_group, the model's RMS eps;
                                                     without ssm_norm: y * SiLU(z), Falcon-H1)

Its state per slot: the conv's last d_conv - 1 rows of x B C [d_conv - 1, conv_dim] and the scan's
[n_head, head_dim, d_state]. HF's Nemotron-H clamps softplus(dt) below at time_step_min (1e-3); llama.cpp
does not, and neither do we."""
from __future__ import annotations

from .checks import MATRIX, VECTOR, Expect


def tensors(s, p) -> dict:
    r, d = p.recurrent, s.n_embd
    n_in = 2 * r.d_inner + 2 * r.n_group * r.d_state + r.n_head
    return {"in_proj": ("ssm_in.weight", Expect((d, n_in), MATRIX)),
            "conv": ("ssm_conv1d.weight", Expect((r.d_conv, r.conv_dim), VECTOR)),
            "conv_bias": ("ssm_conv1d.bias", Expect((r.conv_dim,), VECTOR, required=False)),
            "dt_bias": ("ssm_dt.bias", Expect((r.n_head,), VECTOR)),
            "a": ("ssm_a", Expect((1, r.n_head), VECTOR)),
            "d": ("ssm_d", Expect((1, r.n_head), VECTOR)),
            "norm": ("ssm_norm.weight", Expect((r.d_inner // r.n_group, r.n_group), VECTOR, required=False)),
            "o": ("ssm_out.weight", Expect((r.d_inner, d), MATRIX))}


def state_shapes(s, p) -> tuple:
    r = p.recurrent
    return ((r.d_conv - 1, r.conv_dim), (r.n_head, r.head_dim, r.d_state))


def build(b, batch, states, p, L, inp, mm):
    r, m = p.recurrent, L.mix
    w, di, cd = m["in_proj"], r.d_inner, r.conv_dim
    z, xbc, dt = (b.matmul(inp, w.rows(lo, hi)) for lo, hi in ((0, di), (di, di + cd), (di + cd, di + cd + r.n_head)))
    b.conv(xbc, m["conv"], states[0], batch, bias=m.get("conv_bias"), out=xbc)
    b.activation(xbc, "silu")
    y = b.ssm_scan(xbc, dt, m["a"].reshape(-1), m["d"].reshape(-1), m["dt_bias"], states[1], batch, r.n_group)
    g = b.gated(z, y, "silu")  # SiLU(z) * y
    return b.rmsnorm(g, m["norm"], p.norms.eps, out=g) if "norm" in m else g
