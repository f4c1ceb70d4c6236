"""Grammar-constrained sampling for the scheduler's one decode loop (Scheduler._sample_one): the matcher
masks the logits (end-of-generation allowed only when the output is complete), the sampler draws, the
matcher advances. A matcher is llamay.grammar's Matcher (apply, advance, is_done, clone)."""
from __future__ import annotations

import numpy as np

from .sampling import Sampler


def sample(sampler: Sampler, logits: np.ndarray, history: list[int], matcher=None) -> int:
    return sampler.sample(logits, history, matcher.apply if matcher is not None else None)


def accept(matcher, tok: int, eog_ids) -> bool:
    """Advance past tok -> True when the constrained output is complete (nothing more may follow)."""
    if matcher is None:
        return False
    if tok in eog_ids:
        return True
    matcher.advance(tok)
    return matcher.is_done()
