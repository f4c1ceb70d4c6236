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
