"""quantize_rows(x, qtype, imatrix=None): float32 rows -> GGML block bytes, byte-identical to ggml's
ggml_quantize_chunk (csrc/quantize.c): its reference quantizers without an importance matrix, its weighted
ones with one (Q8_0, F16 and BF16 ignore it, as in ggml). The bytes do not depend on nthreads."""
import numpy as np

from ..gguf import BY_NAME, QuantType
from . import _lib
from .graph import addr

_lib.declare("ly_quantize_rows", _lib.I32, _lib.P, _lib.I32, _lib.P, _lib.I64, _lib.I64, _lib.P, _lib.I32,
             restype=_lib.I64)

SUPPORTED = ("F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")


def _qtype(qtype: QuantType | str) -> QuantType:
    qt = qtype if isinstance(qtype, QuantType) else BY_NAME.get(str(qtype))
    if qt is None or qt.name not in SUPPORTED:
        raise ValueError(f"quantize_rows: unsupported type {getattr(qtype, 'name', qtype)!r} "
                         f"(supported: {', '.join(SUPPORTED)})")
    return qt


_SOURCES = {np.dtype("<f4"): 0, np.dtype("<f2"): 1, np.dtype("<u2"): 30}  # F32, F16, BF16 bits


def _imatrix(imatrix, n_per_row: int) -> np.ndarray:
    """The importance matrix as C-contiguous float32 [n_per_row]: a real array of that shape (other float
    or integer dtypes are cast to float32), every value finite after the cast."""
    w = np.asarray(imatrix)
    if w.dtype.kind not in "fiu" or w.shape != (n_per_row,):
        raise ValueError(f"quantize_rows: imatrix must be a real array of shape ({n_per_row},), "
                         f"got {w.dtype} {w.shape}")
    with np.errstate(over="ignore", invalid="ignore"):  # a float64 beyond float32 becomes inf: refused below
        w = np.ascontiguousarray(w, dtype=np.float32)
    if not np.isfinite(w).all():
        raise ValueError("quantize_rows: imatrix has non-finite values")
    return w


def quantize_rows(x: np.ndarray, qtype, nthreads: int = 1, imatrix=None) -> np.ndarray:
    """x [nrows, n_per_row] (C-contiguous) of float32, float16 or BF16 bits as uint16 -> uint8
    [nrows * row_bytes] in that GGML type (a QuantType or its name). Half-precision rows widen exactly.
    imatrix: None, or float32 [n_per_row] importance values (llama.cpp's imatrix for this tensor, the same
    for every row), as ggml_quantize_chunk's quant_weights."""
    qt = _qtype(qtype)
    if not isinstance(x, np.ndarray) or x.dtype not in _SOURCES or x.ndim != 2 or not x.flags.c_contiguous:
        raise ValueError("quantize_rows: x must be a C-contiguous float32, float16 or uint16 (BF16) array "
                         f"[nrows, n_per_row], got {getattr(x, 'dtype', type(x))} {getattr(x, 'shape', '')}")
    nrows, n_per_row = x.shape
    if n_per_row <= 0 or n_per_row % qt.block_size:
        raise ValueError(f"quantize_rows: a row of {n_per_row} is not a whole number of {qt.name} blocks "
                         f"of {qt.block_size}")
    w = None if imatrix is None else _imatrix(imatrix, n_per_row)
    out = np.empty(nrows * qt.row_bytes(n_per_row), np.uint8)
    if nrows:
        got = _lib.lib.ly_quantize_rows(qt.id, addr(x), _SOURCES[x.dtype], addr(out), nrows, n_per_row,
                                        addr(w), max(1, int(nthreads)))
        if got != out.size:
            raise ValueError(f"quantize_rows: the C quantizer refused {qt.name} rows of {n_per_row}")
    return out
