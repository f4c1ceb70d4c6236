"""Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam 2018): each backend owns vnodes
points on a ring; a key goes to the first backend clockwise from its hash that is up and under
load_factor times the mean load. Adding or removing a backend moves only the keys it owns."""
from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Callable, Sequence


def point(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class Ring:
    def __init__(self, names: Sequence[str], vnodes: int):
        """names: the backends (distinct); vnodes: ring points per backend."""
        if len(set(names)) != len(names) or not names:
            raise ValueError("the backends must be distinct, at least one")
        self.names = list(names)
        points = sorted((point(f"{name}#{i}".encode()), name) for name in names for i in range(vnodes))
        self._at = [p for p, _ in points]
        self._owner = [n for _, n in points]

    def order(self, key: bytes) -> list[str]:
        """Every backend, in the order a request of this key tries them (its owner first)."""
        start = bisect.bisect(self._at, point(key))
        seen: dict[str, None] = {}
        for i in range(len(self._owner)):
            seen.setdefault(self._owner[(start + i) % len(self._owner)])
            if len(seen) == len(self.names):
                break
        return list(seen)

    def choose(self, key: bytes, up: Callable[[str], bool], load: Callable[[str], int],
               load_factor: float) -> list[str]:
        """The order to try for key: backends that are up and under the load bound first (ring order),
        then those up but over it, then those down (a health check can lag a backend's return)."""
        order = self.order(key)
        live = [n for n in order if up(n)]
        if not live:
            return order
        cap = math.ceil(load_factor * (sum(load(n) for n in live) + 1) / len(live))
        under = [n for n in live if load(n) < cap]
        return under + [n for n in live if n not in under] + [n for n in order if n not in live]
