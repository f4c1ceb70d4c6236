"""Mamba's selective scan (Mamba2's one A per head, Mamba1's one per channel and state with B and C in rows
of their own) against its numpy reference, and the equalities that make it canonical: a
sequence's outputs and state are the same bits token by token as in one pass, alone as batched with
others, at any thread count."""
import numpy as np
import pytest

from llamay.kernels.builder import Builder
from llamay.kernels.reference_recurrent import ssm_scan as ssm_ref
from test_kernels_recurrent import meta

RNG = np.random.default_rng(1)


def inputs(n, H, P, N, G, mamba1=False):
    """(xbc, bc, dt, params): Mamba1's x [n, H] and its own bc [n, 2 N] with A [H, N] (P = G = 1), else xbc
    holding x, B and C, bc None, A [H]."""
    xbc = RNG.standard_normal((n, H * P + (0 if mamba1 else 2 * G * N)), np.float32)
    bc = RNG.standard_normal((n, 2 * G * N), np.float32) if mamba1 else None
    dt = (RNG.standard_normal((n, H)) * 3).astype(np.float32)
    dt[0, 0] = 25.0  # above softplus's threshold
    a = -np.exp(RNG.standard_normal((H, N) if mamba1 else H)).astype(np.float32)
    d, dt_bias = RNG.standard_normal(H).astype(np.float32), RNG.standard_normal(H).astype(np.float32)
    return xbc, bc, dt, (a, d, dt_bias)


def state_shape(H, P, N, mamba1=False) -> tuple:
    """A slot's state as the kernel lays it out: Mamba1's [N, H], Mamba2's [H, P, N]."""
    return (N, H) if mamba1 else (H, P, N)


def run_scan(xbc, bc, dt, params, pool, m, G, nthreads=1):
    b = Builder()
    batch = b.batch(len(xbc))
    xin, dtin = b.tensor(*xbc.shape), b.tensor(*dt.shape)
    bcin = None if bc is None else b.tensor(*bc.shape)
    y = b.ssm_scan(xin, dtin, *params, pool, batch, G, bc=bcin)
    xin[:], dtin[:] = xbc, dt
    if bc is not None:
        bcin[:] = bc
    batch.fill(m)
    b.run(nthreads)
    return y.copy()


def cat(parts):
    return None if parts[0] is None else np.concatenate(parts)


@pytest.mark.parametrize("H,P,N,G,mamba1", [(4, 8, 16, 1, False), (6, 4, 8, 2, False), (3, 5, 7, 3, False),
                                             (12, 1, 16, 1, True), (5, 1, 3, 1, True)])
def test_ssm_scan_matches_reference(H, P, N, G, mamba1):
    n = 11
    xbc, bc, dt, params = inputs(n, H, P, N, G, mamba1)
    init = RNG.standard_normal(state_shape(H, P, N, mamba1)).astype(np.float32)
    pool = np.zeros((3, *init.shape), np.float32)
    pool[1] = init
    got = run_scan(xbc, bc, dt, params, pool, meta([n], [1]), G)
    state = init.copy()
    want = ssm_ref(xbc, dt, *params, state, G, bc=bc)
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
    with pytest.raises(ValueError):
        b.ssm_scan(b.tensor(2, 4), b.tensor(2, 4), np.zeros((4, 8), np.float32), *params[1:],
                   np.zeros((1, 16, 4), np.float32), batch, 1, bc=b.tensor(2, 32))  # A of 8 states, not 16
    with pytest.raises(ValueError):
        b.ssm_scan(b.tensor(2, 4), b.tensor(2, 4), np.zeros((4, 16), np.float32), *params[1:],
                   np.zeros((1, 16, 4), np.float32), batch, 1, bc=b.tensor(2, 16))  # BC lacks C
    with pytest.raises(ValueError):
        b.ssm_scan(b.tensor(2, 4), b.tensor(2, 4), np.zeros((4, 16), np.float32), *params[1:],
                   np.zeros((1, 4, 1, 16), np.float32), batch, 1, bc=b.tensor(2, 32))  # Mamba2's layout


@pytest.mark.parametrize("H,P,N,G,mamba1", [(24, 16, 16, 2, False), (48, 1, 16, 1, True)])
def test_ssm_scan_is_canonical(H, P, N, G, mamba1):  # enough rows to split into chunks
    xa, bca, dta, params = inputs(7, H, P, N, G, mamba1)
    xb, bcb, dtb, _ = inputs(5, H, P, N, G, mamba1)
    shape = state_shape(H, P, N, mamba1)
    whole = np.zeros((2, *shape), np.float32)
    ya = run_scan(xa, bca, dta, params, whole, meta([7], [0]), G)
    steps = np.zeros((2, *shape), np.float32)
    one = np.concatenate([run_scan(xa[t:t + 1], None if bca is None else bca[t:t + 1], dta[t:t + 1], params, steps,
                                   meta([1], [1], [t]), G) for t in range(7)])
    assert np.array_equal(ya, one) and np.array_equal(whole[0], steps[1])
    yb = run_scan(xb, bcb, dtb, params, np.zeros((1, *shape), np.float32), meta([5], [0]), G)
    for nthreads in (1, 2, 3):
        for a_first in (False, True):  # a on slot 0, b on slot 1, in either batch order
            parts = [(xa, bca, dta, 0), (xb, bcb, dtb, 1)][::1 if a_first else -1]
            pool = np.zeros((2, *shape), np.float32)
            both = run_scan(cat([p[0] for p in parts]), cat([p[1] for p in parts]), cat([p[2] for p in parts]),
                            params, pool, meta([len(p[0]) for p in parts], [p[3] for p in parts]), G, nthreads)
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


@pytest.mark.parametrize("H,P,N,G,mamba1", [(6, 4, 19, 2, False), (40, 1, 21, 1, True), (13, 1, 3, 1, True)])
def test_ssm_scan_every_kernel_path_gives_the_same_bits(H, P, N, G, mamba1):
    """The vector rows (Mamba2: 8 states at once and its lanes' sum) and columns (Mamba1: 8 channels at once,
    exp and all) run the portable operations per state or channel, those past the last whole vector
    included: outputs and states equal with ==."""
    from llamay.kernels import _lib
    xbc, bc, dt, params = inputs(9, H, P, N, G, mamba1)
    init = RNG.standard_normal((1, *state_shape(H, P, N, mamba1))).astype(np.float32)

    def once():
        pool = init.copy()
        return np.concatenate([run_scan(xbc, bc, dt, params, pool, meta([9], [0]), G, nthreads=2).ravel(),
                               pool.ravel()])
    results = _lib.each_path(once)
    first = next(iter(results.values()))
    assert len(results) == len(_lib.available()) and all(np.array_equal(r, first) for r in results.values())
