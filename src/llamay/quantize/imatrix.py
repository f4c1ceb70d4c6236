"""Importance matrices as llama.cpp's llama-imatrix writes them, read as llama-quantize reads them (ref:
llama.cpp common/imatrix-loader.cpp and tools/quantize/quantize.cpp load_imatrix): per weight tensor, the
mean square of each input column the tensor saw, one row of them per expert.

GGUF files hold `NAME.in_sum2` (sums) and `NAME.counts` (per expert) as F32, with imatrix.datasets,
imatrix.chunk_count and imatrix.chunk_size; each row is sums / round(count) (1 where count is 0). The
legacy .dat file is int32 n_entries, then per entry int32 name length, name, int32 ncall, int32 nval, nval
float32 sums (already divided by their count, times ncall), then optionally int32 chunk count, int32
length and a dataset name; its rows are sums / ncall. Hostile files get a clear ImatrixError."""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

import numpy as np

from ..gguf import GGUFError, GGUFReader

MAX_ENTRIES = 1 << 20
MAX_VALUES = 1 << 31


class ImatrixError(ValueError):
    pass


@dataclass
class Imatrix:
    entries: dict  # tensor name -> float32 [n_expert * n_per_row]
    datasets: list = field(default_factory=list)
    chunk_count: int = 0


def load(path: str | os.PathLike) -> Imatrix:
    path = os.fspath(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    return _load_gguf(path) if magic == b"GGUF" else _load_legacy(path)


def _load_gguf(path: str) -> Imatrix:
    try:
        r = GGUFReader(path)
    except GGUFError as e:
        raise ImatrixError(f"{path}: {e}") from None
    meta = r.metadata
    if not all(k in meta for k in ("imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size")):
        raise ImatrixError(f"{path}: missing imatrix metadata (imatrix.datasets, chunk_count, chunk_size)")
    datasets = meta["imatrix.datasets"]
    if not isinstance(datasets, list) or not all(isinstance(d, str) for d in datasets):
        raise ImatrixError(f"{path}: imatrix.datasets must be an array of strings")
    chunks = meta["imatrix.chunk_count"]
    if not isinstance(chunks, int) or isinstance(chunks, bool) or not 0 <= chunks < 2**32:
        raise ImatrixError(f"{path}: imatrix.chunk_count must be a u32")
    names = {}
    for name in r.tensors:
        for suffix, part in ((".in_sum2", 0), (".counts", 1)):
            if name.endswith(suffix) and name != suffix:
                names.setdefault(name[:-len(suffix)], [None, None])[part] = name
    if not r.tensors:
        raise ImatrixError(f"{path}: no data")
    entries = {}
    for base, (sums_name, counts_name) in names.items():
        if sums_name is None or counts_name is None:
            raise ImatrixError(f"{path}: mismatched sums and counts for {base}")
        s, c = r.tensors[sums_name], r.tensors[counts_name]
        if s.qtype.name != "F32" or c.qtype.name != "F32":
            raise ImatrixError(f"{path}: sums and counts for {base} must be F32")
        sums, c = r.data(sums_name).view("<f4"), r.data(counts_name).view("<f4").astype(np.float64)
        if not np.isfinite(c).all() or np.abs(c).max(initial=0) >= 2**62:
            raise ImatrixError(f"{path}: counts of {base} out of range")
        counts = np.sign(c) * np.floor(np.abs(c) + 0.5)  # lround: halves away from zero
        if not len(counts) or len(sums) % len(counts):
            raise ImatrixError(f"{path}: {len(sums)} sums for {len(counts)} counts of {base}")
        rows = sums.reshape(len(counts), -1)
        out = np.ones_like(rows, dtype=np.float32)
        live = counts > 0
        out[live] = rows[live] / counts[live].astype(np.float32)[:, None]
        entries[base] = out.reshape(-1)
    return Imatrix(entries, list(datasets), chunks)


def _load_legacy(path: str) -> Imatrix:
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(n: int, what: str) -> bytes:
        nonlocal pos
        if pos + n > len(data):
            raise ImatrixError(f"{path}: truncated reading {what}")
        pos += n
        return data[pos - n:pos]

    def i32(what: str) -> int:
        return struct.unpack("<i", take(4, what))[0]
    n_entries = i32("the entry count")
    if not 1 <= n_entries <= MAX_ENTRIES:
        raise ImatrixError(f"{path}: not an imatrix (no data; a legacy file starts with its entry count)")
    entries = {}
    for i in range(n_entries):
        n = i32(f"entry {i + 1}'s name length")
        if not 0 <= n <= 4096:
            raise ImatrixError(f"{path}: entry {i + 1} has a name of {n} bytes")
        name = take(n, f"entry {i + 1}'s name").split(b"\0")[0].decode("utf-8", "replace")
        ncall, nval = i32(f"entry {i + 1}'s call count"), i32(f"entry {i + 1}'s value count")
        if nval < 1:
            raise ImatrixError(f"{path}: entry {i + 1} has {nval} values")
        sums = np.frombuffer(take(4 * nval, f"entry {i + 1}'s values"), "<f4")
        entries[name] = (sums / np.float32(ncall)).astype(np.float32) if ncall > 0 else sums.copy()
    datasets, chunks = [], 0
    if pos < len(data):
        chunks = i32("the chunk count")
        if pos + 4 <= len(data):
            n = i32("the dataset name length")
            if 0 < n <= len(data) - pos:
                datasets.append(take(n, "the dataset name").split(b"\0")[0].decode("utf-8", "replace"))
    return Imatrix(entries, datasets, chunks)
