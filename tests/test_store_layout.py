"""llamay's store: verified blobs, atomic manifests, resolve/models/remove/copy, on stores built in tmp_path
from small real GGUF files. Digests and sizes are computed here with hashlib / os over the bytes written."""
import hashlib
import json
import os

import gguf
import numpy as np
import pytest

from llamay.gguf import GGUFReader, GGUFWriter
from llamay.store import (
    FILE_TYPES,
    Store,
    StoreError,
    gguf_config,
    human_number,
    parse_name,
)

TEMPLATE = "{{ if .System }}<|system|>{{ .System }}{{ end }}<|user|>{{ .Prompt }}<|assistant|>"
PARAMS = {"stop": ["<|user|>", "<|end|>"], "temperature": 0.7, "num_ctx": 4096}


def write_gguf(path, arch="llama", file_type=7, n_rows=8, ctx=2048, license_text=None):
    """A small real GGUF (one F32 tensor [n_rows, 16]); returns its bytes."""
    w = GGUFWriter()
    w.add("general.architecture", arch)
    w.add("general.file_type", file_type, vtype=4)
    w.add(f"{arch}.context_length", ctx, vtype=4)
    w.add(f"{arch}.embedding_length", 16, vtype=4)
    w.add("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}")
    if license_text:
        w.add("general.license", license_text)
    w.add_tensor("token_embd.weight", np.arange(n_rows * 16, dtype=np.float32).reshape(n_rows, 16))
    w.write(path)
    return path.read_bytes()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def leftovers(store: Store) -> list[str]:
    """Temp or partial files anywhere in the store."""
    return [p.name for p in store.root.rglob("*") if p.name.startswith(".tmp-") or "partial" in p.name]


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


@pytest.fixture
def gguf_file(tmp_path):
    path = tmp_path / "tiny.gguf"
    return path, write_gguf(path)


def add_model(store, name, gguf_file, extra=()):
    path, data = gguf_file
    digest = store.add_file(path)
    store.write_manifest(name, store.make_manifest(digest, len(data), extra))
    return digest


def test_add_file_is_content_addressed(store, gguf_file):
    path, data = gguf_file
    digest = store.add_file(path)
    assert digest == sha(data)
    blob = store.root / "blobs" / ("sha256-" + hashlib.sha256(data).hexdigest())
    assert store.blob_path(digest) == blob and blob.read_bytes() == data and store.has_blob(digest)
    assert store.add_file(path, digest=sha(data)) == digest  # again, with the digest given: same blob
    assert sorted(p.name for p in (store.root / "blobs").iterdir()) == [blob.name]


def test_add_file_with_a_wrong_digest_leaves_nothing(store, gguf_file):
    path, data = gguf_file
    wrong = sha(b"other")
    with pytest.raises(StoreError, match=f"expected {wrong}, got {sha(data)}"):
        store.add_file(path, digest=wrong)
    assert list((store.root / "blobs").iterdir()) == []


def test_commit_blob_verifies_then_renames(store):
    data = os.urandom(3000)
    partial = store.partial_path(sha(data))
    assert partial.name == "sha256-" + hashlib.sha256(data).hexdigest() + "-partial"
    partial.parent.mkdir(parents=True)
    partial.write_bytes(data)
    assert store.commit_blob(partial, sha(data)).read_bytes() == data
    assert not partial.exists() and store.has_blob(sha(data))


def test_commit_blob_mismatch_deletes_the_partial(store):
    data, claimed = os.urandom(3000), sha(b"what the registry said")
    partial = store.partial_path(claimed)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(data)
    with pytest.raises(StoreError) as e:
        store.commit_blob(partial, claimed)
    assert claimed in str(e.value) and sha(data) in str(e.value)
    assert not partial.exists() and not store.has_blob(claimed) and not store.has_blob(sha(data))


def test_manifest_shape_and_resolve(store, gguf_file):
    path, data = gguf_file
    digest = add_model(store, "tiny:1b", gguf_file, [("application/vnd.ollama.image.template", TEMPLATE),
                                                    ("application/vnd.ollama.image.system", "Be brief."),
                                                    ("application/vnd.ollama.image.params", json.dumps(PARAMS)),
                                                    ("application/vnd.ollama.image.license", "MIT\nmore")])
    mpath = store.root / "manifests/registry.ollama.ai/library/tiny/1b"
    raw = mpath.read_bytes()
    m = json.loads(raw)
    assert m["schemaVersion"] == 2 and m["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
    assert m["config"]["mediaType"] == "application/vnd.docker.container.image.v1+json"
    assert [(x["mediaType"].rsplit(".", 1)[1], x["size"]) for x in m["layers"]] == [
        ("model", len(data)), ("template", len(TEMPLATE)), ("system", 9), ("params", len(json.dumps(PARAMS))),
        ("license", 8)]
    for entry in [m["config"]] + m["layers"]:  # every blob is there, named by the sha256 of its bytes
        blob = store.root / "blobs" / entry["digest"].replace(":", "-")
        assert sha(blob.read_bytes()) == entry["digest"] and blob.stat().st_size == entry["size"]
    config = json.loads((store.root / "blobs" / m["config"]["digest"].replace(":", "-")).read_bytes())
    ref = gguf.GGUFReader(path)  # gguf-py: the reference for the header values
    assert config["model_family"] == ref.fields["general.architecture"].contents() == "llama"
    assert config["file_type"] == gguf.LlamaFileType(ref.fields["general.file_type"].contents()).name[7:]
    assert config["model_format"] == "gguf" and config["model_type"] == "128"

    sm = store.resolve("TINY:1B")
    assert sm.name == "tiny:1b" and sm.source == "llamay" and sm.model_path == store.blob_path(digest)
    assert sm.digest == hashlib.sha256(raw).hexdigest()
    assert sm.size == sum(os.path.getsize(store.root / "blobs" / e["digest"].replace(":", "-"))
                          for e in [m["config"]] + m["layers"])
    assert sm.modified == mpath.stat().st_mtime
    assert (sm.template, sm.system, sm.params, sm.license) == (TEMPLATE, "Be brief.", PARAMS, "MIT\nmore")
    assert store.read_manifest("tiny:1b") == m
    assert store.resolve("tiny:2b") is None and leftovers(store) == []


def test_write_manifest_needs_every_blob(store, gguf_file):
    path, data = gguf_file
    manifest = {"schemaVersion": 2, "config": {"mediaType": "x", "digest": sha(b"{}"), "size": 2},
                "layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": sha(data),
                            "size": len(data)}]}
    with pytest.raises(StoreError, match="not in the store"):
        store.write_manifest("tiny", manifest)
    assert not (store.root / "manifests").exists()
    store.add_file(path)
    store.add_bytes(b"{}")
    raw = json.dumps(manifest, indent=5).encode() + b"\n"  # a registry's bytes are kept as they are
    store.write_manifest("tiny", raw)
    assert (store.root / "manifests/registry.ollama.ai/library/tiny/latest").read_bytes() == raw
    assert store.resolve("tiny").model_path.read_bytes() == data
    assert store.resolve("tiny").digest == hashlib.sha256(raw).hexdigest()


@pytest.mark.parametrize("digest", ["sha256:../../../../outside", "sha256:" + "A" * 64, "sha256-" + "a" * 64,
                                    "/etc/passwd", "sha256:" + "a" * 63])
def test_manifest_with_a_bad_digest_is_refused(store, tmp_path, digest):
    manifest = {"schemaVersion": 2, "config": {"mediaType": "x", "digest": digest, "size": 2}, "layers": []}
    with pytest.raises(StoreError, match="invalid digest"):
        store.write_manifest("tiny", manifest)
    # one already on disk (written by someone else) is refused on read and skipped by models()
    bad = store.root / "manifests/registry.ollama.ai/library/bad/latest"
    bad.parent.mkdir(parents=True)
    bad.write_text(json.dumps(manifest))
    with pytest.raises(StoreError, match="invalid digest"):
        store.resolve("bad")
    assert store.models() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_broken_manifests_are_skipped_not_fatal(store, gguf_file):
    add_model(store, "good", gguf_file)
    for name, body in (("notjson", b"{"), ("nolayers", b"{}"), ("badsize", json.dumps(
            {"config": {"digest": sha(b""), "size": -1}, "layers": []}).encode())):
        p = store.root / "manifests/registry.ollama.ai/library" / name / "latest"
        p.parent.mkdir(parents=True)
        p.write_bytes(body)
        with pytest.raises(StoreError):
            store.resolve(name)
    (store.root / "manifests/registry.ollama.ai/library/bad..name/latest").mkdir(parents=True)
    assert [m.name for m in store.models()] == ["good:latest"]


def test_remove_keeps_blobs_another_manifest_uses(store, gguf_file):
    shared = add_model(store, "a", gguf_file, [("application/vnd.ollama.image.template", "A")])
    add_model(store, "ns/b:v1", gguf_file, [("application/vnd.ollama.image.template", "B")])
    removed = store.remove("A:latest")
    assert removed == [sha(b"A")]  # the model and config blobs are shared with ns/b:v1
    assert store.resolve("a") is None and store.has_blob(shared) and not store.has_blob(sha(b"A"))
    assert not (store.root / "manifests/registry.ollama.ai/library").exists()  # empty dirs pruned
    assert store.resolve("ns/b:v1").model_path.read_bytes() == gguf_file[1]
    store.remove("ns/b:v1")
    assert list((store.root / "blobs").iterdir()) == []
    assert list((store.root / "manifests").iterdir()) == []
    with pytest.raises(StoreError, match="not found"):
        store.remove("ns/b:v1")


def test_remove_keeps_blobs_named_by_an_unparsable_manifest(store, gguf_file):
    digest = add_model(store, "a", gguf_file)
    other = store.root / "manifests/registry.ollama.ai/library/b/latest"
    other.parent.mkdir(parents=True)
    other.write_text('{"layers": [{"digest": "' + digest + '"')  # truncated JSON still names the blob
    store.remove("a")
    assert store.has_blob(digest)


def test_copy_shares_manifest_and_blobs(store, gguf_file):
    add_model(store, "a", gguf_file)
    store.copy("a", "backup/a:old")
    src = store.root / "manifests/registry.ollama.ai/library/a/latest"
    dst = store.root / "manifests/registry.ollama.ai/backup/a/old"
    assert dst.read_bytes() == src.read_bytes()
    assert store.resolve("backup/a:old").digest == hashlib.sha256(src.read_bytes()).hexdigest()
    store.remove("a")
    assert store.resolve("backup/a:old").model_path.read_bytes() == gguf_file[1]
    with pytest.raises(StoreError, match="not found"):
        store.copy("nothere", "x")


def test_names_match_ignoring_case_and_one_spelling_is_kept(store, gguf_file):
    add_model(store, "Tiny:Big", gguf_file)
    assert store.resolve("tiny:big").name == "Tiny:Big"
    add_model(store, "tiny:big", gguf_file)
    tags = list((store.root / "manifests/registry.ollama.ai/library").glob("*/*"))
    assert [p.relative_to(store.root / "manifests/registry.ollama.ai/library").as_posix() for p in tags] == \
        ["tiny/big"]


def test_manifest_write_is_atomic(store, gguf_file, monkeypatch):
    add_model(store, "a", gguf_file, [("application/vnd.ollama.image.system", "old")])
    path = store.root / "manifests/registry.ollama.ai/library/a/latest"
    before = path.read_bytes()
    manifest = store.make_manifest(sha(gguf_file[1]), len(gguf_file[1]),
                                   [("application/vnd.ollama.image.system", "new")])

    def crash(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        store.write_manifest("a", manifest)
    assert path.read_bytes() == before and leftovers(store) == []


def test_models_newest_first(store, gguf_file):
    add_model(store, "old", gguf_file)
    add_model(store, "new", gguf_file)
    old = store.root / "manifests/registry.ollama.ai/library/old/latest"
    os.utime(old, (1e9, 1e9))
    assert [m.name for m in store.models()] == ["new:latest", "old:latest"]


def test_file_types_agree_with_gguf_py():
    ref = {m.value: m.name.removeprefix("MOSTLY_").removeprefix("ALL_") for m in gguf.LlamaFileType
           if m.name != "GUESSED"}
    assert FILE_TYPES == ref


# ref: ollama format/format_test.go TestHumanNumber
@pytest.mark.parametrize("n, text", [(0, "0"), (999, "999"), (1000, "1K"), (1001, "1K"), (1000000, "1M"),
                                     (125000000, "125M"), (500500000, "500.50M"), (500550000, "500.55M"),
                                     (1000000000, "1B"), (2800000000, "2.8B"), (2850000000, "2.9B"),
                                     (1000000000000, "1000B")])
def test_human_number(n, text):
    assert human_number(n) == text


@pytest.mark.model
def test_config_of_a_real_file(smollm_path):
    ref = gguf.GGUFReader(smollm_path)  # gguf-py on gemma's 262k vocabulary takes ~30 s: SmolLM2 only
    config = gguf_config(GGUFReader(smollm_path))
    assert config["model_family"] == ref.fields["general.architecture"].contents()
    assert config["file_type"] == gguf.LlamaFileType(ref.fields["general.file_type"].contents()).name[7:]
    n_params = sum(int(np.prod(t.shape)) for t in ref.tensors)
    assert config["model_type"] == f"{n_params / 1e6:.2f}M"


def test_parse_name_used_by_store_is_strict(store):
    with pytest.raises(StoreError):
        store.resolve("../x")
    assert parse_name("a").display == "a:latest"
