"""Dequantization: bit-for-bit equality with gguf-py (the reference we did not write) on random blocks
of every supported format and on the real tensors of both model files."""
import collections

import gguf
import numpy as np
import pytest

from llamay.gguf import BY_NAME, GGUFError, GGUFReader, dequantize, dequantize_tensor
from llamay.gguf import dequant

# byte offsets of the f16 scales inside one block; random bytes there could be NaN or inf
F16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
              "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}
FLOATS = ["F32", "F16", "BF16"]
ALL = FLOATS + list(F16_FIELDS)


def random_blocks(rng, name: str, n_blocks: int) -> np.ndarray:
    """[n_blocks * type_size] uint8: random bytes with finite f16 scales (any sign, subnormals, zero)."""
    qt = BY_NAME[name]
    blocks = rng.integers(0, 256, (n_blocks, qt.type_size), dtype=np.uint8)
    for off in F16_FIELDS.get(name, []):
        h = blocks[:, off:off + 2].copy().view("<u2")
        h[(h & 0x7C00) == 0x7C00] &= np.uint16(0xBFFF)  # exponent all ones -> not all ones
        blocks[:, off:off + 2] = h.view(np.uint8)
    return blocks.reshape(-1)


def reference(raw: np.ndarray, name: str, shape) -> np.ndarray:
    """gguf-py's dequantization of GGUF `shape` bytes, rows as numpy rows."""
    qt = BY_NAME[name]
    rows = raw.reshape(-1, shape[0] // qt.block_size * qt.type_size)
    out = gguf.quants.dequantize(rows, gguf.GGMLQuantizationType(qt.id))
    return out.reshape(tuple(reversed(shape)))


def assert_bits_equal(ours: np.ndarray, ref: np.ndarray):
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_blocks_match_gguf_py(name, seed):
    rng = np.random.default_rng([seed, BY_NAME[name].id])
    qt = BY_NAME[name]
    row = qt.block_size * int(rng.integers(1, 9))
    shape = (row, int(rng.integers(1, 6)), int(rng.integers(1, 4)))  # GGUF order
    raw = random_blocks(rng, name, row * shape[1] * shape[2] // qt.block_size)
    assert_bits_equal(dequantize(raw, qt, shape), reference(raw, name, shape))


@pytest.mark.parametrize("name", list(F16_FIELDS))
def test_across_chunk_boundaries(name, monkeypatch):
    monkeypatch.setattr(dequant, "CHUNK_ELEMENTS", 3 * 256)  # 3 K-quant blocks, 24 small ones
    qt = BY_NAME[name]
    n_blocks = 10 if qt.block_size == 256 else 50
    raw = random_blocks(np.random.default_rng(qt.id), name, n_blocks)
    shape = (qt.block_size * n_blocks // 2, 2)
    assert_bits_equal(dequantize(raw, qt.id, shape), reference(raw, name, shape))


def test_special_values_in_float_formats():
    # NaN payloads, infinities, -0.0 and subnormals must pass through unchanged
    raw = np.array([0x7E01, 0xFC00, 0x8000, 0x0001, 0x7C00, 0xFFFF, 0x3C00, 0x03FF], "<u2").view(np.uint8)
    for name in ["F16", "BF16"]:
        assert_bits_equal(dequantize(raw, BY_NAME[name], (8,)), reference(raw, name, (8,)))
    assert_bits_equal(dequantize(raw, BY_NAME["F32"], (4,)), reference(raw, "F32", (4,)))


def test_output_is_row_major_and_owned():
    raw = random_blocks(np.random.default_rng(5), "Q8_0", 6)
    raw.flags.writeable = False
    out = dequantize(raw, BY_NAME["Q8_0"], (64, 3))
    assert out.shape == (3, 64) and out.flags.writeable and out.flags.c_contiguous
    ref = gguf.quants.dequantize(raw.reshape(3, 68), gguf.GGMLQuantizationType.Q8_0)
    assert np.array_equal(out[1].view(np.uint32), ref[1].view(np.uint32))


@pytest.mark.parametrize("name", ["IQ2_XXS", "Q8_K", "IQ1_S", "I32"])
def test_unsupported_type_names_the_type(name):
    qt = BY_NAME[name]
    with pytest.raises(GGUFError, match=name):
        dequantize(np.zeros(qt.type_size, np.uint8), qt, (qt.block_size,))


def test_unknown_type_id():
    with pytest.raises(GGUFError, match="unknown tensor type id 99"):
        dequantize(np.zeros(4, np.uint8), 99, (1,))


def test_wrong_byte_count_and_row_length():
    with pytest.raises(GGUFError, match="do not hold Q4_0"):
        dequantize(np.zeros(17, np.uint8), BY_NAME["Q4_0"], (32,))
    with pytest.raises(GGUFError, match="not a multiple of Q4_K blocks"):
        dequantize(np.zeros(144, np.uint8), BY_NAME["Q4_K"], (128, 2))
    with pytest.raises(GGUFError, match="row of 1 is not a multiple of Q8_0"):
        dequantize(np.zeros(0, np.uint8), BY_NAME["Q8_0"], ())
    assert dequantize(np.zeros(4, np.uint8), BY_NAME["F32"], ()).shape == ()
    with pytest.raises(TypeError, match="uint8"):
        dequantize(np.zeros(8, np.float32), BY_NAME["F32"], (8,))


def sample_tensors(reader: GGUFReader, per_type: int = 2, max_bytes: int = 2_000_000):
    """The `per_type` smallest and the largest (under max_bytes) tensors of each type present."""
    by_type = collections.defaultdict(list)
    for t in sorted(reader.tensors.values(), key=lambda t: (t.n_bytes, t.name)):
        by_type[t.qtype.name].append(t)
    picked = []
    for tensors in by_type.values():
        small = [t for t in tensors if t.n_bytes <= max_bytes] or tensors[:1]
        picked += small[:per_type] + small[-1:]
    return by_type.keys(), {t.name: t for t in picked}.values()


@pytest.mark.model
@pytest.mark.parametrize("which", ["smollm", "gemma"])
def test_real_tensors_match_gguf_py(which, request):
    reader = GGUFReader(request.getfixturevalue(f"{which}_path"))
    types, tensors = sample_tensors(reader)
    assert set(types) <= set(ALL), f"{which} holds a type we cannot dequantize: {types}"
    for t in tensors:
        ours = dequantize_tensor(reader, t.name)
        assert ours.shape == tuple(reversed(t.shape)), t.name
        assert_bits_equal(ours, reference(reader.data(t.name), t.qtype.name, t.shape))
    assert {t.qtype.name for t in tensors} == set(types)
