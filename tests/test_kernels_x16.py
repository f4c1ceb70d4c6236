"""Weights regrouped 16 rows at a time (csrc/x16.h, QWeight.repacked): the layout only moves bytes (the
rows come back exactly), and a matmul on it equals the GGML matmul on the portable path bit for bit, on
every path this CPU runs (its own x16 tiles, or the GGML tiles over rebuilt rows), at any thread count and
token count, for row counts that leave the last group part-empty, and for row slices."""
import numpy as np
import pytest

from llamay.kernels import _lib
from llamay.gguf import BY_NAME
from llamay.kernels.matmul import QWeight, act_block, matmul, quantize_act
from llamay.kernels.quantize import quantize_rows

TYPES = ["Q4_0", "Q8_0", "Q4_K", "Q6_K", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q5_K"]


def weight(name: str, m: int, k: int, seed: int) -> QWeight:
    """m rows quantized by the project's quantizer from random floats (real scales, every value used);
    IQ4_NL, which it does not write: random nibbles under random f16 scales"""
    rng = np.random.default_rng(seed)
    if name == "IQ4_NL":
        blocks = np.empty((m * k // 32, 18), np.uint8)
        blocks[:, :2] = (rng.standard_normal(len(blocks)) * 0.01).astype(np.float16).view(np.uint8).reshape(-1, 2)
        blocks[:, 2:] = rng.integers(0, 256, (len(blocks), 16), dtype=np.uint8)
        return QWeight(blocks.reshape(-1), name, m, k)
    w = rng.standard_normal((m, k)).astype(np.float32) * 0.05
    return QWeight(quantize_rows(w, name).reshape(-1), name, m, k)


def activations(n: int, k: int, seed: int, name: str):
    """name's activation form (blocks of 256 for the K-quants)"""
    bs = act_block(BY_NAME[name])
    x = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32)
    if k > bs:
        x[:, :bs] = 0.0  # an all-zero block (d = 0)
    x[:, k - bs + 8] *= 40.0  # a block dominated by one outlier
    return quantize_act(x, bs=bs)


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("m", [16, 37, 80])
def test_layout_moves_bytes_only(name, m):
    w = weight(name, m, 512, m)
    x16 = w.repacked(force=True)
    assert x16.x16 and x16.raw.size == -(-m // 16) * 16 * w.row_bytes
    assert not np.array_equal(x16.raw[:w.raw.size], w.raw)  # regrouped, not copied
    assert np.array_equal(x16.ggml_rows(), w.raw)
    assert np.array_equal(np.sort(x16.raw[:16 * w.row_bytes]), np.sort(w.raw[:16 * w.row_bytes]))


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("m,k", [(16, 256), (37, 512), (80, 768)])
def test_matmul_equals_ggml_portable_every_path(name, m, k):
    w = weight(name, m, k, 7)
    x16 = w.repacked(force=True)
    for n in (1, 2, 3, 4, 5, 9):
        a = activations(n, k, n, name)
        with _lib.using("portable"):
            want = matmul(a, w, n_threads=1)
        for path, got in _lib.each_path(lambda: [matmul(a, x16, n_threads=t) for t in (1, 2, 3)]).items():
            for t, y in zip((1, 2, 3), got):
                assert np.array_equal(y, want), (name, m, k, n, path, t)


@pytest.mark.parametrize("name", TYPES)
def test_row_slices(name):
    """rows() of an x16 matrix: whole groups stay a view, a cut inside a group is regrouped"""
    w = weight(name, 70, 256, 3)
    x16 = w.repacked(force=True)
    a = activations(2, 256, 1, name)
    for lo, hi in ((0, 16), (16, 70), (32, 45), (5, 40), (69, 70)):
        part = x16.rows(lo, hi)
        want = matmul(a, w.rows(lo, hi), n_threads=1)
        assert np.array_equal(matmul(a, part, n_threads=2), want), (lo, hi)
        if lo % 16 == 0:
            assert np.shares_memory(part.raw, x16.raw)


def test_native_paths_repack_by_default():
    """repacked() without force regroups only where the path has x16 tiles of its own"""
    for name in TYPES:
        w = weight(name, 32, 256, 0)
        for path in _lib.available():
            with _lib.using(path):
                assert w.repacked().x16 == (path != "portable"), (name, path)  # AVX2, AVX-VNNI, AVX-512 tiles
    assert weight("Q3_K", 32, 256, 0).repacked(force=True).x16 is False  # no layout for it
    assert weight("Q4_0", 15, 256, 0).repacked(force=True).x16 is False  # under one group
