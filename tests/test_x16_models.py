"""Regrouped weights at load (LoadOptions.repack): a model's logits are the same bits with and without it,
on every kernel path, prefill and token by token, on real files (SmolLM2-135M Q4_1 holds Q4_1 and Q8_0
matrices, Gemma 3 270M Q4_K_M Q5_0, Q4_K, Q6_K and Q8_0; every one is regrouped on any CPU here, forced
where the path has no x16 tiles of its own)."""
import weakref

import numpy as np
import pytest

import llamay
from llamay.kernels import _lib
from llamay.kernels.matmul import QWeight
from llamay.models import weights


@pytest.fixture
def forced(monkeypatch):
    """every matrix with an x16 layout regrouped, whatever the path (the fallback tiles run elsewhere)"""
    real = QWeight.repacked
    monkeypatch.setattr(QWeight, "repacked", lambda self, n_threads=None, force=False: real(self, n_threads, True))


def matrices(llm) -> list:
    d = llm.decoder
    return [w for layer in d.layers for w in vars(layer).values() if isinstance(w, QWeight)] + [d.output[0]]


def regrouped(llm) -> int:
    return sum(w.x16 for w in matrices(llm))


@pytest.mark.parametrize("model", ["smollm_path", "gemma_path"])
def test_same_bits_with_and_without_regrouping(model, request, forced):
    path = request.getfixturevalue(model)
    ids = list(range(2, 40))
    plain = llamay.load(path, repack=False, n_ctx=256)
    want = plain.logits(ids)
    llm = llamay.load(path, n_ctx=256)
    assert not any(w.x16 for w in matrices(plain)) and all(w.x16 for w in matrices(llm))
    for kernels, got in _lib.each_path(lambda: llm.logits(ids)).items():
        assert np.array_equal(got, want), kernels
    step = [llm.eval_last(ids[:i]) for i in (1, 2, 3)]  # decode steps reuse the cached prefix
    assert all(np.array_equal(s, want[i - 1]) for s, i in zip(step, (1, 2, 3)))


def test_some_matrices_regrouped_and_others_mapped_give_the_same_logits(gemma_path, monkeypatch):
    """a model whose copied matrices' pages were given back and whose others stay mapped computes the same bits
    (that release drops the pages: test_gguf_reader.test_release_drops_a_tensors_pages_from_resident_memory)
    (every matrix of the file has an x16 layout: its Q5_0 ones are kept in the GGML layout here)"""
    real = QWeight.repacked
    monkeypatch.setattr(QWeight, "repacked", lambda self, n_threads=None, force=False:
                        self if self.qtype.name == "Q5_0" else real(self, n_threads, force))
    monkeypatch.setattr(weights, "_REGROUPED", weakref.WeakValueDictionary())  # not another test's model's copies
    llm = llamay.load(gemma_path, n_ctx=256)
    if not regrouped(llm):
        pytest.skip("this CPU's path has no x16 tiles: nothing was copied")
    reader = llamay.gguf.GGUFReader(gemma_path)
    kept = [w for layer in llm.decoder.layers for w in vars(layer).values() if isinstance(w, QWeight) and not w.x16]
    assert kept and not any(w.x16 for w in kept)
    ids = list(range(2, 20))
    assert np.array_equal(llm.logits(ids), llamay.load(gemma_path, repack=False, n_ctx=256).logits(ids))
    del reader


def test_models_of_one_file_share_the_regrouped_copy(gemma_path, forced):
    """a second model of the same file takes the first one's regrouped matrices (one copy in memory)"""
    a, b = llamay.load(gemma_path, n_ctx=256), llamay.load(gemma_path, n_ctx=256)
    assert regrouped(a) and a.decoder.output[0] is b.decoder.output[0]
    assert all(x is y for x, y in zip(vars(a.decoder.layers[0]).values(), vars(b.decoder.layers[0]).values())
               if isinstance(x, QWeight))
    ids = list(range(2, 20))
    assert np.array_equal(a.logits(ids), b.logits(ids))
