"""Perplexity over a token sequence: non-overlapping chunks, each evaluated alone as [BOS] + chunk
from an empty context; every token scored once from the previous position's logits, in float64.
This is the method of the llama.cpp fixtures (ppl_T1.json)."""
from __future__ import annotations

import math

import numpy as np


def token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """logits [n, n_vocab] predicting targets [n] -> float64 negative log-likelihoods [n]."""
    z = logits.astype(np.float64)
    m = z.max(axis=1)
    lse = m + np.log(np.exp(z - m[:, None]).sum(axis=1))
    return lse - z[np.arange(len(targets)), targets]


def perplexity(llm, ids: list[int], bos_id: int, chunk: int = 511) -> tuple[float, np.ndarray]:
    """(perplexity, per-token NLL) of ids."""
    nll = []
    for lo in range(0, len(ids), chunk):
        part = ids[lo:lo + chunk]
        logits = llm.logits([bos_id] + part)
        nll.append(token_nll(logits[:-1], np.asarray(part)))
    per_token = np.concatenate(nll)
    return math.exp(per_token.mean()), per_token
