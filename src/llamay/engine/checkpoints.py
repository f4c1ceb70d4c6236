"""Recurrent state checkpoints: a hybrid context's state after a prefix of tokens, found by that prefix
(and the adapters' namespace) so a context opened on a cached prefix resumes from the deepest checkpoint
at or below it instead of recomputing from the start; and the logits at a prompt's end (a dense model keeps
only those: its K/V pages are in the radix tree). LRU within a byte budget."""
from __future__ import annotations

import hashlib
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence

import numpy as np


def _key(ns: int, tokens: Sequence[int], n: int) -> bytes:
    return hashlib.blake2b(np.asarray(tokens[:n], np.int32).tobytes(), digest_size=16,
                           person=ns.to_bytes(8, "little")).digest()


def turn_starts(tokens: Sequence[int], is_control: Callable[[int], bool], last: int) -> list[int]:
    """The offsets k of tokens (at most the last `last`) where a chat template's message starts: a control
    token with no control token among the three after it, the last of a run such as `<|im_end|> \\n
    <|im_start|>` or `<|eot_id|><|start_header_id|>user<|end_header_id|>`. Not offset 0, nor one in the last
    four tokens (an answer's own start: the prompt's last token is checkpointed anyway)."""
    marks = [k for k, t in enumerate(tokens) if is_control(t)]
    end = len(tokens) - 4
    starts = [k for k, nxt in zip(marks, marks[1:] + [len(tokens) + 4]) if 1 <= k < end and nxt - k > 3]
    return starts[-last:] if last > 0 else []


class Checkpoints:
    """Each checkpoint holds a share of a StatePool slot (a context's slot as it was: copy on write keeps it,
    nothing is copied) and, at a prompt's end, the logits after it (a prompt asked again then computes
    nothing before its first token). Without a pool (a dense model) a checkpoint is those logits alone.
    Byte budget: a slot's bytes and the logits' per checkpoint."""

    def __init__(self, budget: int, pool=None):
        """budget: bytes kept (0: none); pool: the StatePool whose slots they share (None: logits only)."""
        self.budget, self.bytes, self.pool = budget, 0, pool
        self._items: OrderedDict[bytes, list] = OrderedDict()  # key -> [ns, n, slot, logits or None]
        self._lengths: dict[int, Counter] = {}  # ns -> prefix lengths held, with their counts

    def __len__(self) -> int:
        return len(self._items)

    def held(self) -> Counter:
        """slot -> the checkpoints sharing it (for StatePool.check)."""
        return Counter(item[2] for item in self._items.values() if item[2] is not None)

    @property
    def _slot_bytes(self) -> int:
        return self.pool.bytes_per_slot if self.pool is not None else 0

    def put(self, ns: int, tokens: Sequence[int], n: int, slot: int | None, logits: np.ndarray | None = None) -> bool:
        """Keep slot (its state after tokens[:n]; None without a pool) as the checkpoint of that prefix,
        sharing it; logits: those after tokens[:n], a copy kept with it (none made when it has them already;
        required without a pool) -> whether it was held already."""
        if n <= 0 or (slot is None) != (self.pool is None) or (slot is None and logits is None):
            return False
        if self._slot_bytes + (logits.nbytes if logits is not None else 0) > self.budget:
            return False
        key = _key(ns, tokens, n)
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
            if logits is not None and item[3] is None:
                item[3] = logits = logits.copy()
                self.bytes += logits.nbytes
                self._fit()
            return True
        logits = logits.copy() if logits is not None else None
        self._items[key] = [ns, n, self.pool.share(slot) if slot is not None else None, logits]
        self._lengths.setdefault(ns, Counter())[n] += 1
        self.bytes += self._slot_bytes + (logits.nbytes if logits is not None else 0)
        self._fit()
        return False

    def _fit(self):
        while self.bytes > self.budget and self.evict():
            pass

    def evict(self) -> bool:
        """Drop the least recently used checkpoint (its slot share released) -> whether there was one."""
        if not self._items:
            return False
        _, (ns, n, slot, logits) = self._items.popitem(last=False)
        self.bytes -= self._slot_bytes + (logits.nbytes if logits is not None else 0)
        if slot is not None:
            self.pool.release(slot)
        lengths = self._lengths[ns]
        lengths[n] -= 1
        if not lengths[n]:
            del lengths[n]
        return True

    def find(self, ns: int, tokens: Sequence[int], limit: int) -> tuple[int, int | None]:
        """(n, slot) of the deepest checkpoint of tokens[:n] with n <= limit; (0, None) when none. The slot
        is the checkpoint's: share it to hold it."""
        for n in sorted((n for n in self._lengths.get(ns, ()) if n <= limit), reverse=True):
            key = _key(ns, tokens, n)
            if key in self._items:
                self._items.move_to_end(key)
                return n, self._items[key][2]
        return 0, None

    def whole(self, ns: int, tokens: Sequence[int]) -> tuple[int | None, np.ndarray] | None:
        """(slot, logits) of the checkpoint after all of tokens when it holds the logits there (a prompt
        computed before), else None. The slot (None without a pool) and logits are the checkpoint's: share
        and copy them."""
        if len(tokens) not in self._lengths.get(ns, ()):
            return None
        key = _key(ns, tokens, len(tokens))
        item = self._items.get(key)
        if item is None or item[3] is None:
            return None
        self._items.move_to_end(key)
        return item[2], item[3]
