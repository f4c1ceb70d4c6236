"""numpy references for ops.py, in the same canonical order. Transcendentals (exp, tanh, cos) go through
numpy rather than C's libm, so those results are compared with a tolerance; the rest matches with ==."""
import numpy as np


def lanes_sum(terms: np.ndarray) -> np.ndarray:
    """Canonical 8-lane reduction of terms [..., d] (lanes.h), float32."""
    d = terms.shape[-1]
    pad = np.zeros(terms.shape[:-1] + (-d % 8,), np.float32)
    chunks = np.concatenate([terms.astype(np.float32), pad], axis=-1).reshape(terms.shape[:-1] + (-1, 8))
    lanes = np.zeros(terms.shape[:-1] + (8,), np.float32)
    for c in range(chunks.shape[-2]):
        lanes = lanes + chunks[..., c, :]
    l = [lanes[..., j] for j in range(8)]
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    ss = lanes_sum(x * x)
    scale = np.float32(1.0) / np.sqrt(ss / np.float32(x.shape[-1]) + np.float32(eps))
    return (x * scale[..., None]) * w


def rope(x: np.ndarray, pos: np.ndarray, n_rot: int, base: float, neox: bool) -> np.ndarray:
    x = x.copy()
    half = n_rot // 2
    theta = pos[:, None].astype(np.float64) * float(base) ** (-2.0 * np.arange(half) / n_rot)
    cs, sn = np.cos(theta).astype(np.float32)[:, None], np.sin(theta).astype(np.float32)[:, None]
    a = np.arange(half) if neox else 2 * np.arange(half)
    b = a + half if neox else a + 1
    x0, x1 = x[..., a].copy(), x[..., b].copy()
    x[..., a] = x0 * cs - x1 * sn
    x[..., b] = x0 * sn + x1 * cs
    return x


def gated_act(gate: np.ndarray, up: np.ndarray, act: str) -> np.ndarray:
    g = gate.astype(np.float32)
    if act == "none":
        return g * up
    if act == "sigmoid":
        with np.errstate(over="ignore"):  # exp(-g) = inf for g far below 0: the sigmoid is 0 there
            return (np.float32(1) / (np.float32(1) + np.exp(-g))) * up
    if act == "relu_sqr":
        r = np.maximum(g, np.float32(0))
        return (r * r) * up
    if act == "silu":
        a = g / (np.float32(1) + np.exp(-g))
    else:
        c = np.float32(0.7978845608028654)
        a = (np.float32(0.5) * g) * (np.float32(1) + np.tanh(c * (g + (np.float32(0.044715) * g) * (g * g))))
    return a * up


def attention(q, k_pos_major, v_pos_major, tok_pos, scale, window=0, softcap=0.0):
    """q [n, h, d]; k/v [n_ctx, n_kv_head, d] f16 in position order for one sequence."""
    n, n_head, d = q.shape
    group = n_head // k_pos_major.shape[1]
    out = np.empty_like(q)
    k32, v32 = k_pos_major.astype(np.float32), v_pos_major.astype(np.float32)
    for t in range(n):
        p = int(tok_pos[t])
        lo = max(0, p - window + 1) if window else 0
        for h in range(n_head):
            k, v = k32[lo:p + 1, h // group], v32[lo:p + 1, h // group]
            s = lanes_sum(q[t, h][None, :] * k) * np.float32(scale)
            if softcap:
                s = np.float32(softcap) * np.tanh(s / np.float32(softcap))
            e = np.exp(s - s.max())
            o = np.zeros(d, np.float32)
            for j in range(len(e)):
                o = o + e[j] * v[j]
            out[t, h] = o / np.float32(np.cumsum(e, dtype=np.float32)[-1])
    return out


def q8_heads(x: np.ndarray) -> np.ndarray:
    """KV q8 storage of x [..., d] (d % 32 == 0): per 32 values float32 d = amax/127 then int8
    rint(x * (1/d)) -> uint8 [..., d/32*36]."""
    blocks = x.reshape(x.shape[:-1] + (-1, 32)).astype(np.float32)
    d = np.abs(blocks).max(axis=-1) / np.float32(127)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0)).astype(np.float32)
    q = np.rint(blocks * inv[..., None]).astype(np.int8)
    out = np.concatenate([d[..., None].view(np.uint8).reshape(d.shape + (4,)), q.view(np.uint8)], axis=-1)
    return out.reshape(x.shape[:-1] + (-1,))


def q8_values(raw: np.ndarray, d: int) -> np.ndarray:
    """Inverse view of q8_heads: uint8 [..., d/32*36] -> float32 [..., d] (d * q)."""
    blocks = raw.reshape(raw.shape[:-1] + (d // 32, 36))
    scale = blocks[..., :4].copy().view(np.float32)
    q = blocks[..., 4:].view(np.int8).astype(np.float32)
    return (scale * q).reshape(raw.shape[:-1] + (d,))
