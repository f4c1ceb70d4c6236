"""The gated delta rule against its numpy reference, and the equalities that make it canonical: a
sequence's outputs and state are the same bits token by token as in one pass, alone as batched with
another sequence (either order, any slots), at any thread count."""
import numpy as np
import pytest

from llamay.kernels.builder import Builder
from llamay.kernels.reference_recurrent import delta_rule as delta_ref
from test_kernels_recurrent import meta

RNG = np.random.default_rng(0)
EPS = 1e-6


def inputs(n, hk, hv, dk, dv):
    """qkv rows as a conv + SiLU would give them, raw b and a, A < 0 and dt_bias as the files hold them."""
    qkv = RNG.standard_normal((n, 2 * hk * dk + hv * dv)).astype(np.float32)
    ba = (2 * RNG.standard_normal((2, n, hv))).astype(np.float32)
    a = -np.exp(RNG.uniform(-2, 2, hv)).astype(np.float32)
    return qkv, ba, a, RNG.standard_normal(hv).astype(np.float32)


def run(qkv, ba, a, dt, state, m, tiled=False, nthreads=1):
    b = Builder()
    batch = b.batch(len(qkv))
    x, g = b.tensor(*qkv.shape), b.tensor(*ba.shape)
    out = b.delta_rule(x, g, a, dt, state, batch, tiled=tiled, eps=EPS)
    x[:], g[:] = qkv, ba
    batch.fill(m)
    b.run(nthreads)
    return out.copy()


@pytest.mark.parametrize("hk,hv,tiled", [(2, 2, False), (2, 4, False), (2, 4, True), (1, 3, True)])
def test_delta_rule_matches_reference(hk, hv, tiled):
    n, dk, dv = 12, 16, 8
    qkv, ba, a, dt = inputs(n, hk, hv, dk, dv)
    init = (0.1 * RNG.standard_normal((hv, dk, dv))).astype(np.float32)
    pool = np.zeros((3, hv, dk, dv), np.float32)
    pool[1] = init
    got = run(qkv, ba, a, dt, pool, meta([n], [1]), tiled)
    ref_state = init.copy()
    want = delta_ref(qkv, ba, a, dt, ref_state, hk, tiled, EPS)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pool[1], ref_state, rtol=1e-5, atol=1e-6)
    assert not pool[0].any() and not pool[2].any()


def test_delta_rule_head_mapping():
    """tiled and grouped differ exactly by a permutation of the k-heads."""
    n, hk, hv, dk, dv = 5, 2, 4, 8, 8
    qkv, ba, a, dt = inputs(n, hk, hv, dk, dv)
    got = run(qkv, ba, a, dt, np.zeros((1, hv, dk, dv), np.float32), meta([n], [0]), tiled=True)
    swapped = qkv.copy()  # tiled reads k-heads 0 1 0 1, grouped 0 0 1 1: reorder the v-heads to match
    perm = [0, 2, 1, 3]
    v0 = 2 * hk * dk
    swapped[:, v0:] = qkv[:, v0:].reshape(n, hv, dv)[:, perm].reshape(n, -1)
    sba = np.ascontiguousarray(ba[:, :, perm])
    grouped = run(swapped, sba, a[perm], dt[perm], np.zeros((1, hv, dk, dv), np.float32), meta([n], [0]))
    assert np.array_equal(grouped.reshape(n, hv, dv)[:, perm], got.reshape(n, hv, dv))


@pytest.mark.parametrize("tiled", [False, True])
def test_delta_rule_is_canonical(tiled):
    hk, hv, dk, dv = 2, 16, 32, 32  # enough work to split into chunks
    shape = (2, hv, dk, dv)
    xa, xb = inputs(9, hk, hv, dk, dv), inputs(6, hk, hv, dk, dv)
    whole = np.zeros(shape, np.float32)
    ya = run(*xa, whole, meta([9], [0]), tiled)
    steps = np.zeros(shape, np.float32)
    one = np.concatenate([run(xa[0][t:t + 1], xa[1][:, t:t + 1].copy(), *xa[2:], steps, meta([1], [1], [t]), tiled)
                          for t in range(9)])
    assert np.array_equal(ya, one) and np.array_equal(whole[0], steps[1])
    for nthreads in (1, 2, 3):
        for first in (xa, xb):
            second = xb if first is xa else xa
            pool = np.zeros(shape, np.float32)
            slots = [1, 0] if first is xb else [0, 1]
            qkv, ba = np.concatenate([first[0], second[0]]), np.concatenate([first[1], second[1]], axis=1)
            both = run(qkv, ba, *xa[2:], pool, meta([len(first[0]), len(second[0])], slots), tiled, nthreads)
            mine = both[:9] if first is xa else both[6:]
            assert np.array_equal(mine, ya) and np.array_equal(pool[0], whole[0])


@pytest.mark.parametrize("dv", [8, 16, 40, 128])  # whole vectors of both widths, and a tail past them
def test_every_kernel_path_gives_the_same_bits(dv):
    """The AVX2 and AVX-512 steps (8 and 16 value columns at once) run the portable step's operations per
    column: outputs and states equal with ==, on every path this CPU runs."""
    from llamay.kernels import _lib
    n, hk, hv, dk = 7, 2, 4, 24
    qkv, ba, a, dt = inputs(n, hk, hv, dk, dv)

    def once():
        pool = np.zeros((1, hv, dk, dv), np.float32)
        return np.concatenate([run(qkv, ba, a, dt, pool, meta([n], [0]), nthreads=2).ravel(), pool.ravel()])
    results = _lib.each_path(once)
    assert len(results) >= 1
    first = next(iter(results.values()))
    assert all(np.array_equal(r, first) for r in results.values()), list(results)


# ---- Kimi's delta attention (KDA): q, k, v in planes, a decay per state row ----

def kda_inputs(n, h, d):
    """Planes q, k, v [3, n, H d] as three convs + SiLU give them; b [n, H]; the gate's raw a [n, H d];
    A < 0 [H] and dt_bias [H d] as the files hold them."""
    qkv = RNG.standard_normal((3, n, h * d)).astype(np.float32)
    b, g = (2 * RNG.standard_normal((n, h))).astype(np.float32), (2 * RNG.standard_normal((n, h * d))).astype(np.float32)
    a = -np.exp(RNG.uniform(-2, 2, h)).astype(np.float32)
    return qkv, b, g, a, RNG.standard_normal(h * d).astype(np.float32)


def run_kda(qkv, bg, gg, a, dt, state, m, nthreads=1):
    b = Builder()
    n = qkv.shape[1]
    batch = b.batch(n)
    x, ba = b.tensor(*qkv.shape), b.tensor(bg.size + gg.size)
    out = b.delta_rule(x, ba, a, dt, state, batch, tiled=False, eps=EPS, planar=True)
    x[:], ba[:bg.size], ba[bg.size:] = qkv, bg.ravel(), gg.ravel()
    batch.fill(m)
    b.run(nthreads)
    return out.copy()


def test_kda_matches_reference():
    n, h, d = 12, 3, 16
    qkv, bg, gg, a, dt = kda_inputs(n, h, d)
    init = (0.1 * RNG.standard_normal((h, d, d))).astype(np.float32)
    pool = np.zeros((2, h, d, d), np.float32)
    pool[1] = init
    got = run_kda(qkv, bg, gg, a, dt, pool, meta([n], [1]))
    want = delta_ref(qkv, (bg, gg), a, dt, init, h, False, EPS)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pool[1], init, rtol=1e-5, atol=1e-6)
    assert not pool[0].any()


def test_kda_matches_transformers_in_float64():
    """The op (float32) against transformers' token-by-token KDA in float64 (HF KimiLinear's
    recurrent_kimi_delta_attention), its gate g = A softplus(a + dt_bias) per channel as KimiLinearForgetGate."""
    import torch
    from transformers.models.kimi_linear.modeling_kimi_linear import recurrent_kimi_delta_attention
    n, h, d = 40, 2, 16
    qkv, bg, gg, a, dt = kda_inputs(n, h, d)
    state = np.zeros((1, h, d, d), np.float32)
    got = run_kda(qkv, bg, gg, a, dt, state, meta([n], [0]))
    x, b, g, A, dt = (torch.from_numpy(v).double() for v in (qkv, bg, gg, a, dt))
    gate = (A.repeat_interleave(d) * torch.nn.functional.softplus(g + dt)).reshape(1, n, h, d)
    q, k, v = (x[i].reshape(1, n, h, d) for i in range(3))
    want, s = recurrent_kimi_delta_attention(q, k, v, gate, torch.sigmoid(b)[None], None, True,
                                             use_qk_l2norm_in_kernel=True)
    rel = lambda got, want: np.abs(got - want).max() / np.abs(want).max()  # noqa: E731
    assert rel(got, want.reshape(n, -1).numpy()) < 1e-6
    assert rel(state[0], s[0].numpy()) < 1e-6


def test_kda_is_canonical():
    h, d = 8, 32
    xa, xb = kda_inputs(9, h, d), kda_inputs(6, h, d)
    shape = (2, h, d, d)
    whole = np.zeros(shape, np.float32)
    ya = run_kda(*xa, whole, meta([9], [0]))
    steps = np.zeros(shape, np.float32)
    one = np.concatenate([run_kda(xa[0][:, t:t + 1].copy(), xa[1][t:t + 1], xa[2][t:t + 1], *xa[3:], steps,
                                  meta([1], [1], [t])) for t in range(9)])
    assert np.array_equal(ya, one) and np.array_equal(whole[0], steps[1])
    for nthreads in (1, 2, 3):
        for first, second, slots in ((xa, xb, [0, 1]), (xb, xa, [1, 0])):
            pool = np.zeros(shape, np.float32)
            qkv = np.concatenate([first[0], second[0]], axis=1)
            bg, gg = np.concatenate([first[1], second[1]]), np.concatenate([first[2], second[2]])
            both = run_kda(qkv, bg, gg, *xa[3:], pool, meta([len(first[1]), len(second[1])], slots), nthreads)
            mine = both[:9] if first is xa else both[6:]
            assert np.array_equal(mine, ya) and np.array_equal(pool[0], whole[0])


def test_kda_every_kernel_path_gives_the_same_bits():
    from llamay.kernels import _lib
    n, h, d = 7, 2, 40  # 40: whole vectors of both widths and a tail
    x = kda_inputs(n, h, d)

    def once():
        pool = np.zeros((1, h, d, d), np.float32)
        return np.concatenate([run_kda(*x, pool, meta([n], [0]), nthreads=2).ravel(), pool.ravel()])
    results = _lib.each_path(once)
    first = next(iter(results.values()))
    assert all(np.array_equal(r, first) for r in results.values()), list(results)
