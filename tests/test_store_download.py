"""store/download.py and store/progress.py against the fake registry's CDN endpoint (127.0.0.1 only).

Expected bytes and digests come from hashlib over what the server serves, never from our own output."""
import hashlib
import io
import threading

import httpx
import pytest
from store_servers import FakeRegistry, random_bytes, sha256_digest

from llamay.store import download
from llamay.store.download import fetch_blob, fetch_unknown
from llamay.store.layout import Store
from llamay.store.names import StoreError
from llamay.store.progress import Progress

SIZE = 300_000


@pytest.fixture
def reg():
    with FakeRegistry() as r:
        yield r


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    monkeypatch.setattr(download, "BACKOFF_S", 0.01)


def blob(reg, n=SIZE, seed=7):
    data = random_bytes(n, seed)
    return data, reg.add_blob(data), f"{reg.url}/cdn/{sha256_digest(data)}?sig=fake"


def leftovers(store):
    """Files in blobs/ other than finished blobs (partials, lock files)."""
    return sorted(p.name for p in (store.root / "blobs").glob("*") if "-partial" in p.name or "url-" in p.name)


def test_fetch_verifies_and_places_blob(reg, store):
    data, digest, url = blob(reg)
    seen = []
    path = fetch_blob(store, url, digest, SIZE, progress=lambda *a: seen.append(a))
    assert path == store.blob_path(digest) and path.read_bytes() == data
    assert "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert leftovers(store) == []
    assert seen[-1] == (f"pulling {digest[7:19]}", digest, SIZE, SIZE)
    assert reg.ranges() == [None]


def test_blob_already_present_makes_no_request(reg, store):
    _, digest, url = blob(reg)
    fetch_blob(store, url, digest, SIZE)
    fetch_blob(store, url, digest, SIZE)
    assert len(reg.cdn_gets()) == 1


def test_dropped_connection_resumes_with_range(reg, store):
    data, digest, url = blob(reg)
    reg.faults.drop_after, reg.faults.drops = 100_000, 1
    path = fetch_blob(store, url, digest, SIZE)
    assert path.read_bytes() == data
    assert reg.ranges() == [None, "bytes=100000-"]


def test_existing_partial_resumes_from_its_length(reg, store):
    data, digest, url = blob(reg)
    store.partial_path(digest).parent.mkdir(parents=True, exist_ok=True)
    store.partial_path(digest).write_bytes(data[:123_457])
    assert fetch_blob(store, url, digest, SIZE).read_bytes() == data
    assert reg.ranges() == ["bytes=123457-"]


def test_200_to_a_range_request_restarts_from_zero(reg, store):
    data, digest, url = blob(reg)
    store.partial_path(digest).parent.mkdir(parents=True, exist_ok=True)
    store.partial_path(digest).write_bytes(b"\0" * 5000)        # not a prefix: only a restart can fix it
    reg.faults.ignore_range = True
    assert fetch_blob(store, url, digest, SIZE).read_bytes() == data
    assert reg.ranges() == ["bytes=5000-"]


def test_416_on_a_complete_partial_verifies_it(reg, store):
    data, digest, url = blob(reg)
    store.partial_path(digest).parent.mkdir(parents=True, exist_ok=True)
    store.partial_path(digest).write_bytes(data)
    assert fetch_blob(store, url, digest).read_bytes() == data     # size unknown: asks, gets 416
    assert reg.ranges() == [f"bytes={SIZE}-"]


def test_complete_partial_of_known_size_needs_no_request(reg, store):
    data, digest, url = blob(reg)
    store.partial_path(digest).parent.mkdir(parents=True, exist_ok=True)
    store.partial_path(digest).write_bytes(data)
    assert fetch_blob(store, url, digest, SIZE).read_bytes() == data
    assert reg.cdn_gets() == []


def test_wrong_bytes_raise_with_both_digests_and_leave_nothing(reg, store):
    data, digest, url = blob(reg)
    reg.faults.corrupt = True
    with pytest.raises(StoreError) as e:
        fetch_blob(store, url, digest, SIZE)
    wrong = bytes([data[0] ^ 0xFF]) + data[1:]
    assert digest[7:] in str(e.value) and hashlib.sha256(wrong).hexdigest() in str(e.value)
    assert not store.has_blob(digest) and not store.partial_path(digest).exists()


def test_bad_partial_prefix_fails_verification_and_is_removed(reg, store):
    data, digest, url = blob(reg)
    store.partial_path(digest).parent.mkdir(parents=True, exist_ok=True)
    store.partial_path(digest).write_bytes(b"\1" * 1000)        # server honours Range: junk stays in front
    with pytest.raises(StoreError, match="expected"):
        fetch_blob(store, url, digest, SIZE)
    assert not store.has_blob(digest) and not store.partial_path(digest).exists()
    assert fetch_blob(store, url, digest, SIZE).read_bytes() == data    # and the next try starts clean


def test_404_names_url_and_status_without_retrying(reg, store):
    _, digest, url = blob(reg)
    reg.faults.status = 404
    with pytest.raises(StoreError, match="HTTP 404") as e:
        fetch_blob(store, url, digest, SIZE)
    assert url in str(e.value)
    assert len(reg.cdn_gets()) == 1 and not store.has_blob(digest)


def test_500_is_retried_then_reported(reg, store):
    _, digest, url = blob(reg)
    reg.faults.status = 500
    with pytest.raises(StoreError, match="HTTP 500") as e:
        fetch_blob(store, url, digest, SIZE)
    assert f"after {download.RETRIES + 1} attempts" in str(e.value)
    assert len(reg.cdn_gets()) == download.RETRIES + 1 and not store.has_blob(digest)


def test_truncated_every_time_keeps_a_resumable_prefix(reg, store):
    data, digest, url = blob(reg)
    reg.faults.drop_after, reg.faults.drops = 10_000, 100
    with pytest.raises(StoreError, match="failed after") as e:
        fetch_blob(store, url, digest, SIZE)
    assert url in str(e.value)
    attempts = download.RETRIES + 1
    assert reg.ranges() == [None] + [f"bytes={10_000 * i}-" for i in range(1, attempts)]
    assert store.partial_path(digest).read_bytes() == data[:10_000 * attempts]
    assert not store.has_blob(digest)


def test_short_body_against_known_size_is_refused(reg, store):
    _, digest, url = blob(reg)
    reg.faults.short_by = 1000
    with pytest.raises(StoreError, match=f"{SIZE - 1000} bytes, expected {SIZE}"):
        fetch_blob(store, url, digest, SIZE)
    assert not store.has_blob(digest)


def test_slow_server_reports_progress_until_done(reg, store, monkeypatch):
    monkeypatch.setattr(download, "REPORT_EVERY_S", 0.0)
    _, digest, url = blob(reg)
    reg.faults.slow_s = 0.01
    seen = []
    fetch_blob(store, url, digest, SIZE, progress=lambda *a: seen.append(a))
    completed = [c for s, d, c, t in seen]
    assert completed == sorted(completed) and completed[-1] == SIZE and len(set(completed)) > 5
    assert all(t == SIZE and d == digest for s, d, c, t in seen)


def test_read_timeout_is_retried_then_reported(reg, store, monkeypatch):
    monkeypatch.setattr(download, "RETRIES", 1)
    _, digest, url = blob(reg)
    reg.faults.slow_s = 0.5
    with download.new_client(httpx.Timeout(5.0, read=0.1)) as client, pytest.raises(StoreError, match="timed out"):
        fetch_blob(store, url, digest, SIZE, client=client)
    assert len(reg.cdn_gets()) == 2 and not store.has_blob(digest)


def test_concurrent_fetches_of_one_blob_download_it_once(reg, store):
    data, digest, url = blob(reg)
    reg.faults.slow_s = 0.005
    paths, errors = [], []

    def run():
        try:
            paths.append(fetch_blob(store, url, digest, SIZE))
        except Exception as e:       # surfaced by the assertion below
            errors.append(e)
    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(paths) == 3
    assert paths[0].read_bytes() == data and len(reg.cdn_gets()) == 1
    assert leftovers(store) == []


def test_invalid_digest_is_refused_before_any_file(reg, store):
    with pytest.raises(StoreError, match="invalid digest"):
        fetch_blob(store, f"{reg.url}/cdn/x", "sha256:../../etc/passwd")
    assert not (store.root / "blobs").exists() or list((store.root / "blobs").iterdir()) == []
    assert reg.requests == []


def test_fetch_unknown_takes_the_linked_etag(reg, store):
    data, digest, _ = blob(reg)
    reg.faults.linked_etag = True
    got = fetch_unknown(store, f"{reg.url}/v2/library/tiny/blobs/{digest}")
    assert got == (digest, SIZE) and store.blob_path(digest).read_bytes() == data
    assert [m for m, p, h in reg.requests] == ["HEAD", "HEAD", "GET", "GET"]    # each through the redirect


def test_fetch_unknown_hashes_when_no_digest_is_named(reg, store):
    data, digest, url = blob(reg)
    got = fetch_unknown(store, url)
    assert got == (digest, SIZE) and store.blob_path(digest).read_bytes() == data
    # only the URL's lock file stays (a waiter on it cannot know the digest to re-check)
    assert [n[-5:] for n in leftovers(store)] == [".lock"]


def test_fetch_unknown_resumes_a_dropped_download(reg, store):
    _, digest, url = blob(reg)
    reg.faults.drop_after, reg.faults.drops = 50_000, 1
    assert fetch_unknown(store, url) == (digest, SIZE)
    assert reg.ranges() == [None, "bytes=50000-"]


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_progress_plain_lines_change_and_interval():
    out, clock = io.StringIO(), Clock()
    p = Progress(out, interval=5.0, tty=False, clock=clock)
    p("pulling manifest")
    p("pulling 0123456789ab", "sha256:" + "0" * 64, 0, 10_000_000)
    clock.t = 2.0
    p("pulling 0123456789ab", "sha256:" + "0" * 64, 2_000_000, 10_000_000)    # within 5 s: no line
    clock.t = 6.0
    p("pulling 0123456789ab", "sha256:" + "0" * 64, 6_000_000, 10_000_000)
    clock.t = 7.0
    p("pulling 0123456789ab", "sha256:" + "0" * 64, 10_000_000, 10_000_000)   # completion always prints
    p("pulling 0123456789ab", "sha256:" + "0" * 64, 10_000_000, 10_000_000)   # ...once
    p("success")
    lines = out.getvalue().splitlines()
    assert lines[0] == "pulling manifest" and lines[-1] == "success" and len(lines) == 5
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    # 6 MB in 6 s: 1.0 MB/s, 4 MB left: 4 s
    assert lines[2] == "pulling 0123456789ab   60%  6.0 MB/10 MB  1.0 MB/s  4s"
    assert lines[3].startswith("pulling 0123456789ab  100%  10 MB/10 MB")


def test_progress_tty_redraws_one_bar_per_status():
    out, clock = io.StringIO(), Clock()
    p = Progress(out, tty=True, clock=clock)
    p("pulling aaaaaaaaaaaa", None, 0, 4_000_000)
    clock.t = 1.0
    p("pulling aaaaaaaaaaaa", None, 1_000_000, 4_000_000)
    p("verifying sha256 digest")
    p.close()
    text = out.getvalue()
    first, second = text.split("\n")[:2]
    assert first.count("\r") == 1 and "25%" in first and "1.0 MB/4.0 MB" in first
    assert "1.0 MB/s" in first and "3s" in first and "█" * 6 + " " * 18 + "▏" in first
    assert second.startswith("verifying sha256 digest") and text.endswith("\n")
