"""K-quant matmul tiles (csrc/qk.c, qk_avx2.c, qk_avx512.c): numpy reference == every kernel path bit for bit,
independence from tile bounds, and agreement with float math on gguf-py's dequantization."""
import ctypes

import numpy as np
import pytest

from llamay.kernels import _lib
from llamay.kernels import reference_qk as ref

gquants = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType  # noqa: E402

FORMATS = list(ref.TYPE_IDS)
BEST = _lib.available()[-1]
P, I64 = ctypes.c_void_p, ctypes.c_int64
_lib.declare("ly_qk_tile_call", ctypes.c_int, P, ctypes.c_size_t, I64, I64, P, P, P, I64, I64, I64, P, I64,
             restype=ctypes.c_int)
# f16 fields of each format (byte offsets) that hold the super-block scales d and dmin
F16_FIELDS = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}


def ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def random_weights(name: str, m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """[m, row_bytes] random bytes with f16 super-block scales in a sane range (no inf/nan)"""
    nsb, size = k // ref.QK_K, ref.BLOCK_BYTES[name]
    w = rng.integers(0, 256, size=(m, nsb, size), dtype=np.uint8)
    for off in F16_FIELDS[name]:
        scale = (rng.uniform(-1, 1, size=(m, nsb)) * 2e-3).astype(np.float16)
        w[:, :, off:off + 2] = scale.view(np.uint8).reshape(m, nsb, 2)
    return w.reshape(m, nsb * size)


def activations(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((n, k)).astype(np.float32)
    if k > 256:
        x[:, :256] = 0.0  # one all-zero super-block (d = 0) per token
    x[:, k - 200] *= 10.0  # and one dominated by an outlier
    return x


def tile(name: str, w: np.ndarray, act, rows: tuple[int, int], toks: tuple[int, int], y: np.ndarray):
    q, d, s16 = act
    rc = _lib.lib.ly_qk_tile_call(ref.TYPE_IDS[name], ptr(w), w.shape[1], rows[0], rows[1], ptr(q), ptr(d),
                                  ptr(s16), q.shape[1], toks[0], toks[1], ptr(y), y.shape[1])
    assert rc == 0


def c_matmul(name: str, w: np.ndarray, act, path: str = BEST) -> np.ndarray:
    with _lib.using(path):
        y = np.full((act[0].shape[0], w.shape[0]), np.nan, dtype=np.float32)
        tile(name, w, act, (0, w.shape[0]), (0, y.shape[0]), y)
        return y


@pytest.mark.parametrize("name", FORMATS)
def test_decode_matches_gguf_dequantize(name):
    rng = np.random.default_rng(1)
    w = random_weights(name, 3, 512, rng)
    dec = ref.decode(name, w.reshape(3, 2, ref.BLOCK_BYTES[name]))
    per = 16 if dec["scales"].shape[-1] == 16 else 32
    ds = (dec["d"][..., None] * dec["scales"].astype(np.float32)).repeat(per, axis=-1)
    mine = ds * dec["values"].astype(np.float32)
    if "mins" in dec:
        mine = mine - (dec["dmin"][..., None] * dec["mins"].astype(np.float32)).repeat(per, axis=-1)
    theirs = gquants.dequantize(w, GGMLQuantizationType[name])
    assert np.array_equal(mine.reshape(3, 512), theirs)


def test_activation_reference_matches_c():
    from llamay.kernels import matmul as mm
    x = activations(3, 512, np.random.default_rng(2))
    for path, act in _lib.each_path(lambda: mm.quantize_act(x, n_threads=1, bs=256)).items():
        q, d, s16 = ref.quantize_act(x)
        assert np.array_equal(act.q, q) and np.array_equal(act.d, d) and np.array_equal(act.s16, s16), path
        assert d.shape == (3, 2)  # one scale per super-block


@pytest.mark.parametrize("name", FORMATS)
def test_driver_batch_tokens_threads_equal_reference(name):
    from llamay.kernels import matmul as mm
    rng = np.random.default_rng(6)
    m, n, k = 37, 9, 1024
    w, x = random_weights(name, m, k, rng), activations(n, k, rng)
    qw = mm.QWeight(w.reshape(-1), name, m, k)
    expect = ref.matmul(name, w, *ref.quantize_act(x))
    for threads in (1, 2):
        assert np.array_equal(mm.matmul(x, qw, n_threads=threads), expect), threads
    by_token = np.concatenate([mm.matmul(x[i:i + 1], qw, n_threads=2) for i in range(n)])
    assert np.array_equal(by_token, expect)


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("k,m,n", [(256, 13, 3), (1024, 9, 5), (2048, 21, 2), (512, 35, 11)])
def test_reference_equals_every_path(name, k, m, n):
    rng = np.random.default_rng(k + m)
    w, act = random_weights(name, m, k, rng), ref.quantize_act(activations(n, k, rng))
    expect = ref.matmul(name, w, *act)
    assert np.isfinite(expect).all()
    for path in _lib.available():
        assert np.array_equal(c_matmul(name, w, act, path), expect), path


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("path", _lib.PATHS)
def test_tile_bounds_do_not_change_results(name, path):
    if path in _lib.skipped():
        pytest.skip(f"this CPU has no {path} path")
    rng = np.random.default_rng(3)
    m, n, k = 35, 70, 512  # 70 tokens cross the 64-token chunk, 35 rows three 16-row groups
    w, act = random_weights(name, m, k, rng), ref.quantize_act(activations(n, k, rng))
    full = c_matmul(name, w, act, path)
    with _lib.using(path):
        for rows, toks in [((5, 6), (0, n)), ((3, 12), (1, 2)), ((18, 35), (65, 70)), ((7, 30), (10, 69))]:
            y = np.full_like(full, np.nan)
            tile(name, w, act, rows, toks, y)
            part = y[toks[0]:toks[1], rows[0]:rows[1]]
            assert np.array_equal(part, full[toks[0]:toks[1], rows[0]:rows[1]]), (rows, toks)
            y[toks[0]:toks[1], rows[0]:rows[1]] = np.nan
            assert np.isnan(y).all(), "wrote outside its bounds"


def error_bounds(x: np.ndarray, wf: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on |x @ W.T - ours|. Each activation moves by at most dx / 2 onto its int8 grid, so the error
    is at most sum over blocks of dx / 2 * sum |W| (hard bound); the roundings act like independent
    uniform errors of variance dx^2 / 12, so 6 standard deviations bound it tightly (statistical bound).
    Both get 1e-5 of sum |x||W| for float32 rounding of the sums."""
    m, k = wf.shape
    bs = k // d.shape[1]  # values per activation scale
    rounding = 1e-5 * (np.abs(x) @ np.abs(wf).T) + 1e-30
    hard = (d / 2) @ np.abs(wf).reshape(m, k // bs, bs).sum(-1).T
    sigma = np.sqrt((d ** 2 / 12) @ (wf ** 2).reshape(m, k // bs, bs).sum(-1).T)
    return hard * 1.0001 + rounding, 6 * sigma + rounding


def check_against_float(name: str, w: np.ndarray, x: np.ndarray):
    act = ref.quantize_act(x)
    wf = gquants.dequantize(w, GGMLQuantizationType[name]).astype(np.float64)
    y, exact = c_matmul(name, w, act), x.astype(np.float64) @ wf.T
    hard, stat = error_bounds(x.astype(np.float64), wf, act[1].astype(np.float64))
    err = np.abs(y - exact)
    assert (err <= hard).all(), float((err / hard).max())
    assert (err <= stat).all(), float((err / stat).max())
    assert np.median(stat) < 0.5 * np.median(np.abs(exact))  # the check is not vacuous (one scale per 256)


@pytest.mark.parametrize("name", FORMATS)
def test_close_to_float_math(name):
    rng = np.random.default_rng(4)
    check_against_float(name, random_weights(name, 11, 1024, rng), activations(4, 1024, rng))


@pytest.mark.model
@pytest.mark.parametrize("tensor", ["blk.0.attn_output.weight", "blk.0.ffn_down.weight"])
def test_gemma_tensor(gemma_path, tensor):
    from llamay.gguf import GGUFReader
    r = GGUFReader(gemma_path)
    info = r.tensors[tensor]
    k, m = info.shape
    w = np.asarray(r.data(tensor)).reshape(m, -1)[:48]
    x = activations(3, k, np.random.default_rng(5))
    check_against_float(info.qtype.name, w, x)
    act = ref.quantize_act(x)
    assert np.array_equal(c_matmul(info.qtype.name, w, act), ref.matmul(info.qtype.name, w, *act))
