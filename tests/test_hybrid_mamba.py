"""The Mamba (Mamba1) cases (hybrid_mamba.py) exercise what the mixer computes: each parameter and setting below
moves float32 transformers' logits by far more than the 1e-3 within which llamay matches them
(tests/test_hybrid_state.py runs the cases: logits against transformers and llama.cpp, and the state
engine's equalities), so a mixer that dropped one would fail there."""
from functools import cache

import numpy as np
import pytest
import torch

from arch_models import build, edited_logits, zeroed
from hybrid_mamba import CASES

MOVES = 5e-2  # 50x the tolerance, as tests/test_arch_transformers.py
torch.set_num_threads(1)


@cache
def reference(name: str) -> np.ndarray:
    return logits(name)


def logits(name: str, edit=None, **overrides) -> np.ndarray:
    return edited_logits(CASES[name], edit, **overrides)


@pytest.mark.parametrize("edit", [zeroed(".D"), zeroed("dt_proj.bias"), zeroed("conv1d.bias"), zeroed(".A_log"),
                                  zeroed("x_proj.weight")])
def test_mamba_parameters_are_exercised(edit):
    ref = reference("mamba")
    assert np.abs(logits("mamba", edit) - ref).max() / np.abs(ref).max() > MOVES


def test_falcon_mambas_norms_are_exercised():
    """Falcon-Mamba is the same model as Mamba (same draws, same names) but for its RMSNorms of dt, B and C."""
    a, b = build(CASES["mamba"]), build(CASES["falcon-mamba"])
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)
    ref = reference("mamba")
    assert np.abs(reference("falcon-mamba") - ref).max() / np.abs(ref).max() > MOVES


@pytest.mark.parametrize("edit", [zeroed("dt_layernorm.weight"), zeroed("b_layernorm.weight"),
                                  zeroed("c_layernorm.weight")])
def test_jambas_norm_weights_are_exercised(edit):
    ref = reference("jamba")
    assert np.abs(logits("jamba", edit) - ref).max() / np.abs(ref).max() > MOVES


@pytest.mark.parametrize("change", [dict(num_experts_per_tok=1), dict(expert_layer_offset=0)])
def test_jambas_experts_are_exercised(change):
    ref = reference("jamba")
    assert np.abs(logits("jamba", **change) - ref).max() / np.abs(ref).max() > MOVES
