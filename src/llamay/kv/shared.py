"""The prefix cache's shared tier: pages in Redis or Valkey under the disk tier's content keys
(disk.chain_keys), so a server finds what another computed, on this machine or another.

A value is the page's xxh3-64 checksum (8 bytes, little-endian) then its bytes (the disk tier's page
layout); a value of the wrong length or checksum is never used (the caller computes the page). Pages are
written with SET NX, an expiry if asked; the server's own policy (maxmemory-policy allkeys-lru) bounds it.
A failing server (down, timing out, refusing) is a miss: the request computes, nothing else fails; and
for BACKOFF_S after a failure the tier is not asked at all, so lookups on the scheduler's thread never wait
out a connect timeout per request while the server is away.
Reading: one MGET for a run of pages, its reply (RESP2 or RESP3) parsed here straight from the connection's
socket into the pages' buffers (recv_into: no copy through redis-py's reply buffer, 4-5x less time on 35 MB).
Thread-safe: redis-py's client pools its connections."""
from __future__ import annotations

from collections.abc import Sequence

import time

import xxhash

PREFIX = b"llamay:kv:"
TIMEOUT_S = 2.0  # a server slower than this to answer is treated as absent for that call
BACKOFF_S = 30.0  # after a failure, the tier is taken as empty this long before it is asked again


class SharedTier:
    def __init__(self, url: str, page_bytes: int, ttl: int | None = None):
        """url: redis://host:port/db (rediss:// for TLS, unix:// for a socket). ttl: seconds a page lives."""
        import redis
        self.page_bytes, self.ttl, self.url = page_bytes, ttl, url
        self._errors = (redis.RedisError, OSError)
        self.client = redis.Redis.from_url(url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)
        self.errors = 0  # calls that failed (the server away): each a miss
        self._down_until = 0.0  # monotonic time before which the server is not asked (BACKOFF_S)
        self.dropped = 0  # values refused: wrong length or checksum

    def find(self, keys: Sequence[bytes]) -> int:
        """How many of keys, from the first, the server holds."""
        found = self.has(keys)
        n = 0
        while n < len(keys) and found[n]:
            n += 1
        return n

    def has(self, keys: Sequence[bytes]) -> list[bool]:
        """Which of keys the server holds (none, where it cannot be asked)."""
        if not keys or self._away():
            return [False] * len(keys)
        try:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.exists(PREFIX + key)
            return [bool(x) for x in pipe.execute()]
        except self._errors:
            self._failed()
            return [False] * len(keys)

    def read(self, keys: Sequence[bytes], dests: Sequence[Sequence[memoryview]]) -> int:
        """Page keys[j] into the buffers dests[j], verified -> how many pages, from the first, were read.
        A page missing, of the wrong length or checksum ends the run (the buffers after it may hold
        anything: the caller uses only the pages read)."""
        if not keys or self._away():
            return 0
        pool = self.client.connection_pool
        try:
            conn = pool.get_connection()
        except TypeError:  # redis-py before 5.3 names the command
            conn = pool.get_connection("MGET")
        try:
            conn.send_command("MGET", *(PREFIX + k for k in keys))
            return self._read_reply(_Reply(conn._sock), len(keys), dests)
        except (*self._errors, ValueError):
            conn.disconnect()  # the reply may be half read: this connection is not reused as is
            self._failed()
            return 0
        finally:
            pool.release(conn)

    def _read_reply(self, reply: _Reply, n: int, dests: Sequence[Sequence[memoryview]]) -> int:
        if reply.header(b"*") != n:
            raise ValueError("MGET: not one value per key")
        good, stamp = n, bytearray(8)
        for j, bufs in enumerate(dests):
            size = reply.header(b"$")
            if good < n or size != 8 + self.page_bytes:  # a page after the run's end, missing or the wrong size
                self.dropped += good == n and size >= 0
                good = min(good, j)
                reply.skip(size + 2 if size >= 0 else 0)
                continue
            end = bytearray(2)
            reply.read_into([memoryview(stamp), *bufs, memoryview(end)])
            if end != b"\r\n":
                raise ValueError("MGET: a value's length does not match its bytes")
            h = xxhash.xxh3_64()
            for b in bufs:
                h.update(b)
            if h.intdigest() != int.from_bytes(stamp, "little"):
                self.dropped += 1
                good = j
        return good

    def write(self, keys: Sequence[bytes], pages: Sequence[Sequence[memoryview]]):
        """Set each page not set yet (NX)."""
        if self._away():
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            for key, bufs in zip(keys, pages):
                body = b"".join(bytes(b) for b in bufs)
                pipe.set(PREFIX + key, xxhash.xxh3_64_intdigest(body).to_bytes(8, "little") + body, nx=True,
                         ex=self.ttl)
            pipe.execute()
        except self._errors:
            self._failed()

    def _away(self) -> bool:
        return time.monotonic() < self._down_until

    def _failed(self):
        self.errors += 1
        self._down_until = time.monotonic() + BACKOFF_S


class _Reply:
    """A RESP reply read from a socket: header lines through a small buffer, bulk values straight into
    the caller's buffers."""

    def __init__(self, sock):
        if sock is None:
            raise ValueError("no connection")
        self.sock, self.buf = sock, bytearray()

    def header(self, kind: bytes) -> int:
        """The number after a `kind` line (*N, $N); -1 for a null ($-1, *-1, RESP3's _)."""
        while (end := self.buf.find(b"\r\n")) < 0:
            self._recv()
        line = bytes(self.buf[:end])
        del self.buf[:end + 2]
        if line == b"_" or line[:1] == kind and line[1:] == b"-1":
            return -1
        if line[:1] != kind or not line[1:].isdigit():
            raise ValueError(f"unexpected reply line {line[:80]!r}")
        return int(line[1:])

    def read_into(self, views: list[memoryview]):
        for v in views:
            v = v.cast("B")
            take = min(len(v), len(self.buf))
            v[:take] = self.buf[:take]
            del self.buf[:take]
            while take < len(v):
                got = self.sock.recv_into(v[take:])
                if not got:
                    raise ConnectionError("the server closed the connection")
                take += got

    def skip(self, n: int):
        while len(self.buf) < n:
            self._recv()
        del self.buf[:n]

    def _recv(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buf += chunk
