"""numpy references of the matmul kernels, written as the same canonical float sequences as the C code
(csrc/q32.h, csrc/qfloat.c). numpy float32 elementwise ops are plain IEEE operations, so the C results
must equal these exactly. Slow by design: for tests only."""
import numpy as np

from ..gguf import QUANT_TYPES, QuantType

F32 = np.float32
# name -> (bytes per block, offset of qh or None, offset of qs, has a min, integer offset)
Q32_LAYOUT = {"Q4_0": (18, None, 2, False, 8), "Q4_1": (20, None, 4, True, 0),
              "Q5_0": (22, 2, 6, False, 16), "Q5_1": (24, 4, 8, True, 0), "Q8_0": (34, None, 2, False, 0)}


def quantize_act(x: np.ndarray, bs: int = 32):
    """x: float32 [n, k] -> q int8 [n, k], d float32 [n, k/bs], s16 int32 [n, k/16] (matmul.h; bs 256 for
    the K-quants)."""
    n, k = x.shape
    xb = x.reshape(n, k // bs, bs)
    d = np.abs(xb).max(axis=2) / F32(127)
    inv = np.divide(F32(1), d, out=np.zeros_like(d), where=d != 0)
    q = np.rint(xb * inv[..., None]).astype(np.int8).reshape(n, k)
    return q, d, q.reshape(n, k // 16, 16).sum(axis=2, dtype=np.int32)


def decode_q32(raw: np.ndarray, name: str, m: int, k: int):
    """Block bytes [m rows] -> integer values int32 [m, k/32, 32], dw and mw float32 [m, k/32] (mw None
    for formats without a min). Values are signed (offset removed) or unsigned for Q4_1/Q5_1."""
    size, qh_at, qs_at, has_min, offset = Q32_LAYOUT[name]
    blocks = raw.reshape(m, k // 32, size)
    dw = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(F32)
    mw = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(F32) if has_min else None
    if name == "Q8_0":
        return blocks[..., 2:].view(np.int8).astype(np.int32), dw, mw
    qs = blocks[..., qs_at:qs_at + 16].astype(np.int32)
    v = np.concatenate([qs & 15, qs >> 4], axis=-1)
    if qh_at is not None:
        qh = blocks[..., qh_at:qh_at + 4].copy().view("<u4").astype(np.int64)  # [m, nb, 1]
        v |= (((qh >> np.arange(32)) & 1) << 4).astype(np.int32)
    return v - offset, dw, mw


def matmul_q32(x: np.ndarray, raw: np.ndarray, name: str, m: int) -> np.ndarray:
    """x float32 [n, k] . w[m, k]^T for a 32-block format, the sequence of csrc/q32.h -> float32 [n, m]."""
    n, k = x.shape
    q, dx, s16 = quantize_act(x)
    v, dw, mw = decode_q32(raw, name, m, k)
    isum = np.einsum("tbj,rbj->trb", q.reshape(n, k // 32, 32).astype(np.int64), v.astype(np.int64))
    isum = isum.astype(np.int32).astype(F32)
    sx = (s16[:, 0::2] + s16[:, 1::2]).astype(F32)  # [n, nb]
    acc = np.zeros((n, m), F32)
    for b in range(k // 32):
        c = (dw[None, :, b] * dx[:, None, b]) * isum[:, :, b]
        if mw is not None:
            c = c + (mw[None, :, b] * dx[:, None, b]) * sx[:, None, b]
        acc = acc + c
    return acc


def float_rows(raw: np.ndarray, name: str, m: int, k: int) -> np.ndarray:
    """F32 / F16 / BF16 rows -> float32 [m, k] (exact)."""
    if name == "F32":
        return raw.view(F32).reshape(m, k)
    if name == "F16":
        return raw.view(np.float16).reshape(m, k).astype(F32)
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(F32).reshape(m, k)


def matmul_float(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x float32 [n, k] . w float32 [m, k]^T with 8 lane accumulators and the fixed tree (csrc/qfloat.c)."""
    n, k = x.shape
    lanes = np.zeros((n, w.shape[0], 8), F32)
    for i in range(0, k, 8):
        j = min(8, k - i)
        lanes[:, :, :j] = lanes[:, :, :j] + w[None, :, i:i + j] * x[:, None, i:i + j]
    l = [lanes[:, :, j] for j in range(8)]
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))


def matmul(x: np.ndarray, raw: np.ndarray, qtype: QuantType | int, m: int) -> np.ndarray:
    """Reference for kernels.matmul on a weight given as raw block bytes of m rows."""
    name = (QUANT_TYPES[qtype] if isinstance(qtype, int) else qtype).name
    if name in Q32_LAYOUT:
        return matmul_q32(x, raw, name, m)
    if name not in ("F32", "F16", "BF16"):
        raise ValueError(f"no reference here for {name} (K-quants: reference_qk)")
    return matmul_float(x, float_rows(raw, name, m, x.shape[1]))
