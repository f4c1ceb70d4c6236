"""GGUF reader: equal to gguf-py's GGUFReader on a real file; every malformed file fails with GGUFError
naming the problem, fast and without big allocations. Small files are built byte by byte here
(independently of our writer) from the format spec: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
"""
import struct
import tracemalloc

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamay.gguf import GGUFError, GGUFReader
from llamay.gguf.reader import MAX_ARRAY_DEPTH

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
T_F32, T_Q8_0 = 0, 8
HUGE = 2**62


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    return s(key) + struct.pack("<I", vtype) + payload


def arr(etype: int, n: int, payload: bytes) -> bytes:
    return struct.pack("<IQ", etype, n) + payload


def tinfo(name: str, shape, type_id: int, offset: int) -> bytes:
    return (s(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
            + struct.pack("<IQ", type_id, offset))


def gguf_bytes(kvs=(), infos=(), data=b"", version=3, n_tensors=None, n_kv=None, align=32,
               magic=b"GGUF") -> bytes:
    head = magic + struct.pack("<IQQ", version, len(infos) if n_tensors is None else n_tensors,
                               len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(infos)
    return head + b"\0" * (-len(head) % align) + data


F32_DATA = np.arange(4, dtype="<f4").tobytes()  # 16 bytes
Q8_DATA = bytes(range(68))  # two Q8_0 blocks
VALID_KVS = [kv("general.architecture", STRING, s("llama")), kv("a.u32", U32, struct.pack("<I", 7)),
             kv("a.ints", ARRAY, arr(I32, 3, struct.pack("<3i", -1, 0, 5))),
             kv("a.strs", ARRAY, arr(STRING, 2, s("x") + s("héllo"))),
             kv("a.nested", ARRAY, arr(ARRAY, 1, arr(STRING, 1, s("deep"))))]
VALID_INFOS = [tinfo("f", [4], T_F32, 0), tinfo("q", [32, 2], T_Q8_0, 32)]
VALID_DATA = F32_DATA + b"\0" * 16 + Q8_DATA  # ends with tensor data: no prefix is a valid file


def valid_file() -> bytes:
    return gguf_bytes(VALID_KVS, VALID_INFOS, VALID_DATA)


def write(tmp_path, data: bytes, name="t.gguf"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def fails(tmp_path, data: bytes, match: str):
    """Opening `data` raises GGUFError whose message, less the file's path, contains `match`."""
    path = write(tmp_path, data)
    with pytest.raises(GGUFError) as e:
        GGUFReader(path)
    assert match in str(e.value).replace(str(path), "")


def test_valid_small_file(tmp_path):
    r = GGUFReader(write(tmp_path, valid_file()))
    assert r.version == 3
    assert r.metadata["general.architecture"] == "llama" and r.metadata["a.u32"] == 7
    assert r.metadata["a.ints"].tolist() == [-1, 0, 5]
    assert r.metadata["a.strs"] == ["x", "héllo"] and r.metadata["a.nested"] == [["deep"]]
    assert r.tensors["f"].shape == (4,) and r.tensors["q"].shape == (32, 2)
    assert r.array("f").tolist() == [0.0, 1.0, 2.0, 3.0]
    assert r.data("q").tobytes() == Q8_DATA


# --- against gguf-py on a real file -----------------------------------------------------------

def _flat(value) -> list:
    """Our value as gguf-py's ReaderField.contents() gives it: nested arrays flattened."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list):
        return [x for v in value for x in (_flat(v) if isinstance(v, (list, np.ndarray)) else [v])]
    return value


def _types(value, vtype: int) -> list[int]:
    """Our value's type chain as gguf-py's ReaderField.types gives it (first element's, for arrays)."""
    if vtype != ARRAY:
        return [vtype]
    if isinstance(value, np.ndarray):
        codes = {"u1": U8, "i1": I8, "u2": U16, "i2": I16, "u4": U32, "i4": I32, "f4": F32,
                 "b1": BOOL, "u8": U64, "i8": I64, "f8": F64}
        return [ARRAY, codes[value.dtype.str[1:]]]
    if value and isinstance(value[0], str):
        return [ARRAY, STRING]
    return [ARRAY] + (_types(value[0], ARRAY) if value else [])


def assert_same_as_gguf_py(path, ours: GGUFReader):
    ref = gguf.GGUFReader(path)
    assert ours.version == ref.fields["GGUF.version"].contents()
    assert len(ours.tensors) == ref.fields["GGUF.tensor_count"].contents()
    keys = [k for k in ref.fields if not k.startswith("GGUF.")]
    assert list(ours.metadata) == keys  # same keys, same order
    for key in keys:
        field, value = ref.fields[key], ours.metadata[key]
        assert _types(value, ours.metadata_types[key]) == [int(t) for t in field.types], key
        assert _flat(value) == field.contents(), key
    assert ours.data_offset == ref.data_offset and ours.alignment == ref.alignment
    assert [t.name for t in ref.tensors] == list(ours.tensors)
    for t in ref.tensors:
        mine = ours.tensors[t.name]
        assert mine.shape == tuple(int(d) for d in t.shape), t.name
        assert (mine.qtype.id, mine.n_elements, mine.n_bytes, mine.offset) == \
            (int(t.tensor_type), t.n_elements, t.n_bytes, t.data_offset), t.name
    return ref


@pytest.mark.model
def test_smollm_matches_gguf_py(smollm_path):
    ours = GGUFReader(smollm_path)
    ref = assert_same_as_gguf_py(smollm_path, ours)
    assert len(ours.metadata["tokenizer.ggml.tokens"]) == 49152
    for t in ref.tensors[:3] + ref.tensors[-3:]:
        assert ours.data(t.name).tobytes() == t.data.tobytes(), t.name


def test_small_file_matches_gguf_py(tmp_path):
    path = write(tmp_path, valid_file())
    assert_same_as_gguf_py(path, GGUFReader(path))


# --- malformed files ---------------------------------------------------------------------------

def test_bad_magic(tmp_path):
    fails(tmp_path, gguf_bytes(VALID_KVS, VALID_INFOS, VALID_DATA, magic=b"GGML"), "bad magic")


@pytest.mark.parametrize("version", [0, 1, 4, 2**31])
def test_unsupported_version(tmp_path, version):
    fails(tmp_path, gguf_bytes(version=version), f"unsupported GGUF version {version}")


def test_empty_and_missing_file(tmp_path):
    fails(tmp_path, b"", "not a GGUF file")
    with pytest.raises(GGUFError, match="cannot open"):
        GGUFReader(tmp_path / "missing.gguf")


def test_every_prefix_fails(tmp_path):
    data = valid_file()
    GGUFReader(write(tmp_path, data))  # the whole file is valid
    path = tmp_path / "cut.gguf"
    for n in range(len(data)):
        path.write_bytes(data[:n])
        with pytest.raises(GGUFError):
            GGUFReader(path)


@pytest.mark.parametrize("case, data, match", [
    ("tensor count", lambda: gguf_bytes(n_tensors=HUGE), "absurd tensor count"),
    ("kv count", lambda: gguf_bytes(n_kv=HUGE), "absurd metadata count"),
    ("key length", lambda: gguf_bytes([struct.pack("<Q", HUGE) + b"k"]), "metadata key"),
    ("string length", lambda: gguf_bytes([kv("k", STRING, struct.pack("<Q", HUGE))]), "value of 'k'"),
    ("array length", lambda: gguf_bytes([kv("k", ARRAY, arr(U8, HUGE, b""))]), "absurd array length"),
    ("string array", lambda: gguf_bytes([kv("k", ARRAY, arr(STRING, HUGE, b""))]), "absurd array length"),
    ("nested array", lambda: gguf_bytes([kv("k", ARRAY, arr(ARRAY, HUGE, b""))]), "absurd array length"),
    ("string in array", lambda: gguf_bytes([kv("k", ARRAY, arr(STRING, 1, struct.pack("<Q", HUGE)))]),
     "string 0 of 'k'"),
    ("tensor name", lambda: gguf_bytes(infos=[struct.pack("<Q", HUGE) + bytes(40)]),
     "tensor name"),
    ("dimension", lambda: gguf_bytes(infos=[tinfo("t", [HUGE, HUGE], T_F32, 0)]), "absurd shape"),
])
def test_absurd_sizes_fail_fast_without_allocating(tmp_path, case, data, match):
    tracemalloc.start()
    try:
        fails(tmp_path, data(), match)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{case}: {peak} bytes allocated"


def _nested(depth: int) -> bytes:
    """`depth` arrays, one inside the other, the innermost holding one u8."""
    payload = arr(U8, 1, b"\x05")
    for _ in range(depth - 1):
        payload = arr(ARRAY, 1, payload)
    return kv("n", ARRAY, payload)


def test_nested_arrays(tmp_path):
    r = GGUFReader(write(tmp_path, gguf_bytes([_nested(MAX_ARRAY_DEPTH)])))
    value = r.metadata["n"]
    for _ in range(MAX_ARRAY_DEPTH - 1):
        value = value[0]
    assert value.tolist() == [5]
    fails(tmp_path, gguf_bytes([_nested(MAX_ARRAY_DEPTH + 1)]), "nested deeper")
    fails(tmp_path, gguf_bytes([_nested(10_000)]), "nested deeper")


@pytest.mark.parametrize("vtype", [13, 99, 2**32 - 1])
def test_unknown_metadata_value_type(tmp_path, vtype):
    fails(tmp_path, gguf_bytes([kv("k", vtype, bytes(8))]), f"unknown metadata value type {vtype}")
    fails(tmp_path, gguf_bytes([kv("k", ARRAY, arr(vtype, 1, bytes(8)))]), f"unknown array element type {vtype}")


@pytest.mark.parametrize("type_id", [4, 5, 31, 1000])  # 4, 5: removed Q4_2/Q4_3; 31: unused
def test_unknown_tensor_type(tmp_path, type_id):
    fails(tmp_path, gguf_bytes(infos=[tinfo("t", [32], type_id, 0)], data=bytes(64)),
          f"unknown type {type_id}")


def test_too_many_dims(tmp_path):
    fails(tmp_path, gguf_bytes(infos=[tinfo("t", [1] * 5, T_F32, 0)], data=bytes(32)), "5 dimensions")
    r = GGUFReader(write(tmp_path, gguf_bytes(infos=[tinfo("t", [1, 2, 1, 2], T_F32, 0)], data=bytes(32))))
    assert r.tensors["t"].shape == (1, 2, 1, 2)


def test_offset_past_end(tmp_path):
    fails(tmp_path, gguf_bytes(infos=[tinfo("t", [4], T_F32, 32)], data=bytes(32)), "past the end")
    fails(tmp_path, gguf_bytes(infos=[tinfo("t", [4], T_F32, 2**64 - 32)], data=bytes(32)), "past the end")
    fails(tmp_path, gguf_bytes(infos=[tinfo("t", [32, 2], T_Q8_0, 0)], data=bytes(67)), "past the end")


def test_misaligned_offset(tmp_path):
    fails(tmp_path, gguf_bytes(infos=[tinfo("t", [4], T_F32, 4)], data=bytes(64)), "not aligned to 32")


def test_duplicate_tensor_names(tmp_path):
    infos = [tinfo("t", [4], T_F32, 0), tinfo("t", [4], T_F32, 32)]
    fails(tmp_path, gguf_bytes(infos=infos, data=bytes(64)), "duplicate tensor name")


def test_duplicate_keys(tmp_path):
    kvs = [kv("k", U8, b"\1"), kv("k", U8, b"\2")]
    fails(tmp_path, gguf_bytes(kvs), "duplicate metadata key 'k'")


@pytest.mark.parametrize("payload, vtype", [(struct.pack("<I", 48), U32), (struct.pack("<I", 0), U32),
                                            (struct.pack("<f", 32.0), F32), (s("32"), STRING),
                                            (b"\1", BOOL)])
def test_bad_alignment(tmp_path, payload, vtype):
    fails(tmp_path, gguf_bytes([kv("general.alignment", vtype, payload)]), "power of two")


def test_custom_alignment(tmp_path):
    data = gguf_bytes([kv("general.alignment", U32, struct.pack("<I", 64))],
                      [tinfo("t", [4], T_F32, 0), tinfo("u", [4], T_F32, 64)], bytes(80), align=64)
    r = GGUFReader(write(tmp_path, data))
    assert r.alignment == 64 and r.data_offset % 64 == 0
    assert r.tensors["u"].offset == r.data_offset + 64
    fails(tmp_path, gguf_bytes([kv("general.alignment", U32, struct.pack("<I", 64))],
                               [tinfo("t", [4], T_F32, 32)], bytes(64), align=64), "not aligned to 64")


@pytest.mark.parametrize("shape", [[0], [4, 0], [0, 4, 1]])
def test_zero_dimension(tmp_path, shape):
    fails(tmp_path, gguf_bytes(infos=[tinfo("t", shape, T_F32, 0)], data=bytes(64)), "zero")


def test_row_not_a_multiple_of_the_block(tmp_path):
    fails(tmp_path, gguf_bytes(infos=[tinfo("t", [16, 4], T_Q8_0, 0)], data=bytes(68)),
          "not a multiple of Q8_0 blocks")
    fails(tmp_path, gguf_bytes(infos=[tinfo("t", [], T_Q8_0, 0)], data=bytes(68)),
          "not a multiple of Q8_0 blocks")


def test_invalid_utf8_is_kept_not_fatal(tmp_path):
    r = GGUFReader(write(tmp_path, gguf_bytes([kv("k", STRING, s(b"a\xffb"))])))
    assert r.metadata["k"].encode("utf-8", "surrogateescape") == b"a\xffb"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, len(valid_file()) - 1), st.integers(0, 255)),
                      min_size=1, max_size=6),
       cut=st.integers(0, len(valid_file())))
def test_random_mutations_succeed_or_raise_gguf_error(tmp_path, edits, cut):
    data = bytearray(valid_file())
    for pos, byte in edits:
        data[pos] = byte
    try:
        r = GGUFReader(write(tmp_path, bytes(data[:cut])))
    except GGUFError:
        return
    for name, t in r.tensors.items():  # a file that opens is consistent
        assert t.offset + t.n_bytes <= r.file_size and len(r.data(name)) == t.n_bytes


def _mapping_rss_kb(address: int) -> int | None:
    """Rss of the mapping holding `address` in /proc/self/smaps (None where there is no smaps)"""
    try:
        lines = open("/proc/self/smaps").read().split("\n")
    except OSError:
        return None
    for i, line in enumerate(lines):
        head = line.split(" ")[0]
        if "-" in head and not line.startswith(" "):
            try:
                lo, hi = (int(x, 16) for x in head.split("-"))
            except ValueError:
                continue
            if lo <= address < hi:
                return next(int(x.split()[1]) for x in lines[i + 1:] if x.startswith("Rss:"))
    return None


def test_release_drops_a_tensors_pages_from_resident_memory(gemma_path):
    """release(view) gives the mapped pages under a tensor back (a copy is used instead): the mapping's resident
    size falls by about the tensor's size; the bytes read back the same afterwards"""
    r = GGUFReader(gemma_path)
    name = max(r.tensors, key=lambda n: r.tensors[n].n_bytes)
    view = r.data(name)
    before_sum = int(view.sum(dtype=np.uint64))  # touches every page
    base = np.frombuffer(r.buffer, np.uint8, count=1).ctypes.data
    touched = _mapping_rss_kb(base)
    if touched is None:
        pytest.skip("no /proc/self/smaps here")
    r.release(view)
    released = _mapping_rss_kb(base)
    assert touched - released >= 0.9 * view.nbytes / 1024, (touched, released, view.nbytes)
    assert int(view.sum(dtype=np.uint64)) == before_sum  # read back from the page cache
    r.release(np.zeros(10, np.uint8))  # a view of anything else is left alone (no error, nothing freed)
