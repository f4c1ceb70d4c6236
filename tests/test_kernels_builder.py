"""The typed backend boundary (kernels/builder.py): wrong operands fail while the graph is built, a matmul
input is quantized once per write, and the ops added with it (scale, softcap) agree with float math and
are identical across kernel paths and thread counts."""
import numpy as np
import pytest

from llamay.kernels import _lib
from llamay.kernels.builder import Builder
from llamay.kernels.graph import OPS
from llamay.kernels.matmul import QWeight, matmul
from llamay.kv import PagePool

rng = np.random.default_rng(11)


def q8_weight(m: int, k: int) -> QWeight:
    raw = rng.integers(0, 256, (m, k // 32, 34), dtype=np.uint8)
    raw[..., :2] = rng.uniform(-0.05, 0.05, (m, k // 32, 1)).astype(np.float16).view(np.uint8)
    return QWeight(raw.reshape(-1), "Q8_0", m, k)


def ops_of(b: Builder) -> list[str]:
    names = {v: k for k, v in OPS.items()}
    return [names[spec[0]] for spec in b._g._specs]


def test_bad_operands_fail_when_the_graph_is_built():
    b, w = Builder(), q8_weight(16, 64)
    with pytest.raises(ValueError, match="x of"):
        b.matmul(b.tensor(3, 32), w)
    with pytest.raises(ValueError, match="float32"):
        b.matmul(np.zeros((3, 64), np.float64), w)
    with pytest.raises(ValueError, match="C-contiguous"):
        b.matmul(b.tensor(64, 3).T, w)
    with pytest.raises(ValueError, match="does not divide"):
        b.rmsnorm(b.tensor(3, 10), np.ones(4, np.float32), 1e-6)
    with pytest.raises(ValueError, match="shape"):
        b.add(b.tensor(3, 4), b.tensor(4, 3))
    pool, batch = PagePool(1, 2, 16, 2, 32), b.batch(3)
    with pytest.raises(ValueError, match="q has shape"):
        b.attention(b.tensor(3, 4 * 16), pool, 0, batch, 4, 0.1)
    with pytest.raises(ValueError, match="heads over"):
        b.attention(b.tensor(3, 3 * 32), pool, 0, batch, 3, 0.1)
    with pytest.raises(ValueError, match="rope"):
        b.rope(b.tensor(3, 2 * 32), batch, 2, 32, 33, 1e4, True)
    assert b._g._specs == []  # nothing half-added


def test_a_matmul_input_is_quantized_once_per_write():
    b, w = Builder(), q8_weight(16, 64)
    x, h = b.tensor(2, 64), b.tensor(2, 64)
    norm = np.ones(64, np.float32)
    b.rmsnorm(x, norm, 1e-6, out=h)
    ys = [b.matmul(h, w) for _ in range(3)]
    b.rmsnorm(x, norm, 1e-6, out=h)  # h written again: the next matmul needs a fresh quantization
    ys.append(b.matmul(h, w))
    # the norm that wrote h quantizes it (no quant node); the second write needs (and gets) a fresh one
    assert ops_of(b) == ["rmsnorm", "matmul", "matmul", "matmul", "rmsnorm", "matmul"]
    x[:] = rng.standard_normal(x.shape).astype(np.float32)
    b.run(2)
    ms = (x * x).mean(axis=1, keepdims=True)
    assert all(np.allclose(y, matmul(x / np.sqrt(ms + 1e-6), w), rtol=1e-5, atol=1e-5) for y in ys)
    assert all(np.array_equal(y, ys[0]) for y in ys)


def test_an_input_read_by_both_kinds_is_quantized_in_each_form():
    """A Q8_0 weight reads activations in blocks of 32, a Q4_K weight in blocks of 256: one normed input
    read by both gets the norm's fused quantization for the first and a quant node for the other, and each
    matmul gives the bits of a matmul on its own."""
    from llamay.kernels.quantize import quantize_rows
    k = 256
    wk = QWeight(quantize_rows(rng.standard_normal((24, k)).astype(np.float32) * 0.05, "Q4_K").reshape(-1),
                 "Q4_K", 24, k)
    for first, second in ((q8_weight(16, k), wk), (wk, q8_weight(16, k))):
        b = Builder()
        x, h = b.tensor(3, k), b.tensor(3, k)
        b.rmsnorm(x, np.ones(k, np.float32), 1e-6, out=h)
        y1, y2, y3 = b.matmul(h, first), b.matmul(h, second), b.matmul(h, first)
        assert ops_of(b) == ["rmsnorm", "matmul", "quant", "matmul", "matmul"], ops_of(b)
        x[:] = rng.standard_normal(x.shape).astype(np.float32)
        b.run(2)
        ref = Builder()  # the normed rows alone
        rx, normed = ref.tensor(3, k), ref.tensor(3, k)
        ref.rmsnorm(rx, np.ones(k, np.float32), 1e-6, out=normed)
        rx[:] = x
        ref.run(1)
        assert np.array_equal(y1, matmul(normed, first)) and np.array_equal(y3, y1)
        assert np.array_equal(y2, matmul(normed, second))


WEIGHTS = [q8_weight(96, 64), q8_weight(96, 64), q8_weight(64, 96)]
BIAS = rng.standard_normal(96).astype(np.float32)


def block(x0: np.ndarray, fused: bool, nthreads: int):
    """Twice over one residual stream: norm -> two matmuls (one with bias) -> gated -> matmul -> add.
    fused=False keeps every step its own node: an unrelated node after the norm and after the gated op
    (so each quantization is a quant node), the bias and the residual as add nodes."""
    b, (w1, w2, w3) = Builder(), WEIGHTS
    x, h, spare = b.tensor(*x0.shape), b.tensor(*x0.shape), b.tensor(1, 8)
    bias = np.broadcast_to(BIAS, (x0.shape[0], 96)).copy()
    for _ in range(2):
        b.rmsnorm(x, np.ones(64, np.float32), 1e-6, out=h)
        if fused:
            g = b.matmul(h, w1, bias=BIAS)
        else:
            b.scale(spare, 1.0)
            g = b.add(b.matmul(h, w1), bias)
        b.gated(g, b.matmul(h, w2), "silu")
        if fused:
            b.matmul(g, w3, residual=x)
        else:
            b.scale(spare, 1.0)
            b.add(x, b.matmul(g, w3))
    x[:] = x0
    b.run(nthreads)
    return x, ops_of(b)


def test_fused_nodes_give_the_bits_of_separate_ones():
    x0 = rng.standard_normal((5, 64)).astype(np.float32)
    ref, ref_ops = block(x0, False, 1)
    assert ref_ops.count("quant") == 4 and ref_ops.count("add") == 4, ref_ops
    for path in _lib.available():
        with _lib.using(path):
            for t in (1, 2, 3):
                got, ops = block(x0, True, t)
                assert ops == ["rmsnorm", "matmul", "matmul", "gated", "matmul"] * 2, ops
                assert np.array_equal(got, ref), (path, t)
    want, _ = block(x0, False, 2)
    assert np.array_equal(want, ref)


def scale_softcap(x0: np.ndarray, nthreads: int) -> np.ndarray:
    b = Builder()
    x = b.tensor(*x0.shape)
    b.softcap(b.scale(x, 0.5), 30.0)
    x[:] = x0
    b.run(nthreads)
    return x


def test_scale_and_softcap_agree_with_float_math_and_across_paths():
    x0 = (rng.standard_normal((5, 1003)) * 40).astype(np.float32)
    x0[0, :4] = [1e6, -1e6, 0.0, -0.0]
    results = _lib.each_path(lambda: scale_softcap(x0, 2))
    ref = results["portable"]
    assert all(np.array_equal(r, ref) for r in results.values()), list(results)
    assert np.array_equal(scale_softcap(x0, 1), ref) and np.array_equal(scale_softcap(x0, 3), ref)
    want = 30.0 * np.tanh(x0.astype(np.float64) * 0.5 / 30.0)
    np.testing.assert_allclose(ref, want, rtol=2e-6, atol=2e-6)
    assert ref[0, 0] == 30.0 and ref[0, 1] == -30.0 and ref[0, 2] == 0.0


def layernorm_run(x0, w, b0, nthreads):
    b = Builder()
    x = b.tensor(*x0.shape)
    b.layernorm(x, w, b0, 1e-12, out=x)
    x[:] = x0
    b.run(nthreads)
    return x


def test_layernorm_agrees_with_float64_and_across_paths_and_threads():
    x0 = (rng.standard_normal((7, 384)) * 3 + 1).astype(np.float32)
    w, b0 = rng.standard_normal(384).astype(np.float32), rng.standard_normal(384).astype(np.float32)
    results = _lib.each_path(lambda: layernorm_run(x0, w, b0, 2))
    ref = results["portable"]
    assert all(np.array_equal(r, ref) for r in results.values())
    assert np.array_equal(layernorm_run(x0, w, b0, 1), ref)
    x64 = x0.astype(np.float64)
    want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-12) * w + b0
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-5)


def test_activation_is_the_gated_op_times_one():
    x0 = (rng.standard_normal((3, 333)) * 4).astype(np.float32)
    for act in ("silu", "gelu_tanh"):
        def run(gated):
            b = Builder()
            x, ones = b.tensor(*x0.shape), np.ones(x0.shape, np.float32)
            b.gated(x, ones, act) if gated else b.activation(x, act)
            x[:] = x0
            b.run(2)
            return x
        got = _lib.each_path(lambda: run(False))
        assert all(np.array_equal(g, run(True)) for g in got.values()), act


def both_ways(q0, k0, v0, lens, nthreads=2):
    """Bidirectional attention of sequences `lens` packed in one batch, through a page pool of 1-slot pages."""
    from llamay.kernels.ops import BatchMeta
    from llamay.kv import kv_type
    n, h, d = q0.shape
    b, pool = Builder(), PagePool(1, n, 1, h, d, kv_type("f32", d))
    batch = b.batch(n)
    q, k, v = (b.tensor(n, h * d) for _ in range(3))
    b.kv_write(pool, 0, k, v, batch)
    out = b.attention(q, pool, 0, batch, h, 0.125, causal=False)
    q[:], k[:], v[:] = (a.reshape(n, h * d) for a in (q0, k0, v0))
    first = np.cumsum([0] + lens[:-1])
    table = np.zeros((len(lens), max(lens)), np.int32)
    for i, (f, m) in enumerate(zip(first, lens)):
        table[i, :m] = np.arange(f, f + m)
    pos = np.concatenate([np.arange(m, dtype=np.int32) for m in lens])
    batch.fill(BatchMeta(pos, np.repeat(np.arange(len(lens), dtype=np.int32), lens), table, 1))
    b.run(nthreads)
    return out.reshape(n, h, d)


def test_bidirectional_attention_sees_its_whole_sequence_and_only_it():
    lens, h, d = [5, 3, 6], 2, 32
    n = sum(lens)
    q0, k0, v0 = (rng.standard_normal((n, h, d)).astype(np.float32) for _ in range(3))
    got = both_ways(q0, k0, v0, lens)
    lo = 0
    for m in lens:
        sl = slice(lo, lo + m)
        s = np.einsum("qhd,khd->hqk", q0[sl].astype(np.float64), k0[sl].astype(np.float64)) * 0.125
        p = np.exp(s - s.max(-1, keepdims=True))
        want = np.einsum("hqk,khd->qhd", p / p.sum(-1, keepdims=True), v0[sl].astype(np.float64))
        np.testing.assert_allclose(got[sl], want, rtol=1e-5, atol=1e-6)
        alone = both_ways(q0[sl].copy(), k0[sl].copy(), v0[sl].copy(), [m], 1)
        assert np.array_equal(alone, got[sl])
        lo += m
    results = _lib.each_path(lambda: both_ways(q0, k0, v0, lens))
    assert all(np.array_equal(r, results["portable"]) for r in results.values())


def test_nodes_wait_only_for_what_they_read_or_overwrite():
    b, w = Builder(), q8_weight(16, 64)
    x, h, norm = b.tensor(2, 64), b.tensor(2, 64), np.ones(64, np.float32)
    b.rmsnorm(x, norm, 1e-6, out=h)  # 0, quantizing h as well
    q = b.matmul(h, w)  # 1
    k = b.matmul(h, w)  # 2: needs the quantization, not the other projection
    b.add(q, k)  # 3: needs both projections
    b.rmsnorm(x, norm, 1e-6, out=h)  # 4: overwrites h and its quantization, so waits for their readers
    b.matmul(h, w)  # 5
    x2 = b.tensor(2, 64)
    b.add(x2, x)  # 6: independent of every write before
    b.matmul(x2, w)  # 7 quant (the add cannot quantize), 8 matmul
    assert ops_of(b) == ["rmsnorm", "matmul", "matmul", "add", "rmsnorm", "matmul", "add", "quant", "matmul"]
    assert [spec[4] for spec in b._g._specs] == [-1, 0, 0, 2, 2, 4, -1, 6, 7]


def test_row_scale_is_the_float_math_per_row():
    """row_scale: row t times s[t] * alpha / rank in float32 (s[t] when alpha is 0); a row of scale 0 is
    zeros even where y holds inf; 1 == 2 threads."""
    rng = np.random.default_rng(9)
    y0 = rng.standard_normal((5, 40)).astype(np.float32)
    y0[3, 7] = np.inf
    s = np.array([1.0, 0.5, -2.0, 0.0, 3.0], np.float32)
    for alpha, rank in ((8.0, 4), (0.0, 4)):
        outs = []
        for threads in (1, 2):
            b = Builder()
            y = b.tensor(5, 40)
            b.row_scale(y, s, alpha, rank)
            y[:] = y0
            b.run(threads)
            outs.append(y.copy())
        f = s * np.float32(alpha) / np.float32(rank) if alpha else s
        want = np.where(f[:, None] != 0, y0 * f[:, None], np.float32(0))
        assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], want)
