"""The LFM2 cases (hybrid_shortconv.py) exercise what their blocks compute: each part below moves float32
transformers' logits by far more than the 1e-3 within which llamay matches them (tests/test_hybrid_state.py
runs the cases against transformers and llama.cpp, with the state engine's equalities)."""
import numpy as np
import pytest
import torch

from arch_models import build, hf_logits, token_ids, zeroed
from hybrid_shortconv import CASES

MOVES = 5e-2  # 50x the tolerance, as tests/test_arch_transformers.py
torch.set_num_threads(1)


def moved(name: str, edit) -> float:
    case = CASES[name]
    model = build(case)
    ids = token_ids(model.config.vocab_size, case.n_tokens)
    want = hf_logits(model, ids)
    with torch.no_grad():
        edit(model)
    got = hf_logits(model, ids)
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("name, suffix", [("lfm2", "conv.conv.weight"), ("lfm2moe", "expert_bias"),
                                          ("lfm2moe", "feed_forward.gate.weight")])
def test_each_part_moves_the_logits(name, suffix):
    assert moved(name, zeroed(suffix)) > MOVES, (name, suffix)
