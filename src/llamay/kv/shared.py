"""The prefix cache's shared tier: pages in Redis or Valkey under the disk tier's content keys
(disk.chain_keys), so a server finds what another computed, on this machine or another.

A value is the page's xxh3-64 checksum (8 bytes, little-endian) then its bytes (the disk tier's page
layout); a value of the wrong length or checksum is never used (the caller computes the page). Pages are
written with SET NX, an expiry if asked; the server's own policy (maxmemory-policy allkeys-lru) bounds it.
A failing server (down, timing out, refusing) is a miss: the request computes, nothing else fails; and
for BACKOFF_S after a failure the tier is not asked at all, so lookups on the scheduler's thread never wait
out a connect timeout per request while the server is away.
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
        """Page keys[j] into the buffers dests[j], verified -> how many pages, from the first, were read."""
        if not keys or self._away():
            return 0
        try:
            values = self.client.mget([PREFIX + k for k in keys])
        except self._errors:
            self._failed()
            return 0
        for j, (value, bufs) in enumerate(zip(values, dests)):
            if value is None or len(value) != 8 + self.page_bytes:
                self.dropped += value is not None
                return j
            body = memoryview(value)[8:]
            if xxhash.xxh3_64_intdigest(body) != int.from_bytes(value[:8], "little"):
                self.dropped += 1
                return j
            at = 0
            for b in bufs:
                b[:] = body[at:at + len(b)]
                at += len(b)
        return len(values)

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
