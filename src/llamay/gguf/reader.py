"""GGUF reader: header, metadata, tensor infos; tensor data memory-mapped, never copied at load.

Every count and length read from the file is checked against the bytes that remain before anything is
allocated, so a hostile file fails with GGUFError instead of a crash, a hang or a huge allocation.
ref: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass

import numpy as np

from .errors import GGUFError
from .quant_types import QUANT_TYPES, QuantType

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_ARRAY_DEPTH = 8

# metadata value types: id -> (struct code, size); 8 = string, 9 = array
SCALAR_TYPES = {0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4),
                6: ("f", 4), 7: ("?", 1), 10: ("Q", 8), 11: ("q", 8), 12: ("d", 8)}
NUMPY_TYPES = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?",
               10: "<u8", 11: "<i8", 12: "<f8"}
T_STRING, T_ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # GGUF order: shape[0] is the contiguous (row) dimension
    qtype: QuantType
    offset: int  # absolute offset in the file
    n_bytes: int

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


class _Cursor:
    """Bounds-checked little-endian reads over a buffer."""

    def __init__(self, buf, path: str):
        self.buf, self.pos, self.end, self.path = buf, 0, len(buf), path

    def fail(self, what: str):
        raise GGUFError(f"{self.path}: {what} (at byte {self.pos})")

    def need(self, n: int, what: str):
        if n < 0 or self.pos + n > self.end:
            self.fail(f"truncated file: {what} needs {n} bytes, {self.end - self.pos} remain")

    def scalar(self, code: str, size: int, what: str):
        self.need(size, what)
        v = struct.unpack_from("<" + code, self.buf, self.pos)[0]
        self.pos += size
        return v

    def u32(self, what: str) -> int:
        return self.scalar("I", 4, what)

    def u64(self, what: str) -> int:
        return self.scalar("Q", 8, what)

    def string(self, what: str) -> str:
        n = self.u64(what + " length")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="surrogateescape")

    def count(self, min_item_bytes: int, what: str) -> int:
        n = self.u64(what)
        if n * min_item_bytes > self.end - self.pos:
            self.fail(f"absurd {what} {n}: the file has {self.end - self.pos} bytes left")
        return n


def _read_value(cur: _Cursor, vtype: int, key: str, depth: int = 0):
    if vtype in SCALAR_TYPES:
        code, size = SCALAR_TYPES[vtype]
        return cur.scalar(code, size, f"value of {key!r}")
    if vtype == T_STRING:
        return cur.string(f"value of {key!r}")
    if vtype == T_ARRAY:
        return _read_array(cur, key, depth)
    cur.fail(f"unknown metadata value type {vtype} for key {key!r}")


def _read_array(cur: _Cursor, key: str, depth: int):
    if depth >= MAX_ARRAY_DEPTH:
        cur.fail(f"arrays nested deeper than {MAX_ARRAY_DEPTH} in {key!r}")
    etype = cur.u32(f"array type of {key!r}")
    if etype in NUMPY_TYPES:
        size = SCALAR_TYPES[etype][1]
        n = cur.count(size, f"array length of {key!r}")
        arr = np.frombuffer(cur.buf, dtype=NUMPY_TYPES[etype], count=n, offset=cur.pos).copy()
        cur.pos += n * size
        return arr
    if etype == T_STRING:
        n = cur.count(8, f"array length of {key!r}")
        return _read_strings(cur, n, key)
    if etype == T_ARRAY:
        n = cur.count(12, f"array length of {key!r}")
        return [_read_array(cur, key, depth + 1) for _ in range(n)]
    cur.fail(f"unknown array element type {etype} for key {key!r}")


def _read_strings(cur: _Cursor, n: int, key: str) -> list[str]:
    """Fast path for big vocabularies: one unpack per string, bounds checked."""
    buf, pos, end, out = cur.buf, cur.pos, cur.end, [None] * n
    unpack = struct.Struct("<Q").unpack_from
    for i in range(n):
        if pos + 8 > end:
            cur.pos = pos
            cur.fail(f"truncated file: string {i} of {key!r}")
        (ln,) = unpack(buf, pos)
        pos += 8
        if ln > end - pos:
            cur.pos = pos
            cur.fail(f"truncated file: string {i} of {key!r} claims {ln} bytes")
        raw = buf[pos:pos + ln]
        pos += ln
        try:
            out[i] = str(raw, "utf-8")
        except UnicodeDecodeError:
            out[i] = str(raw, "utf-8", "surrogateescape")
    cur.pos = pos
    return out


class GGUFReader:
    """Opens a GGUF file (version 2 or 3). `metadata`: key -> value; `tensors`: name -> TensorInfo."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < 24:
                    raise GGUFError(f"{self.path}: not a GGUF file (only {size} bytes)")
                self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                st = os.fstat(f.fileno())
        except OSError as e:
            raise GGUFError(f"{self.path}: cannot open: {e.strerror}") from e
        self.file_size = size
        self.identity = (st.st_dev, st.st_ino, size, st.st_mtime_ns)  # which file, as it is now
        self.buffer = memoryview(self._mmap)
        cur = _Cursor(self.buffer, self.path)
        self._parse(cur)

    def _parse(self, cur: _Cursor):
        if bytes(self.buffer[:4]) != MAGIC:
            raise GGUFError(f"{self.path}: not a GGUF file (bad magic {bytes(self.buffer[:4])!r})")
        cur.pos = 4
        self.version = cur.u32("version")
        if self.version not in (2, 3):
            cur.fail(f"unsupported GGUF version {self.version} (2 and 3 are supported)")
        n_tensors = cur.count(24, "tensor count")
        n_kv = cur.count(12, "metadata count")
        self.metadata: dict[str, object] = {}
        self.metadata_types: dict[str, int] = {}
        self.metadata_spans: dict[str, tuple[int, int]] = {}  # key -> [start, end) of its bytes (key, type, value)
        for _ in range(n_kv):
            start = cur.pos
            key = cur.string("metadata key")
            if key in self.metadata:
                cur.fail(f"duplicate metadata key {key!r}")
            vtype = cur.u32(f"type of {key!r}")
            self.metadata[key] = _read_value(cur, vtype, key)
            self.metadata_types[key] = vtype
            self.metadata_spans[key] = (start, cur.pos)
        self.alignment = self._alignment(cur)
        infos = [self._tensor_info(cur) for _ in range(n_tensors)]
        self.data_offset = -(-cur.pos // self.alignment) * self.alignment
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, qtype, rel in infos:
            self._add_tensor(cur, name, shape, qtype, rel)

    def _alignment(self, cur: _Cursor) -> int:
        a = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(a, int) or isinstance(a, bool) or a <= 0 or a & (a - 1):
            cur.fail(f"general.alignment must be a power of two, got {a!r}")
        return a

    def _tensor_info(self, cur: _Cursor):
        name = cur.string("tensor name")
        n_dims = cur.u32(f"dimension count of {name!r}")
        if n_dims > MAX_DIMS:
            cur.fail(f"tensor {name!r} has {n_dims} dimensions (at most {MAX_DIMS})")
        shape = tuple(cur.u64(f"dimension of {name!r}") for _ in range(n_dims))
        type_id = cur.u32(f"type of {name!r}")
        qtype = QUANT_TYPES.get(type_id)
        if qtype is None:
            cur.fail(f"tensor {name!r} has unknown type {type_id}")
        return name, shape, qtype, cur.u64(f"offset of {name!r}")

    def _add_tensor(self, cur: _Cursor, name: str, shape, qtype: QuantType, rel: int):
        where = f"{self.path}: tensor {name!r}"
        if name in self.tensors:
            raise GGUFError(f"{where}: duplicate tensor name")
        if 0 in shape:
            raise GGUFError(f"{where}: zero dimension in shape {shape}")
        n = 1
        for d in shape:
            n *= d
            if n > self.file_size * 64:
                raise GGUFError(f"{where}: absurd shape {shape}")
        row = shape[0] if shape else 1
        if row % qtype.block_size:
            raise GGUFError(f"{where}: row of {row} is not a multiple of {qtype.name} blocks "
                            f"of {qtype.block_size}")
        if rel % self.alignment:
            raise GGUFError(f"{where}: data offset {rel} is not aligned to {self.alignment}")
        n_bytes = n // qtype.block_size * qtype.type_size
        start = self.data_offset + rel
        if start + n_bytes > self.file_size:
            raise GGUFError(f"{where}: data [{start}, {start + n_bytes}) runs past the end of the "
                            f"file ({self.file_size} bytes)")
        self.tensors[name] = TensorInfo(name, shape, qtype, start, n_bytes)

    def data(self, name: str) -> np.ndarray:
        """Raw bytes of a tensor as a read-only uint8 view of the mapped file (no copy)."""
        t = self.tensors[name]
        return np.frombuffer(self.buffer, dtype=np.uint8, count=t.n_bytes, offset=t.offset)

    def _span(self, view: np.ndarray) -> tuple[int, int] | None:
        """[lo, hi) byte offsets in the file of a view of data(), or None for a view of anything else"""
        base = np.frombuffer(self.buffer, np.uint8, count=1).ctypes.data
        lo, hi = view.ctypes.data - base, view.ctypes.data - base + view.nbytes
        return (lo, hi) if 0 <= lo < hi <= self.file_size else None

    def locate(self, view: np.ndarray) -> tuple | None:
        """(the file's identity, the view's offset): the same for the same bytes of the same unchanged file,
        whichever reader mapped it; None for a view of anything else"""
        span = self._span(view)
        return (self.identity, span[0], span[1]) if span else None

    def release(self, view: np.ndarray):
        """Tells the kernel this process is done with the mapped pages under a view of data() (a copy of
        them is used instead): they leave the process's resident memory and stay in the page cache, read
        back on a later touch. A view of anything else is left alone."""
        span = self._span(view)
        if span is None or not hasattr(self._mmap, "madvise"):
            return
        lo, hi = span
        page = mmap.PAGESIZE
        lo, hi = -(-lo // page) * page, hi // page * page  # whole pages only
        if hi > lo:
            self._mmap.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def array(self, name: str) -> np.ndarray:
        """A float tensor (F32/F16/BF16 ...) as a numpy view shaped in row-major order (no copy)."""
        t = self.tensors[name]
        dtypes = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I8": "<i1", "I16": "<i2",
                  "I32": "<i4", "I64": "<i8"}
        if t.qtype.name not in dtypes:
            raise GGUFError(f"{self.path}: tensor {name!r} is {t.qtype.name}; dequantize it instead")
        return self.data(name).view(dtypes[t.qtype.name]).reshape(tuple(reversed(t.shape)))

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)
