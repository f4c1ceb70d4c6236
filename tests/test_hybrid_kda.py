"""The Kimi-Linear case (hybrid_kda.py) exercises what its blocks compute: each parameter and setting below moves
float32 transformers' logits by far more than the 1e-3 within which llamay matches them (tests/test_hybrid_state.py
runs the case: logits against transformers and llama.cpp, and the state engine's equalities), so a mixer or
attention that dropped one would fail there. The variant with low-rank queries runs here."""
from functools import cache

import numpy as np
import pytest
import torch

import llamay
from arch_models import build, convert, edited_logits, hf_logits, token_ids, zeroed
from conftest import CACHE
from hybrid_kda import CASES, KIMI, MORE

MOVES = 5e-2  # 50x the tolerance, as tests/test_arch_transformers.py
torch.set_num_threads(1)


@cache
def reference() -> np.ndarray:
    return logits()


def logits(edit=None, **overrides) -> np.ndarray:
    return edited_logits(CASES["kimi-linear"], edit, **overrides)


def rotary_keys_zeroed(model):
    """The shared rotary part of the latent attention's keys (the last rows of kv_a_proj_with_mqa) zeroed."""
    for layer in model.model.layers:
        if hasattr(layer.self_attn, "kv_a_proj_with_mqa"):
            layer.self_attn.kv_a_proj_with_mqa.weight[-KIMI["qk_rope_head_dim"]:] = 0


@pytest.mark.parametrize("edit", [zeroed("forget_gate.dt_bias"), zeroed("forget_gate.A_log"), zeroed("b_proj.weight"),
                                  zeroed("g_b_proj.weight"), zeroed("self_attn.conv1d.weight"),
                                  zeroed("kv_a_layernorm.weight"), zeroed("e_score_correction_bias"),
                                  rotary_keys_zeroed])
def test_parameters_are_exercised(edit):
    ref = reference()
    assert np.abs(logits(edit) - ref).max() / np.abs(ref).max() > MOVES


@pytest.mark.parametrize("change", [dict(routed_scaling_factor=1.0), dict(num_experts_per_token=1)])
def test_experts_settings_are_exercised(change):
    ref = reference()
    assert np.abs(logits(**change) - ref).max() / np.abs(ref).max() > MOVES


def test_low_rank_queries_match_transformers(tmp_path):
    case = MORE["kimi-linear-qlora"]
    model = build(case)
    path = convert({"q": (case, model)}, tmp_path, CACHE)["q"]
    ids = token_ids(model.config.vocab_size, case.n_tokens)
    got, want = llamay.load(path, threads=1, kv="f32", n_ctx=case.n_ctx).logits(ids), hf_logits(model, ids)
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-3
    assert (got.argmax(1) == want.argmax(1)).all()


def test_latent_layers_hold_their_values_once(tmp_path):
    """A latent attention layer's values are its keys: the pool's V array is its K array (the memory once),
    and the logits are those of the converted model (test_hybrid_state.py's fixtures run on this pool)."""
    case = CASES["kimi-linear"]
    model = build(case)
    path = convert({"k": (case, model)}, tmp_path, CACHE)["k"]
    llm = llamay.load(path, threads=1, kv="f32", n_ctx=case.n_ctx)
    ids = token_ids(model.config.vocab_size, 24)
    got = llm.logits(ids)
    pool = llm.context_store.pool
    assert len(pool.k) == 2 and all(v is k for k, v in zip(pool.k, pool.v))
    want = hf_logits(model, ids)
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-3
