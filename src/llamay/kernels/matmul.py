"""matmul(x, w): float32 activations [n, k] times a weight matrix in a GGML block format, [m, k] -> [n, m].

Quantized weights use activations quantized once per input (quantize_act, the Q8 form of csrc/matmul.h);
float weights (F32/F16/BF16) use x itself. The result is bit-reproducible: independent of n, of the
thread count and of the kernel path (every path == reference.py)."""
import ctypes
import mmap

import numpy as np

from ..gguf import BY_NAME, QUANT_TYPES, QuantType
from . import _lib
from .graph import addr
from .threads import default_threads

_lib.declare("ly_quantize_act", _lib.P, _lib.I64, _lib.I64, _lib.I64, _lib.P, _lib.P, _lib.P, _lib.I32)
_lib.declare("ly_matmul", _lib.P, ctypes.c_size_t, _lib.I32, _lib.I64, _lib.P, _lib.I64, _lib.P, _lib.I32,
             restype=_lib.I32)
_lib.declare("ly_act_block", _lib.I32, restype=_lib.I64)
_lib.declare("ly_x16_repack", _lib.I32, _lib.P, ctypes.c_size_t, _lib.I64, _lib.P, _lib.I32, restype=_lib.I32)
_lib.declare("ly_x16_unpack", _lib.I32, _lib.P, ctypes.c_size_t, _lib.I64, _lib.P, restype=_lib.I32)
_lib.declare("ly_x16_native", _lib.I32, restype=_lib.I32)
X16 = 0x100  # csrc/x16.h LY_X16: a type id | X16 names its blocks in the x16 layout
X16_ROWS = 16
_FLOAT_TYPES = ("F32", "F16", "BF16")


class _ActStruct(ctypes.Structure):
    _fields_ = [("q", ctypes.c_void_p), ("d", ctypes.c_void_p), ("s16", ctypes.c_void_p),
                ("x", ctypes.c_void_p), ("k", ctypes.c_int64), ("bs", ctypes.c_int64)]


def act_block(qtype: QuantType) -> int:
    """Values per activation scale that a weight type's tiles read (csrc/matmul.h LY_ACT_BS): 256 for the
    K-quants (one float step per super-block), else 32."""
    return _lib.lib.ly_act_block(qtype.id)


_F32 = np.dtype(np.float32)


def _check_x(x: np.ndarray) -> tuple[int, int]:
    if not isinstance(x, np.ndarray) or x.dtype != _F32 or x.ndim != 2 or not x.flags.c_contiguous:
        raise ValueError("x must be a C-contiguous float32 array [n, k], got "
                         f"{getattr(x, 'dtype', type(x))} {getattr(x, 'shape', '')}")
    return x.shape


class QAct:
    """Activations for one matmul input: x float32 [n, k] and, when quantized, q int8 [n, k],
    d float32 [n, k/bs], s16 int32 [n, k/16] (one buffer), bs values per scale (act_block of the weights
    it is for). Reuse one QAct for every weight of that block that reads x."""

    def __init__(self, x: np.ndarray, quantized: bool, n_threads: int | None = None, bs: int = 32):
        self.n, self.k = _check_x(x)
        self.x, self.bs = x, bs
        self._buf = None
        self.struct = s = _ActStruct()
        s.x, s.k, s.bs = addr(x), self.k, bs
        if quantized:
            n, k = self.n, self.k
            if k % bs:
                raise ValueError(f"quantized activations need k % {bs} == 0, got k={k}")
            self._buf = (ctypes.c_char * (n * k * 11 // 8))()  # q [n*k] i8, d [<= n*k/32] f32, s16 [n*k/16] i32
            s.q = ctypes.addressof(self._buf)
            s.d = s.q + n * k
            s.s16 = s.d + n * k // 8
            _lib.lib.ly_quantize_act(s.x, n, k, bs, s.q, s.d, s.s16, n_threads or default_threads())

    @property
    def quantized(self) -> bool:
        return self._buf is not None

    def _view(self, dtype, offset: int, count: int, cols: int) -> np.ndarray | None:
        if self._buf is None:
            return None
        return np.frombuffer(self._buf, dtype, count, offset).reshape(self.n, cols)

    @property
    def q(self) -> np.ndarray | None:  # int8 [n, k]
        return self._view(np.int8, 0, self.n * self.k, self.k)

    @property
    def d(self) -> np.ndarray | None:  # float32 [n, k/bs]
        return self._view(np.float32, self.n * self.k, self.n * self.k // self.bs, self.k // self.bs)

    @property
    def s16(self) -> np.ndarray | None:  # int32 [n, k/16]
        return self._view(np.int32, self.n * self.k * 9 // 8, self.n * self.k // 16, self.k // 16)


def quantize_act(x: np.ndarray, n_threads: int | None = None, bs: int = 32) -> QAct:
    """x float32 [n, k], k % bs == 0 -> its canonical Q8 activations in blocks of bs (32, or 256 for the
    K-quants: act_block), plus x for float weights."""
    return QAct(x, True, n_threads, bs)


class QWeight:
    """A weight matrix of m rows of k values in one GGML type, as raw block bytes (a view, no copy), or,
    when x16, the same bytes regrouped 16 rows at a time (csrc/x16.h; made by repacked()).
    ctypes arguments are prepared here once so that a matmul costs two foreign calls."""

    def __init__(self, raw: np.ndarray, qtype: QuantType | int | str, m: int, k: int, x16: bool = False):
        if isinstance(qtype, (str, int)):
            qtype = BY_NAME[qtype] if isinstance(qtype, str) else QUANT_TYPES[qtype]
        self.qtype = qtype
        self.m, self.k = int(m), int(k)
        if k % self.qtype.block_size:
            raise ValueError(f"k={k} is not a multiple of {self.qtype.name} blocks of {self.qtype.block_size}")
        self.row_bytes = self.qtype.row_bytes(self.k)
        if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8 or not raw.flags.c_contiguous:
            raise ValueError("raw must be a C-contiguous uint8 array of block bytes")
        self.x16 = bool(x16)
        need = self.row_bytes * (-(-self.m // X16_ROWS) * X16_ROWS if x16 else self.m)
        if raw.size != need:
            raise ValueError(f"raw has {raw.size} bytes, {self.qtype.name} [{m}, {k}] needs {need}")
        if not supported(self.qtype):
            raise ValueError(f"no matmul kernel for {self.qtype.name}")
        self.raw = raw
        self.is_float = self.qtype.name in _FLOAT_TYPES
        self.type_code = self.qtype.id | (X16 if x16 else 0)  # what the C matmul is told
        self._args = (ctypes.c_void_p(addr(raw)), ctypes.c_size_t(self.row_bytes),
                      ctypes.c_int(self.type_code), ctypes.c_int64(self.m))

    @classmethod
    def from_gguf(cls, reader, name: str) -> "QWeight":
        """A 2-D tensor of a GGUFReader (GGUF shape (k, m): k is the row length), or a 1-D one as one row."""
        t = reader.tensors[name]
        if len(t.shape) not in (1, 2):
            raise ValueError(f"{name} has shape {t.shape}, a matmul weight is 2-D")
        return cls(reader.data(name), t.qtype, t.shape[1] if len(t.shape) == 2 else 1, t.shape[0])

    def rows(self, lo: int, hi: int) -> "QWeight":
        """Rows [lo, hi) as a weight of their own: a view of the same bytes, or for an x16 matrix cut
        inside a group, those rows copied out and regrouped."""
        if not 0 <= lo < hi <= self.m:
            raise ValueError(f"rows [{lo}, {hi}) of {self!r}")
        rb = self.row_bytes
        if not self.x16:
            return QWeight(self.raw[lo * rb:hi * rb], self.qtype, hi - lo, self.k)
        if lo % X16_ROWS == 0:  # whole groups; rows of the last one past hi are computed, never stored
            end = -(-hi // X16_ROWS) * X16_ROWS
            return QWeight(self.raw[lo * rb:end * rb], self.qtype, hi - lo, self.k, x16=True)
        return QWeight(self.ggml_rows()[lo * rb:hi * rb].copy(), self.qtype, hi - lo, self.k).repacked()

    def repacked(self, n_threads: int | None = None, force: bool = False) -> "QWeight":
        """This matrix in the x16 layout, when the kernel path in use has x16 tiles of its own for the type
        (each load feeds 16 rows: decode streams at the memory's speed), or when forced and the type has
        the layout; else itself. Same results, bit for bit, on every path (a path without x16 tiles runs
        its GGML tile on each group's rows rebuilt). A new buffer: the mapped file's pages are left alone."""
        if self.x16 or self.m < X16_ROWS or not (force or _lib.lib.ly_x16_native(self.qtype.id)):
            return self
        out = _aligned(self.row_bytes * -(-self.m // X16_ROWS) * X16_ROWS)
        if _lib.lib.ly_x16_repack(self.qtype.id, addr(self.raw), self.row_bytes, self.m, addr(out),
                                  n_threads or default_threads()):
            return self  # a row length the layout does not take
        return QWeight(out, self.qtype, self.m, self.k, x16=True)

    def ggml_rows(self) -> np.ndarray:
        """The m GGML rows' bytes (a copy back out of the x16 layout, or raw itself)."""
        if not self.x16:
            return self.raw
        out = np.empty(self.m * self.row_bytes, np.uint8)
        _lib.lib.ly_x16_unpack(self.qtype.id, addr(self.raw), self.row_bytes, self.m, addr(out))
        return out

    def __repr__(self):
        return f"QWeight({self.qtype.name}{' x16' if self.x16 else ''}, m={self.m}, k={self.k})"


_HUGE = 2 << 20


def _aligned(n: int) -> np.ndarray:
    """n bytes of anonymous memory on a 2 MiB boundary, asking the kernel for huge pages where it gives them
    on request (Linux THP "madvise"): a weight streamed whole each token then costs far fewer TLB misses."""
    if not hasattr(mmap, "MAP_ANONYMOUS"):  # Windows: plain memory
        arr = np.empty(n + 64, np.uint8)
        off = -arr.ctypes.data % 64
        return arr[off:off + n]
    buf = mmap.mmap(-1, n + _HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            buf.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # a kernel without THP
            pass
    arr = np.frombuffer(buf, np.uint8)
    off = -arr.ctypes.data % _HUGE
    return arr[off:off + n]


class QExperts:
    """n_expert weight matrices of m rows of k values each, one after another in one GGML type (a GGUF
    tensor of shape (k, m, n_expert)), as raw block bytes."""

    def __init__(self, raw: np.ndarray, qtype, n_expert: int, m: int, k: int):
        self.all = QWeight(raw, qtype, n_expert * m, k)  # checks size, type and support
        self.raw, self.qtype, self.row_bytes, self.is_float = raw, self.all.qtype, self.all.row_bytes, self.all.is_float
        self.n_expert, self.m, self.k = int(n_expert), int(m), int(k)
        self.expert_bytes = self.m * self.row_bytes  # from one expert's matrix to the next

    def rows(self, lo: int, hi: int) -> "QExperts":
        """Rows [lo, hi) of every expert's matrix (a view of the same bytes: the part of a fused gate/up)."""
        if not 0 <= lo < hi <= self.m:
            raise ValueError(f"rows [{lo}, {hi}) of {self!r}")
        part = object.__new__(QExperts)
        part.__dict__.update(self.__dict__, m=hi - lo)
        part.raw = self.raw[lo * self.row_bytes:]  # the last expert's rows end inside it
        return part

    @classmethod
    def from_gguf(cls, reader, name: str) -> "QExperts":
        t = reader.tensors[name]
        if len(t.shape) != 3:
            raise ValueError(f"{name} has shape {t.shape}, experts' weights are 3-D")
        return cls(reader.data(name), t.qtype, t.shape[2], t.shape[1], t.shape[0])

    def __repr__(self):
        return f"QExperts({self.qtype.name}, n_expert={self.n_expert}, m={self.m}, k={self.k})"


_lib.declare("ly_iq_dequantize", _lib.I32, _lib.P, _lib.I64, _lib.P, restype=_lib.I32)


IQ_TYPES = frozenset(("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"))  # csrc/iq.c


def iq_dequantize(raw: np.ndarray, qtype: QuantType) -> np.ndarray:
    """The IQ2 / IQ3 / IQ1 formats' weights as the C tiles decode them: raw uint8 superblocks -> float32 [n].
    (Their matmul reads these exact values; tests compare them with gguf-py's dequantization.)"""
    raw = np.ascontiguousarray(raw, np.uint8)
    n_blocks = raw.size // qtype.type_size
    out = np.empty(n_blocks * qtype.block_size, np.float32)
    if _lib.lib.ly_iq_dequantize(qtype.id, addr(raw), n_blocks, addr(out)):
        raise ValueError(f"{qtype.name} is not an IQ2/IQ3/IQ1 format")
    return out


def supported(qtype: QuantType) -> bool:
    """Whether the C library has a tile for this type (probed with an empty matmul)."""
    if qtype.id not in _SUPPORTED:
        _SUPPORTED[qtype.id] = _lib.lib.ly_matmul(None, 0, qtype.id, 0, None, 0, None, 1) == 0
    return _SUPPORTED[qtype.id]


_SUPPORTED: dict[int, bool] = {}


def matmul(x: np.ndarray | QAct, w: QWeight, out: np.ndarray | None = None,
           n_threads: int | None = None) -> np.ndarray:
    """x float32 [n, k] (or a QAct of it) . w[m, k]^T -> float32 [n, m] (written into out if given)."""
    if not isinstance(x, QAct):
        x = QAct(x, not w.is_float, n_threads, act_block(w.qtype))
    elif not (x.quantized or w.is_float):
        raise ValueError(f"{w!r} needs quantized activations: use quantize_act(x)")
    elif x.quantized and not w.is_float and x.bs != act_block(w.qtype):
        raise ValueError(f"{w!r} reads activations in blocks of {act_block(w.qtype)}, got {x.bs}")
    if x.k != w.k:
        raise ValueError(f"x has k={x.k}, {w!r} expects k={w.k}")
    if out is None:
        out = np.empty((x.n, w.m), np.float32)
    elif (out.dtype != _F32 or out.shape != (x.n, w.m) or not out.flags.c_contiguous
          or not out.flags.writeable):
        raise ValueError(f"out must be a writable C-contiguous float32 array {(x.n, w.m)}")
    rc = _lib.lib.ly_matmul(*w._args, ctypes.byref(x.struct), x.n, addr(out), n_threads or default_threads())
    if rc:
        raise ValueError(f"no matmul kernel for {w!r}")
    return out
