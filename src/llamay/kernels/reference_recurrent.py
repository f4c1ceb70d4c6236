"""numpy references for the recurrent ops (builder.py conv, ssm_scan, delta_rule): one sequence at a time,
token by token, in the C kernels' operation order, so float32 results match them with == (where they
call exp or log1p, numpy's differ from the C ones in the last bits)."""
import numpy as np

from .reference_ops import lanes_sum


def conv(x: np.ndarray, w: np.ndarray, state: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """One sequence's causal depthwise convolution: x [n, C], w [C, K], state [K - 1, C] (updated in place,
    its last K - 1 inputs) -> y [n, C]."""
    n, K = len(x), w.shape[1]
    y = np.zeros_like(x)
    for t in range(n):
        acc = np.zeros(x.shape[1], np.float32)
        for j in range(K - 1):
            acc = acc + w[:, j] * state[j]
        acc = acc + w[:, K - 1] * x[t]
        if bias is not None:
            acc = acc + bias
        y[t] = acc
        if K > 1:
            state[:-1] = state[1:].copy()
            state[-1] = x[t]
    return y


def delta_rule(qkv: np.ndarray, ba, a: np.ndarray, dt_bias: np.ndarray, state: np.ndarray,
               n_k_heads: int, tiled: bool, eps: float) -> np.ndarray:
    """One sequence's gated delta rule (csrc/graph.h DELTA_RULE): qkv [n, 2 Hk dk + Hv dv] or planes [3, n,
    Hk dk]; ba (b [n, Hv], a [n, Hv], or [n, Hv dk] with dt_bias [Hv dk]: a decay per state row, Kimi's
    KDA); A [Hv]; state [Hv, dk, dv] (updated in place) -> y [n, Hv dv]. exp and log1p are numpy's."""
    hv, dk, dv = state.shape
    hk, f32 = n_k_heads, np.float32
    kh = np.arange(hv) % hk if tiled else np.arange(hv) // (hv // hk)
    planar = qkv.ndim == 3
    n = qkv.shape[1] if planar else len(qkv)
    y = np.zeros((n, hv * dv), f32)
    for t in range(n):
        b, a_t = ba[0][t], ba[1][t]
        if planar:
            q, k, v = qkv[0, t].reshape(hk, dk)[kh], qkv[1, t].reshape(hk, dk)[kh], qkv[2, t].reshape(hv, dv)
        else:
            x = qkv[t]
            q, k = x[:hk * dk].reshape(hk, dk)[kh], x[hk * dk:2 * hk * dk].reshape(hk, dk)[kh]
            v = x[2 * hk * dk:].reshape(hv, dv)
        q = (q * (f32(1) / np.sqrt(lanes_sum(q * q) + f32(eps)))[:, None]) * f32(1 / np.sqrt(dk))
        k = (k * (f32(1) / np.sqrt(lanes_sum(k * k) + f32(eps)))[:, None]) * f32(1)
        beta = f32(1) / (f32(1) + np.exp(-b))
        z = a_t + dt_bias
        softplus = np.where(z > 20, z, np.log1p(np.exp(np.minimum(z, 20))))
        if len(z) == hv:
            state *= np.exp(a * softplus)[:, None, None]
        else:
            state *= np.exp(a[:, None] * softplus.reshape(hv, dk))[:, :, None]
        kv = np.zeros((hv, dv), f32)
        for i in range(dk):
            kv = kv + state[:, i] * k[:, i, None]
        delta = (v - kv) * beta[:, None]
        out = np.zeros((hv, dv), f32)
        for i in range(dk):
            state[:, i] = state[:, i] + k[:, i, None] * delta
            out = out + state[:, i] * q[:, i, None]
        y[t] = out.reshape(-1)
    return y


def ssm_scan(xbc: np.ndarray, dt: np.ndarray, a: np.ndarray, d: np.ndarray, dt_bias: np.ndarray,
             state: np.ndarray, n_group: int, bc: np.ndarray | None = None) -> np.ndarray:
    """One sequence's Mamba selective scan: xbc [n, H P + 2 G N] (x, B, C), or x [n, H P] with bc [n, 2 G N];
    dt [n, H] raw; d, dt_bias [H]; Mamba2: a [H], state [H, P, N]; Mamba1: a [H, N], state [N, H] (P = G =
    1); state updated in place -> y [n, H P]. float32 throughout; numpy's exp and log1p may differ from C's
    exp (mathfn.h ly_exp) and log1pf in the last bit."""
    mamba1 = a.ndim == 2
    H, P, N = (state.shape[1], 1, state.shape[0]) if mamba1 else state.shape
    rep = H // n_group
    bc = xbc[:, H * P:] if bc is None else bc
    y = np.zeros((len(xbc), H * P), np.float32)
    for t in range(len(xbc)):
        v = dt[t] + dt_bias
        sp = np.where(v > np.float32(20), v, np.log1p(np.exp(np.minimum(v, np.float32(20))))).astype(np.float32)
        if mamba1:  # each channel's sum over its states in order
            x, B, C = xbc[t, :H], bc[t, :N], bc[t, N:]
            xdt, acc = x * sp, np.zeros(H, np.float32)
            for i in range(N):
                state[i] = state[i] * np.exp(sp * a[:, i]) + B[i] * xdt
                acc = acc + state[i] * C[i]
            y[t] = acc + d * x
            continue
        x = xbc[t, :H * P].reshape(H, P)
        B = np.repeat(bc[t, :n_group * N].reshape(n_group, N), rep, axis=0)  # [H, N]
        C = np.repeat(bc[t, n_group * N:].reshape(n_group, N), rep, axis=0)
        dA = np.exp(sp * a)
        xdt = x * sp[:, None]  # [H, P]
        state[:] = state * dA[:, None, None] + B[:, None, :] * xdt[:, :, None]
        y[t] = (lanes_sum(state * C[:, None, :]) + d[:, None] * x).reshape(-1)  # the sum over the states
    return y
