"""The prefix cache's disk tier: pages of K/V in files under one directory, keyed by content.

A page's key is a chain (chain_keys): key(i) = blake2b(key(i - 1) + the page's token ids), key(-1) the
root, which names the weights, the adapters, the KV type and the page size (engine/disk_cache.py). So a key
names everything before the page, and K/V of other weights can never be taken for this model's.

Files are segments, each holding the pages one write put, in order: a header (magic, page count, page bytes,
each page's key and xxh3-64 checksum, the header's own checksum), then the pages, each the K then V rows of
every layer in turn (the pool's order). A segment is written to a temporary name and renamed, so a crash at
any moment leaves whole segments and temporary files (removed when the tier opens). A segment whose header
or size is wrong is deleted when the tier opens; a page whose checksum fails on reading is not used (its
segment is deleted) and the caller computes it again: never wrong K/V.

LRU under a byte budget, by segment: a read touches its segment (mtime); the least recently used go first.
Thread-safe: the engine writes from a thread of its own and reads on the scheduler's."""
from __future__ import annotations

import hashlib
import os
import struct
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from .snapshot_format import IOV_MAX, SnapshotError, _fill

MAGIC = b"LLKVSEG1"
KEY_BYTES = 16
_HEAD = struct.Struct("<8sIQ")  # magic, pages, page bytes
_ENTRY = struct.Struct(f"<{KEY_BYTES}sQ")  # key, xxh3-64 of the page
SUFFIX, TMP_SUFFIX = ".seg", ".tmp"
STALE_TMP_S = 600.0  # a temporary file this old is a crashed write's, not another process's in progress


def chain_keys(root: bytes, tokens: Sequence[int], page_size: int, n_pages: int) -> list[bytes]:
    """The keys of the first n_pages full pages of tokens (len(tokens) >= n_pages * page_size)."""
    keys, key = [], root
    ids = np.asarray(tokens[:n_pages * page_size], "<u4")
    for i in range(n_pages):
        key = hashlib.blake2b(key + ids[i * page_size:(i + 1) * page_size].tobytes(), digest_size=KEY_BYTES).digest()
        keys.append(key)
    return keys


def root_key(*parts: str) -> bytes:
    """The chain's root for these parts (weights digest, adapters, KV type, page size ...)."""
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=KEY_BYTES).digest()


@dataclass
class _Segment:
    path: Path
    keys: list[bytes]
    page_bytes: int
    size: int
    used: float  # last write or read (its mtime)

    @property
    def payload_at(self) -> int:
        return _header_size(len(self.keys))


def _header_size(n: int) -> int:
    return _HEAD.size + n * _ENTRY.size + 8


class DiskTier:
    def __init__(self, directory: str | os.PathLike, budget: int, page_bytes: int):
        """Pages of page_bytes each under directory (made if missing), at most budget bytes of segments."""
        self.dir, self.budget, self.page_bytes = Path(directory), budget, page_bytes
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._segments: dict[str, _Segment] = {}
        self._index: dict[bytes, tuple[str, int, int]] = {}  # key -> (segment name, slot, checksum)
        self.bytes = 0
        self.dropped = 0  # segments deleted as torn or corrupt
        self._scan()

    # --- queries -------------------------------------------------------------------------------

    def find(self, keys: Sequence[bytes]) -> int:
        """How many of keys, from the first, the tier holds."""
        with self._lock:
            n = 0
            while n < len(keys) and keys[n] in self._index:
                n += 1
            return n

    def has(self, keys: Sequence[bytes]) -> list[bool]:
        with self._lock:
            return [k in self._index for k in keys]

    @property
    def n_pages(self) -> int:
        with self._lock:
            return len(self._index)

    # --- reading -------------------------------------------------------------------------------

    def read(self, keys: Sequence[bytes], dests: Sequence[Sequence[memoryview]]) -> int:
        """Read page keys[j] into the buffers dests[j] (its bytes in order, page_bytes in all), pages of
        one segment in one read -> how many pages, from the first, were read and verified. A page that
        fails (missing, torn, corrupt) ends the run; its segment is dropped."""
        done = 0
        while done < len(keys):
            with self._lock:
                where = self._index.get(keys[done])
                seg = self._segments.get(where[0]) if where else None
            if seg is None:
                return done
            run = 1  # the pages after it in the same segment, slot after slot
            while done + run < len(keys) and run + where[1] < len(seg.keys) and seg.keys[where[1] + run] == keys[done + run]:
                run += 1
            ok = self._read_run(seg, where[1], keys[done:done + run], dests[done:done + run])
            done += ok
            if ok < run:
                return done
        return done

    def _read_run(self, seg: _Segment, slot: int, keys, dests) -> int:
        try:
            fd = os.open(seg.path, os.O_RDONLY)
        except OSError:
            self._drop(seg.path.name, corrupt=False)
            return 0
        try:
            _fill(fd, [b for d in dests for b in d], seg.payload_at + slot * seg.page_bytes)
        except (OSError, SnapshotError):
            self._drop(seg.path.name)
            return 0
        finally:
            os.close(fd)
        for j, (key, bufs) in enumerate(zip(keys, dests)):
            h = xxhash.xxh3_64()
            for b in bufs:
                h.update(b)
            with self._lock:
                where = self._index.get(key)
            if where is None or h.intdigest() != where[2]:
                self._drop(seg.path.name)
                return j
        now = time.time()
        seg.used = now
        try:
            os.utime(seg.path, (now, now))
        except OSError:
            pass
        return len(keys)

    # --- writing -------------------------------------------------------------------------------

    def write(self, keys: Sequence[bytes], pages: Sequence[Sequence[memoryview]]):
        """One segment of these pages (each its buffers in order, page_bytes in all), keys not held yet;
        then the least recently used segments go until the tier is within its budget."""
        with self._lock:
            todo = [(k, p) for k, p in zip(keys, pages) if k not in self._index]
        if not todo:
            return
        sums = []
        for _, bufs in todo:
            h = xxhash.xxh3_64()
            for b in bufs:
                h.update(b)
            sums.append(h.intdigest())
        entries = b"".join(_ENTRY.pack(k, s) for (k, _), s in zip(todo, sums))
        head = _HEAD.pack(MAGIC, len(todo), self.page_bytes) + entries
        head += xxhash.xxh3_64_intdigest(head).to_bytes(8, "little")
        name = f"{uuid.uuid4().hex}{SUFFIX}"
        tmp = self.dir / f".{name}.{os.getpid()}{TMP_SUFFIX}"
        views = [memoryview(head)] + [memoryview(b).cast("B") for _, bufs in todo for b in bufs]
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            for i in range(0, len(views), IOV_MAX):
                _write_all(fd, views[i:i + IOV_MAX])
            os.close(fd)
            fd = -1
            os.replace(tmp, self.dir / name)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        seg = _Segment(self.dir / name, [k for k, _ in todo], self.page_bytes,
                       _header_size(len(todo)) + len(todo) * self.page_bytes, time.time())
        with self._lock:
            self._add(name, seg, sums)
            self._trim()

    # --- upkeep --------------------------------------------------------------------------------

    def clear(self):
        with self._lock:
            for seg in self._segments.values():
                seg.path.unlink(missing_ok=True)
            self._segments.clear()
            self._index.clear()
            self.bytes = 0

    def _scan(self):
        now = time.time()
        for path in self.dir.iterdir():
            if path.name.endswith(TMP_SUFFIX):
                if now - _mtime(path) > STALE_TMP_S:
                    path.unlink(missing_ok=True)
                continue
            if not path.name.endswith(SUFFIX):
                continue
            parsed = _parse(path, self.page_bytes)
            if parsed is None:
                path.unlink(missing_ok=True)
                self.dropped += 1
                continue
            seg, sums = parsed
            self._add(path.name, seg, sums)
        self._trim()

    def _add(self, name: str, seg: _Segment, sums: list[int]):
        self._segments[name] = seg
        for slot, (key, s) in enumerate(zip(seg.keys, sums)):
            self._index.setdefault(key, (name, slot, s))
        self.bytes += seg.size

    def _trim(self):
        """Oldest segments out until within budget (the lock held)."""
        if self.bytes <= self.budget:
            return
        for name in sorted(self._segments, key=lambda n: self._segments[n].used):
            if self.bytes <= self.budget:
                break
            self._remove(name)

    def _remove(self, name: str):
        seg = self._segments.pop(name)
        seg.path.unlink(missing_ok=True)
        for key in seg.keys:
            if self._index.get(key, ("",))[0] == name:
                del self._index[key]
        self.bytes -= seg.size

    def _drop(self, name: str, corrupt: bool = True):
        with self._lock:
            if name in self._segments:
                self._remove(name)
                self.dropped += corrupt


def _parse(path: Path, page_bytes: int) -> tuple[_Segment, list[int]] | None:
    """The segment's keys and checksums, or None if its header or size is wrong (torn, corrupt, other)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD.size)
            if len(head) < _HEAD.size:
                return None
            magic, n, pb = _HEAD.unpack(head)
            if magic != MAGIC or pb != page_bytes or not 0 < n < 1 << 20:
                return None
            rest = f.read(n * _ENTRY.size + 8)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return None
    body = head + rest
    if len(rest) != n * _ENTRY.size + 8 or xxhash.xxh3_64_intdigest(body[:-8]) != int.from_bytes(body[-8:], "little"):
        return None
    if size != _header_size(n) + n * page_bytes:
        return None
    entries = [_ENTRY.unpack_from(rest, i * _ENTRY.size) for i in range(n)]
    return _Segment(path, [k for k, _ in entries], page_bytes, size, _mtime(path)), [s for _, s in entries]


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _write_all(fd: int, views: list[memoryview]):
    while views:
        n = os.writev(fd, views)
        while views and n >= len(views[0]):
            n -= len(views[0])
            views = views[1:]
        if n:
            views[0] = views[0][n:]
