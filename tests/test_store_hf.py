"""hf.pull_hf against a fake Hub + CDN on 127.0.0.1: quant choice, headers, auth, faults, nothing left behind."""
import hashlib

import pytest
from store_servers_hf_pypi import FakeHub, tiny_gguf

from llamay.store import download, hf
from llamay.store.layout import Store
from llamay.store.names import StoreError, parse_name
from llamay.store.pull import pull

REPO = "org/tiny-GGUF"


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "models")


@pytest.fixture
def hub(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))     # no token file unless a test writes one
    with FakeHub() as h:
        h.repos[REPO] = {"README.md": b"# tiny\n", "tiny-Q4_K_M.gguf": tiny_gguf(1), "tiny-Q8_0.gguf": tiny_gguf(2),
                         "tiny-Q4_K_S.gguf": tiny_gguf(3), "mmproj-tiny-f16.gguf": tiny_gguf(4)}
        monkeypatch.setenv("LLAMAY_HF_ENDPOINT", h.url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield h


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def stored_files(store: Store) -> list[str]:
    """Blob and manifest files (lock files are the downloader's, not content)."""
    return sorted(str(p.relative_to(store.root)) for p in store.root.rglob("*")
                  if p.is_file() and not p.name.endswith(".lock"))


def model_digest(store: Store, name: str) -> str:
    layers = store.read_manifest(name)["layers"]
    return next(layer["digest"] for layer in layers if layer["mediaType"] == "application/vnd.ollama.image.model")


def test_quant_tag_picks_that_file_case_insensitively(store, hub):
    events = []
    model = hf.pull_hf(store, f"hf.co/{REPO}:q8_0", lambda *a: events.append(a))
    served = hub.repos[REPO]["tiny-Q8_0.gguf"]
    assert model.name == f"hf.co/{REPO}:q8_0"
    assert model_digest(store, model.name) == sha(served)
    assert model.model_path.read_bytes() == served
    assert model.config["model_family"] == "llama"
    assert [e[0] for e in events][0] == "pulling manifest" and events[-1][0] == "success"
    gets = [(server, path) for server, method, path, _ in hub.requests if method == "GET"]
    assert ("cdn", f"/blob/{sha(served)[7:]}?sig=fake") in gets          # bytes came from the redirect target


def test_default_is_q4_k_m_named_latest(store, hub):
    model = pull(store, f"hf.co/{REPO}")                                  # through the one entry point
    assert model.name == f"hf.co/{REPO}:latest"
    assert model_digest(store, model.name) == sha(hub.repos[REPO]["tiny-Q4_K_M.gguf"])


def test_huggingface_co_and_hf_endpoint(store, hub, monkeypatch):
    monkeypatch.delenv("LLAMAY_HF_ENDPOINT")
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    model = hf.pull_hf(store, f"huggingface.co/{REPO}:Q4_K_S")
    assert model.name == f"hf.co/{REPO}:Q4_K_S"
    assert model_digest(store, model.name) == sha(hub.repos[REPO]["tiny-Q4_K_S.gguf"])


def test_file_form_plain_git_file_is_hashed_on_the_way(store, hub):
    data = tiny_gguf(7)
    hub.repos[REPO]["small.gguf"] = data
    hub.plain.add("small.gguf")               # only a git-sha1 ETag: the digest comes from hashing the bytes
    spec = hf.parse_hf_ref(f"hf.co/{REPO}/small.gguf")
    assert spec.model_name == parse_name(f"hf.co/{REPO}:small")
    model = hf.pull_hf(store, spec)
    assert model_digest(store, model.name) == sha(data)
    assert not any(server == "cdn" for server, *_ in hub.requests)


def test_file_form_in_a_subfolder(store, hub):
    data = tiny_gguf(8)
    hub.repos[REPO]["sub dir/Odd.Name.gguf"] = data
    model = hf.pull_hf(store, f"hf.co/{REPO}/sub dir/Odd.Name.gguf")
    assert model.name == f"hf.co/{REPO}:Odd.Name"
    assert model.model_path.read_bytes() == data
    assert any("/resolve/main/sub%20dir/Odd.Name.gguf" in path for _, _, path, _ in hub.requests)


def test_token_goes_to_the_hub_and_not_to_the_cdn(store, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    with FakeHub(token="s3cret") as hub:
        hub.repos[REPO] = {"tiny-Q4_K_M.gguf": tiny_gguf(1)}
        monkeypatch.setenv("LLAMAY_HF_ENDPOINT", hub.url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        with pytest.raises(StoreError, match="GatedRepo.*HF_TOKEN"):
            hf.pull_hf(store, f"hf.co/{REPO}")
        monkeypatch.setenv("HF_TOKEN", "s3cret")
        hf.pull_hf(store, f"hf.co/{REPO}")
        auth = {(server, "Authorization" in headers) for server, _, _, headers in hub.requests}
        monkeypatch.delenv("HF_TOKEN")
        (tmp_path / "hf_home").mkdir()
        (tmp_path / "hf_home" / "token").write_text("s3cret\n")       # what `hf auth login` leaves
        assert hf.pull_hf(store, f"hf.co/{REPO}:Q4_K_M").name == f"hf.co/{REPO}:Q4_K_M"
    assert ("hub", True) in auth and ("cdn", True) not in auth and ("cdn", False) in auth


def test_tree_listing_is_followed_across_pages(store, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    with FakeHub(page_size=2) as hub:
        hub.repos[REPO] = {f"a{i}.txt": b"x" for i in range(5)} | {"z-Q4_K_M.gguf": tiny_gguf(5)}
        monkeypatch.setenv("LLAMAY_HF_ENDPOINT", hub.url)
        model = hf.pull_hf(store, f"hf.co/{REPO}")
        pages = [path for _, _, path, _ in hub.requests if "/tree/" in path]
    assert model.model_path.read_bytes() == tiny_gguf(5)
    assert len(pages) == 3


def test_missing_repo_says_so_and_stores_nothing(store, hub):
    with pytest.raises(StoreError, match="RepoNotFound"):
        hf.pull_hf(store, "hf.co/org/absent:Q4_K_M")
    with pytest.raises(StoreError, match="EntryNotFound"):
        hf.pull_hf(store, f"hf.co/{REPO}/absent.gguf")
    with pytest.raises(StoreError, match="no .gguf file for quant 'Q2_K'"):
        hf.pull_hf(store, f"hf.co/{REPO}:Q2_K")
    assert stored_files(store) == []


def test_wrong_linked_etag_fails_verification_and_stores_nothing(store, hub):
    hub.faults.wrong_etag = True
    with pytest.raises(StoreError, match="the tree lists sha256:"):
        hf.pull_hf(store, f"hf.co/{REPO}:Q8_0")               # listing and header disagree: no download
    with pytest.raises(StoreError, match="digest mismatch"):
        hf.pull_hf(store, f"hf.co/{REPO}/tiny-Q8_0.gguf")     # no listing: the bytes fail verification
    assert stored_files(store) == []


def test_not_a_hub_without_x_repo_commit(store, hub):
    hub.faults.no_repo_commit = True
    with pytest.raises(StoreError, match="X-Repo-Commit"):
        hf.pull_hf(store, f"hf.co/{REPO}")
    assert stored_files(store) == []


def test_dropped_connection_resumes_with_range(store, hub):
    hub.faults.drop_after, hub.faults.drops = 1000, 1
    model = hf.pull_hf(store, f"hf.co/{REPO}:Q8_0")
    assert model.model_path.read_bytes() == hub.repos[REPO]["tiny-Q8_0.gguf"]
    ranges = [h.get("Range") for server, method, _, h in hub.requests if server == "cdn" and method == "GET"]
    assert ranges == [None, "bytes=1000-"]


def test_connection_that_keeps_dropping_fails_without_a_model(store, hub, monkeypatch):
    monkeypatch.setattr(download, "BACKOFF_S", 0.0)
    hub.faults.drop_after, hub.faults.drops = 100, 99
    with pytest.raises(StoreError, match="failed after"):
        hf.pull_hf(store, f"hf.co/{REPO}:Q8_0")
    served = hub.repos[REPO]["tiny-Q8_0.gguf"]
    assert stored_files(store) == [f"blobs/sha256-{sha(served)[7:]}-partial"]   # kept only to resume from
    hub.faults.drops = 0
    model = hf.pull_hf(store, f"hf.co/{REPO}:Q8_0")                  # the next pull resumes and completes
    assert model.model_path.read_bytes() == hub.repos[REPO]["tiny-Q8_0.gguf"]


def test_split_gguf_is_refused_before_downloading(store, hub):
    hub.repos[REPO] = {"big-Q4_K_M-00001-of-00002.gguf": b"GGUF1", "big-Q4_K_M-00002-of-00002.gguf": b"GGUF2"}
    with pytest.raises(StoreError, match="split GGUF"):
        hf.pull_hf(store, f"hf.co/{REPO}")
    with pytest.raises(StoreError, match="split GGUF"):
        hf.parse_hf_ref(f"hf.co/{REPO}/big-Q4_K_M-00001-of-00002.gguf")
    assert not any("/resolve/" in path for _, _, path, _ in hub.requests)


@pytest.mark.parametrize("quant, expected", [
    (None, "m-Q4_K_M.gguf"), ("latest", "m-Q4_K_M.gguf"), ("q4_k", "m-Q4_K.gguf"), ("Q4_0", "m.Q4_0.gguf"),
    ("IQ4_XS", "m-IQ4_XS.gguf"), ("F16", "m-F16.gguf"),
])
def test_pick_file_whole_word_quant(quant, expected):
    paths = ["m-Q4_K_M.gguf", "m-Q4_K.gguf", "m.Q4_0.gguf", "m-IQ4_XS.gguf", "m-IQ4_0.gguf", "mmproj-m-F16.gguf",
             "m-F16.gguf", "README.md"]
    assert hf.pick_file(paths, quant) == expected


def test_pick_file_quant_is_not_a_prefix_match():
    assert hf.pick_file(["a-Q4_K_M.gguf", "b-Q4_K.gguf"], "Q4_K") == "b-Q4_K.gguf"
    assert hf.pick_file(["a-IQ4_NL.gguf", "b-Q4_NL.gguf"], "q4_nl") == "b-Q4_NL.gguf"


def test_pick_file_without_q4_k_m_takes_the_first_gguf():
    assert hf.pick_file(["b-Q8_0.gguf", "a-Q5_K_M.gguf", "mmproj-a.gguf"], None) == "a-Q5_K_M.gguf"
    with pytest.raises(StoreError, match="no .gguf"):
        hf.pick_file(["mmproj-a.gguf", "config.json"], None)


@pytest.mark.parametrize("text", [
    "hf.co/org", "hf.co/org/", "hf.co/../repo", "hf.co/org/repo/../x.gguf", "hf.co/org/repo/file.bin",
    "hf.co/org/repo/x.gguf:Q4_0", "hf.co/org/repo:bad/tag", "hf.co/org/repo:", "hf.co/org.x/repo",
    "registry.ollama.ai/library/qwen",
])
def test_invalid_specs_are_refused(text):
    with pytest.raises(StoreError):
        hf.parse_hf_ref(text)


def test_spec_forms():
    assert hf.parse_hf_ref("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M") == \
        hf.HFSpec("bartowski/Llama-3.2-1B-Instruct-GGUF", "Q4_K_M", None)
    assert hf.parse_hf_ref("HuggingFace.co/o/r") == hf.HFSpec("o/r", None, None)
    assert hf.parse_hf_ref("https://hf.co/o/r/d/f.gguf") == hf.HFSpec("o/r", None, "d/f.gguf")
