"""Mamba's (Mamba1's) mixer (ref: HF MambaMixer.slow_forward, FalconMambaMixer, JambaMambaMixer; llama.cpp's
build_mamba_layer), for the GGUF architectures mamba (Mamba, Falcon-Mamba) and jamba (beside attention).
Per layer (GGUF shapes as numpy's, rows first):

    ssm_in.weight      [2 d_inner, n_embd]          rows: x, then z
    ssm_conv1d.weight  [d_inner, d_conv]            ssm_conv1d.bias [d_inner]
    ssm_x.weight       [dt_rank + 2 d_state, d_inner]  rows: dt's low rank, B, C
    ssm_dt.weight      [d_inner, dt_rank]           ssm_dt.bias [d_inner]
    ssm_a              [d_inner, d_state] (A = -exp(A_log), by the converter)     ssm_d [d_inner]
    ssm_out.weight     [n_embd, d_inner]
    jamba: ssm_dt_norm.weight [dt_rank], ssm_b_norm.weight, ssm_c_norm.weight [d_state]

    x = SiLU(conv(x) + bias); dt, B, C = x_proj(x), each RMS-normed when the file says so (Falcon-Mamba's
    ssm.dt_b_c_rms: without weights; Jamba: with its three); y = scan(x, B, C, dt_proj(dt)) (graph.h SSM_SCAN
    with one A per channel and state: softplus(dt + dt_bias), D x added); y * SiLU(z)

Its state per slot: the conv's last d_conv - 1 rows of x [d_conv - 1, d_inner] and the scan's [d_state,
d_inner] (graph.h SSM_SCAN: a vector takes several channels at once). The norms' eps is the model's RMS eps, as llama.cpp (HF Falcon-Mamba has its own mixer_rms_eps)."""
from __future__ import annotations

import numpy as np

from .checks import MATRIX, VECTOR, Expect


def tensors(s, p) -> dict:
    r, d = p.recurrent, s.n_embd
    t = {"in_proj": ("ssm_in.weight", Expect((d, 2 * r.d_inner), MATRIX)),
         "conv": ("ssm_conv1d.weight", Expect((r.d_conv, r.d_inner), VECTOR)),
         "conv_bias": ("ssm_conv1d.bias", Expect((r.d_inner,), VECTOR)),
         "x_proj": ("ssm_x.weight", Expect((r.d_inner, r.dt_rank + 2 * r.d_state), MATRIX)),
         "dt_proj": ("ssm_dt.weight", Expect((r.dt_rank, r.d_inner), MATRIX)),
         "dt_bias": ("ssm_dt.bias", Expect((r.d_inner,), VECTOR)),
         "a": ("ssm_a", Expect((r.d_state, r.d_inner), VECTOR)),
         "d": ("ssm_d", Expect((r.d_inner,), VECTOR)),
         "o": ("ssm_out.weight", Expect((r.d_inner, d), MATRIX))}
    if r.norms == "weights":
        t.update(dt_norm=("ssm_dt_norm.weight", Expect((r.dt_rank,), VECTOR)),
                 b_norm=("ssm_b_norm.weight", Expect((r.d_state,), VECTOR)),
                 c_norm=("ssm_c_norm.weight", Expect((r.d_state,), VECTOR)))
    return t


def state_shapes(s, p) -> tuple:
    r = p.recurrent
    return ((r.d_conv - 1, r.d_inner), (r.d_state, r.d_inner))  # the scan's state i of every channel together


def prepare(p, mix: dict) -> dict:
    """The dt, B and C norms' weights as build reads them: dt's [dt_rank], B's and C's as the two groups of
    one [2, d_state] norm; ones where the norms have no weights (1.0 times a value is that value)."""
    r = p.recurrent
    if r.norms == "rms":
        mix["dt_norm"], mix["bc_norm"] = np.ones(r.dt_rank, np.float32), np.ones((2, r.d_state), np.float32)
    elif r.norms == "weights":
        mix["bc_norm"] = np.stack([mix.pop("b_norm"), mix.pop("c_norm")])
    return mix


def build(b, batch, states, p, L, inp, mm):
    r, m = p.recurrent, L.mix
    w, di, xp = m["in_proj"], r.d_inner, m["x_proj"]
    x, z = b.matmul(inp, w.rows(0, di)), b.matmul(inp, w.rows(di, 2 * di))
    b.conv(x, m["conv"], states[0], batch, bias=m["conv_bias"], out=x)
    b.activation(x, "silu")
    dt, bc = b.matmul(x, xp.rows(0, r.dt_rank)), b.matmul(x, xp.rows(r.dt_rank, r.dt_rank + 2 * r.d_state))
    if "dt_norm" in m:
        b.rmsnorm(dt, m["dt_norm"], p.norms.eps, out=dt)
        b.rmsnorm(bc, m["bc_norm"], p.norms.eps, out=bc)
    dt = b.matmul(dt, m["dt_proj"])
    y = b.ssm_scan(x, dt, m["a"], m["d"], m["dt_bias"], states[1], batch, 1, bc=bc)
    return b.gated(z, y, "silu")  # SiLU(z) * y
