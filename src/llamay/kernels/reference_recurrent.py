"""numpy references for the recurrent ops (builder.py conv, ssm_scan, delta_rule): one sequence at a time,
token by token, in the C kernels' operation order, so float32 results match them with ==."""
import numpy as np


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


def ssm_scan(xbc: np.ndarray, dt: np.ndarray, a: np.ndarray, d: np.ndarray, dt_bias: np.ndarray,
             state: np.ndarray, n_group: int) -> np.ndarray:
    """One sequence's Mamba2 selective scan: xbc [n, H P + 2 G N] (x, B, C), dt [n, H] raw, a, d, dt_bias
    [H], state [H, P, N] (updated in place) -> y [n, H P]. float32 throughout; numpy's exp and log1p may
    differ from C's expf and log1pf in the last bit."""
    H, P, N = state.shape
    rep = H // n_group
    y = np.zeros((len(xbc), H * P), np.float32)
    for t in range(len(xbc)):
        x = xbc[t, :H * P].reshape(H, P)
        B = np.repeat(xbc[t, H * P:H * P + n_group * N].reshape(n_group, N), rep, axis=0)  # [H, N]
        C = np.repeat(xbc[t, H * P + n_group * N:].reshape(n_group, N), rep, axis=0)
        v = dt[t] + dt_bias
        sp = np.where(v > np.float32(20), v, np.log1p(np.exp(np.minimum(v, np.float32(20))))).astype(np.float32)
        dA = np.exp(sp * a)
        xdt = x * sp[:, None]  # [H, P]
        acc = np.zeros((H, P), np.float32)
        for i in range(N):
            state[:, :, i] = state[:, :, i] * dA[:, None] + B[:, None, i] * xdt
            acc = acc + state[:, :, i] * C[:, None, i]
        y[t] = (acc + d[:, None] * x).reshape(-1)
    return y
