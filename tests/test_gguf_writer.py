"""GGUF writer: what it writes reads back equal through our reader and through gguf-py's GGUFReader
(the reference we did not write), for every metadata type, float and raw quantized tensors, and
custom alignments."""
import gguf
import numpy as np
import pytest

from llamay.gguf import BY_NAME, GGUFReader, GGUFWriter, dequantize

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)

# (type, values that span its range); floats are exact in their type
SCALARS = {
    U8: [0, 255], I8: [-128, 127], U16: [0, 65535], I16: [-32768, 32767], U32: [0, 2**32 - 1],
    I32: [-2**31, 2**31 - 1], U64: [0, 2**64 - 1], I64: [-2**63, 2**63 - 1],
    F32: [-1.5, 3.0517578125e-05], F64: [0.1, -1e300], BOOL: [True, False],
}
STRINGS = ["", "llama", "héllo wörld ✓", "a\nb\0c"]


def metadata_writer(alignment: int = 32) -> tuple[GGUFWriter, dict]:
    """A writer holding every metadata type, and the values expected back (key -> (type, value))."""
    w, expected = GGUFWriter(alignment), {}

    def add(key, vtype, value, elem_type=None):
        w.add(key, value, vtype=vtype, elem_type=elem_type)
        expected[key] = (vtype, value)

    for vtype, values in SCALARS.items():
        for i, v in enumerate(values):
            add(f"scalar.{vtype}.{i}", vtype, v)
        add(f"array.{vtype}", ARRAY, values, elem_type=vtype)
    for i, text in enumerate(STRINGS):
        add(f"string.{i}", STRING, text)
    add("array.strings", ARRAY, STRINGS)
    add("array.empty", ARRAY, [], elem_type=STRING)
    add("array.nested", ARRAY, [["a", "bc"], ["✓"], ["d", "", "e"]])
    add("array.nested3", ARRAY, [[["x"]], [["y", "z"]]])
    return w, expected


def _flat(value) -> list:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list):
        return [x for v in value for x in (_flat(v) if isinstance(v, (list, np.ndarray)) else [v])]
    return value


def _as_list(value):
    """Nested lists of Python values (numpy arrays become lists)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list):
        return [_as_list(v) for v in value]
    return value


def test_every_metadata_type_reads_back(tmp_path):
    w, expected = metadata_writer()
    path = tmp_path / "m.gguf"
    w.write(path)
    ours, ref = GGUFReader(path), gguf.GGUFReader(path)
    assert list(ours.metadata) == list(expected)
    for key, (vtype, value) in expected.items():
        assert ours.metadata_types[key] == vtype, key
        got = ours.metadata[key]
        assert repr(_as_list(got)) == repr(value), key  # repr: True is not 1, 1.0 is not 1
        field = ref.fields[key]
        assert int(field.types[0]) == vtype, key
        assert field.contents() == _flat(value), key
    assert [int(t) for t in ref.fields["array.nested3"].types] == [ARRAY, ARRAY, ARRAY, STRING]
    for vtype in SCALARS:
        assert [int(t) for t in ref.fields[f"array.{vtype}"].types] == [ARRAY, vtype]


def test_inferred_types(tmp_path):
    w = GGUFWriter()
    values = {"int": 7, "big": -2**40, "float": 0.5, "bool": True, "str": "s", "ints": [1, 2**40],
              "mixed": [1, 2.5], "np": np.array([1, 2], np.uint16), "bools": [True, False]}
    for key, value in values.items():
        w.add(key, value)
    w.write(tmp_path / "i.gguf")
    ref = gguf.GGUFReader(tmp_path / "i.gguf")
    types = {k: [int(t) for t in ref.fields[k].types] for k in values}
    assert types == {"int": [I32], "big": [I64], "float": [F32], "bool": [BOOL], "str": [STRING],
                     "ints": [ARRAY, I64], "mixed": [ARRAY, F32], "np": [ARRAY, U16],
                     "bools": [ARRAY, BOOL]}
    assert ref.fields["mixed"].contents() == [1.0, 2.5] and ref.fields["ints"].contents() == [1, 2**40]
    with pytest.raises(TypeError, match="mixed"):
        GGUFWriter().add("bad", ["a", 1])


def tensors_writer(alignment: int) -> tuple[GGUFWriter, dict]:
    """Float tensors from arrays and raw quantized blocks; name -> (GGUF type name, GGUF shape, bytes)."""
    rng = np.random.default_rng(alignment)
    w, expected = GGUFWriter(alignment), {}
    arrays = {"f32": rng.standard_normal((3, 5)).astype(np.float32),
              "f16": rng.standard_normal((2, 7)).astype(np.float16),
              "f32.1d": np.array([1.0, -0.0, np.inf], np.float32),
              "f32.3d": rng.standard_normal((2, 3, 4)).astype(np.float32)}
    for name, a in arrays.items():
        w.add_tensor(name, a)
        expected[name] = ("F32" if a.dtype == np.float32 else "F16", tuple(reversed(a.shape)), a.tobytes())
    for name, shape in [("Q8_0", (64, 3)), ("Q4_K", (256, 2)), ("Q6_K", (512,)), ("Q5_0", (32, 1))]:
        qt = BY_NAME[name]
        raw = rng.integers(0, 256, shape[0] // qt.block_size * qt.type_size * int(np.prod(shape[1:])),
                           dtype=np.uint8)
        w.add_tensor(f"q.{name}", raw, qtype=name, shape=shape)
        expected[f"q.{name}"] = (name, shape, raw.tobytes())
    return w, expected


@pytest.mark.parametrize("alignment", [1, 8, 32, 64, 4096])
def test_tensors_read_back(tmp_path, alignment):
    w, expected = tensors_writer(alignment)
    w.add("general.name", "t")
    path = tmp_path / "t.gguf"
    w.write(path)
    ours, ref = GGUFReader(path), gguf.GGUFReader(path)
    assert ours.alignment == ref.alignment == alignment
    assert ours.data_offset == ref.data_offset and ours.data_offset % alignment == 0
    assert [t.name for t in ref.tensors] == list(ours.tensors) == list(expected)
    for t in ref.tensors:
        qname, shape, raw = expected[t.name]
        mine = ours.tensors[t.name]
        assert (mine.qtype.name, mine.shape) == (qname, shape) == (t.tensor_type.name, tuple(t.shape.tolist()))
        assert mine.offset == t.data_offset and (mine.offset - ours.data_offset) % alignment == 0
        assert ours.data(t.name).tobytes() == raw == t.data.tobytes()


def test_float_tensors_values(tmp_path):
    a = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    h = a.astype(np.float16)
    w = GGUFWriter()
    w.add_tensor("a", np.asfortranarray(a))  # layout of the input does not matter
    w.add_tensor("h", h)
    w.write(tmp_path / "f.gguf")
    r = GGUFReader(tmp_path / "f.gguf")
    assert r.array("a").shape == (4, 6) and np.array_equal(r.array("a"), a)
    assert np.array_equal(r.array("h").view(np.uint16), h.view(np.uint16))
    ref = gguf.GGUFReader(tmp_path / "f.gguf")
    assert np.array_equal(ref.tensors[0].data, a)
    assert np.array_equal(dequantize(r.data("h"), r.tensors["h"].qtype, r.tensors["h"].shape),
                          gguf.quants.dequantize(ref.tensors[1].data, gguf.GGMLQuantizationType.F16))


def test_wrong_block_bytes_refused():
    with pytest.raises(ValueError, match="do not hold Q8_0"):
        GGUFWriter().add_tensor("q", np.zeros(33, np.uint8), qtype="Q8_0", shape=(32,))
