"""kernels.matmul for the 32-block and float formats: numpy reference == every kernel path (portable, AVX2, AVX-512) bit for bit,
independence from thread count and batch size, activation quantization, and agreement with float math on
gguf-py's dequantization (an implementation we did not write)."""
import numpy as np
import pytest

from llamay.gguf import BY_NAME, GGUFReader
from llamay.kernels import _lib, reference
from llamay.kernels.matmul import QWeight, matmul, quantize_act

gquants = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType  # noqa: E402

Q32 = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
FLOATS = ["F32", "F16", "BF16"]
SHAPES = [(3, 13, 576), (5, 37, 640), (2, 21, 896)]  # (n, m, k): m not a multiple of the 8-row group


def random_raw(name: str, m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Random block bytes [m * row_bytes] with f16 scales/mins in a sane range (no inf/nan)."""
    if name in FLOATS:
        w = rng.standard_normal((m, k)).astype(np.float32)
        if name == "F16":
            return w.astype(np.float16).view(np.uint8).reshape(-1)
        return (w.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(-1) if name == "BF16" \
            else w.view(np.uint8).reshape(-1)
    qt = BY_NAME[name]
    raw = rng.integers(0, 256, (m, k // 32, qt.type_size), dtype=np.uint8)
    raw[..., 0:2] = rng.uniform(-0.05, 0.05, (m, k // 32, 1)).astype(np.float16).view(np.uint8)
    if name in ("Q4_1", "Q5_1"):
        raw[..., 2:4] = rng.uniform(-0.5, 0.5, (m, k // 32, 1)).astype(np.float16).view(np.uint8)
    return raw.reshape(-1)


def activations(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((n, k)).astype(np.float32)
    x[:, :32] = 0.0  # an all-zero block (d = 0)
    x[:, 40] *= 50.0  # a block dominated by one outlier
    return x


def run(x, w: QWeight, path: str, n_threads: int = 2) -> np.ndarray:
    with _lib.using(path):
        return matmul(x, w, n_threads=n_threads)


def paths(x, w: QWeight) -> list[np.ndarray]:
    """The result under every kernel path this CPU runs (portable, avx2, avx512)."""
    return list(_lib.each_path(lambda: matmul(x, w, n_threads=2)).values())


def test_quantize_act_rounds_half_to_even():
    x = np.zeros((1, 32), np.float32)
    x[0, :6] = [127.0, 2.5, -3.5, 0.5, 1.5, -127.0]  # amax 127 -> d = 1, so x * id = x exactly
    for a in _lib.each_path(lambda: quantize_act(x)).values():
        assert a.q[0, :6].tolist() == [127, 2, -4, 0, 2, -127]
        assert a.d[0, 0] == 1.0 and a.s16[0].tolist() == [127 + 2 - 4 + 0 + 2 - 127, 0]


@pytest.mark.parametrize("k", [576, 640, 896])
def test_quantize_act_paths_equal_reference(k):
    rng = np.random.default_rng(k)
    x = activations(9, k, rng)
    q, d, s16 = reference.quantize_act(x)
    for path in _lib.available():
        for n_threads in (1, 2):
            with _lib.using(path):
                a = quantize_act(x, n_threads)
            assert (a.q == q).all() and (a.d == d).all() and (a.s16 == s16).all()
    assert np.abs(q).max() <= 127


def test_quantize_act_threads_on_large_input():
    x = activations(128, 640, np.random.default_rng(1))  # large enough to be split across threads
    a, b = quantize_act(x, 1), quantize_act(x, 2)
    assert (a.q == b.q).all() and (a.d == b.d).all() and (a.s16 == b.s16).all()


@pytest.mark.parametrize("name", Q32 + FLOATS)
@pytest.mark.parametrize("n,m,k", SHAPES)
def test_paths_equal_reference(name, n, m, k):
    rng = np.random.default_rng(n * m + k)
    raw, x = random_raw(name, m, k, rng), activations(n, k, rng)
    w = QWeight(raw, name, m, k)
    expected = reference.matmul(x, raw, BY_NAME[name], m)
    for y in paths(x, w):
        assert y.dtype == np.float32 and y.shape == (n, m)
        assert (y == expected).all()


@pytest.mark.parametrize("name", FLOATS)
def test_float_rows_with_a_tail(name):
    rng = np.random.default_rng(7)
    raw, x = random_raw(name, 11, 103, rng), activations(6, 103, rng)  # k % 8 != 0
    expected = reference.matmul(x, raw, BY_NAME[name], 11)
    for y in paths(x, QWeight(raw, name, 11, 103)):
        assert (y == expected).all()


@pytest.mark.parametrize("name", Q32 + FLOATS)
def test_independent_of_threads_and_batch(name):
    rng = np.random.default_rng(3)
    m, k = 603, 640  # enough weight bytes that even one token is split across 2 threads
    w = QWeight(random_raw(name, m, k, rng), name, m, k)
    x = activations(37, k, rng)
    for path in _lib.available():
        batch = run(x, w, path, 2)
        assert (run(x, w, path, 1) == batch).all()
        assert (run(x, w, path, 3) == batch).all()
        for t in (0, 5, 36):
            assert (run(x[t:t + 1], w, path, 2)[0] == batch[t]).all()


@pytest.mark.parametrize("path", _lib.PATHS)
def test_independent_of_token_tiles(path):
    """k = 8192 makes the driver use several token tiles (activations sized for L2) within a 70-token batch."""
    if path in _lib.skipped():
        pytest.skip(f"this CPU has no {path} path")
    rng = np.random.default_rng(4)
    m, k = 12, 8192
    for name in ("Q4_1", "Q8_0"):
        w = QWeight(random_raw(name, m, k, rng), name, m, k)
        x = activations(70, k, rng)
        with _lib.using(path):
            batch = matmul(x, w)
            for t in (0, 63, 64, 69):
                assert (matmul(x[t:t + 1], w)[0] == batch[t]).all()


def q8_error_bound(x: np.ndarray, wf: np.ndarray) -> np.ndarray:
    """|y_int8 - y_float| <= sum over blocks of (d_b / 2) * sum_i |w_i|: each quantized activation is off by at
    most half a step d = amax / 127; plus float32 rounding of the sums (1e-5 of sum |w x|)."""
    n, k = x.shape
    half_step = np.abs(x.reshape(n, k // 32, 32)).max(axis=2).astype(np.float64) / 127 / 2
    wabs = np.abs(wf.astype(np.float64)).reshape(wf.shape[0], k // 32, 32).sum(axis=2)
    return half_step @ wabs.T + 1e-5 * (np.abs(x.astype(np.float64)) @ np.abs(wf.astype(np.float64)).T) + 1e-6


@pytest.mark.parametrize("name", Q32 + FLOATS)
def test_close_to_float_math_on_gguf_dequantization(name):
    rng = np.random.default_rng(11)
    m, k, n = 29, 640, 4
    raw, x = random_raw(name, m, k, rng), activations(n, k, rng)
    wf = gquants.dequantize(raw.reshape(m, -1), GGMLQuantizationType[name]).astype(np.float32)
    exact = x.astype(np.float64) @ wf.astype(np.float64).T
    y = matmul(x, QWeight(raw, name, m, k))
    if name in FLOATS:
        bound = 1e-5 * (np.abs(x.astype(np.float64)) @ np.abs(wf.astype(np.float64)).T) + 1e-6
    else:
        bound = q8_error_bound(x, wf)
    assert (np.abs(y - exact) <= bound).all()


def test_quantized_activations_reused_across_weights():
    rng = np.random.default_rng(5)
    x = activations(3, 576, rng)
    a = quantize_act(x)
    for name in ("Q4_1", "Q8_0", "F16"):
        w = QWeight(random_raw(name, 10, 576, rng), name, 10, 576)
        assert (matmul(a, w) == matmul(x, w)).all()


def test_arguments_are_checked():
    rng = np.random.default_rng(6)
    raw = random_raw("Q8_0", 8, 64, rng)
    w = QWeight(raw, "Q8_0", 8, 64)
    x = activations(2, 64, rng)
    with pytest.raises(ValueError):
        matmul(x.astype(np.float64), w)
    with pytest.raises(ValueError):
        matmul(np.ones((64, 2), np.float32).T, w)  # not C-contiguous
    with pytest.raises(ValueError):
        matmul(activations(2, 96, rng), w)  # wrong k
    with pytest.raises(ValueError):
        matmul(x, w, out=np.empty((2, 9), np.float32))
    with pytest.raises(ValueError):
        QWeight(raw[:-1], "Q8_0", 8, 64)  # wrong byte count
    with pytest.raises(ValueError):
        QWeight(raw, "Q8_0", 8, 48)  # k not a multiple of 32
    with pytest.raises(ValueError):
        QWeight(np.zeros(8 * 292, np.uint8), "Q8_K", 8, 256)  # a type without a kernel


@pytest.mark.model
def test_real_tensors_equal_reference(smollm_path, gemma_path):
    rng = np.random.default_rng(8)
    gemma = GGUFReader(gemma_path)
    q8_v = next(t.name for t in gemma.tensors.values()
                if t.name.endswith("attn_v.weight") and t.qtype.name == "Q8_0")
    for reader, name in ((GGUFReader(smollm_path), "blk.0.attn_k.weight"), (gemma, "blk.0.attn_k.weight"),
                         (gemma, q8_v)):
        w = QWeight.from_gguf(reader, name)
        x = activations(3, w.k, rng)
        expected = reference.matmul(x, w.raw, w.qtype, w.m)
        for y in paths(x, w):
            assert (y == expected).all(), name
