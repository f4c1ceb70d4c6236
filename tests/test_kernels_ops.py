"""C ops against their numpy references, and every kernel path (portable, AVX2, AVX-512) == any thread count, with ==."""
import numpy as np
import pytest

from llamay.kernels import _lib, ops, reference_ops as ref

rng = np.random.default_rng(7)


@pytest.fixture(params=_lib.PATHS)
def path(request):
    if request.param in _lib.skipped():
        pytest.skip(f"this CPU has no {request.param} path")
    with _lib.using(request.param):
        yield request.param


def both_paths(fn):
    """fn() under every path this CPU runs, asserted equal; returns the portable result and the best
    path's (the same when it runs no other)."""
    out = _lib.each_path(fn)
    for name, got in out.items():
        assert np.array_equal(got, out["portable"]), name
    return out["portable"], out[_lib.available()[-1]]


@pytest.mark.parametrize("d", [7, 64, 576, 640])
def test_rmsnorm_matches_reference_exactly(d, path):
    x = rng.standard_normal((5, d)).astype(np.float32)
    w = rng.standard_normal(d).astype(np.float32)
    assert np.array_equal(ops.rmsnorm(x, w, 1e-6, 2), ref.rmsnorm(x, w, 1e-6))


def test_rmsnorm_paths_and_threads_identical():
    x = rng.standard_normal((33, 640)).astype(np.float32) * 10
    w = rng.standard_normal(640).astype(np.float32)
    a, b = both_paths(lambda: ops.rmsnorm(x, w, 1e-5, 1))
    assert np.array_equal(a, b) and np.array_equal(a, ops.rmsnorm(x, w, 1e-5, 2))


@pytest.mark.parametrize("neox", [False, True])
def test_rope_matches_reference(neox):
    x = rng.standard_normal((6, 3, 64)).astype(np.float32)
    pos = np.array([0, 1, 2, 100, 1000, 8000], np.int32)
    got = x.copy()
    ops.rope(got, pos, 64, 10000.0, neox, 2)
    np.testing.assert_allclose(got, ref.rope(x, pos, 64, 10000.0, neox), rtol=1e-6, atol=1e-6)
    assert np.array_equal(got[0], x[0])  # position 0 rotates by nothing


@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
def test_gated_act_matches_reference(act):
    g = rng.standard_normal(1000).astype(np.float32) * 4
    u = rng.standard_normal(1000).astype(np.float32)
    want = ref.gated_act(g, u, act)
    got = ops.gated_act(g.copy(), u, act, 2)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def _paged(k_ctx: np.ndarray, page_size: int, perm: np.ndarray):
    """Scatter [n_ctx, kvh, d] into a pool through a shuffled page table."""
    n_ctx = k_ctx.shape[0]
    n_pages = -(-n_ctx // page_size)
    pool = np.zeros((len(perm) * page_size,) + k_ctx.shape[1:], np.float16)
    for p in range(n_ctx):
        pool[perm[p // page_size] * page_size + p % page_size] = k_ctx[p]
    return pool, perm[:n_pages].astype(np.int32)[None, :].copy()


@pytest.mark.parametrize("window,softcap", [(0, 0.0), (5, 0.0), (0, 30.0)])
def test_attention_matches_reference_through_shuffled_pages(window, softcap):
    n_ctx, n_head, kvh, d, ps = 19, 4, 2, 16, 4
    k = rng.standard_normal((n_ctx, kvh, d)).astype(np.float16)
    v = rng.standard_normal((n_ctx, kvh, d)).astype(np.float16)
    q = rng.standard_normal((n_ctx, n_head, d)).astype(np.float32)
    perm = rng.permutation(8)
    kp, table = _paged(k, ps, perm)
    vp, _ = _paged(v, ps, perm)
    pos = np.arange(n_ctx, dtype=np.int32)
    meta = ops.BatchMeta(pos, np.zeros(n_ctx, np.int32), table, ps)
    got = ops.attention(q, kp, vp, meta, 0.25, window, softcap, 2)
    want = ref.attention(q, k, v, pos, 0.25, window, softcap)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n_ctx,n_head,kvh,d,window,cap", [(37, 9, 3, 64, 0, 0.0), (40, 8, 1, 256, 0, 0.0),
                                                           (6, 4, 4, 32, 0, 0.0), (33, 4, 2, 48, 7, 20.0),
                                                           (21, 12, 2, 64, 0, 0.0), (19, 14, 2, 32, 5, 0.0),
                                                           (17, 5, 1, 64, 0, 0.0),  # G = 6, 7, 5
                                                           # past the grouped kernels' 8: in subgroups of 8, of 1
                                                           # (G = 11), latent attention's one head of 576
                                                           (20, 32, 1, 64, 0, 0.0), (15, 22, 2, 32, 0, 0.0),
                                                           (9, 16, 1, 576, 0, 0.0)])
def test_attention_prefill_equals_decode_and_paths_agree(n_ctx, n_head, kvh, d, window, cap):
    ps = 8
    k = rng.standard_normal((n_ctx, kvh, d)).astype(np.float16)
    v = rng.standard_normal((n_ctx, kvh, d)).astype(np.float16)
    q = rng.standard_normal((n_ctx, n_head, d)).astype(np.float32)
    kp, table = _paged(k, ps, np.arange(5))
    vp, _ = _paged(v, ps, np.arange(5))
    pos = np.arange(n_ctx, dtype=np.int32)
    meta = ops.BatchMeta(pos, np.zeros(n_ctx, np.int32), table, ps)
    portable, avx2 = both_paths(lambda: ops.attention(q, kp, vp, meta, 0.125, window, cap, 2))
    one = ops.attention(q, kp, vp, meta, 0.125, window, cap, 1)
    assert np.array_equal(one, avx2)
    np.testing.assert_allclose(avx2, ref.attention(q, k, v, pos, 0.125, window, cap), rtol=2e-5, atol=1e-6)
    for t in (0, n_ctx // 2, n_ctx - 1):  # one query at a time, as decode runs it
        m1 = ops.BatchMeta(pos[t:t + 1].copy(), np.zeros(1, np.int32), table, ps)
        assert np.array_equal(ops.attention(q[t:t + 1].copy(), kp, vp, m1, 0.125, window, cap, 2), avx2[t:t + 1])


def test_kv_write_rounds_like_numpy_float16():
    x = (rng.standard_normal((5, 12)) * 1000).astype(np.float32)
    x[0, :3] = [1e-7, -6e-5, 70000.0]  # subnormal, near-subnormal, overflow
    pool = np.zeros((16, 12), np.float16)
    meta = ops.BatchMeta(np.arange(5, dtype=np.int32), np.zeros(5, np.int32),
                         np.array([[3, 1]], np.int32), 4)
    ops.kv_write(pool, x, meta)
    slots = [12, 13, 14, 15, 4]
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    assert np.array_equal(pool[slots].view(np.uint16), want.view(np.uint16))


def test_kv_write_q8_matches_reference_bytes():
    x = (rng.standard_normal((6, 2 * 64)) * 3).astype(np.float32)
    x[1, :32] = 0.0  # an all-zero block has scale 0
    pool = np.zeros((8, 2 * 2 * 36), np.uint8)
    meta = ops.BatchMeta(np.arange(6, dtype=np.int32), np.zeros(6, np.int32), np.array([[1, 0]], np.int32), 4)
    a, b = both_paths(lambda: (ops.kv_write(pool, x, meta, n_kv_head=2, kv="q8"), pool.copy())[1])
    assert np.array_equal(a, b)
    slots = [4, 5, 6, 7, 0, 1]
    assert np.array_equal(pool[slots], ref.q8_heads(x.reshape(6, 2, 64)).reshape(6, -1))


@pytest.mark.parametrize("k_kv,v_kv", [("f32", "f32"), ("q8", "q8"), ("f16", "q8")])
def test_attention_kv_types_match_reference_and_agree_across_paths(k_kv, v_kv):
    n_ctx, n_head, kvh, d, ps = 21, 4, 2, 64, 8
    k = rng.standard_normal((n_ctx, kvh * d)).astype(np.float32)
    v = rng.standard_normal((n_ctx, kvh * d)).astype(np.float32)
    q = rng.standard_normal((n_ctx, n_head, d)).astype(np.float32)
    row = {"f32": d * 4, "f16": d * 2, "q8": d // 32 * 36}
    kp, vp = np.zeros((24, kvh * row[k_kv]), np.uint8), np.zeros((24, kvh * row[v_kv]), np.uint8)
    pos = np.arange(n_ctx, dtype=np.int32)
    meta = ops.BatchMeta(pos, np.zeros(n_ctx, np.int32), np.array([[2, 0, 1]], np.int32), ps)
    ops.kv_write(kp, k, meta, kvh, k_kv)
    ops.kv_write(vp, v, meta, kvh, v_kv)
    run = lambda nt: ops.attention(q, kp, vp, meta, 0.125, 0, 0.0, nt, kvh, k_kv, v_kv)  # noqa: E731
    portable, avx2 = both_paths(lambda: run(2))
    assert np.array_equal(portable, avx2) and np.array_equal(run(1), avx2)

    def stored(x, kind):  # what the pool holds, as floats, in position order
        if kind == "q8":
            return ref.q8_values(ref.q8_heads(x.reshape(n_ctx, kvh, d)), d)
        return x.reshape(n_ctx, kvh, d).astype(np.float16 if kind == "f16" else np.float32)
    want = ref.attention(q, stored(k, k_kv), stored(v, v_kv), pos, 0.125)
    np.testing.assert_allclose(avx2, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("act", ["silu", "gelu_tanh", "swiglu_oai", "none", "sigmoid", "relu_sqr"])
def test_gated_act_paths_and_threads_identical(act):
    g = (rng.standard_normal(1003) * 6).astype(np.float32)
    g[:6] = [0.0, -0.0, 100.0, -100.0, 1e-30, -90.0]  # zero signs, saturation, clamped exp range
    u = rng.standard_normal(1003).astype(np.float32)
    portable, avx2 = both_paths(lambda: ops.gated_act(g.copy(), u, act, 1))
    assert np.array_equal(portable, avx2)
    assert np.array_equal(ops.gated_act(g.copy(), u, act, 2), avx2)
    assert np.isfinite(avx2).all()
    if act in ("none", "sigmoid", "relu_sqr"):
        np.testing.assert_allclose(avx2, ref.gated_act(g, u, act), rtol=1e-6, atol=1e-30)


def test_attention_keys_far_below_the_maximum_get_weight_zero_in_every_path():
    """Scores spread over hundreds: keys more than 40 below the maximum are dropped (csrc/attention.h
    LY_ATT_DROP) identically in the portable, AVX2 and AVX-512 kernels, and what they would have added is
    below float32 resolution (the float64 reference keeps them)."""
    n_ctx, n_head, kvh, d, ps = 24, 4, 1, 64, 8
    k = rng.standard_normal((n_ctx, kvh, d)).astype(np.float16)
    v = (rng.standard_normal((n_ctx, kvh, d)) * 1e-3).astype(np.float16)  # small values: subnormal products
    q = (rng.standard_normal((n_ctx, n_head, d)) * 30).astype(np.float32)
    kp, table = _paged(k, ps, np.arange(3))
    vp, _ = _paged(v, ps, np.arange(3))
    pos = np.arange(n_ctx, dtype=np.int32)
    meta = ops.BatchMeta(pos, np.zeros(n_ctx, np.int32), table, ps)
    scores = np.einsum("thd,jd->thj", q.astype(np.float64), k[:, 0].astype(np.float64)) * 0.125
    causal = np.tril(np.ones((n_ctx, n_ctx), bool))[:, None, :]
    gap = np.where(causal, scores.max(-1, keepdims=True) - scores, 0)
    assert (gap > 40).sum() > n_ctx * n_head  # the drop is exercised, many times
    portable, best = both_paths(lambda: ops.attention(q, kp, vp, meta, 0.125, 0, 0.0, 2))
    assert np.array_equal(ops.attention(q, kp, vp, meta, 0.125, 0, 0.0, 1), best)
    np.testing.assert_allclose(best, ref.attention(q, k, v, pos, 0.125), rtol=1e-5, atol=1e-9)


def test_a_dropped_key_contributes_exactly_nothing():
    """Key 0 scores 60 below the others and is the only one with a nonzero value in dim 0: every path
    drops it, so dim 0 of the output is exactly 0 (exp(-60) would leave about 1e-26 there)."""
    n_ctx, d, ps = 6, 32, 8
    u = np.ones(d, np.float32) / np.sqrt(d)
    k = np.tile(u * 15.0, (n_ctx, 1, 1)).astype(np.float16)
    k[0, 0] = -u * 15.0  # score -15 * 16 * 0.125 * 2 = -60 relative to the others
    v = np.zeros((n_ctx, 1, d), np.float16)
    v[0, 0, 0], v[1:, 0, 1] = 1.0, 1.0
    q = np.tile(u * 16.0, (n_ctx, 2, 1)).astype(np.float32)
    kp, table = _paged(k, ps, np.arange(1))
    vp, _ = _paged(v, ps, np.arange(1))
    pos = np.arange(n_ctx, dtype=np.int32)
    meta = ops.BatchMeta(pos, np.zeros(n_ctx, np.int32), table, ps)
    want = ref.attention(q, k, v, pos, 0.125)  # numpy: exp, no drop
    assert 0 < want[1:, :, 0].min() < 1e-20
    portable, best = both_paths(lambda: ops.attention(q, kp, vp, meta, 0.125, 0, 0.0, 2))
    assert (best[1:, :, 0] == 0).all() and (best[0, :, 0] == 1).all()
    np.testing.assert_allclose(best[:, :, 1:], want[:, :, 1:], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("n_head, kvh, window", [(8, 2, 0), (4, 4, 5), (6, 1, 0)])
def test_attention_sinks_every_path_prefill_equals_decode_and_float64(n_head, kvh, window):
    """gpt-oss's sinks: each head's logit joins its softmax's denominator. Grouped f16 kernels (AVX2,
    AVX-512) == the portable one, prefill == one query at a time, and the float64 math."""
    n_ctx, d, ps = 21, 64, 8
    k = rng.standard_normal((n_ctx, kvh, d)).astype(np.float16)
    v = rng.standard_normal((n_ctx, kvh, d)).astype(np.float16)
    q = rng.standard_normal((n_ctx, n_head, d)).astype(np.float32)
    sinks = (rng.standard_normal(n_head) * 2).astype(np.float32)
    kp, table = _paged(k, ps, np.arange(3))
    vp, _ = _paged(v, ps, np.arange(3))
    pos = np.arange(n_ctx, dtype=np.int32)
    meta = ops.BatchMeta(pos, np.zeros(n_ctx, np.int32), table, ps)
    portable, best = both_paths(lambda: ops.attention(q, kp, vp, meta, 0.125, window, 0.0, 2, sinks=sinks))
    assert np.array_equal(ops.attention(q, kp, vp, meta, 0.125, window, 0.0, 1, sinks=sinks), best)
    for t in (0, n_ctx - 1):
        m1 = ops.BatchMeta(pos[t:t + 1].copy(), np.zeros(1, np.int32), table, ps)
        assert np.array_equal(ops.attention(q[t:t + 1].copy(), kp, vp, m1, 0.125, window, 0.0, 2, sinks=sinks),
                              best[t:t + 1])
    k64, v64, q64 = k.astype(np.float64), v.astype(np.float64), q.astype(np.float64)
    want = np.zeros_like(q64)
    for t in range(n_ctx):
        lo = max(0, t - window + 1) if window else 0
        for h in range(n_head):
            g = h // (n_head // kvh)
            s = k64[lo:t + 1, g] @ q64[t, h] * 0.125
            m = max(s.max(), float(sinks[h]))
            p = np.exp(s - m)
            want[t, h] = p @ v64[lo:t + 1, g] / (p.sum() + np.exp(float(sinks[h]) - m))
    np.testing.assert_allclose(best, want, rtol=2e-5, atol=2e-6)
    plain = ops.attention(q, kp, vp, meta, 0.125, window, 0.0, 2)
    assert np.abs(plain - best).max() > 1e-2  # the sinks take a share
