"""llama-server's slots: per model, one per sequence its scheduler runs at once (--concurrency), each
remembering the tokens (prompt and generated) of the last request it served. A request names its slot
(`id_slot`) or gets the idle one whose tokens share the longest prefix with its prompt.

The K/V behind those tokens is the model's prefix cache, which every slot shares: a save computes what
the cache lost (a snapshot file, engine/snapshots.py), a restore puts the file's K/V back in the cache,
where the next prompt extending those tokens finds it; an erase forgets the slot's tokens, not the cache."""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field

import numpy as np

from ..events import Finish
from .protocol.base import bad_request
from .protocol.request import GenRequest
from .sessions import settle


@dataclass
class Slot:
    id: int
    tokens: list[int] = field(default_factory=list)  # of the last request it served
    lora: tuple | None = None  # the adapters those tokens' K/V was computed under (None: the default)
    busy: int = 0  # requests in flight on it
    task: int = -1  # the last request's number
    req: GenRequest | None = None  # the last request, with the defaults it ran with
    last: Finish | None = None  # how it ended
    used: int = 0  # the clock when it was last taken


class SlotTable:
    def __init__(self, n_slots: int):
        self.n_slots = n_slots
        self.by_model: dict[str, list[Slot]] = {}
        self._clock = itertools.count(1)

    def slots(self, model: str) -> list[Slot]:
        return self.by_model.setdefault(model, [Slot(i) for i in range(self.n_slots)])

    def get(self, model: str, id_slot: int) -> Slot:
        slots = self.slots(model)
        if not 0 <= id_slot < len(slots):
            raise bad_request("Invalid slot ID", "id_slot")
        return slots[id_slot]

    def take(self, model: str, ids: list[int], pinned: int | None) -> Slot:
        """The pinned slot, else the idle one sharing the longest prefix with ids (then the least recently
        used); all busy: the same choice among every slot."""
        if pinned is not None:
            slot = self.get(model, pinned)
        else:
            slots = self.slots(model)
            idle = [s for s in slots if not s.busy] or slots
            slot = max(idle, key=lambda s: (_common_prefix(s.tokens, ids), -s.used))
        slot.busy += 1
        slot.used = slot.task = next(self._clock)
        return slot

    def finish(self, slot: Slot, req: GenRequest, finish: Finish, lora: tuple | None):
        slot.tokens, slot.lora, slot.req, slot.last = list(finish.context or []), lora, req, finish

    @staticmethod
    def release(slot: Slot):
        slot.busy -= 1


def _common_prefix(a: list[int], b: list[int]) -> int:
    """Compared in numpy: every request compares its prompt with every slot's tokens, on the event loop."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n], np.int64) != np.asarray(b[:n], np.int64))
    return int(differ[0]) if differ.size else n


async def save(session, slot: Slot, path: str) -> tuple[int, int]:
    """The slot's tokens into a snapshot at path (session: its model's engine Session) -> (tokens saved,
    bytes)."""
    if not slot.tokens:
        raise bad_request(f"slot {slot.id} holds no tokens to save")
    await settle(session.save_tokens(slot.tokens, slot.lora, path))
    return len(slot.tokens), os.path.getsize(path)


async def restore(session, slot: Slot, path: str, matcher) -> int:
    """The snapshot at path into the prefix cache and the slot -> tokens restored (matcher:
    snapshots.read_grammar's result for the file)."""
    slot.tokens, slot.lora = await settle(session.restore_tokens(path, matcher))
    slot.req, slot.last = None, None
    return len(slot.tokens)


def erase(slot: Slot) -> int:
    n, slot.tokens, slot.req, slot.last = len(slot.tokens), [], None, None
    return n

