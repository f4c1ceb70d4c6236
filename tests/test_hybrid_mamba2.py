"""The Mamba2 cases (hybrid_mamba2.py) exercise what the mixer computes: each parameter and setting below moves
float32 transformers' logits by far more than the 1e-3 within which llamay matches them
(tests/test_hybrid_state.py runs the cases: logits against transformers and llama.cpp, and the state
engine's equalities), so a mixer that dropped one would fail there."""
from functools import cache

import numpy as np
import pytest
import torch

from arch_models import edited_logits, zeroed
from hybrid_mamba2 import CASES

MOVES = 5e-2  # 50x the tolerance, as tests/test_arch_transformers.py
torch.set_num_threads(1)


def one_norm_group(model):
    """The gated RMSNorm over all of d_inner instead of per group."""
    norms = [m for m in model.modules() if hasattr(m, "group_size")]
    assert norms
    for m in norms:
        m.group_size = m.weight.numel()


@cache
def reference(name: str) -> np.ndarray:
    return logits(name)


def logits(name: str, edit=None, **overrides) -> np.ndarray:
    return edited_logits(CASES[name], edit, **overrides)


@pytest.mark.parametrize("name, edit", [("mamba2", zeroed(".D")), ("mamba2", zeroed(".dt_bias")),
                                        ("mamba2", zeroed("conv1d.bias")), ("mamba2", zeroed(".A_log")),
                                        ("mamba2", one_norm_group), ("granitehybrid", one_norm_group),
                                        ("nemotron_h", one_norm_group),
                                        ("nemotron_h_moe", zeroed("e_score_correction_bias"))])
def test_mamba2_parameters_are_exercised(name, edit):
    ref = reference(name)
    assert np.abs(logits(name, edit) - ref).max() / np.abs(ref).max() > MOVES


@pytest.mark.parametrize("name, change", [("nemotron_h", dict(mlp_hidden_act="relu")),
                                          ("granitehybrid-moe", dict(num_experts_per_tok=1)),
                                          ("nemotron_h_moe", dict(routed_scaling_factor=1.0)),
                                          ("nemotron_h_moe", dict(norm_topk_prob=False)),
                                          ("granitehybrid", dict(residual_multiplier=1.0)),
                                          ("falcon-h1", dict(ssm_out_multiplier=0.0)),  # the Mamba2 beside
                                          ("falcon-h1", dict(attention_out_multiplier=0.0))])  # the attention
def test_family_settings_are_exercised(name, change):
    ref = reference(name)
    assert np.abs(logits(name, **change) - ref).max() / np.abs(ref).max() > MOVES
