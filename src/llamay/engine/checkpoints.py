"""Recurrent state checkpoints: a hybrid context's state after a prefix of tokens, found by that prefix
(and the adapters' namespace) so a context opened on a cached prefix resumes from the deepest checkpoint
at or below it instead of recomputing from the start. LRU within a byte budget."""
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
    def __init__(self, budget: int):
        """budget: bytes of states kept (0: none)."""
        self.budget, self.bytes = budget, 0
        self._items: OrderedDict[bytes, tuple[int, int, np.ndarray]] = OrderedDict()  # key -> (ns, n, state)
        self._lengths: dict[int, Counter] = {}  # ns -> prefix lengths held, with their counts

    def __len__(self) -> int:
        return len(self._items)

    def put(self, ns: int, tokens: Sequence[int], n: int, state: np.ndarray):
        """Keep the state after tokens[:n] (a copy is the caller's to give: it is held as is)."""
        if n <= 0 or state.nbytes > self.budget:
            return
        key = _key(ns, tokens, n)
        if key in self._items:
            self._items.move_to_end(key)
            return
        self._items[key] = (ns, n, state)
        self._lengths.setdefault(ns, Counter())[n] += 1
        self.bytes += state.nbytes
        while self.bytes > self.budget:
            _, (ns_old, n_old, old) = self._items.popitem(last=False)
            self.bytes -= old.nbytes
            lengths = self._lengths[ns_old]
            lengths[n_old] -= 1
            if not lengths[n_old]:
                del lengths[n_old]

    def find(self, ns: int, tokens: Sequence[int], limit: int) -> tuple[int, np.ndarray | None]:
        """(n, state) of the deepest checkpoint of tokens[:n] with n <= limit; (0, None) when none."""
        for n in sorted((n for n in self._lengths.get(ns, ()) if n <= limit), reverse=True):
            key = _key(ns, tokens, n)
            if key in self._items:
                self._items.move_to_end(key)
                return n, self._items[key][2]
        return 0, None
