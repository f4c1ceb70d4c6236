"""Token sampling from one position's logits, following llama.cpp's default sampler chain.

Order (ref: llama.cpp common/sampling.cpp, default `samplers`): logit bias, penalties, top-k, top-p,
min-p, temperature, draw. Works on a float32 [n_vocab] array; the vocabulary-wide steps are O(n_vocab)
(argpartition, masks), sorting only the few candidates that survive.
"""
import math
import dataclasses
from dataclasses import dataclass

import numpy as np

_FIRST_PREFIX = 256  # candidates sorted first when top-p must search the whole vocabulary
_DRAW_BLOCK = 512  # tokens per float32 partial sum in Sampler._draw


@dataclass(frozen=True)
class SamplingParams:
    """llama.cpp's defaults. 0 disables top_k and repeat_last_n (-1: whole history), 1.0 disables
    top_p and repeat_penalty, 0.0 disables min_p; temperature <= 0 is greedy."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_last_n: int = 64
    seed: int | None = None
    logit_bias: dict[int, float] | None = None

    def check(self, n_vocab: int) -> None:
        """ValueError naming the first field no sampler can use: a float that is not finite (NaN passes
        every range check), a negative top_k, a logit_bias id outside [0, n_vocab) or a bias NaN or +inf."""
        for name in ("temperature", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if self.repeat_penalty <= 0:
            raise ValueError(f"repeat_penalty must be > 0, got {self.repeat_penalty}")
        for name in ("top_k", "repeat_last_n"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < (0 if name == "top_k" else -1):
                raise ValueError(f"{name} must be an integer >= {0 if name == 'top_k' else -1}, got {getattr(self, name)!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or not 0 <= self.seed < 2**64):
            raise ValueError(f"seed must be an integer in [0, 2^64), got {self.seed!r}")
        for tok, bias in (self.logit_bias or {}).items():
            if not isinstance(tok, int) or not 0 <= tok < n_vocab:
                raise ValueError(f"logit_bias token id {tok!r} is outside the vocabulary [0, {n_vocab})")
            if not (math.isfinite(bias) or bias == -math.inf):  # -inf bans the token
                raise ValueError(f"logit_bias for token {tok} must be finite or -inf, got {bias!r}")


def apply_penalties(logits: np.ndarray, history: list[int], params: SamplingParams) -> None:
    """In place, over the last repeat_last_n tokens of history (ref: llama.cpp penalties sampler):
    repeat penalty divides a positive logit and multiplies one <= 0; then OpenAI's
    logit -= count * frequency_penalty + (count > 0) * presence_penalty."""
    n_last = params.repeat_last_n
    inactive = (params.repeat_penalty == 1.0 and params.presence_penalty == 0.0
                and params.frequency_penalty == 0.0)
    if inactive or n_last == 0 or not history:
        return
    window = history if n_last < 0 else history[-n_last:]
    ids, counts = np.unique(np.asarray(window, dtype=np.int64), return_counts=True)
    values = logits[ids]
    values = np.where(values <= 0, values * params.repeat_penalty, values / params.repeat_penalty)
    values -= counts * params.frequency_penalty + params.presence_penalty
    logits[ids] = values


def filter_candidates(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Ids kept by top-k, then top-p, then min-p; ordered by logit descending, ties by lower id.

    Each filter keeps a prefix of that order, so the result is the shortest of the three prefixes,
    with top-p's probabilities normalised over the top-k survivors as llama.cpp does."""
    n_vocab = logits.size
    if 0 < params.top_k < n_vocab:
        ids = _top_ids(logits, params.top_k)
        return ids[:_prefix_len(logits[ids], params, _logsumexp(logits[ids]))]
    if params.top_p >= 1.0 and params.min_p <= 0.0:
        return np.arange(n_vocab)
    return _filter_whole_vocab(logits, params)


def _filter_whole_vocab(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    limit = logits.size
    if params.min_p > 0.0:
        limit = int(np.count_nonzero(logits >= _min_p_threshold(logits.max(), params.min_p)))
    if params.top_p >= 1.0:
        return _top_ids(logits, limit)
    log_z = _logsumexp(logits)
    n_sorted = min(limit, _FIRST_PREFIX)
    while True:  # widen the sorted prefix until it holds top_p of the mass
        ids = _top_ids(logits, n_sorted)
        keep = _prefix_len(logits[ids], params, log_z)
        if keep < n_sorted or n_sorted == limit:
            return ids[:keep]
        n_sorted = min(4 * n_sorted, limit)


def _prefix_len(values: np.ndarray, params: SamplingParams, log_z: float) -> int:
    """values: logits sorted descending; log_z: log of the softmax normaliser over top-k survivors."""
    keep = values.size
    if params.top_p < 1.0:
        cumulative = np.cumsum(np.exp(values.astype(np.float64) - log_z))
        keep = min(keep, int(np.searchsorted(cumulative, params.top_p)) + 1)  # first cum >= top_p
    if params.min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(values >= _min_p_threshold(values[0], params.min_p))))
    return max(keep, 1)


def _min_p_threshold(max_logit: np.float32, min_p: float) -> np.float32:
    # p >= min_p * p_max  <=>  logit >= max_logit + log(min_p)  (ref: llama.cpp min-p sampler)
    return np.float32(max_logit + np.float32(np.log(min_p)))


def _top_ids(logits: np.ndarray, n: int) -> np.ndarray:
    """The n largest logits' ids, by logit descending then id ascending (ties at the cut: lower ids)."""
    n_vocab = logits.size
    if n >= n_vocab:
        ids = np.arange(n_vocab)
    else:
        cut = np.partition(logits, n_vocab - n)[n_vocab - n]  # n-th largest value, O(n_vocab)
        above = np.flatnonzero(logits > cut)
        ids = np.concatenate([above, np.flatnonzero(logits == cut)[: n - above.size]])
    return ids[np.lexsort((ids, -logits[ids]))]


def _logsumexp(values: np.ndarray) -> float:
    top = values.max()
    return float(top) + float(np.log(np.exp(values - top, dtype=np.float32).sum(dtype=np.float64)))


def logprobs(logits: np.ndarray, tok: int, k: int | None) -> tuple[float | None, list[tuple[int, float]] | None]:
    """The model's log-probabilities (log-softmax of the raw logits) of tok and of the k likeliest."""
    if k is None:
        return None, None
    top = float(logits.max())
    logz = top + float(np.log(np.exp(logits - top, dtype=np.float64).sum()))
    ids = np.argpartition(-logits, k)[:k] if 0 < k < logits.size else np.zeros(0, np.int64)
    ids = ids[np.lexsort((ids, -logits[ids]))]
    return float(logits[tok]) - logz, [(int(i), float(logits[i]) - logz) for i in ids]


def sampling_params(params: SamplingParams | None, fields: dict, n_vocab: int) -> SamplingParams:
    """params (default SamplingParams()) with `fields` replaced, checked (ValueError, TypeError)."""
    params = dataclasses.replace(params or SamplingParams(), **fields)
    params.check(n_vocab)
    return params


class Sampler:
    """One sequence's sampler: params plus its own random generator (same seed, same choices)."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self._rng = np.random.default_rng(params.seed)
        bias = params.logit_bias or {}
        self._bias_ids = np.fromiter(bias.keys(), dtype=np.int64, count=len(bias))
        self._bias_values = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))
        # the last draw's candidates and scaled logits; None after a greedy step
        self._drawn: tuple[np.ndarray, np.ndarray] | None = None

    def sample(self, logits: np.ndarray, history: list[int], constrain=None) -> int:
        """logits: float32 [n_vocab], not modified; history: token ids so far (prompt and generated);
        constrain(logits): masks the working copy in place first (a grammar, the chain's first step)."""
        logits = np.array(logits, dtype=np.float32)
        if constrain is not None:
            constrain(logits)
        logits[self._bias_ids] += self._bias_values
        apply_penalties(logits, history, self.params)
        if self.params.temperature <= 0:
            self._drawn = None
            return int(np.argmax(logits))
        ids = filter_candidates(logits, self.params)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            scaled = logits[ids] / np.float32(self.params.temperature)
        if scaled.max() == np.inf:  # a temperature so small it overflows float32: its limit is greedy
            self._drawn = None
            return int(ids[np.argmax(logits[ids])])
        self._drawn = ids, scaled
        return int(ids[self._draw(scaled)])

    def drawn_logprobs(self, tok: int, k: int) -> tuple[float, list[tuple[int, float]]]:
        """The last sample()'s distribution, the one its token was drawn from (after every sampler; greedy:
        the chosen token alone, probability 1): the log-probability of tok and those of the k likeliest
        (fewer when fewer candidates survived; ordered by probability, ties by lower id)."""
        if self._drawn is None:  # nothing is allocated for this on a greedy step, which most are
            return 0.0, [(tok, 0.0)][:k]
        ids, scaled = self._drawn
        logz = float(scaled.max()) + float(np.log(np.exp(scaled - scaled.max(), dtype=np.float64).sum()))
        logp = scaled.astype(np.float64) - logz
        n = min(k, ids.size)
        top = np.argpartition(-logp, n - 1)[:n] if 0 < n < ids.size else np.arange(n)
        top = top[np.lexsort((ids[top], -logp[top]))]
        return float(logp[np.flatnonzero(ids == tok)[0]]), [(int(ids[i]), float(logp[i])) for i in top]

    def _draw(self, scaled: np.ndarray) -> int:
        """Index drawn from softmax(scaled): the inverse of its cumulative sum at one uniform number.

        Two levels: float64 running sums of float32 block totals (_DRAW_BLOCK tokens each), then a
        running sum inside the one block that holds the target."""
        weights = np.exp(scaled - scaled.max())
        n_blocks = -(-weights.size // _DRAW_BLOCK)
        padded = np.zeros(n_blocks * _DRAW_BLOCK, dtype=np.float32)
        padded[: weights.size] = weights
        blocks = padded.reshape(n_blocks, _DRAW_BLOCK)
        across = np.cumsum(blocks.sum(axis=1), dtype=np.float64)
        target = self._rng.random() * across[-1]
        block = _invert_cdf(across, target)
        offset = target - (across[block - 1] if block else 0.0)
        return block * _DRAW_BLOCK + _invert_cdf(np.cumsum(blocks[block], dtype=np.float64), offset)


def _invert_cdf(cumulative: np.ndarray, value: float) -> int:
    """First index whose cumulative sum exceeds value (so zero weights are never picked); a value
    rounded up to the total picks the last element of positive weight."""
    index = int(np.searchsorted(cumulative, value, side="right"))
    if index == cumulative.size:
        index = int(np.searchsorted(cumulative, cumulative[-1], side="left"))
    return index
