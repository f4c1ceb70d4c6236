"""quantize_rows (csrc/quantize.c) is byte-identical to ggml_quantize_chunk, without an importance matrix
(ggml's reference quantizers) and with each of quantize_rows_cases.IMATRICES: the sha256 of its bytes on
every input of quantize_rows_cases.py equals that of ggml's, recorded by scripts/ggml_quantize_rows.py in
fixtures/quantize_rows.json; the bytes do not depend on the thread count; bad types, shapes and importance
matrices raise ValueError; and dequantizing gives back the input within each format's error."""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from llamay.gguf import BY_NAME, dequantize
from llamay.kernels import _lib
from llamay.kernels.quantize import quantize_rows
from quantize_rows_cases import CASES, IMATRICES, TYPES, case_input, imatrix_input

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "quantize_rows.json").read_text())


def test_fixture_matches_the_cases():
    """The fixture was recorded from these very inputs (rerun the script after changing the cases)."""
    recorded = [{k: v for k, v in c.items() if k not in ("sha256", "sha256_imatrix")} for c in FIXTURE["cases"]]
    assert recorded == CASES
    assert FIXTURE["imatrices"] == IMATRICES
    assert all(sorted(c["sha256"]) == sorted(TYPES) for c in FIXTURE["cases"])
    names = sorted(im["name"] for im in IMATRICES)
    assert all(sorted(c["sha256_imatrix"]) == names for c in FIXTURE["cases"])
    assert all(sorted(d) == sorted(TYPES) for c in FIXTURE["cases"] for d in c["sha256_imatrix"].values())


@pytest.mark.parametrize("name", TYPES)
def test_bytes_equal_ggml(name):
    differ = []
    for case in FIXTURE["cases"]:
        x = case_input(case)
        raw = quantize_rows(x, name)
        assert raw.dtype == np.uint8 and raw.size == x.shape[0] * BY_NAME[name].row_bytes(x.shape[1])
        if hashlib.sha256(raw.tobytes()).hexdigest() != case["sha256"][name]:
            differ.append(case["name"])
    assert not differ, f"{name} differs from ggml {FIXTURE['ggml_version']} on {differ}"


@pytest.mark.parametrize("name", TYPES)
def test_bytes_equal_ggml_with_imatrix(name):
    differ = []
    for case in FIXTURE["cases"]:
        x = case_input(case)
        for im in IMATRICES:
            raw = quantize_rows(x, name, imatrix=imatrix_input(im, x.shape[1]))
            assert raw.dtype == np.uint8 and raw.size == x.shape[0] * BY_NAME[name].row_bytes(x.shape[1])
            if hashlib.sha256(raw.tobytes()).hexdigest() != case["sha256_imatrix"][im["name"]][name]:
                differ.append(f"{case['name']}/{im['name']}")
    assert not differ, f"{name} with an imatrix differs from ggml {FIXTURE['ggml_version']} on {differ}"


@pytest.mark.parametrize("name", TYPES)
def test_threads_give_the_same_bytes_with_imatrix(name):
    x = np.random.default_rng(24).standard_normal((9, 512)).astype(np.float32)
    w = imatrix_input(IMATRICES[0], 512)
    one = quantize_rows(x, name, nthreads=1, imatrix=w)
    assert np.array_equal(one, quantize_rows(x, name, nthreads=2, imatrix=w))
    assert np.array_equal(one, quantize_rows(x, name, nthreads=16, imatrix=w))


# ggml's Q8_0, F16 and BF16 ignore an importance matrix; every other type here uses it
IMATRIX_USERS = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")


@pytest.mark.parametrize("name", TYPES)
def test_imatrix_changes_the_bytes_where_ggml_uses_it(name):
    """The weighted path runs: the positive and zeros imatrices change every user's bytes (the range one
    may not: with weights far apart Q4_1 / Q5_1 can keep their first, unweighted-looking fit), and no
    imatrix changes a non-user's."""
    x = np.random.default_rng(25).standard_normal((4, 512)).astype(np.float32)
    plain = quantize_rows(x, name)
    for im in IMATRICES:
        same = np.array_equal(plain, quantize_rows(x, name, imatrix=imatrix_input(im, 512)))
        if name not in IMATRIX_USERS:
            assert same, im["name"]
        elif im["kind"] != "range":
            assert not same, im["name"]


@pytest.mark.parametrize("imatrix", [np.ones(255, np.float32), np.ones(257, np.float32),
                                     np.ones((1, 256), np.float32), np.ones((2, 256), np.float32),
                                     np.float32(1), np.ones(256, np.complex64), np.array(["1"] * 256),
                                     np.full(256, np.nan, np.float32), np.r_[np.ones(255), np.inf],
                                     np.r_[np.ones(255), -np.inf], np.r_[np.ones(255), 1e39]])
@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "F16"])
def test_bad_imatrix_raises(name, imatrix):
    with pytest.raises(ValueError):
        quantize_rows(np.zeros((2, 256), np.float32), name, imatrix=imatrix)


def test_imatrix_is_cast_to_float32():
    x = np.random.default_rng(26).standard_normal((2, 256)).astype(np.float32)
    w = imatrix_input(IMATRICES[0], 256)
    want = quantize_rows(x, "Q4_K", imatrix=w)
    assert np.array_equal(quantize_rows(x, "Q4_K", imatrix=w.astype(np.float64)), want)
    assert np.array_equal(quantize_rows(x, "Q4_K", imatrix=list(w)), want)
    assert np.array_equal(quantize_rows(x, "Q4_K", imatrix=np.repeat(w, 2)[::2]), want)  # not contiguous


@pytest.mark.parametrize("name", TYPES)
def test_threads_give_the_same_bytes(name):
    x = np.random.default_rng(21).standard_normal((9, 512)).astype(np.float32)
    one = quantize_rows(x, name, nthreads=1)
    assert np.array_equal(one, quantize_rows(x, name, nthreads=2))
    assert np.array_equal(one, quantize_rows(x, BY_NAME[name], nthreads=16))  # more threads than rows


def test_rows_are_independent():
    x = np.random.default_rng(22).standard_normal((5, 256)).astype(np.float32)
    w = imatrix_input(IMATRICES[1], 256)
    for name in TYPES:
        whole = quantize_rows(x, name)
        assert np.array_equal(whole, np.concatenate([quantize_rows(x[i:i + 1], name) for i in range(5)]))
        whole = quantize_rows(x, name, imatrix=w)
        assert np.array_equal(whole, np.concatenate([quantize_rows(x[i:i + 1], name, imatrix=w) for i in range(5)]))


def test_empty_rows():
    assert quantize_rows(np.zeros((0, 256), np.float32), "Q4_K").size == 0


@pytest.mark.parametrize("name", ["F32", "Q8_1", "Q8_K", "IQ2_XXS", "IQ4_NL", "TQ1_0", "MXFP4", "nope"])
def test_unsupported_type_raises(name):
    with pytest.raises(ValueError):
        quantize_rows(np.zeros((1, 256), np.float32), BY_NAME.get(name, name))


@pytest.mark.parametrize("name,n", [("Q4_0", 48), ("Q8_0", 16), ("Q4_K", 128), ("Q6_K", 384), ("F16", 0)])
def test_bad_row_length_raises(name, n):
    with pytest.raises(ValueError):
        quantize_rows(np.zeros((2, n), np.float32), name)


@pytest.mark.parametrize("x", [np.zeros(256, np.float32), np.zeros((2, 256), np.float64),
                               np.zeros((256, 2), np.float32).T, np.zeros((1, 2, 256), np.float32)])
def test_bad_array_raises(x):
    with pytest.raises(ValueError):
        quantize_rows(x, "Q8_0")


def test_c_refuses_bad_arguments():
    x = np.zeros((1, 256), np.float32)
    out = np.zeros(1024, np.uint8)
    w = np.ones(256, np.float32)
    fn = _lib.lib.ly_quantize_rows
    assert fn(15, x.ctypes.data, 0, out.ctypes.data, 1, 256, None, 1) == -1  # Q8_K
    assert fn(12, x.ctypes.data, 0, out.ctypes.data, 1, 255, None, 1) == -1
    assert fn(12, x.ctypes.data, 0, out.ctypes.data, 1, 255, w.ctypes.data, 1) == -1
    assert fn(2, x.ctypes.data, 8, out.ctypes.data, 1, 256, None, 1) == -1  # a source type other than F32/F16/BF16
    assert fn(2, x.ctypes.data, 0, out.ctypes.data, 1, 256, None, 1) == 8 * 18
    assert fn(2, x.ctypes.data, 0, out.ctypes.data, 1, 256, w.ctypes.data, 1) == 8 * 18


@pytest.mark.parametrize("qtype", ["Q4_0", "Q8_0", "Q4_K", "Q6_K", "F16", "BF16"])
def test_half_precision_sources_give_the_bytes_of_their_widening(qtype):
    """F16 and BF16 rows widen to float32 inside the quantizer, exactly: the bytes of the float32 rows."""
    x = np.random.default_rng(4).standard_normal((5, 512)).astype(np.float32)
    h = x.astype(np.float16)
    assert np.array_equal(quantize_rows(h, qtype, 2), quantize_rows(h.astype(np.float32), qtype, 1))
    b = (x.view(np.uint32) >> 16).astype(np.uint16)
    widened = (b.astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(quantize_rows(b, qtype, 2), quantize_rows(widened, qtype, 1))
    w = imatrix_input(IMATRICES[0], 512)
    assert np.array_equal(quantize_rows(h, qtype, 2, imatrix=w),
                          quantize_rows(h.astype(np.float32), qtype, 1, imatrix=w))
    assert np.array_equal(quantize_rows(b, qtype, 2, imatrix=w), quantize_rows(widened, qtype, 1, imatrix=w))


# Relative RMS error bounds of the K-quants on normal rows (measured: 0.29, 0.15, 0.071, 0.036, 0.018).
K_RMSE = {"Q2_K": 0.35, "Q3_K": 0.2, "Q4_K": 0.09, "Q5_K": 0.045, "Q6_K": 0.023}


def _per_element_bound(name: str, x: np.ndarray) -> np.ndarray:
    """The most each element may move: half a step (a whole one at Q4_0/Q5_0's clamped end), plus the
    fp16 rounding of the block's scale (and min)."""
    if name == "F16":
        return np.abs(x) * 2.0 ** -11 + 2.0 ** -25
    if name == "BF16":
        return np.abs(x) * 2.0 ** -8
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(1, keepdims=True)
    lo, hi = b.min(1, keepdims=True), b.max(1, keepdims=True)
    bound = {"Q8_0": amax * (1 / 254 + 1 / 1024), "Q4_0": amax / 8 * 1.01, "Q5_0": amax / 16 * 1.02,
             "Q4_1": (hi - lo) / 30 * 1.05 + np.abs(lo) * 2.0 ** -10,
             "Q5_1": (hi - lo) / 62 * 1.1 + np.abs(lo) * 2.0 ** -10}[name]
    return np.broadcast_to(bound, b.shape).reshape(x.shape)


@pytest.mark.parametrize("name", TYPES)
def test_round_trip_error(name):
    rng = np.random.default_rng(23)
    for x in (rng.standard_normal((8, 512)), rng.uniform(-0.5, 1.5, (8, 512))):
        x = x.astype(np.float32)
        y = dequantize(quantize_rows(x, name), BY_NAME[name], (x.shape[1], x.shape[0]))
        assert y.shape == x.shape
        err = np.abs(y.astype(np.float64) - x)
        if name in K_RMSE:
            assert np.sqrt(np.mean(err ** 2) / np.mean(x.astype(np.float64) ** 2)) < K_RMSE[name]
            assert err.max() < np.abs(x).max() * 0.5
        else:
            assert np.all(err <= _per_element_bound(name, x.astype(np.float64)))
    zeros = np.zeros((1, 256), np.float32)
    assert not dequantize(quantize_rows(zeros, name), BY_NAME[name], (256, 1)).any()
