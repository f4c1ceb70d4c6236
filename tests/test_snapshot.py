"""kv/snapshot_format.py: the .llamayctx format. Round trips are byte-exact; every damaged file raises SnapshotError."""
import os
import struct
import tracemalloc

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings, strategies as st

from llamay.kv.snapshot_format import (HEADERS, KVGeometry, Snapshot, SnapshotError, SnapshotFile, SnapshotHeader,
                                check_compatible, read_snapshot, write_snapshot)

HEADER = HEADERS[2]  # of the files these tests write: versions 2 and 3 (no recurrent state)

DIGEST = "ab" * 32
N_VOCAB = 11
PAGES_AT = 256  # small's page data: 180 header + 7 * 4 tokens + 11 * 4 logits = 252, padded to 64
OTHER = "cd" * 32
# vq8: exact f16 keys, int8 values with one f16 scale per 4 values (an engine-defined layout, opaque here)
GEOMETRIES = {
    "f32": KVGeometry.dense("llama", 3, 2, 4, "f32", 4),
    "f16": KVGeometry.dense("gemma3", 2, 1, 8, "f16", 4),
    "q8": KVGeometry("qwen2", 2, 2, 4, "q8", 4, 4 * 2 * 4 * 3 // 2, 4 * 2 * 4 * 3 // 2),
    "vq8": KVGeometry("qwen2", 2, 2, 4, "vq8", 4, 4 * 2 * 4 * 2, 4 * 2 * 4 * 3 // 2),
    # layers of different shapes (Gemma 4's sliding and full layers): version 3, with a layer table
    "mixed": KVGeometry("gemma4", 3, 2, 4, "f16", 4, 64, 64, layers=((2, 4, 64, 64), (1, 8, 64, 64), (3, 8, 192, 192))),
}
DTYPES = {"f32": np.float32, "f16": np.float16}


def make(kv_type: str = "f16", n_tokens: int = 7, seed: int = 0):
    """(header, ks, vs, logits) with random bit patterns for values (NaNs included)."""
    g = GEOMETRIES[kv_type]
    rng = np.random.default_rng(seed)
    header = SnapshotHeader(DIGEST, g, rng.integers(0, 2**32, n_tokens, dtype=np.uint64))
    dtype = DTYPES.get(g.kv_type, np.uint8)

    def layer(i, page_bytes):
        shape = g.layer_shape(header.n_pages, page_bytes, i)
        n_bytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return np.frombuffer(rng.bytes(n_bytes), dtype).reshape(shape)
    ks = [layer(i, g.layer(i)[2]) for i in range(g.n_layer)]
    vs = [layer(i, g.layer(i)[3]) for i in range(g.n_layer)]
    return header, ks, vs, np.frombuffer(rng.bytes(4 * N_VOCAB), np.float32)


def via_pool(path) -> Snapshot:
    """Restore through SnapshotFile into scattered pages of an engine-like uint8 pool; return the
    restored pages as a Snapshot of the same shapes and dtypes, for comparison."""
    with SnapshotFile(path) as f:
        g, n = f.header.geometry, f.header.n_pages
        ids = np.arange(n) * 3 + 1  # scattered, and never page 0
        pools = [[np.zeros((3 * n + 2, g.page_size, g.layer(i)[w] // g.page_size) if g.kv_type in DTYPES
                           else (3 * n + 2, g.layer(i)[w]), np.uint8) for i in range(g.n_layer)] for w in (2, 3)]
        f.read_pages_into(pools[0], pools[1], ids)
        assert not any(p[0].any() for p in pools[0] + pools[1])  # untouched pages stay untouched
        dtype = DTYPES.get(g.kv_type, np.uint8)
        return Snapshot(f.header, *([p[ids].view(dtype).reshape(g.layer_shape(n, g.layer(i)[w], i))
                                     for i, p in enumerate(pools[w - 2])] for w in (2, 3)), f.read_logits(N_VOCAB))


READERS = {"views": read_snapshot, "pool": via_pool}


def same_content(snap: Snapshot, header: SnapshotHeader, ks, vs, logits) -> bool:
    """Byte equality (a NaN is equal to itself here), shapes and dtypes included."""
    def same(a, b):
        return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
    h = snap.header
    return (h.weights_digest == header.weights_digest and h.geometry == header.geometry
            and h.token_ids.tolist() == np.asarray(header.token_ids).tolist()
            and len(snap.layers_k) == len(ks) and len(snap.layers_v) == len(vs)
            and all(map(same, snap.layers_k, ks)) and all(map(same, snap.layers_v, vs))
            and same(snap.logits, logits))


@pytest.fixture
def small(tmp_path):
    """A written f16 snapshot: (path, its bytes, header, ks, vs, logits)."""
    header, ks, vs, logits = make("f16", 7)
    path = tmp_path / "small.llamayctx"
    write_snapshot(path, header, ks, vs, logits)
    return path, path.read_bytes(), header, ks, vs, logits


def reseal(data: bytes) -> bytes:
    """Recompute the checksum, as a hostile writer would."""
    body = data[:-16]
    return body + xxhash.xxh3_128_intdigest(body).to_bytes(16, "little")


def with_fields(data: bytes, **changes) -> bytes:
    names = ["magic", "version", "digest", "arch", "kv_type", "n_layer", "n_kv_head", "head_dim", "page_size",
             "n_tokens", "n_pages", "k_page_bytes", "v_page_bytes", "n_logits", "n_meta"]
    fields = dict(zip(names, HEADER.unpack(data[:HEADER.size])))
    fields.update(changes)
    return HEADER.pack(*fields.values()) + data[HEADER.size:]


def read_bytes(tmp_path, data: bytes, name: str = "x.llamayctx", reader=read_snapshot) -> Snapshot:
    path = tmp_path / name
    path.unlink(missing_ok=True)  # a new file: overwriting by truncation makes ext4 flush on close (~4 ms)
    path.write_bytes(data)
    return reader(path)


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("kv_type", list(GEOMETRIES))
@pytest.mark.parametrize("n_tokens", [0, 1, 4, 9])
def test_round_trip(tmp_path, kv_type, n_tokens, reader):
    header, ks, vs, logits = make(kv_type, n_tokens, seed=n_tokens)
    write_snapshot(tmp_path / "s.llamayctx", header, ks, vs, logits)
    snap = READERS[reader](tmp_path / "s.llamayctx")
    assert same_content(snap, header, ks, vs, logits)
    assert snap.header.n_pages == -(-n_tokens // 4)
    if kv_type in ("f32", "f16", "mixed"):
        assert all((a == b)[~np.isnan(b)].all() for a, b in zip(snap.layers_k, ks))


def test_layout_is_the_documented_one(small):
    """Parse the file by hand from the module docstring's layout, not with the reader."""
    _, data, header, ks, vs, logits = small
    assert data[:8] == b"LLAMAYCX" and struct.unpack_from("<I", data, 8) == (2,)
    assert data[12:76].decode() == DIGEST and data[76:82] == b"gemma3" and data[108:111] == b"f16"
    assert struct.unpack_from("<IIIIQQQQQQ", data, 116) == (2, 1, 8, 4, 7, 2, 64, 64, N_VOCAB, 0)
    assert np.frombuffer(data, "<u4", 7, 180).tolist() == header.token_ids.tolist()
    assert data[208:252] == logits.astype("<f4").tobytes() and data[252:PAGES_AT] == bytes(4)
    pages = b"".join(a.astype("<f2").tobytes() for kv in zip(ks, vs) for a in kv)
    assert data[PAGES_AT:-16] == pages
    assert int.from_bytes(data[-16:], "little") == xxhash.xxh3_128_intdigest(data[:-16])


@pytest.mark.parametrize("reader", list(READERS))
def test_meta_round_trips(tmp_path, reader):
    header, ks, vs, logits = make("f16", 5)
    meta = {"grammar": {"kind": "json_schema", "source": '{"type":"object"}', "tokens": [1, 2, 3]}, "é": None}
    with_meta = SnapshotHeader(header.weights_digest, header.geometry, header.token_ids, meta)
    write_snapshot(tmp_path / "m.llamayctx", with_meta, ks, vs, logits)
    snap = READERS[reader](tmp_path / "m.llamayctx")
    assert snap.header.meta == meta and same_content(snap, header, ks, vs, logits)


@pytest.mark.parametrize("reader", list(READERS))
def test_version_1_files_still_read(tmp_path, small, reader):
    """Version 1: a 172-byte header without n_meta, no meta section (same padding rule)."""
    _, data, header, ks, vs, logits = small
    fields = list(HEADER.unpack(data[:HEADER.size]))
    fields[1] = 1
    v1 = HEADERS[1].pack(*fields[:-1]) + data[180:252]
    v1 += bytes(-len(v1) % 64) + data[PAGES_AT:-16]
    snap = read_bytes(tmp_path, reseal(v1 + bytes(16)), reader=READERS[reader])
    assert snap.header.meta == {} and same_content(snap, header, ks, vs, logits)


def test_bad_meta_is_refused(tmp_path, small):
    header, ks, vs, logits = make("f16", 5)
    for meta, message in (([1], "must be a JSON object"), ({"x": object()}, "not JSON-serialisable")):
        with pytest.raises(SnapshotError, match=message):
            write_snapshot(tmp_path / "b.llamayctx", SnapshotHeader(header.weights_digest, header.geometry,
                                                                   header.token_ids, meta), ks, vs, logits)
    good = SnapshotHeader(header.weights_digest, header.geometry, header.token_ids, {"a": 1})
    write_snapshot(tmp_path / "g.llamayctx", good, ks, vs, logits)
    data = (tmp_path / "g.llamayctx").read_bytes()
    at = data.index(b'{"a":1}')
    for bad in (b'{"a":!}', b'[1,2,3]'):
        with pytest.raises(SnapshotError, match="meta"):
            read_bytes(tmp_path, reseal(data[:at] + bad + data[at + 7:]))


def test_views_are_read_only_and_not_copies(tmp_path):
    header, ks, vs, _ = make("f32", 4000)  # 768 kB of pages
    write_snapshot(tmp_path / "s.llamayctx", header, ks, vs)
    tracemalloc.start()
    try:
        snap = read_snapshot(tmp_path / "s.llamayctx")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(a.nbytes for a in snap.layers_k + snap.layers_v) > 500_000
    assert peak < 100_000
    assert not snap.layers_k[0].flags.writeable and not snap.header.token_ids.flags.writeable


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("reader", list(READERS))
def test_every_truncation_raises(tmp_path, small, reader):
    _, data, *_ = small
    fds = open_fds()
    for n in range(len(data)):
        with pytest.raises(SnapshotError):
            read_bytes(tmp_path, data[:n], reader=READERS[reader])
    assert open_fds() <= fds  # none leaked (another test's lingering descriptor may close meanwhile)


def test_appended_bytes_raise(tmp_path, small):
    with pytest.raises(SnapshotError, match="oversized"):
        read_bytes(tmp_path, small[1] + b"\0")


@pytest.mark.parametrize("reader", list(READERS))
def test_every_flipped_bit_raises(tmp_path, small, reader):
    _, data, *_ = small
    for i in range(len(data)):
        for bit in (i % 8, 7 - i % 8):
            damaged = bytearray(data)
            damaged[i] ^= 1 << bit
            with pytest.raises(SnapshotError) as err:
                read_bytes(tmp_path, bytes(damaged), reader=READERS[reader])
            if i >= PAGES_AT:  # pages and checksum: only the checksum can tell
                assert "checksum" in str(err.value)


def test_bad_magic_is_named(tmp_path, small):
    with pytest.raises(SnapshotError, match="not a .llamayctx"):
        read_bytes(tmp_path, b"GGUF" + small[1][4:])


@pytest.mark.parametrize("version", [0, 5, 2**32 - 1])
def test_other_version_is_refused_by_number(tmp_path, small, version):
    with pytest.raises(SnapshotError, match=f"format version {version} is not supported.*reads versions 1, 2, 3, 4"):
        read_bytes(tmp_path, reseal(with_fields(small[1], version=version)))


@pytest.mark.parametrize("changes, message", [
    ({"n_tokens": 2**40, "n_pages": 2**38}, "truncated"),
    ({"n_tokens": 2**64 - 1, "n_pages": 2**62}, "truncated"),
    ({"n_logits": 2**40}, "truncated"),
    ({"n_tokens": 9}, "need 3 pages"),
    ({"n_pages": 2**64 - 1}, "need 2 pages"),
    ({"n_layer": 2**32 - 1}, "n_layer"),
    ({"n_layer": 0}, "n_layer"),
    ({"page_size": 0}, "page_size"),
    ({"head_dim": 2**31}, "head_dim"),
    ({"k_page_bytes": 2**63}, "k_page_bytes"),
    ({"v_page_bytes": 65}, "v_page_bytes"),
    ({"kv_type": b"bf16"}, "unknown KV type"),
    ({"arch": b""}, "architecture"),
    ({"arch": b"\xff\xfe"}, "architecture"),
    ({"digest": b"z" * 64}, "digest"),
])
def test_hostile_header_fails_fast_without_allocating(tmp_path, small, changes, message):
    data = reseal(with_fields(small[1], **changes))
    tracemalloc.start()
    try:
        with pytest.raises(SnapshotError, match=message):
            read_bytes(tmp_path, data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_consistent_header_with_matching_size_but_wrong_checksum(tmp_path, small):
    """A hostile file whose sizes all agree is still refused unless its checksum is right."""
    data = with_fields(small[1], n_tokens=6)  # 6 tokens still need 2 pages and the same padded size
    with pytest.raises(SnapshotError, match="checksum"):
        read_bytes(tmp_path, data)
    assert read_bytes(tmp_path, reseal(data)).header.token_ids.size == 6


def test_compatibility_names_both_digests(small):
    snap = read_snapshot(small[0])
    check_compatible(snap.header, DIGEST, GEOMETRIES["f16"])
    with pytest.raises(SnapshotError) as err:
        check_compatible(snap.header, OTHER, GEOMETRIES["f16"])
    assert DIGEST in str(err.value) and OTHER in str(err.value)


def test_compatibility_names_the_differing_geometry(small):
    snap = read_snapshot(small[0])
    q = KVGeometry.dense("gemma3", 2, 1, 8, "f32", 4)
    with pytest.raises(SnapshotError, match=r"kv_type 'f16' \(model: 'f32'\).*k_page_bytes"):
        check_compatible(snap.header, DIGEST, q)


def test_failed_write_leaves_no_temp_file_and_keeps_the_old_snapshot(tmp_path, small, monkeypatch):
    path, data, *_ = small

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        write_snapshot(path, *make("f16", 3))
    assert sorted(os.listdir(tmp_path)) == ["small.llamayctx"]
    assert path.read_bytes() == data


def test_overwrite_replaces_atomically(tmp_path, small):
    path = small[0]
    case = make("f16", 3, seed=5)
    write_snapshot(path, *case)
    assert same_content(read_snapshot(path), *case)
    assert sorted(os.listdir(tmp_path)) == ["small.llamayctx"]


@pytest.mark.parametrize("bad, message", [
    (lambda h, ks, vs: (h, ks[:1], vs), "expected 2 layers"),
    (lambda h, ks, vs: (h, [k.astype(np.float32) for k in ks], vs), "K of layer 0: expected float16"),
    (lambda h, ks, vs: (h, ks, [v[:1] for v in vs]), "V of layer 0"),
    (lambda h, ks, vs: (SnapshotHeader(h.weights_digest, h.geometry, [-1] * 7), ks, vs), "uint32"),
    (lambda h, ks, vs: (SnapshotHeader(h.weights_digest, h.geometry, [0.5] * 7), ks, vs), "integers"),
    (lambda h, ks, vs: (SnapshotHeader("ABCD", h.geometry, h.token_ids), ks, vs), "sha256"),
    (lambda h, ks, vs: (SnapshotHeader(DIGEST, KVGeometry("x" * 33, 2, 1, 8, "f16", 4, 64, 64), h.token_ids),
                        ks, vs), "architecture"),
])
def test_writer_refuses_inconsistent_input_and_writes_nothing(tmp_path, bad, message):
    with pytest.raises(SnapshotError, match=message):
        write_snapshot(tmp_path / "s.llamayctx", *bad(*make("f16", 7)[:3]))
    assert os.listdir(tmp_path) == []


def test_writer_accepts_non_contiguous_and_big_endian_arrays(tmp_path):
    header, ks, vs, logits = make("f32", 6)
    odd = [np.asfortranarray(k).astype(">f4") for k in ks]
    write_snapshot(tmp_path / "s.llamayctx", header, odd, vs, logits)
    assert same_content(read_snapshot(tmp_path / "s.llamayctx"), header, ks, vs, logits)


def test_dense_geometry_refuses_opaque_types():
    with pytest.raises(SnapshotError, match="not dense"):
        KVGeometry.dense("llama", 2, 2, 4, "q8", 4)


@pytest.fixture(scope="module")
def q8_snapshot(tmp_path_factory):
    """Written once (a write fsyncs): (folder, file bytes, (header, ks, vs, logits))."""
    case = make("q8", 6, seed=1)
    folder = tmp_path_factory.mktemp("q8")
    write_snapshot(folder / "s.llamayctx", *case)
    return folder, (folder / "s.llamayctx").read_bytes(), case


@settings(max_examples=300, deadline=None)
@given(edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
       cut=st.one_of(st.none(), st.integers(0, 10_000)), tail=st.binary(max_size=8))
def test_random_mutations_either_read_identically_or_raise(q8_snapshot, edits, cut, tail):
    folder, data, case = q8_snapshot
    data = bytearray(data)
    for pos, value in edits:
        data[pos % len(data)] = value
    data = bytes(data[:cut]) + tail if cut is not None else bytes(data)
    for reader in READERS.values():
        try:
            snap = read_bytes(folder, data, "m.llamayctx", reader)
        except SnapshotError:
            continue
        assert same_content(snap, *case)


def test_pool_restore_refuses_a_destination_that_does_not_fit(small):
    path, _, header, *_ = small
    g = header.geometry
    pool = [np.zeros((5, g.page_size, 16), np.uint8) for _ in range(g.n_layer)]
    with SnapshotFile(path) as f:
        with pytest.raises(ValueError, match="1 page ids for 2 pages"):
            f.read_pages_into(pool, pool, [1])
        with pytest.raises(ValueError, match="outside"):
            f.read_pages_into(pool, pool, [1, 5])
        with pytest.raises(ValueError, match="64 writable contiguous bytes"):
            f.read_pages_into([p[:, :, :8] for p in pool], pool, [1, 2])
        with pytest.raises(ValueError, match="64 writable contiguous bytes"):
            f.read_pages_into([np.zeros((5, 32), np.uint8)] * 2, pool, [1, 2])
    assert f._fd == -1


@pytest.mark.parametrize("kv_name", ["f16", "vq8"])
def test_restore_into_the_engine_page_pool(tmp_path, kv_name):
    """Snapshot pages taken from a kv.PagePool come back bit-exact into other pages of another pool."""
    from llamay.kv import KV_TYPES, PagePool
    kv = KV_TYPES[kv_name]
    src, dst = (PagePool(2, 6, 4, 2, 32, kv) for _ in range(2))
    rng = np.random.default_rng(3)
    for a in src.k + src.v:
        a[:] = rng.integers(0, 256, a.shape, dtype=np.uint8)
    pages = [0, 5, 2]  # the context's page table, in context order
    g = KVGeometry("llama", 2, 2, 32, kv_name, 4, 4 * 2 * kv.head_bytes("k", 32), 4 * 2 * kv.head_bytes("v", 32))
    as_layer = (lambda p: p.view(np.float16).reshape(len(pages), 4, 2, 32)) if kv_name == "f16" else \
        (lambda p: p.reshape(len(pages), -1))
    ks = [as_layer(src.page_view(a)[pages]) for a in src.k]
    vs = [as_layer(src.page_view(a)[pages]) for a in src.v]
    write_snapshot(tmp_path / "c.llamayctx", SnapshotHeader(DIGEST, g, list(range(10))), ks, vs)
    with SnapshotFile(tmp_path / "c.llamayctx") as f:
        check_compatible(f.header, DIGEST, g)
        f.read_pages_into([dst.page_view(a) for a in dst.k], [dst.page_view(a) for a in dst.v], [4, 1, 3])
    for s, d in zip(src.k + src.v, dst.k + dst.v):
        assert (dst.page_view(d)[[4, 1, 3]] == src.page_view(s)[pages]).all()
        assert not dst.page_view(d)[[0, 2, 5]].any()


def test_snapshot_without_logits(tmp_path):
    header, ks, vs, _ = make("f16", 5)
    write_snapshot(tmp_path / "s.llamayctx", header, ks, vs)
    assert read_snapshot(tmp_path / "s.llamayctx").logits.shape == (0,)
    with SnapshotFile(tmp_path / "s.llamayctx") as f:
        with pytest.raises(RuntimeError, match="verify"):
            f.read_logits(0)
        g = header.geometry
        pool = [np.zeros((2, g.page_size, g.k_page_bytes // g.page_size), np.uint8) for _ in range(g.n_layer)]
        f.read_pages_into(pool, [p.copy() for p in pool], [0, 1])
        with pytest.raises(SnapshotError, match="holds 0 logits, the model has 11"):
            f.read_logits(N_VOCAB)


def test_writer_takes_raw_page_bytes_for_dense_types(tmp_path):
    """The engine's pool holds uint8 rows: [n_pages, page_bytes] is accepted for f16 and read back typed."""
    header, ks, vs, logits = make("f16", 6)
    raw = [np.ascontiguousarray(a).view(np.uint8).reshape(len(a), -1) for a in ks]
    write_snapshot(tmp_path / "s.llamayctx", header, raw, vs, logits)
    assert same_content(read_snapshot(tmp_path / "s.llamayctx"), header, ks, vs, logits)


def test_writer_refuses_logits_that_are_not_float32(tmp_path):
    header, ks, vs, logits = make("f16", 6)
    with pytest.raises(SnapshotError, match="logits must be float32"):
        write_snapshot(tmp_path / "s.llamayctx", header, ks, vs, logits.astype(np.float64))
    assert os.listdir(tmp_path) == []


def test_mixed_layers_write_version_3_with_the_layer_table(tmp_path):
    """Layers of different shapes: version 3, the table (KV heads, head size, K and V page bytes per layer)
    after the fixed header and before the tokens; uniform layers still write version 2."""
    header, ks, vs, logits = make("mixed", 5)
    write_snapshot(tmp_path / "m.llamayctx", header, ks, vs, logits)
    data = (tmp_path / "m.llamayctx").read_bytes()
    assert struct.unpack_from("<I", data, 8) == (3,)
    assert [struct.unpack_from("<IIQQ", data, HEADER.size + 24 * i) for i in range(3)] == list(header.geometry.layers)
    assert np.frombuffer(data, "<u4", 5, HEADER.size + 72).tolist() == header.token_ids.tolist()
    make_uniform = make("f16", 5)
    write_snapshot(tmp_path / "u.llamayctx", *make_uniform)
    assert struct.unpack_from("<I", (tmp_path / "u.llamayctx").read_bytes(), 8) == (2,)


@pytest.mark.parametrize("entry, value, message", [
    (0, (1, 4, 32, 32), "first disagrees"), (1, (1, 8, 64, 65), "v_page_bytes"), (2, (0, 8, 192, 192), "n_kv_head"),
    (2, (3, 2**31, 192, 192), "head_dim")])
def test_hostile_layer_table_is_refused(tmp_path, entry, value, message):
    header, ks, vs, logits = make("mixed", 5)
    write_snapshot(tmp_path / "m.llamayctx", header, ks, vs, logits)
    data = bytearray((tmp_path / "m.llamayctx").read_bytes())
    struct.pack_into("<IIQQ", data, HEADER.size + 24 * entry, *value)
    with pytest.raises(SnapshotError, match=message):
        read_bytes(tmp_path, reseal(bytes(data)))


def test_truncated_layer_table_is_refused(tmp_path):
    header, ks, vs, logits = make("mixed", 5)
    write_snapshot(tmp_path / "m.llamayctx", header, ks, vs, logits)
    data = (tmp_path / "m.llamayctx").read_bytes()
    for n in (HEADER.size, HEADER.size + 30, HEADER.size + 71):
        with pytest.raises(SnapshotError, match="truncated"):
            read_bytes(tmp_path, data[:n])


@pytest.mark.parametrize("kv_type", ["f16", "mixed"])
def test_a_recurrent_state_round_trips_as_version_4(tmp_path, kv_type):
    """A hybrid model's state after the pages, in the checksum: both readers give it back bit for bit, and
    a version-4 file of uniform layers has the geometry a version-2 header gives."""
    header, ks, vs, logits = make(kv_type, 6)
    state = np.frombuffer(np.random.default_rng(3).bytes(4 * 37), np.float32)
    path = tmp_path / "s.llamayctx"
    write_snapshot(path, header, ks, vs, logits, state=state)
    data = path.read_bytes()
    assert int.from_bytes(data[8:12], "little") == 4
    snap = read_snapshot(path)
    assert same_content(snap, header, ks, vs, logits) and snap.state.tobytes() == state.tobytes()
    with SnapshotFile(path) as f:
        g, n = f.header.geometry, f.header.n_pages
        assert f.has_state and f.header.geometry == header.geometry
        f.read_pages_into(*([np.zeros((n, g.layer(i)[w]), np.uint8) for i in range(g.n_layer)] for w in (2, 3)),
                          np.arange(n))
        assert f.read_state().tobytes() == state.tobytes()
    damaged = bytearray(data)
    damaged[-20] ^= 1  # inside the state
    with pytest.raises(SnapshotError, match="checksum"):
        read_bytes(tmp_path, bytes(damaged))
    with pytest.raises(SnapshotError, match="truncated"):
        read_bytes(tmp_path, reseal(data[:-20] + data[-16:]))
    n_state_at = HEADERS[4].size - 8
    for bad, message in ((0, "recurrent state of 0 floats"), (2**60, "recurrent state of")):
        hostile = bytearray(data)
        hostile[n_state_at:n_state_at + 8] = bad.to_bytes(8, "little")
        with pytest.raises(SnapshotError, match=message):
            read_bytes(tmp_path, reseal(bytes(hostile)))
    write_snapshot(tmp_path / "plain.llamayctx", header, ks, vs, logits)
    with SnapshotFile(tmp_path / "plain.llamayctx") as f:
        assert not f.has_state
