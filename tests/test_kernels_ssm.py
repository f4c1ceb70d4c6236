"""Mamba2's selective scan against its numpy reference, and the equalities that make it canonical: a
sequence's outputs and state are the same bits token by token as in one pass, alone as batched with
others, at any thread count."""
import numpy as np
import pytest

from llamay.kernels.builder import Builder
from llamay.kernels.reference_recurrent import ssm_scan as ssm_ref
from test_kernels_recurrent import meta

RNG = np.random.default_rng(1)


def inputs(n, H, P, N, G):
    xbc = RNG.standard_normal((n, H * P + 2 * G * N), np.float32)
    dt = (RNG.standard_normal((n, H)) * 3).astype(np.float32)
    dt[0, 0] = 25.0  # above softplus's threshold
    a = -np.exp(RNG.standard_normal(H)).astype(np.float32)
    d, dt_bias = RNG.standard_normal(H).astype(np.float32), RNG.standard_normal(H).astype(np.float32)
    return xbc, dt, (a, d, dt_bias)


def run_scan(xbc, dt, params, pool, m, G, nthreads=1):
    b = Builder()
    batch = b.batch(len(xbc))
    xin, dtin = b.tensor(*xbc.shape), b.tensor(*dt.shape)
    y = b.ssm_scan(xin, dtin, *params, pool, batch, G)
    xin[:], dtin[:] = xbc, dt
    batch.fill(m)
    b.run(nthreads)
    return y.copy()


@pytest.mark.parametrize("H,P,N,G", [(4, 8, 16, 1), (6, 4, 8, 2), (3, 5, 7, 3)])
def test_ssm_scan_matches_reference(H, P, N, G):
    n = 11
    xbc, dt, params = inputs(n, H, P, N, G)
    init = RNG.standard_normal((H, P, N)).astype(np.float32)
    pool = np.zeros((3, H, P, N), np.float32)
    pool[1] = init
    got = run_scan(xbc, dt, params, pool, meta([n], [1]), G)
    state = init.copy()
    want = ssm_ref(xbc, dt, *params, state, G)
    # exp and log1p: numpy's and libm's may differ in the last bit
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pool[1], state, rtol=1e-5, atol=1e-5)
    assert not pool[0].any() and not pool[2].any()


def test_ssm_scan_rejects_bad_shapes():
    b = Builder()
    batch = b.batch(2)
    params = [np.zeros(4, np.float32)] * 3
    with pytest.raises(ValueError):
        b.ssm_scan(b.tensor(2, 4 * 8 + 16), b.tensor(2, 4), *params, np.zeros((1, 4, 8, 16), np.float32),
                   batch, 1)  # xBC lacks C
    with pytest.raises(ValueError):
        b.ssm_scan(b.tensor(2, 4 * 8 + 2 * 2 * 16), b.tensor(2, 4), *params, np.zeros((1, 4, 8, 16), np.float32),
                   batch, 3)  # 3 groups do not divide 4 heads


def test_ssm_scan_is_canonical():
    H, P, N, G = 24, 16, 16, 2  # enough rows to split into chunks
    xa, dta, params = inputs(7, H, P, N, G)
    xb, dtb, _ = inputs(5, H, P, N, G)
    whole = np.zeros((2, H, P, N), np.float32)
    ya = run_scan(xa, dta, params, whole, meta([7], [0]), G)
    steps = np.zeros((2, H, P, N), np.float32)
    one = np.concatenate([run_scan(xa[t:t + 1], dta[t:t + 1], params, steps, meta([1], [1], [t]), G)
                          for t in range(7)])
    assert np.array_equal(ya, one) and np.array_equal(whole[0], steps[1])
    yb = run_scan(xb, dtb, params, np.zeros((1, H, P, N), np.float32), meta([5], [0]), G)
    for nthreads in (1, 2, 3):
        for a_first in (False, True):  # a on slot 0, b on slot 1, in either batch order
            parts = [(xa, dta, 0), (xb, dtb, 1)][::1 if a_first else -1]
            pool = np.zeros((2, H, P, N), np.float32)
            both = run_scan(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), params,
                            pool, meta([len(p[0]) for p in parts], [p[2] for p in parts]), G, nthreads)
            got_a, got_b = (both[:7], both[7:]) if a_first else (both[5:], both[:5])
            assert np.array_equal(got_a, ya) and np.array_equal(got_b, yb)
            assert np.array_equal(pool[0], whole[0])


def test_group_rmsnorm_weights():
    """RMSNorm with weights [G, d] over rows of G * d (Mamba2's gated norm): each group normed by itself with
    its own weight row, the same bits as normalizing that group's columns alone."""
    G, d, n = 3, 8, 5
    x, w = RNG.standard_normal((n, G * d), np.float32), RNG.standard_normal((G, d)).astype(np.float32)
    b = Builder()
    xin = b.tensor(n, G * d)
    y = b.rmsnorm(xin, w, 1e-5)
    xin[:] = x
    b.run(2)
    alone = []
    for g in range(G):
        c = Builder()
        xi = c.tensor(n, d)
        out = c.rmsnorm(xi, w[g].copy(), 1e-5)
        xi[:] = x[:, g * d:(g + 1) * d]
        c.run(1)
        alone.append(out)
    assert np.array_equal(y, np.concatenate(alone, axis=1))
    with pytest.raises(ValueError):
        b.rmsnorm(b.tensor(n, G * d + 1), w, 1e-5)
