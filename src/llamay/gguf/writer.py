"""GGUF writer (version 3): metadata with explicit or inferred types, tensors as raw block bytes."""
from __future__ import annotations

import os
import struct

import numpy as np

from .quant_types import BY_NAME, QuantType
from .reader import DEFAULT_ALIGNMENT, MAGIC, NUMPY_TYPES, SCALAR_TYPES, T_ARRAY, T_STRING

_NP_TO_GGUF = {np.dtype(v): k for k, v in NUMPY_TYPES.items()}
_FLOAT_TENSOR = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i1"): "I8",
                 np.dtype("<i2"): "I16", np.dtype("<i4"): "I32", np.dtype("<f8"): "F64"}


def _infer_type(value) -> int:
    if isinstance(value, bool):
        return 7
    if isinstance(value, int):
        return 5 if -2**31 <= value < 2**31 else 11
    if isinstance(value, float):
        return 6
    if isinstance(value, str):
        return T_STRING
    if isinstance(value, (list, tuple, np.ndarray)):
        return T_ARRAY
    raise TypeError(f"cannot store {type(value).__name__} in GGUF metadata")


def _infer_elem_type(values) -> int:
    """One type for all elements (ints widen to i64, ints among floats become f32): a mixed list
    must not be truncated to the type of its first element."""
    types = {_infer_type(v) for v in values} or {5}
    for wide, narrow in ((11, 5), (6, 5), (6, 11)):
        if wide in types:
            types.discard(narrow)
    if len(types) != 1:
        raise TypeError(f"cannot store an array of mixed GGUF types {sorted(types)}")
    return types.pop()


def _pack_string(s: str | bytes) -> bytes:
    raw = s.encode("utf-8", "surrogateescape") if isinstance(s, str) else s
    return struct.pack("<Q", len(raw)) + raw


def _pack_value(value, vtype: int, elem_type: int | None = None) -> bytes:
    if vtype in SCALAR_TYPES:
        return struct.pack("<" + SCALAR_TYPES[vtype][0], value)
    if vtype == T_STRING:
        return _pack_string(value)
    if vtype != T_ARRAY:
        raise ValueError(f"unknown GGUF value type {vtype}")
    if isinstance(value, np.ndarray) and elem_type is None:
        elem_type = _NP_TO_GGUF[value.dtype.newbyteorder("<") if value.dtype.byteorder == ">" else value.dtype]
    if elem_type is None:
        elem_type = _infer_elem_type(value)
    head = struct.pack("<IQ", elem_type, len(value))
    if elem_type in NUMPY_TYPES:
        return head + np.asarray(value, dtype=NUMPY_TYPES[elem_type]).tobytes()
    return head + b"".join(_pack_value(v, elem_type) for v in value)


def pack_kv(key: str, value, vtype: int) -> bytes:
    """One metadata entry: key, type, value."""
    return _pack_string(key) + struct.pack("<I", vtype) + _pack_value(value, vtype)


def pack_tensor_info(name: str, shape, type_id: int, offset: int) -> bytes:
    """One tensor's entry: name, dimensions (GGUF order), type, data offset."""
    return (_pack_string(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
            + struct.pack("<IQ", type_id, offset))


class GGUFWriter:
    """Collect metadata and tensors, then `write(path)` once. Tensor shapes are in GGUF order."""

    def __init__(self, alignment: int = DEFAULT_ALIGNMENT):
        self.alignment = alignment
        self.kv: list[tuple[str, int, bytes]] = []
        self.tensors: list[tuple[str, tuple[int, ...], QuantType, bytes]] = []
        if alignment != DEFAULT_ALIGNMENT:
            self.add("general.alignment", alignment, vtype=4)

    def add(self, key: str, value, vtype: int | None = None, elem_type: int | None = None):
        vtype = _infer_type(value) if vtype is None else vtype
        self.kv.append((key, vtype, _pack_value(value, vtype, elem_type)))

    def add_tensor(self, name: str, data: np.ndarray, qtype: str | None = None,
                   shape: tuple[int, ...] | None = None):
        """A float/int array (type from its dtype, shape reversed into GGUF order), or raw uint8
        block bytes with `qtype` and the logical GGUF `shape` given."""
        if qtype is None:
            qtype = _FLOAT_TENSOR[data.dtype]
            shape = tuple(reversed(data.shape))
        qt = BY_NAME[qtype]
        raw = np.ascontiguousarray(data).tobytes()
        n = int(np.prod(shape, dtype=np.int64))
        if len(raw) != n // qt.block_size * qt.type_size:
            raise ValueError(f"{name}: {len(raw)} bytes do not hold {qtype} of shape {shape}")
        self.tensors.append((name, tuple(shape), qt, raw))

    def to_bytes(self) -> bytes:
        out = [MAGIC, struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))]
        for key, vtype, payload in self.kv:
            out += [_pack_string(key), struct.pack("<I", vtype), payload]
        offset = 0
        for name, shape, qt, raw in self.tensors:
            out.append(pack_tensor_info(name, shape, qt.id, offset))
            offset += -(-len(raw) // self.alignment) * self.alignment
        head = b"".join(out)
        parts = [head, b"\0" * (-len(head) % self.alignment)]
        for *_, raw in self.tensors:
            parts += [raw, b"\0" * (-len(raw) % self.alignment)]
        return b"".join(parts)

    def write(self, path: str | os.PathLike):
        tmp = os.fspath(path) + ".tmp"
        with open(tmp, "wb") as f:
            f.write(self.to_bytes())
        os.replace(tmp, path)
