"""Regrouped weights at load (LoadOptions.repack): a model's logits are the same bits with and without it,
on every kernel path, prefill and token by token, on real files (Gemma 3 270M Q4_K_M holds Q4_K, Q6_K and
Q8_0 matrices; they are regrouped on any CPU here, forced where the path has no x16 tiles of its own)."""
import numpy as np
import pytest

import llamay
from llamay.kernels import _lib
from llamay.kernels.matmul import QWeight


@pytest.fixture
def forced(monkeypatch):
    """every matrix with an x16 layout regrouped, whatever the path (the fallback tiles run elsewhere)"""
    real = QWeight.repacked
    monkeypatch.setattr(QWeight, "repacked", lambda self, n_threads=None, force=False: real(self, n_threads, True))


def regrouped(llm) -> int:
    d = llm.decoder
    ws = [w for layer in d.layers for w in vars(layer).values() if isinstance(w, QWeight)] + [d.output[0]]
    return sum(w.x16 for w in ws)


def test_gemma_same_bits_with_and_without_regrouping(gemma_path, forced):
    ids = list(range(2, 40))
    plain = llamay.load(gemma_path, repack=False, n_ctx=256)
    want = plain.logits(ids)
    llm = llamay.load(gemma_path, n_ctx=256)
    assert regrouped(plain) == 0 and regrouped(llm) >= 40  # the Q4_K, Q6_K and Q8_0 matrices
    for path, got in _lib.each_path(lambda: llm.logits(ids)).items():
        assert np.array_equal(got, want), path
    step = [llm.eval_last(ids[:i]) for i in (1, 2, 3)]  # decode steps reuse the cached prefix
    assert all(np.array_equal(s, want[i - 1]) for s, i in zip(step, (1, 2, 3)))
