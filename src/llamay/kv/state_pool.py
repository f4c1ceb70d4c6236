"""Recurrent state slots: each hybrid layer's fixed-size float32 state (a convolution's last inputs, an
SSM's or a delta rule's matrix), one slot per context that has computed tokens. Slots are refcounted:
a fork shares its parent's slot and the first branch that computes gets its own copy (writable), so a
fork of n ways allocates nothing until a branch runs. A state checkpoint shares a slot the same way (no
copy: engine/checkpoints.py), and a full pool asks its reclaim hook to give one back first. The arrays are
allocated once (np.zeros: touched only as slots are used) because the forward graphs hold pointers into
them; a slot used once is in memory from then on (a fresh copy per checkpoint page-faulted 19 MB each time
on Qwen3.5-0.8B: 10-60 ms)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .allocator import InvariantError, OutOfPages
from .pool import madvise_populate


class OutOfStates(OutOfPages):
    """Every recurrent state slot is held: a context past them cannot compute (like running out of pages)."""


class StatePool:
    def __init__(self, n_slots: int, shapes: dict[int, tuple[tuple[int, ...], ...]]):
        """shapes: layer -> the shapes of the arrays one slot holds for it."""
        self.n_slots = n_slots
        self.reclaim: Callable[[], bool] | None = None  # frees a share of some slot -> whether it could
        self.layers = {il: tuple(np.zeros((n_slots, *shape), np.float32) for shape in s) for il, s in shapes.items()}
        self.clear()

    def clear(self):
        """Every slot free (a new store reusing the arrays: the graphs built over them stay valid)."""
        self._refs = [0] * self.n_slots
        self._free = list(range(self.n_slots - 1, -1, -1))

    @property
    def bytes_per_slot(self) -> int:
        return sum(a[0].nbytes for arrays in self.layers.values() for a in arrays)

    @property
    def n_free(self) -> int:
        return len(self._free)

    def alloc(self, zero: bool = True) -> int:
        """A slot held once: of zeros (the state before any token), or (zero=False) of whatever it held, for
        a caller that overwrites it whole."""
        while not self._free and self.reclaim is not None and self.reclaim():
            pass
        if not self._free:
            raise OutOfStates(f"all {self.n_slots} recurrent state slots are held")
        slot = self._free.pop()
        for arrays in self.layers.values() if zero else ():
            for a in arrays:
                a[slot] = 0
        self._refs[slot] = 1
        return slot

    def share(self, slot: int) -> int:
        self._refs[slot] += 1
        return slot

    def release(self, slot: int):
        self._refs[slot] -= 1
        if self._refs[slot] == 0:
            self._free.append(slot)

    def writable(self, slot: int) -> int:
        """The slot itself when held once, else a copy of it that is (the share given up): copy on write."""
        if self._refs[slot] == 1:
            return slot
        new = self.alloc(zero=False)
        self.copy(slot, new)
        self.release(slot)
        return new

    def copy(self, src: int, dst: int):
        for arrays in self.layers.values():
            for a in arrays:
                a[dst] = a[src]

    def read(self, slot: int, out: np.ndarray | None = None) -> np.ndarray:
        """The slot's state as one float32 vector (a checkpoint's or a snapshot's bytes), into out when given
        (float32, bytes_per_slot of them)."""
        parts = [a[slot].ravel() for arrays in self.layers.values() for a in arrays]
        return np.concatenate(parts, out=out)

    def prefault(self, n_slots: int, wait=None, first: int = 0) -> bool:
        """Back slots [first, n_slots) with memory now, their bytes unchanged (MADV_POPULATE_WRITE, as
        PagePool.prefault), slot by slot, each step after wait(its bytes) -> whether the system could. alloc
        hands out the lowest free slot ids first: they are the first ready."""
        try:
            for slot in range(first, min(n_slots, self.n_slots)):
                for arrays in self.layers.values():
                    for a in arrays:
                        if not madvise_populate(a[slot], wait):
                            return False
        except (OSError, AttributeError):
            return False
        return True

    def buffers(self, slot: int) -> list[memoryview]:
        """The slot's state in place, in read()'s order, as bytes (the caller holds a share: nothing writes a
        shared slot)."""
        return [memoryview(a[slot]).cast("B") for arrays in self.layers.values() for a in arrays]

    def write(self, slot: int, state: np.ndarray):
        """Sets the slot from a vector read() gave (ValueError when its size is not this pool's)."""
        if state.dtype != np.float32 or state.size * 4 != self.bytes_per_slot:
            raise ValueError(f"a recurrent state of {state.size * state.itemsize} bytes for slots of "
                             f"{self.bytes_per_slot}")
        at = 0
        for arrays in self.layers.values():
            for a in arrays:
                n = a[slot].size
                a[slot] = state[at:at + n].reshape(a.shape[1:])
                at += n

    def check(self, held: dict[int, int]):
        """InvariantError unless each slot's refcount is its holders (held: slot -> holders the owner counts)
        and the free slots are exactly those of refcount 0."""
        for slot in range(self.n_slots):
            if self._refs[slot] != held.get(slot, 0):
                raise InvariantError(f"state slot {slot}: refcount {self._refs[slot]} != holders {held.get(slot, 0)}")
        if sorted(self._free) != [s for s in range(self.n_slots) if not self._refs[s]]:
            raise InvariantError("state slots: the free list disagrees with the refcounts")
