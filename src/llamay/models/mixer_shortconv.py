"""LFM2's short convolution (ref: HF Lfm2ShortConv; llama.cpp's lfm2 graph): in_proj gives B, C and x
[n, d] each (its rows in that order); y = C * conv(B * x), the convolution over the last d_conv values of
B * x of the token's sequence. Its state per slot: those last d_conv - 1 values [d_conv - 1, d]."""
from __future__ import annotations

from .checks import MATRIX, VECTOR, Expect


def tensors(s, p) -> dict:
    d, k = s.n_embd, p.recurrent.d_conv
    return {"in_proj": ("shortconv.in_proj.weight", Expect((d, 3 * d), MATRIX)),
            "conv": ("shortconv.conv.weight", Expect((k, d), VECTOR)),
            "o": ("shortconv.out_proj.weight", Expect((d, d), MATRIX))}


def state_shapes(s, p) -> tuple:
    return ((p.recurrent.d_conv - 1, s.n_embd),)


def build(b, batch, states, p, L, inp, mm):
    w = L.mix["in_proj"]
    d = w.m // 3
    bx, c, x = (b.matmul(inp, w.rows(i * d, (i + 1) * d)) for i in range(3))
    b.gated(bx, x, "none")
    y = b.conv(bx, L.mix["conv"], states[0], batch, out=bx)
    return b.gated(y, c, "none")
