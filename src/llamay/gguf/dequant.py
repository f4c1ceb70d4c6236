"""numpy dequantization of GGML block formats to float32, bit for bit equal to gguf-py's.

Each format is a function of `blocks` [n_blocks, type_size] uint8 -> [n_blocks, block_size] float32.
Equality with the references needs the same float operations in the same order: the f16 scale is
widened to f32, multiplied by the sub-block scale, then by the quant, then the min is subtracted;
numpy never fuses a multiply-add.
ref: ggml/src/ggml-common.h (block layouts), ggml/src/ggml-quants.c (dequantize_row_*)
"""
from __future__ import annotations

import numpy as np

from .errors import GGUFError
from .quant_types import QUANT_TYPES, QuantType

QK_K = 256
CHUNK_ELEMENTS = 1 << 17  # per step: keeps the temporaries in cache (measured 1.5-2x faster than 1 << 22)


def _f16(b: np.ndarray) -> np.ndarray:
    """[n, 2] uint8 -> [n, 1] float32."""
    return b.view("<f2").astype(np.float32)


def _bits(x: np.ndarray, width: int, count: int) -> np.ndarray:
    """x [..., L] uint8 -> [..., count, L]: field i holds bits [width*i, width*(i+1)) of each byte."""
    shifts = np.arange(0, width * count, width, dtype=np.uint8).reshape(count, 1)
    return (x[..., None, :] >> shifts) & np.uint8((1 << width) - 1)


def _scaled(d, sc, q, dmin=None, m=None) -> np.ndarray:
    """(d * sc) * q [- dmin * m] per sub-block. d, dmin [n, 1]; sc, m [n, n_sub]; q [n, n_sub, len]."""
    y = (d * sc.astype(np.float32))[..., None] * q.astype(np.float32)
    if dmin is not None:
        y -= (dmin * m.astype(np.float32))[..., None]
    return y.reshape(len(q), -1)


def _scale_min_k4(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: 12 bytes -> 8 six-bit scales and 8 six-bit mins, each [n, 8].
    Bytes 0-3 / 4-7 hold scales / mins 0-3 in their low 6 bits and the top 2 bits of 4-7;
    bytes 8-11 hold the low 4 bits of scales 4-7 (low nibble) and mins 4-7 (high nibble)."""
    lo_sc, lo_m, hi = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = np.concatenate([lo_sc & 63, (hi & 15) | ((lo_sc >> 6) << 4)], axis=1)
    m = np.concatenate([lo_m & 63, (hi >> 4) | ((lo_m >> 6) << 4)], axis=1)
    return sc, m


def _scales_q3k(s: np.ndarray) -> np.ndarray:
    """Q3_K: 12 bytes -> 16 six-bit scales minus 32, [n, 16]. Scale i has its low 4 bits in
    nibble i // 8 of byte i % 8, its high 2 bits in field i // 4 of byte 8 + i % 4."""
    lo = _bits(s[:, 0:8], 4, 2).reshape(-1, 16)
    hi = _bits(s[:, 8:12], 2, 4).reshape(-1, 16)
    return (lo | (hi << 4)).astype(np.int8) - np.int8(32)


def _q4_0(b):  # d f16 | qs[16]: element j low nibble, j + 16 high nibble
    q = _bits(b[:, 2:], 4, 2).reshape(-1, 32).astype(np.int8) - np.int8(8)
    return _f16(b[:, 0:2]) * q.astype(np.float32)


def _q4_1(b):  # d f16 | m f16 | qs[16]
    q = _bits(b[:, 4:], 4, 2).reshape(-1, 32).astype(np.float32)
    return _f16(b[:, 0:2]) * q + _f16(b[:, 2:4])


def _q5(qh: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """5-bit quants [n, 32]: bit j of the little-endian u32 qh is the fifth bit of element j."""
    high = np.unpackbits(qh, axis=1, bitorder="little")
    return _bits(qs, 4, 2).reshape(-1, 32) | (high << 4)


def _q5_0(b):  # d f16 | qh u32 | qs[16]
    q = _q5(b[:, 2:6], b[:, 6:]).astype(np.int8) - np.int8(16)
    return _f16(b[:, 0:2]) * q.astype(np.float32)


def _q5_1(b):  # d f16 | m f16 | qh u32 | qs[16]
    q = _q5(b[:, 4:8], b[:, 8:]).astype(np.float32)
    return _f16(b[:, 0:2]) * q + _f16(b[:, 2:4])


def _q8_0(b):  # d f16 | qs int8[32]
    return b[:, 2:].view(np.int8).astype(np.float32) * _f16(b[:, 0:2])


def _q2_k(b):  # scales[16] (low nibble scale, high nibble min) | qs[64] | d f16 | dmin f16
    # element 128 * h + 32 * j + l = bits 2j of qs[32 * h + l]; 16 sub-blocks of 16
    q = _bits(b[:, 16:80].reshape(-1, 2, 32), 2, 4).reshape(-1, 16, 16)
    sc = b[:, 0:16]
    return _scaled(_f16(b[:, 80:82]), sc & 15, q, _f16(b[:, 82:84]), sc >> 4)


def _q3_k(b):  # hmask[32] | qs[64] | scales[12] | d f16
    # element 128 * h + 32 * j + l: low 2 bits = bits 2j of qs[32 * h + l], high bit = bit 4h + j of
    # hmask[l]; a clear high bit means minus 4
    low = _bits(b[:, 32:96].reshape(-1, 2, 32), 2, 4).reshape(-1, 16, 16)
    high = _bits(b[:, 0:32], 1, 8).reshape(-1, 16, 16)
    q = low.astype(np.int8) - ((high ^ np.uint8(1)) << 2).astype(np.int8)
    return _scaled(_f16(b[:, 108:110]), _scales_q3k(b[:, 96:108]), q)


def _q4_k(b):  # d f16 | dmin f16 | scales[12] | qs[128]
    # element 64 * j + 32 * h + l = nibble h of qs[32 * j + l]; 8 sub-blocks of 32
    q = _bits(b[:, 16:].reshape(-1, 4, 32), 4, 2).reshape(-1, 8, 32)
    sc, m = _scale_min_k4(b[:, 4:16])
    return _scaled(_f16(b[:, 0:2]), sc, q, _f16(b[:, 2:4]), m)


def _q5_k(b):  # d f16 | dmin f16 | scales[12] | qh[32] | qs[128]
    # as Q4_K, plus the fifth bit of element 32 * s + l = bit s of qh[l]
    low = _bits(b[:, 48:].reshape(-1, 4, 32), 4, 2).reshape(-1, 8, 32)
    q = low | (_bits(b[:, 16:48], 1, 8) << 4)
    sc, m = _scale_min_k4(b[:, 4:16])
    return _scaled(_f16(b[:, 0:2]), sc, q, _f16(b[:, 2:4]), m)


def _q6_k(b):  # ql[128] | qh[64] | scales int8[16] | d f16
    # element 128 * h + 32 * j + l: low 4 bits = nibble j // 2 of ql[64 * h + 32 * (j % 2) + l],
    # high 2 bits = bits 2j of qh[32 * h + l]; minus 32
    low = _bits(b[:, 0:128].reshape(-1, 2, 64), 4, 2).reshape(-1, 2, 4, 32)
    high = _bits(b[:, 128:192].reshape(-1, 2, 32), 2, 4)
    q = ((low | (high << 4)).astype(np.int8) - np.int8(32)).reshape(-1, 16, 16)
    return _scaled(_f16(b[:, 208:210]), b[:, 192:208].view(np.int8), q)


_KV_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)
_KV_MXFP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)  # e2m1 values doubled


def _lut(qs: np.ndarray, kv: np.ndarray) -> np.ndarray:
    """qs [n, 16 m] -> table values [n, 32 m] as float32: per 16 bytes, 16 low nibbles then 16 high."""
    return kv[_bits(qs.reshape(len(qs), -1, 16), 4, 2).reshape(len(qs), -1)].astype(np.float32)


def _iq4_nl(b):  # d f16 | qs[16], values from the IQ4_NL table
    return _f16(b[:, 0:2]) * _lut(b[:, 2:], _KV_IQ4NL)


def _iq4_xs(b):  # d f16 | scales_h u16 | scales_l[4] | qs[128]: 8 blocks of 32 with 6-bit scales - 32
    lo = _bits(b[:, 4:8], 4, 2).transpose(0, 2, 1).reshape(-1, 8)
    hi = (b[:, 2:4].view("<u2").astype(np.uint16) >> np.arange(0, 16, 2, dtype=np.uint16)) & np.uint16(3)
    ls = (lo | (hi.astype(np.uint8) << np.uint8(4))).astype(np.int8) - np.int8(32)
    dl = _f16(b[:, 0:2]) * ls.astype(np.float32)  # [n, 8]
    return (dl[..., None] * _lut(b[:, 8:], _KV_IQ4NL).reshape(-1, 8, 32)).reshape(len(b), -1)


def _mxfp4(b):  # e u8 (2^(e - 128), ggml's e8m0 "half") | qs[16], values from the e2m1 table doubled
    e = b[:, 0:1].astype(np.uint32)
    d = np.where(e < 2, np.uint32(0x00200000) << e, (e - np.uint32(1)) << np.uint32(23)).view(np.float32)
    return d * _lut(b[:, 1:], _KV_MXFP4)


def _tq1_0(b):  # qs[48] (5 trits per byte: 32 bytes x 5, then 16 x 5) | qh[4] (4 trits each) | d f16
    def trits(x: np.ndarray, n: int) -> np.ndarray:  # byte * 3^i (mod 256), its top trit: (q * 3) >> 8
        q = x[:, None, :] * (np.uint8(3) ** np.arange(n, dtype=np.uint8)).reshape(1, n, 1)
        return ((q.astype(np.uint16) * 3) >> 8).reshape(len(x), -1)
    t = np.concatenate([trits(b[:, 0:32], 5), trits(b[:, 32:48], 5), trits(b[:, 48:52], 4)], axis=1)
    return _f16(b[:, 52:54]) * (t.astype(np.int8) - np.int8(1)).astype(np.float32)


def _tq2_0(b):  # qs[64]: element 128 g + 32 l + m is bits 2l, 2l + 1 of byte 32 g + m, minus 1 | d f16
    q = _bits(b[:, 0:64].reshape(-1, 2, 32), 2, 4).reshape(len(b), -1)
    return _f16(b[:, 64:66]) * (q.astype(np.int8) - np.int8(1)).astype(np.float32)


_BLOCK_FORMATS = {"Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q8_0": _q8_0,
                  "Q2_K": _q2_k, "Q3_K": _q3_k, "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k,
                  "IQ4_NL": _iq4_nl, "IQ4_XS": _iq4_xs, "MXFP4": _mxfp4, "TQ1_0": _tq1_0, "TQ2_0": _tq2_0}
_FLOAT_FORMATS = {
    "F32": lambda raw: raw.view("<f4").copy(),
    "F16": lambda raw: raw.view("<f2").astype(np.float32),
    "BF16": lambda raw: (raw.view("<u2").astype(np.uint32) << 16).view(np.float32),
}
SUPPORTED = tuple(_FLOAT_FORMATS) + tuple(_BLOCK_FORMATS)


def _qtype(qtype: QuantType | int) -> QuantType:
    qt = qtype if isinstance(qtype, QuantType) else QUANT_TYPES.get(int(qtype))
    if qt is None:
        raise GGUFError(f"dequantize: unknown tensor type id {qtype}")
    if qt.name not in SUPPORTED:
        raise GGUFError(f"dequantize: type {qt.name} is not supported (supported: {', '.join(SUPPORTED)})")
    return qt


def dequantize(raw: np.ndarray, qtype: QuantType | int, shape) -> np.ndarray:
    """Block bytes of a tensor of GGUF `shape` (shape[0] is the row length) -> float32 array
    shaped in row-major order, i.e. tuple(reversed(shape)). `raw` is not modified."""
    qt = _qtype(qtype)
    shape = tuple(int(d) for d in shape)
    n = int(np.prod(shape, dtype=np.int64))
    row = shape[0] if shape else 1
    if row % qt.block_size:
        raise GGUFError(f"dequantize: row of {row} is not a multiple of {qt.name} blocks of {qt.block_size}")
    if raw.dtype != np.uint8:
        raise TypeError(f"dequantize: raw must be uint8 block bytes, got {raw.dtype}")
    raw = np.ascontiguousarray(raw).reshape(-1)
    if raw.size != n // qt.block_size * qt.type_size:
        raise GGUFError(f"dequantize: {raw.size} bytes do not hold {qt.name} of shape {shape}")
    if qt.name in _FLOAT_FORMATS:
        out = _FLOAT_FORMATS[qt.name](raw)
    else:
        out = _dequantize_blocks(raw.reshape(-1, qt.type_size), qt)
    return out.reshape(tuple(reversed(shape)))


def _dequantize_blocks(blocks: np.ndarray, qt: QuantType) -> np.ndarray:
    fn, out = _BLOCK_FORMATS[qt.name], np.empty((len(blocks), qt.block_size), np.float32)
    step = max(1, CHUNK_ELEMENTS // qt.block_size)
    with np.errstate(invalid="ignore"):  # a NaN or inf scale gives NaN/inf values, as in ggml
        for start in range(0, len(blocks), step):
            out[start:start + step] = fn(blocks[start:start + step])
    return out


def dequantize_tensor(reader, name: str) -> np.ndarray:
    """Tensor `name` of an open GGUFReader as float32, shaped in row-major order."""
    t = reader.tensors[name]
    return dequantize(reader.data(name), t.qtype, t.shape)
