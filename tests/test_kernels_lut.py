"""The lookup formats IQ4_NL, IQ4_XS, MXFP4 and the ternary TQ1_0, TQ2_0 (csrc/q32.h): numpy dequantization
== gguf-py's bit for bit; matmul equal on every kernel path, for any thread count and batch, and equal to
the canonical per-block sum computed in float64 from gguf-py's dequantized weights."""
import numpy as np
import pytest

from llamay.gguf import BY_NAME, dequantize
from llamay.kernels import _lib
from llamay.kernels.matmul import QWeight, matmul, quantize_act

gquants = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType  # noqa: E402

LUT = ["IQ4_NL", "IQ4_XS", "MXFP4", "TQ1_0", "TQ2_0"]
rng = np.random.default_rng(9)


def random_blocks(name: str, n_blocks: int) -> np.ndarray:
    """Random blocks [n_blocks, type_size] with scales in a sane range."""
    qt = BY_NAME[name]
    raw = rng.integers(0, 256, (n_blocks, qt.type_size), dtype=np.uint8)
    scale = rng.uniform(-0.02, 0.02, (n_blocks, 1)).astype(np.float16).view(np.uint8)
    if name == "MXFP4":
        raw[:, 0] = rng.integers(118, 128, n_blocks)  # 2^-10 .. 2^-1
    elif name.startswith("TQ"):
        raw[:, -2:] = scale  # d last
    else:
        raw[:, 0:2] = scale
    if name == "MXFP4":
        raw[:3, 0] = [0, 1, 255]  # the denormal scales and the largest
    return raw


@pytest.mark.parametrize("name", LUT)
def test_dequantize_equals_gguf_py(name):
    qt = BY_NAME[name]
    raw = random_blocks(name, 300)
    with np.errstate(over="ignore"):  # MXFP4's largest scale, 2^127, times 12 is inf in both
        want = gquants.dequantize(raw, GGMLQuantizationType[name]).astype(np.float32).reshape(-1)
        got = dequantize(raw.reshape(-1), qt, (300 * qt.block_size,))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def weight(name: str, m: int, k: int) -> tuple[QWeight, np.ndarray]:
    qt = BY_NAME[name]
    raw = random_blocks(name, m * k // qt.block_size)
    if name == "MXFP4":
        raw[:, 0] = rng.integers(118, 128, len(raw))
    return QWeight(raw.reshape(-1), name, m, k), raw


@pytest.mark.parametrize("name", LUT)
@pytest.mark.parametrize("n, m, k", [(3, 13, 512), (6, 37, 768), (1, 21, 256)])
def test_matmul_every_path_and_the_canonical_sum(name, n, m, k):
    w, raw = weight(name, m, k)
    x = rng.standard_normal((n, k)).astype(np.float32)
    x[:, 40] *= 50.0  # a block dominated by one outlier
    results = _lib.each_path(lambda: matmul(x, w, n_threads=2))
    got = results["portable"]
    assert all(np.array_equal(r, got) for r in results.values()), list(results)
    assert np.array_equal(matmul(x, w, n_threads=1), got)
    for t in range(n):
        assert np.array_equal(matmul(x[t:t + 1], w, n_threads=2)[0], got[t])
    a = quantize_act(x)
    wf = gquants.dequantize(raw.reshape(m, -1), GGMLQuantizationType[name]).astype(np.float64)  # dw * v exactly
    blocks = (wf.reshape(1, m, k // 32, 32) * a.q.astype(np.float64).reshape(n, 1, k // 32, 32)).sum(-1)
    want = (blocks * a.d.astype(np.float64).reshape(n, 1, k // 32)).sum(-1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
