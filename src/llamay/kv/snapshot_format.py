""".llamayctx snapshots: one context's tokens and KV pages in one self-checking file (DESIGN.md §6).

Layout, version 2, all little-endian, no pointers:
  fixed header (HEADER, 180 bytes): magic, version, weights digest, arch, KV type, geometry, counts
  layer table          version 3 only: per layer (LAYER) KV heads, head size, K and V bytes of one page;
                       written only when layers differ (Gemma 4), the header's geometry then layer 0's
  token ids            u32[n_tokens]
  logits               f32[n_logits]: after the last token (n_vocab of them), or none (n_logits = 0)
  meta                 n_meta bytes of UTF-8 JSON (an object; none when empty): state beside the KV, such
                       as a grammar's position in a constrained generation
  zero padding         to a multiple of 64 bytes, so page data is aligned for numpy views
  page data            for each layer: K pages then V pages, n_pages * page_bytes each, context order;
                       a dense (f32/f16) page is [page_size, n_kv_head, head_dim] of that dtype (the
                       layer's own, in version 3)
  recurrent state      version 4 only: f32[n_state], a hybrid model's recurrent layers' state after the
                       last token (the header's last field counts them; the layer table is always there)
  checksum             xxh3_128 of every byte before it, 16 bytes
The header is fixed binary rather than JSON: every field has a fixed width and type, so parsing hostile
input is one struct.unpack plus integer bounds, and the exact file size follows from the header by
arithmetic before anything is allocated. Any change of layout bumps VERSION; version 1 (no meta, a
172-byte header) is still read, uniform layers without a recurrent state are still written as version 2,
others without one as version 3.

Two ways to read, both validating the header against the file size before allocating anything:
read_snapshot maps the file (no copy) and returns read-only numpy views after verifying the checksum;
SnapshotFile.read_pages_into (the engine's restore) reads pages with preadv straight into pool pages and
hashes each layer while it is in cache: one copy in all, and no page faults on a fresh mapping.
Writers replace files by rename, so a mapped file is never modified under a reader; a file truncated in
place by another process while it is mapped can still raise SIGBUS, as with any mmap.
"""
from __future__ import annotations

import json
import mmap
import os
import re
import struct
from dataclasses import dataclass, field, fields
from typing import NamedTuple, Sequence

import numpy as np
import xxhash

from ..files import write_atomic

MAGIC = b"LLAMAYCX"
VERSION = 4
HEADERS = {1: struct.Struct("<8sI64s32s8sIIIIQQQQQ"), 2: struct.Struct("<8sI64s32s8sIIIIQQQQQQ")}
HEADERS[3] = HEADERS[2]  # followed by the layer table
HEADERS[4] = struct.Struct("<8sI64s32s8sIIIIQQQQQQQ")  # + n_state; followed by the layer table
HEADER = HEADERS[VERSION]
MAX_STATE = 1 << 34  # floats of a recurrent state (64 GiB): a bound on hostile counts, far above any model
LAYER = struct.Struct("<IIQQ")  # n_kv_head, head_dim, k_page_bytes, v_page_bytes
CHECKSUM_BYTES = 16
ALIGN = 64
IOV_MAX = 1024  # buffers per preadv call (Linux's limit)
# dense types are stored as [n_pages, page_size, n_kv_head, head_dim] of this dtype; None: opaque
# bytes per page, laid out by the engine ([n_pages, page_bytes] uint8)
KV_DTYPES = {"f32": np.dtype("<f4"), "f16": np.dtype("<f2"), "q8": None, "vq8": None}
MAX_LAYERS, MAX_HEADS, MAX_HEAD_DIM, MAX_PAGE_SIZE = 4096, 4096, 65536, 65536
_HEX64 = re.compile(r"[0-9a-f]{64}")


class SnapshotError(ValueError):
    """A snapshot that cannot be used: truncated, corrupted, another version, or another model."""


@dataclass(frozen=True)
class KVGeometry:
    """What a snapshot's KV bytes mean; two geometries must be equal for a restore."""
    arch: str
    n_layer: int
    n_kv_head: int
    head_dim: int
    kv_type: str  # a key of KV_DTYPES
    page_size: int  # token slots per page
    k_page_bytes: int  # bytes of one page of K in one layer
    v_page_bytes: int
    layers: tuple = ()  # per layer (n_kv_head, head_dim, k_page_bytes, v_page_bytes) when layers differ;
    # the fields above are then layer 0's

    def layer(self, i: int) -> tuple[int, int, int, int]:
        """(n_kv_head, head_dim, k_page_bytes, v_page_bytes) of layer i."""
        return self.layers[i] if self.layers else (self.n_kv_head, self.head_dim, self.k_page_bytes,
                                                   self.v_page_bytes)

    @property
    def bytes_per_page(self) -> int:
        """K and V bytes of one page over every layer."""
        return sum(kb + vb for _, _, kb, vb in map(self.layer, range(self.n_layer)))

    @classmethod
    def dense(cls, arch: str, n_layer: int, n_kv_head: int, head_dim: int, kv_type: str,
              page_size: int) -> KVGeometry:
        """Geometry of an f32/f16 pool; page bytes follow from the shape."""
        if KV_DTYPES.get(kv_type) is None:
            raise SnapshotError(f"KV type {kv_type!r} is not dense; give its page bytes")
        n = page_size * n_kv_head * head_dim * KV_DTYPES[kv_type].itemsize
        return cls(arch, n_layer, n_kv_head, head_dim, kv_type, page_size, n, n)

    def validate(self, stateful: bool = False):
        """Raise SnapshotError unless every field is in range and page bytes fit the KV type. stateful: the
        snapshot carries a recurrent state, and may have no K/V layer (Mamba2, where no layer attends)."""
        if not 1 <= len(self.arch.encode()) <= 32:
            raise SnapshotError(f"architecture name {self.arch!r} must be 1 to 32 UTF-8 bytes")
        if self.kv_type not in KV_DTYPES:
            raise SnapshotError(f"unknown KV type {self.kv_type!r} (known: {', '.join(KV_DTYPES)})")
        for name, lo, hi in (("n_layer", 0 if stateful else 1, MAX_LAYERS), ("page_size", 1, MAX_PAGE_SIZE)):
            if not lo <= getattr(self, name) <= hi:
                raise SnapshotError(f"{name} = {getattr(self, name)} is outside {lo}..{hi}")
        if self.layers and (len(self.layers) != self.n_layer or tuple(self.layers[0]) != (
                self.n_kv_head, self.head_dim, self.k_page_bytes, self.v_page_bytes)):
            raise SnapshotError(f"the layer table has {len(self.layers)} entries for {self.n_layer} layers, or "
                                "its first disagrees with the header")
        dtype = KV_DTYPES[self.kv_type]
        for i in range(self.n_layer):
            n_kv_head, head_dim, *page_bytes = self.layer(i)
            for name, v, hi in (("n_kv_head", n_kv_head, MAX_HEADS), ("head_dim", head_dim, MAX_HEAD_DIM)):
                if not 1 <= v <= hi:
                    raise SnapshotError(f"{name} = {v} of layer {i} is outside 1..{hi}")
            elems = self.page_size * n_kv_head * head_dim
            for name, n in zip(("k_page_bytes", "v_page_bytes"), page_bytes):
                # a quantized page is never larger than the same page in f32
                ok = n == elems * dtype.itemsize if dtype is not None else 1 <= n <= elems * 4
                if not ok:
                    raise SnapshotError(f"{name} = {n} of layer {i} does not fit {self.kv_type} pages of "
                                        f"{elems} values")

    def layer_shape(self, n_pages: int, page_bytes: int, layer: int = 0) -> tuple[int, ...]:
        """Shape of one layer's K or V in a snapshot."""
        if KV_DTYPES[self.kv_type] is None:
            return (n_pages, page_bytes)
        n_kv_head, head_dim = self.layer(layer)[:2]
        return (n_pages, self.page_size, n_kv_head, head_dim)


@dataclass(frozen=True, eq=False)
class SnapshotHeader:
    weights_digest: str  # sha256 hex of the GGUF file the KV was computed with
    geometry: KVGeometry
    token_ids: np.ndarray  # [n_tokens] uint32 (any int sequence is accepted when writing)
    meta: dict = field(default_factory=dict)  # JSON-serialisable state kept with the KV

    @property
    def n_pages(self) -> int:
        return pages_for(len(self.token_ids), self.geometry.page_size)


class Snapshot(NamedTuple):
    header: SnapshotHeader
    layers_k: list[np.ndarray]  # per layer, KVGeometry.layer_shape; read-only views of the file
    layers_v: list[np.ndarray]
    logits: np.ndarray  # f32 [n_logits], n_logits 0 when none were stored
    state: np.ndarray | None = None  # f32 [n_state]: a hybrid model's recurrent state (version 4), else None


def pages_for(n_tokens: int, page_size: int) -> int:
    return -(-n_tokens // page_size)


def check_compatible(header: SnapshotHeader, weights_digest: str, geometry: KVGeometry):
    """Raise SnapshotError unless the snapshot was made under these weights with this KV layout."""
    if header.weights_digest != weights_digest:
        raise SnapshotError(
            f"snapshot was made under other weights: snapshot weights sha256 {header.weights_digest}, "
            f"loaded model sha256 {weights_digest}; KV from other weights would give nonsense")
    diffs = [f"{f.name} {getattr(header.geometry, f.name)!r} (model: {getattr(geometry, f.name)!r})"
             for f in fields(KVGeometry) if getattr(header.geometry, f.name) != getattr(geometry, f.name)]
    if diffs:
        raise SnapshotError("snapshot KV layout does not match the model: " + ", ".join(diffs))


# ---- writing ----

def write_snapshot(path: str | os.PathLike, header: SnapshotHeader, layers_k: Sequence[np.ndarray],
                   layers_v: Sequence[np.ndarray], logits: np.ndarray | None = None, state: np.ndarray | None = None):
    """Write atomically: temp file in the same directory, write, fsync, rename, fsync the directory.
    layers_k[i] / layers_v[i]: layer i's pages in context order, shaped as KVGeometry.layer_shape, or
    for any KV type as uint8 [n_pages, page_bytes]. logits: float32 [n_vocab] after the last token.
    state: float32 [n], a hybrid model's recurrent state after the last token (written as version 4)."""
    g = header.geometry
    g.validate(stateful=state is not None)
    if not _HEX64.fullmatch(header.weights_digest):
        raise SnapshotError(f"weights digest {header.weights_digest!r} is not a lowercase sha256 hex")
    tokens = _token_array(header.token_ids)
    logits = _logits_array(logits)
    meta = _meta_bytes(header.meta)
    n_pages = pages_for(len(tokens), g.page_size)
    if len(layers_k) != g.n_layer or len(layers_v) != g.n_layer:
        raise SnapshotError(f"expected {g.n_layer} layers of K and V, got {len(layers_k)} and {len(layers_v)}")
    state = None if state is None else _state_array(state)
    head = _pack_header(header.weights_digest, g, len(tokens), n_pages, len(logits), len(meta), state)
    parts = [head, tokens, logits, meta, bytes(_pad(len(head) + tokens.nbytes + logits.nbytes + len(meta)))]
    for i in range(g.n_layer):
        _, _, kb, vb = g.layer(i)
        parts.append(_layer_array(layers_k[i], g, n_pages, kb, i, f"K of layer {i}"))
        parts.append(_layer_array(layers_v[i], g, n_pages, vb, i, f"V of layer {i}"))
    if state is not None:
        parts.append(state)
    _write_atomic(os.fspath(path), parts)


def _state_array(state) -> np.ndarray:
    a = np.asarray(state)
    if a.ndim != 1 or a.dtype.type is not np.float32 or not 1 <= a.size <= MAX_STATE:
        raise SnapshotError(f"a recurrent state must be float32 [n], 1 <= n <= {MAX_STATE}, got {a.dtype.name} "
                            f"{a.shape}")
    return np.ascontiguousarray(a, dtype="<f4")


def _token_array(token_ids) -> np.ndarray:
    a = np.asarray(token_ids)
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise SnapshotError("token ids must be a 1-d sequence of integers")
    if a.size and (a.min() < 0 or a.max() > 0xFFFFFFFF):
        raise SnapshotError("token ids must fit in uint32")
    return np.ascontiguousarray(a, dtype="<u4")


def _logits_array(logits) -> np.ndarray:
    if logits is None:
        return np.zeros(0, "<f4")
    a = np.asarray(logits)
    if a.ndim != 1 or a.dtype.type is not np.float32:
        raise SnapshotError(f"logits must be float32 [n_vocab], got {a.dtype.name} {a.shape}")
    return np.ascontiguousarray(a, dtype="<f4")


def _meta_bytes(meta: dict) -> bytes:
    if not isinstance(meta, dict):
        raise SnapshotError(f"snapshot meta must be a JSON object, got {type(meta).__name__}")
    try:
        return json.dumps(meta, separators=(",", ":"), ensure_ascii=False).encode() if meta else b""
    except (TypeError, ValueError) as e:
        raise SnapshotError(f"snapshot meta is not JSON-serialisable: {e}") from None


def _parse_meta(raw) -> dict:
    if not len(raw):
        return {}
    try:
        meta = json.loads(bytes(raw).decode())
    except RecursionError:
        raise SnapshotError("snapshot meta nests too deeply") from None
    except ValueError as e:
        raise SnapshotError(f"snapshot meta is not UTF-8 JSON: {e}") from None
    if not isinstance(meta, dict):
        raise SnapshotError("snapshot meta must be a JSON object")
    return meta


def _layer_array(a: np.ndarray, g: KVGeometry, n_pages: int, page_bytes: int, layer: int, what: str) -> np.ndarray:
    if a.dtype == np.uint8 and a.shape == (n_pages, page_bytes):
        return np.ascontiguousarray(a)
    dtype = KV_DTYPES[g.kv_type] or np.dtype(np.uint8)
    shape = g.layer_shape(n_pages, page_bytes, layer)
    if a.dtype.type is not dtype.type or a.shape != shape:
        raise SnapshotError(f"{what}: expected {dtype.name} {shape}, got {a.dtype.name} {a.shape}")
    return np.ascontiguousarray(a, dtype=dtype)  # no copy when already contiguous little-endian


def _pack_header(digest: str, g: KVGeometry, n_tokens: int, n_pages: int, n_logits: int, n_meta: int,
                 state: np.ndarray | None) -> bytes:
    version = 4 if state is not None else 3 if g.layers else 2
    fields = [MAGIC, version, digest.encode(), g.arch.encode(), g.kv_type.encode(), g.n_layer, g.n_kv_head,
              g.head_dim, g.page_size, n_tokens, n_pages, g.k_page_bytes, g.v_page_bytes, n_logits, n_meta]
    head = HEADERS[version].pack(*fields, *([state.size] if state is not None else []))
    return head + b"".join(LAYER.pack(*g.layer(i)) for i in range(g.n_layer) if version >= 3)


def _pad(offset: int) -> int:
    return -offset % ALIGN


def _write_atomic(path: str, parts: list):
    def write(f):
        h = xxhash.xxh3_128()
        for part in parts:
            h.update(part)
            f.write(part)
        f.write(h.intdigest().to_bytes(CHECKSUM_BYTES, "little"))
    write_atomic(path, write)


# ---- reading ----

def read_snapshot(path: str | os.PathLike) -> Snapshot:
    """Validate the header against the file size, map the file, verify the checksum, return views.
    Every problem with the file's content raises SnapshotError; OSError only for open/stat/map."""
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        digest, g, c = _parse_header(_read_head(fd), size)
        mapped = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    buf = np.frombuffer(mapped, np.uint8)  # keeps the mapping alive while any view lives
    body = buf[:size - CHECKSUM_BYTES]
    _verify(xxhash.xxh3_128_intdigest(body), buf[size - CHECKSUM_BYTES:].tobytes(), path)
    header = SnapshotHeader(digest, g, body[c.header_size:c.logits_at].view("<u4"),
                            _parse_meta(body[c.logits_end:c.meta_end]))
    state = body[c.state_at(g):c.state_at(g) + 4 * c.n_state].view("<f4") if c.n_state else None
    return Snapshot(header, *_layer_views(body, g, c), body[c.logits_at:c.logits_end].view("<f4"), state)


class SnapshotFile:
    """The engine's restore path: an open snapshot whose header and size are validated (not yet its
    checksum); read_pages_into then reads the pages straight into pool pages and verifies as it goes.
        with SnapshotFile(path) as f:
            check_compatible(f.header, digest, geometry); ids = allocate(f.header.n_pages)
            f.read_pages_into(pool_k, pool_v, ids)  # on SnapshotError, free ids: they hold garbage"""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._fd = os.open(self.path, os.O_RDONLY)
        try:
            self.size = os.fstat(self._fd).st_size
            digest, g, self._counts = _parse_header(_read_head(self._fd), self.size)
            self._prefix = np.empty(self._counts.pages_at, np.uint8)  # bounded: <= the file's size
            _fill(self._fd, [self._prefix], 0)
            c = self._counts
            tokens = self._prefix[c.header_size:c.logits_at].view("<u4")
            meta = _parse_meta(self._prefix[c.logits_end:c.meta_end])
            self.header = SnapshotHeader(digest, g, tokens, meta)  # unverified until read_pages_into returns
            self.verified = False
        except BaseException:
            os.close(self._fd)
            raise

    def read_pages_into(self, dest_k: Sequence[np.ndarray], dest_v: Sequence[np.ndarray], page_ids):
        """Page j of layer l goes to dest_k[l][page_ids[j]] (and V likewise): any per-layer arrays
        whose [page] item is a writable C-contiguous buffer of exactly that page's bytes."""
        g, ids = self.header.geometry, [int(i) for i in page_ids]
        if len(ids) != self.header.n_pages:
            raise ValueError(f"{len(ids)} page ids for {self.header.n_pages} pages")
        h = xxhash.xxh3_128(self._prefix)
        offset = self._counts.pages_at
        runs = _runs(ids)  # consecutive page ids are read into one buffer
        for layer in range(g.n_layer):
            for dest, page_bytes in zip((dest_k, dest_v), g.layer(layer)[2:]):
                bufs = [_page_buffer(dest[layer], start, n, page_bytes) for start, n in runs]
                offset = _fill(self._fd, bufs, offset)
                for b in bufs:  # hashed while still in cache
                    h.update(b)
        self._state = np.empty(self._counts.n_state, "<f4") if self._counts.n_state else None
        if self._state is not None:
            offset = _fill(self._fd, [self._state], offset)
            h.update(self._state)
        checksum = bytearray(CHECKSUM_BYTES)
        _fill(self._fd, [checksum], offset)
        _verify(h.intdigest(), bytes(checksum), self.path)
        self.verified = True

    @property
    def has_state(self) -> bool:
        """Whether the snapshot holds a recurrent state (version 4), from its header."""
        return self._counts.n_state > 0

    def read_state(self) -> np.ndarray | None:
        """The recurrent state (float32 [n_state]), None when it holds none; once read_pages_into has
        verified it."""
        if not self.verified:
            raise RuntimeError("read_pages_into must verify the snapshot before its state is used")
        return self._state

    def read_logits(self, n_vocab: int) -> np.ndarray:
        """float32 [n_vocab] stored after the last token; only once read_pages_into has verified them."""
        if not self.verified:
            raise RuntimeError("read_pages_into must verify the snapshot before its logits are used")
        if self._counts.n_logits != n_vocab:
            raise SnapshotError(f"snapshot holds {self._counts.n_logits} logits, the model has {n_vocab}")
        return self._prefix[self._counts.logits_at:self._counts.logits_end].view("<f4").copy()

    def close(self):
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> SnapshotFile:
        return self

    def __exit__(self, *exc):
        self.close()


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    """[(first id, count)] of runs of consecutive ids, in order."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][0] + runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([i, 1])
    return [(a, n) for a, n in runs]


def _page_buffer(dest: np.ndarray, page: int, n: int, page_bytes: int) -> memoryview:
    """The bytes of pages page .. page + n - 1 of dest."""
    if not (0 <= page and page + n <= len(dest)):
        raise ValueError(f"page id {page + n - 1} is outside the destination's {len(dest)} pages")
    item = dest[page:page + n]
    if item.nbytes != n * page_bytes or not item.flags.c_contiguous or not item.flags.writeable:
        raise ValueError(f"destination page must be {page_bytes} writable contiguous bytes, "
                         f"got {item.nbytes} ({item.dtype} {item.shape})")
    return memoryview(item).cast("B")


def _fill(fd: int, bufs: list, offset: int) -> int:
    """Read exactly into bufs from offset, resuming short reads; returns the offset after them."""
    views = [memoryview(b).cast("B") for b in bufs]
    i = 0
    while i < len(views):
        n = os.preadv(fd, views[i:i + IOV_MAX], offset)
        if n == 0:
            raise SnapshotError("snapshot ended early: the file changed while it was being read")
        offset += n
        while i < len(views) and n >= len(views[i]):
            n -= len(views[i])
            i += 1
        if n:
            views[i] = views[i][n:]
    return offset


def _verify(computed: int, stored: bytes, path):
    if computed != int.from_bytes(stored, "little"):
        raise SnapshotError(f"{os.fspath(path)}: checksum mismatch, the file is corrupted")


class _Counts(NamedTuple):
    """Byte offsets of each section follow from the counts (Python ints: no overflow)."""
    n_tokens: int
    n_pages: int
    n_logits: int
    n_meta: int
    header_size: int
    n_state: int = 0

    @property
    def logits_at(self) -> int:
        return self.header_size + 4 * self.n_tokens

    @property
    def logits_end(self) -> int:
        return self.logits_at + 4 * self.n_logits

    @property
    def meta_end(self) -> int:
        return self.logits_end + self.n_meta

    @property
    def pages_at(self) -> int:
        return self.meta_end + _pad(self.meta_end)

    def state_at(self, g: KVGeometry) -> int:
        return self.pages_at + self.n_pages * g.bytes_per_page

    def file_size(self, g: KVGeometry) -> int:
        return self.state_at(g) + 4 * self.n_state + CHECKSUM_BYTES


def _read_head(fd: int) -> bytes:
    """The fixed header and, in version 3, the layer table its n_layer implies (less when the file is
    shorter; _parse_header checks)."""
    head = os.pread(fd, HEADER.size, 0)
    version = int.from_bytes(head[8:12], "little") if len(head) >= 12 else 0
    if version >= 3 and version in HEADERS and len(head) >= HEADERS[version].size:
        head = head[:HEADERS[version].size]
        n_layer = int.from_bytes(head[116:120], "little")  # after magic, version, digest, arch, KV type
        if 1 <= n_layer <= MAX_LAYERS:
            head += os.pread(fd, LAYER.size * n_layer, len(head))
    return head


def _parse_header(head: bytes, size: int) -> tuple[str, KVGeometry, _Counts]:
    """Everything checkable from the fixed header and the file size, before any allocation."""
    if head[:len(MAGIC)] != MAGIC[:len(head)]:
        raise SnapshotError(f"not a .llamayctx snapshot (magic {head[:len(MAGIC)]!r}, expected {MAGIC!r})")
    if len(head) < len(MAGIC) + 4:
        raise SnapshotError(f"truncated snapshot: {size} bytes, not even a header")
    version = int.from_bytes(head[len(MAGIC):len(MAGIC) + 4], "little")
    if version not in HEADERS:
        raise SnapshotError(f"snapshot format version {version} is not supported "
                            f"(this llamay reads versions {', '.join(map(str, HEADERS))})")
    header = HEADERS[version]
    if len(head) < header.size:
        raise SnapshotError(f"truncated snapshot: {size} bytes, the header alone needs {header.size}")
    (_, _, digest, arch, kv_type, n_layer, n_kv_head, head_dim, page_size, n_tokens, n_pages,
     k_bytes, v_bytes, n_logits, *more) = header.unpack(head[:header.size])
    n_meta = more[0] if more else 0
    n_state = more[1] if len(more) > 1 else 0
    if version >= 4 and not 1 <= n_state <= MAX_STATE:
        raise SnapshotError(f"a recurrent state of {n_state} floats is outside 1..{MAX_STATE}")
    digest = _text(digest, "weights digest")
    if not _HEX64.fullmatch(digest):
        raise SnapshotError(f"weights digest {digest!r} is not a sha256 hex")
    layers, header_size = (), header.size
    if version >= 3:
        lo = 0 if version >= 4 else 1  # 0: no layer attends (Mamba2), the state is all
        if not lo <= n_layer <= MAX_LAYERS:
            raise SnapshotError(f"n_layer = {n_layer} is outside {lo}..{MAX_LAYERS}")
        header_size += LAYER.size * n_layer
        if len(head) < header_size:
            raise SnapshotError(f"truncated snapshot: {size} bytes, the header and layer table need {header_size}")
        layers = tuple(LAYER.unpack_from(head, header.size + LAYER.size * i) for i in range(n_layer))
        if version >= 4 and len(set(layers)) == 1:
            layers = ()  # uniform layers: the geometry the header alone gives
    g = KVGeometry(_text(arch, "architecture"), n_layer, n_kv_head, head_dim, _text(kv_type, "KV type"),
                   page_size, k_bytes, v_bytes, layers)
    g.validate(stateful=version >= 4)
    if n_pages != pages_for(n_tokens, page_size):
        raise SnapshotError(f"{n_tokens} tokens need {pages_for(n_tokens, page_size)} pages of "
                            f"{page_size}, the header says {n_pages}")
    counts = _Counts(n_tokens, n_pages, n_logits, n_meta, header_size, n_state)
    expected = counts.file_size(g)
    if expected != size:
        kind = "truncated" if size < expected else "oversized"
        raise SnapshotError(f"{kind} snapshot: {size} bytes, the header implies {expected}")
    return digest, g, counts


def _text(raw: bytes, what: str) -> str:
    value = raw.rstrip(b"\0")
    try:
        if b"\0" in value:
            raise ValueError
        return value.decode()
    except ValueError:
        raise SnapshotError(f"{what} field is not NUL-padded UTF-8: {raw!r}") from None


def _layer_views(body: np.ndarray, g: KVGeometry, c: _Counts):
    dtype = KV_DTYPES[g.kv_type] or np.dtype(np.uint8)
    off = c.pages_at
    ks, vs = [], []
    for layer in range(g.n_layer):
        for out, page_bytes in zip((ks, vs), g.layer(layer)[2:]):
            n = c.n_pages * page_bytes
            out.append(body[off:off + n].view(dtype).reshape(g.layer_shape(c.n_pages, page_bytes, layer)))
            off += n
    return ks, vs
