"""Multi-head latent attention's per-head ops (kernels/builder.py head_matmul, copy_rows): against numpy, and the
same bits at any thread count, in any batch, on every kernel path."""
import numpy as np
import pytest

from llamay.kernels import _lib
from llamay.kernels.builder import Builder

RNG = np.random.default_rng(0)


def run(x, w, out_shape, x_off=0, out_off=0, nthreads=1):
    b = Builder()
    xs, out = b.tensor(*x.shape), b.tensor(*out_shape)
    b.head_matmul(xs, w, out, x_off, out_off)
    xs[:] = x
    b.run(nthreads)
    return out.copy()


def test_head_matmul_matches_numpy():
    n, h, m, k = 5, 3, 24, 13  # a K past whole lanes
    x, w = RNG.standard_normal((n, h * 20)).astype(np.float32), RNG.standard_normal((h, m, k)).astype(np.float32)
    got = run(x, w, (n, h * 30), x_off=4, out_off=2)
    want = np.einsum("hmk,nhk->nhm", w.astype(np.float64), x.reshape(n, h, 20)[:, :, 4:4 + k].astype(np.float64))
    g = got.reshape(n, h, 30)
    np.testing.assert_allclose(g[:, :, 2:2 + m], want, rtol=1e-5, atol=1e-5)
    assert not g[:, :, :2].any() and not g[:, :, 2 + m:].any()  # nothing written outside


def test_head_matmul_is_canonical():
    """A token's row is the same bits alone as in a batch, at 1, 2 or 3 threads, on every kernel path."""
    n, h, m, k = 9, 4, 64, 40
    x, w = RNG.standard_normal((n, h * k)).astype(np.float32), RNG.standard_normal((h, m, k)).astype(np.float32)
    whole = run(x, w, (n, h * m))
    alone = np.concatenate([run(x[t:t + 1], w, (1, h * m)) for t in range(n)])
    assert np.array_equal(whole, alone)
    for nthreads in (2, 3):
        assert np.array_equal(run(x, w, (n, h * m), nthreads=nthreads), whole)
    results = _lib.each_path(lambda: run(x, w, (n, h * m), nthreads=2))
    assert all(np.array_equal(r, whole) for r in results.values()), list(results)


def test_copy_rows():
    b = Builder()
    x, out = b.tensor(6, 8), b.tensor(3, 10)
    b.copy_rows(x, out, 3, 5, x_off=2, out_off=4)  # rows of 16 from x, of 10 into out
    x[:] = RNG.standard_normal((6, 8)).astype(np.float32)
    b.run(2)
    assert np.array_equal(out[:, 4:9], x.reshape(3, 16)[:, 2:7])
    assert not out[:, :4].any() and not out[:, 9:].any()


@pytest.mark.parametrize("call", [
    lambda b: b.head_matmul(b.tensor(2, 12), np.zeros((3, 4, 5), np.float32), b.tensor(2, 12)),  # 5 > 12/3 - 0
    lambda b: b.head_matmul(b.tensor(2, 12), np.zeros((3, 4, 4), np.float32), b.tensor(3, 12)),  # rows differ
    lambda b: b.copy_rows(b.tensor(2, 4), b.tensor(2, 4), 2, 3, x_off=2)])  # past a row's end
def test_bad_shapes_are_refused_when_built(call):
    with pytest.raises(ValueError):
        call(Builder())
