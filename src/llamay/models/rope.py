"""RoPE frequency factors computed from metadata (those read from a file are in weights.py): YaRN's.

A factor divides its pair's frequency (the rope op's `factors`), so YaRN's blend of interpolated and
extrapolated frequencies is one factor per pair; its attention factor scales cos and sin (`mscale`)."""
from __future__ import annotations

import math

import numpy as np


def yarn_factors(n_rot: int, base: float, factor: float, n_ctx_orig: int, beta_fast: float, beta_slow: float,
                 truncate: bool) -> np.ndarray:
    """ref: YaRN (Peng et al. 2023) as HF transformers' _compute_yarn_parameters: pairs rotating fewer than
    beta_slow times over the original context are interpolated (frequency / factor), more than beta_fast
    extrapolated (unchanged), a linear ramp between; truncate rounds the ramp's ends out to whole pairs
    (llama.cpp always does; gpt-oss does not)."""
    def pair_of(rotations: float) -> float:
        return n_rot * math.log(n_ctx_orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_of(beta_fast), pair_of(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, n_rot - 1)
    if low == high:
        high += 0.001  # as the reference: no division by zero
    ramp = np.clip((np.arange(n_rot // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolate = 1.0 - ramp
    return (1.0 / ((1.0 - extrapolate) / factor + extrapolate)).astype(np.float32)


def yarn_mscale(factor: float, mscale_all_dim: float = 0.0) -> float:
    """YaRN's default attention factor: get_mscale(factor) = 0.1 ln(factor) + 1 (1 for factor <= 1), or with
    mscale_all_dim (GGUF rope.scaling.yarn_log_multiplier) get_mscale(factor, 1) / get_mscale(factor,
    mscale_all_dim), as transformers (mscale 1) and llama.cpp compute it."""
    def get(m: float) -> float:
        return 0.1 * m * math.log(factor) + 1.0 if factor > 1 else 1.0
    return get(1.0) / get(mscale_all_dim) if mscale_all_dim else get(1.0)
