"""numpy references for the K-quant matmul tiles (csrc/qk.c): each format decoded from its definition
(signed integer values, per-sub-block integer scales), then the canonical sequence of csrc/qk.h. numpy's
float32 elementwise operations are IEEE-exact, so the C paths must match these results with ==."""
import numpy as np

from . import reference

QK_K = 256
TYPE_IDS = {"Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}
BLOCK_BYTES = {"Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210}

_U8 = np.uint8
_F32 = np.float32


def _f16(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view(np.float16)[..., 0].astype(_F32)


def _shifted(b: np.ndarray, shifts) -> np.ndarray:
    """b [..., n, 32] -> [..., n, len(shifts), 32]: b >> each shift"""
    return b[..., None, :] >> np.asarray(shifts, dtype=_U8)[:, None]


def _scales_6bit_q4k(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p [..., 12] -> (scales [..., 8], mins [..., 8]) of 6 bits each"""
    lo, mid, hi = p[..., 0:4], p[..., 4:8], p[..., 8:12]
    sc = np.concatenate([lo & 63, (hi & 15) | ((lo >> 6) << 4)], axis=-1)
    mn = np.concatenate([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], axis=-1)
    return sc.astype(np.int64), mn.astype(np.int64)


def _two_bit_values(qs: np.ndarray) -> np.ndarray:
    """qs [..., 64] -> [..., 256]: value half*128 + j*32 + l is bits 2j of qs[half*32 + l]"""
    lead = qs.shape[:-1]
    return (_shifted(qs.reshape(*lead, 2, 32), [0, 2, 4, 6]) & 3).reshape(*lead, QK_K).astype(np.int64)


def _nibble_values(qs: np.ndarray) -> np.ndarray:
    """qs [..., 128] -> [..., 256]: value g*64 + h*32 + l is nibble h of qs[g*32 + l]"""
    lead = qs.shape[:-1]
    return (_shifted(qs.reshape(*lead, 4, 32), [0, 4]) & 15).reshape(*lead, QK_K).astype(np.int64)


def _bit_planes(qh: np.ndarray) -> np.ndarray:
    """qh [..., 32] -> [..., 256]: bit n // 32 of qh[n % 32]"""
    lead = qh.shape[:-1]
    return (_shifted(qh, list(range(8))) & 1).reshape(*lead, QK_K).astype(np.int64)


def decode(name: str, blocks: np.ndarray) -> dict:
    """blocks [..., BLOCK_BYTES] -> values [..., 256] (signed integers), scales and mins per sub-block
    ([..., 16] for Q2_K/Q3_K/Q6_K, [..., 8] for Q4_K/Q5_K; mins absent without dmin), d and dmin [...]."""
    b = blocks
    if name == "Q2_K":
        sc = b[..., :16]
        return dict(values=_two_bit_values(b[..., 16:80]), scales=(sc & 15).astype(np.int64),
                    mins=(sc >> 4).astype(np.int64), d=_f16(b[..., 80:82]), dmin=_f16(b[..., 82:84]))
    if name == "Q3_K":
        p = b[..., 96:108]
        low = np.concatenate([p[..., :8] & 15, p[..., :8] >> 4], axis=-1)
        high = (p[..., None, 8:12] >> np.array([0, 2, 4, 6], dtype=_U8)[:, None]) & 3  # [..., h // 4, h % 4]
        scales = (low | high.reshape(*p.shape[:-1], 16) << 4).astype(np.int64) - 32
        values = _two_bit_values(b[..., 32:96]) - 4 * (1 - _bit_planes(b[..., :32]))
        return dict(values=values, scales=scales, d=_f16(b[..., 108:110]))
    if name in ("Q4_K", "Q5_K"):
        sc, mn = _scales_6bit_q4k(b[..., 4:16])
        values = _nibble_values(b[..., 16:144]) if name == "Q4_K" else \
            _nibble_values(b[..., 48:176]) + 16 * _bit_planes(b[..., 16:48])
        return dict(values=values, scales=sc, mins=mn, d=_f16(b[..., 0:2]), dmin=_f16(b[..., 2:4]))
    if name == "Q6_K":
        lead = b.shape[:-1]
        ql = b[..., :128].reshape(*lead, 2, 2, 32)  # [half, j % 2, l]
        lo = (ql[..., None, :, :] >> np.array([0, 4], dtype=_U8)[:, None, None]) & 15  # [half, j // 2, j % 2, l]
        hi = _shifted(b[..., 128:192].reshape(*lead, 2, 32), [0, 2, 4, 6]) & 3  # [half, j, l]
        values = (lo.reshape(*lead, 2, 4, 32) | hi << 4).reshape(*lead, QK_K).astype(np.int64) - 32
        return dict(values=values, scales=b[..., 192:208].view(np.int8).astype(np.int64), d=_f16(b[..., 208:210]))
    raise ValueError(f"not a K-quant format: {name}")


def quantize_act(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The K-quants' activation form (matmul.h, bs = 256): x [n, k] float32 -> q [n, k] int8,
    d [n, k/256] float32, s16 [n, k/16] int32."""
    return reference.quantize_act(np.ascontiguousarray(x, dtype=_F32), QK_K)


def _integer_parts(name: str, dec: dict, q: np.ndarray, s16: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """-> raw [n, m, k/256] and corr [n, m, k/256] (None without dmin) as int64: qk.h's per super-block
    integers (for Q3_K and Q6_K raw - corr, the dot with the signed values)"""
    m, n, k = dec["values"].shape[0], q.shape[0], q.shape[1]
    per = 32 if name in ("Q4_K", "Q5_K") else 16  # values per integer scale
    vals = dec["values"].reshape(m, k // per, per)
    dots = np.einsum("tgi,rgi->trg", q.reshape(n, k // per, per).astype(np.int64), vals)
    isum = (dots * dec["scales"].reshape(1, m, k // per)).reshape(n, m, k // QK_K, -1).sum(-1)
    if "mins" not in dec:
        return isum, None
    sx = s16.astype(np.int64).reshape(n, k // per, per // 16).sum(-1)  # activation sum per scale group
    imin = (dec["mins"].reshape(1, m, k // per) * sx[:, None, :]).reshape(n, m, k // QK_K, -1).sum(-1)
    return isum, imin


def matmul(name: str, w: np.ndarray, q: np.ndarray, d: np.ndarray, s16: np.ndarray) -> np.ndarray:
    """w [m, row_bytes] uint8 rows of a K-quant matrix; q, d, s16 from quantize_act -> y [n, m] float32."""
    m, (n, k) = w.shape[0], q.shape
    dec = decode(name, np.ascontiguousarray(w).reshape(m, k // QK_K, BLOCK_BYTES[name]))
    isum, imin = _integer_parts(name, dec, q, s16)
    acc = np.zeros((n, m), dtype=_F32)
    for s in range(k // QK_K):
        dx = d[:, s, None]
        ddx = dec["d"][None, :, s] * dx
        if imin is None:  # acc = acc + (d * dx) * (float)(raw - corr)
            acc = acc + ddx * isum[:, :, s].astype(_F32)
        else:  # acc = acc + ((d * dx) * (float)raw - (dmin * dx) * (float)corr)
            acc = acc + (ddx * isum[:, :, s].astype(_F32) - (dec["dmin"][None, :, s] * dx) * imin[:, :, s].astype(_F32))
    return acc
