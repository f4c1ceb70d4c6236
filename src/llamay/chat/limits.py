"""Limits on one chat-template render (untrusted code from a model file): time, loop steps, sizes, memory,
and cancellation from another thread.

A Budget is the state of one render (or compile). The sandbox's hooks (loop steps, calls, filters,
operators, output) check and charge it; crossing a limit raises LimitExceeded, which stays raised: every
later check raises it again, so code that swallows it cannot carry on."""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from jinja2.utils import Namespace

# Defaults, generous for real templates (the 70 in shared/fixtures render in well under 5 ms each).
RENDER_SECONDS = 2.0  # wall clock for one render
MAX_LOOP_STEPS = 1_000_000  # for-loop iterations in one render, all loops together
MAX_CHARS = 4 * 2**20  # the prompt, any one string built on the way, and the text of any one value
MAX_ITEMS = 1_000_000  # the nodes of any one value, shared parts counted each time (as str() walks them)
MAX_DEPTH = 256  # nesting of any one value (CPython's tuple hash overflows the C stack past ~1e5)
MAX_CREATED_BYTES = 256 * 2**20  # what one render allocates through its operations, less what it frees
MAX_INT_BITS = 2**16  # results of * and ** on integers (about 20,000 digits)
MAX_SOURCE_CHARS = 128 * 2**10  # a template's source; compiling one this long takes up to ~1 s and cannot be
# interrupted. The largest real one known is 17 KB
MAX_NESTING = 64  # blocks and brackets open at once in the source; real templates reach about 10
_CHECK_EVERY = 16  # check points between two reads of the clock and the cancel flag


@dataclass(frozen=True)
class RenderLimits:
    seconds: float = RENDER_SECONDS
    loop_steps: int = MAX_LOOP_STEPS
    chars: int = MAX_CHARS
    items: int = MAX_ITEMS
    depth: int = MAX_DEPTH
    created_bytes: int = MAX_CREATED_BYTES


DEFAULT_LIMITS = RenderLimits()


class LimitExceeded(Exception):
    """A render crossed a limit or was cancelled; str(error) says which, in one line."""

    def __init__(self, message: str, cancelled: bool = False):
        super().__init__(message)
        self.cancelled = cancelled


class Budget:
    """One render's clock, counters and caller data sizes. Not shared between threads."""

    __slots__ = ("limits", "deadline", "cancel", "caller", "caller_sizes", "steps", "created", "tripped",
                 "countdown", "max_chars", "max_created")

    def __init__(self, limits: RenderLimits = DEFAULT_LIMITS, cancel: threading.Event | None = None,
                 caller: frozenset[int] = frozenset()):
        self.limits = limits
        self.deadline = time.monotonic() + limits.seconds
        self.cancel = cancel
        self.caller = caller  # ids of the caller's containers (alive during the render, so ids are unique)
        self.caller_sizes: dict[int, tuple[int, int, int]] = {}  # filled as walks meet them
        self.steps = 0
        self.created = 0  # bytes
        self.tripped: LimitExceeded | None = None
        self.countdown = 0  # check points left before the next check(); hooks may decrement it inline
        self.max_chars, self.max_created = limits.chars, limits.created_bytes  # read on every operation

    def trip(self, message: str, cancelled: bool = False) -> None:
        self.tripped = LimitExceeded(message, cancelled)
        self.countdown = 0
        raise self.tripped

    def tick(self) -> None:
        """A check point; the clock and the cancel flag are read at every _CHECK_EVERY-th."""
        self.countdown -= 1
        if self.countdown <= 0:
            self.check()

    def check(self) -> None:
        """Raises once the time is up, the render was cancelled or a limit was crossed."""
        self.countdown = _CHECK_EVERY
        if self.tripped is not None:
            raise LimitExceeded(str(self.tripped), self.tripped.cancelled)
        if time.monotonic() > self.deadline:
            self.trip(f"the chat template ran past its {self.limits.seconds:g} s limit")
        if self.cancel is not None and self.cancel.is_set():
            self.trip("the chat template render was cancelled", cancelled=True)

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.limits.loop_steps:
            self.trip(f"the chat template ran past its limit of {self.limits.loop_steps:,} loop steps")
        self.tick()

    def admit(self, value: Any, deep: bool = False) -> Any:
        """value, just made by a template operation: within the size limits, and charged (a container of the
        caller's is not). deep: charge the elements too (a C method may have created them)."""
        if type(value) is str:
            if len(value) > self.max_chars:
                self.over_chars()
            self.created += sys.getsizeof(value)
            if self.created > self.max_created:
                self.charge(0)
            return value
        if isinstance(value, (str, bytes)):
            if len(value) > self.max_chars:
                self.over_chars()
        elif isinstance(value, int):
            if value.bit_length() > MAX_INT_BITS:
                self.trip(f"the chat template computed a number over its limit of {MAX_INT_BITS:,} bits")
        elif isinstance(value, (list, tuple, dict, set, frozenset)):
            if len(value) > self.limits.items:
                self.over_items()
            if id(value) in self.caller:  # the caller's own data was never the template's allocation
                return value
            if deep:
                caller = self.caller
                elements = value.values() if isinstance(value, dict) else value
                self.charge(sum(sys.getsizeof(e) for e in elements if id(e) not in caller))
        else:
            return value
        self.charge(sys.getsizeof(value))
        return value

    def charge(self, n_bytes: int) -> None:
        self.created += n_bytes
        if self.created > self.limits.created_bytes:
            self.trip(f"the chat template allocated past its limit of {self.limits.created_bytes >> 20} MiB")

    def refund(self, value: Any) -> None:
        """value is being freed (its last reference was just dropped)."""
        if isinstance(value, (str, bytes, int, list, tuple, dict)):
            self.created = max(0, self.created - sys.getsizeof(value))

    def over_chars(self) -> None:
        self.trip(f"the chat template built a string over its limit of {self.limits.chars:,} characters")

    def over_items(self) -> None:
        self.trip(f"the chat template built a value over its limit of {self.limits.items:,} items")


# the budget of the render running in this context (each thread, each asyncio.to_thread call has its own)
ACTIVE: ContextVar[Budget | None] = ContextVar("chat_template_budget", default=None)


def current() -> Budget:
    budget = ACTIVE.get()
    if budget is None:  # fail closed: template code only runs under a budget
        raise LimitExceeded("the chat template ran outside a render")
    return budget


@contextmanager
def using(budget: Budget) -> Iterator[Budget]:
    token = ACTIVE.set(budget)
    try:
        yield budget
    finally:
        ACTIVE.reset(token)


_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
CONTAINERS = (list, tuple, dict, set, frozenset, Namespace, *_VIEWS)  # what str() and JSON walk into


def _children(value: Any) -> Iterator[Any]:
    if isinstance(value, Namespace):
        value = object.__getattribute__(value, "_Namespace__attrs")
    if isinstance(value, dict):
        yield from value.keys()
        yield from value.values()
    else:
        yield from value


def leaf_chars(value: Any) -> int:
    """The length of value's text (str() or JSON) when it is not a container; ints by their digits."""
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, int):
        return value.bit_length() * 3 // 10 + 2
    return 24


def container_ids(value: Any) -> frozenset[int]:
    """ids of the containers in value (the caller's data, immutable to the template)."""
    found: set[int] = set()
    stack = [value]  # iterative: caller data may nest deeper than the recursion limit
    while stack:
        item = stack.pop()
        if isinstance(item, (dict, list, set, tuple)) and id(item) not in found:
            found.add(id(item))
            stack.extend(item.values() if isinstance(item, dict) else item)
    return frozenset(found)


_ATOMIC = frozenset({str, int, float, bool, type(None)})


def measure_all(values: Any, budget: Budget) -> None:
    """measure() each of values (arguments of a call, operands): the common case, none a container, fast.
    A string is checked against the size limit (a value can grow through calls too)."""
    for value in values:
        if type(value) is str:
            if len(value) > budget.max_chars:
                budget.over_chars()
        elif type(value) not in _ATOMIC and isinstance(value, CONTAINERS):
            measure(value, budget)


def measure(value: Any, budget: Budget) -> tuple[int, int, int]:
    """(items, chars, depth) of value as str(), JSON, == and hash() walk it: a shared part counts once per
    parent (a DAG of lists doubling at each level is as large as its tree), though each is visited once.
    Raises past the item, character or depth limit, so that no single C-level walk over value can run long,
    allocate much or nest deep."""
    if type(value) in _ATOMIC or not isinstance(value, CONTAINERS):
        return 1, leaf_chars(value), 0
    return _sized(value, budget, {}, budget.limits.depth)


def _sized(container: Any, budget: Budget, memo: dict, depth_left: int) -> tuple[int, int, int]:
    """measure() of a container, from memo (sizes of the containers met already in this walk) if there.
    The caller's containers have their own memo, kept for the whole render: they cannot change during it."""
    if id(container) in budget.caller:
        memo, depth_left = budget.caller_sizes, budget.limits.depth
    return memo.get(id(container)) or _size(container, budget, memo, depth_left)


def _size(container: Any, budget: Budget, memo: dict, depth_left: int) -> tuple[int, int, int]:
    """Walks one container (recursion bounded by the depth limit) and records its size in memo."""
    limits = budget.limits
    if depth_left <= 0:
        budget.trip(f"the chat template nested a value past its limit of {limits.depth} levels")
    if not isinstance(container, Namespace) and len(container) >= limits.items:  # before walking it
        budget.over_items()
    budget.tick()
    items, chars, depth = 1, 0, 0
    for child in _children(container):
        if type(child) is str:
            items, chars = items + 1, chars + len(child)
        elif not isinstance(child, CONTAINERS):
            items, chars = items + 1, chars + leaf_chars(child)
        else:
            size = _sized(child, budget, memo, depth_left - 1)
            items, chars, depth = items + size[0], chars + size[1], max(depth, size[2])
            if items > limits.items or chars > limits.chars:
                _within(items, chars, 0, budget)
    size = memo[id(container)] = (items, chars, depth + 1)
    _within(*size, budget)
    return size


def _within(items: int, chars: int, depth: int, budget: Budget) -> None:
    limits = budget.limits
    if depth > limits.depth:
        budget.trip(f"the chat template nested a value past its limit of {limits.depth} levels")
    if items > limits.items:
        budget.over_items()
    if chars > limits.chars:
        budget.over_chars()
