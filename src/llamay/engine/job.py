"""What the scheduler takes and gives: a Job (one generation at the token level), its Pieces (one per
sampled token), its Progress events (events.py, when asked) and one Done per choice."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .sampling import SamplingParams

if TYPE_CHECKING:
    from ..events import Progress
    from ..grammar import Grammar


@dataclass
class Job:
    """One generation at the token level. With ctx, the job continues that context (prompt appended to it)
    and the context stays; otherwise a new context is made from the prompt (prefix from the radix tree)
    and freed at the end, its tokens left cached. n > 1: the prompt is computed once and forked."""
    prompt: list[int]
    params: SamplingParams
    sink: Callable[["Piece | Progress | Done"], None]  # called on the scheduler thread; must not block
    max_tokens: int | None = None
    stops: list[str] = field(default_factory=list)
    n: int = 1
    logprobs: int | None = None  # None: none; k >= 0: the chosen token's logprob and the top k
    ctx: int | None = None
    grammar: Grammar | None = None  # every choice's output is constrained by it
    lora: tuple | None = None  # a new context's adapters ((name, scale), ...); None: the default ones
    spec: str | None = None  # speculative decoding (draft.MODES); None: the scheduler's (the LLM's spec)
    progress: bool = False  # sink a Progress when admitted and after each pass that computed part of the prompt
    post_sampling: bool = False  # logprobs are of the distribution drawn from (after the samplers)
    cancelled: bool = False  # set by cancel(); seen at the next step
    cached_tokens: int | None = None  # of the prompt, found computed: set when admitted, before any Piece
    prompt_tokens: int | None = None  # of the sequence (a continued context's included): set likewise

    def cancel(self):
        self.cancelled = True


@dataclass
class Piece:
    """One sampled token; text is what is safe to show now (may be empty). prompt_ns / eval_ns: the
    sequence's times so far, as Done counts them (0 on the text a sequence's end flushes: token -1)."""
    index: int
    text: str
    token: int
    logprob: float | None = None
    top: list[tuple[int, float]] | None = None
    prompt_ns: int = 0
    eval_ns: int = 0


@dataclass
class Done:
    """reason: 'stop', 'length', 'cancelled' or 'error' (then error says why)."""
    index: int
    reason: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    prompt_ns: int
    eval_ns: int
    total_ns: int
    tokens: list[int]  # the sequence's tokens: prompt (with the context's before it) and generated
    stop_sequence: str | None = None
    ctx: int | None = None  # the context holding the sequence when the job continued one
    error: Exception | None = None
    drafted_tokens: int = 0  # draft tokens verified (speculative decoding)
    accepted_tokens: int = 0  # of them, emitted: each saved a forward pass
    draft_steps: int = 0  # forward passes that verified a draft of this sequence
    disk_tokens: int = 0  # of cached_tokens, those read from the prefix cache's disk tier
    shared_tokens: int = 0  # and from its shared tier (Redis / Valkey)
