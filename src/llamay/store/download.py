"""Resumable, verified blob downloads into a Store.

Contract: bytes go to blobs/sha256-<hex>-partial (resumed with `Range: bytes=<len>-`), the finished file is
hashed and only then renamed to its digest name (Store.commit_blob), and a flock on
blobs/sha256-<hex>-partial.lock serialises two pulls of the same blob (the second finds it there).
`progress(status, digest, completed, total)` is the one progress shape (Ollama's /api/pull objects)."""
import fcntl
import hashlib
import os
import re
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import httpx

from ..files import sha256_file
from .layout import Store
from .names import StoreError, check_digest

ProgressFn = Callable[[str, "str | None", int, int], None]

RETRIES = 4                    # extra attempts after a dropped connection / 5xx, each resuming
BACKOFF_S = 0.25               # doubled per attempt
REPORT_EVERY_S = 0.1           # progress callbacks while bytes flow (Ollama: ~60 ms)
TIMEOUT = httpx.Timeout(connect=15.0, read=60.0, write=60.0, pool=60.0)
RETRY_STATUSES = {408, 429, 500, 502, 503, 504}
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class _Retry(Exception):
    """A failure worth another attempt that resumes from the partial file."""


def new_client(timeout: httpx.Timeout = TIMEOUT) -> httpx.Client:
    """Follows redirects (registry blobs redirect to a CDN; httpx drops Authorization across hosts)."""
    from llamay import __version__
    return httpx.Client(follow_redirects=True, timeout=timeout,
                        headers={"User-Agent": f"llamay/{__version__}"})


def fetch_blob(store: Store, url: str, digest: str, size: int | None = None,
               progress: ProgressFn | None = None, client: httpx.Client | None = None,
               headers: dict | None = None) -> Path:
    """Download url into the store as `digest` (verified) unless it is there; returns the blob path."""
    digest = check_digest(digest)
    status = f"pulling {digest[7:19]}"
    if not store.has_blob(digest):
        with _blob_lock(store, digest):
            if not store.has_blob(digest):
                _download_locked(store, url, digest, size, _Reporter(progress, status, digest), client,
                                 headers)
    blob = store.blob_path(digest)
    n = blob.stat().st_size
    if progress:
        progress(status, digest, n, n)
    return blob


def fetch_unknown(store: Store, url: str, progress: ProgressFn | None = None,
                  client: httpx.Client | None = None, headers: dict | None = None) -> tuple[str, int]:
    """Download a file whose digest is not known in advance; returns (digest, size).

    When the server names the content's sha256 (X-Linked-Etag, else a 64-hex ETag, on any hop) the file is
    fetched as that digest; otherwise it is downloaded to a URL-keyed partial, hashed, then committed (its
    lock file stays: a waiter cannot re-check a digest it does not know, so the lock must not be replaced)."""
    with _client(client) as c:
        digest, size = _probe(c, url, headers)
        if digest is not None:
            path = fetch_blob(store, url, digest, size, progress, c, headers)
            return digest, path.stat().st_size
        partial = store.blobs_dir / f"url-{_sha256(url.encode())}-partial"
        report = _Reporter(progress, f"pulling {url.rsplit('/', 1)[-1][:40]}", None)
        with _file_lock(partial.with_name(partial.name + ".lock")):
            _download(c, url, partial, size, headers, report, url)
            digest = "sha256:" + sha256_file(partial)
            path = store.install(partial, digest)  # just hashed: commit_blob would read it all again
        return digest, path.stat().st_size


def _download_locked(store, url, digest, size, report, client, headers) -> None:
    partial = store.partial_path(digest)
    with _client(client) as c:
        _download(c, url, partial, size, headers, report, f"{digest} from {url}")
    store.commit_blob(partial, digest)           # hashes; a mismatch deletes the partial and raises


def _download(client: httpx.Client, url: str, partial: Path, size: int | None, headers, report,
              what: str) -> None:
    """Fill `partial` with the whole body of url, resuming; retries dropped connections and 5xx.
    `what` names the download in the error (digest and URL)."""
    for attempt in range(RETRIES + 1):
        try:
            _attempt(client, url, partial, size, headers, report)
            return
        except (httpx.TransportError, _Retry) as e:
            why = _describe(e)
            if attempt == RETRIES:
                raise StoreError(f"download of {what} failed after {RETRIES + 1} attempts: {why}") from e
            time.sleep(BACKOFF_S * 2 ** attempt)


def _attempt(client, url, partial: Path, size: int | None, headers, report) -> None:
    have = partial.stat().st_size if partial.exists() else 0
    if size is not None and have > size:
        have = 0                                 # longer than the blob: cannot be a prefix of it
    if size is not None and have == size:
        partial.touch()
        return
    req = {**(headers or {}), "Accept-Encoding": "identity"}   # Range offsets count identity bytes
    if have:
        req["Range"] = f"bytes={have}-"
    with client.stream("GET", url, headers=req) as r:
        if r.status_code == 416 and have:
            if size is None:
                return                           # nothing past our length: complete, or bad (verify says)
            _truncate(partial, 0)
            raise _Retry(f"HTTP 416 for bytes={have}- of a {size}-byte blob; restarting")
        start = _check_response(r, url, have, size)
        total = size if size is not None else _body_total(r, start)
        report.total = total or 0
        done = _write_body(r, partial, start, size, report)
    if total is not None and done < total:
        raise _Retry(f"truncated body: got {done} of {total} bytes")


def _check_response(r: httpx.Response, url: str, have: int, size: int | None) -> int:
    """Offset the body starts at: `have` for a 206 that honours our Range, 0 for a 200 (restart)."""
    if r.status_code in RETRY_STATUSES:
        raise _Retry(f"HTTP {r.status_code} from {url}")
    if r.status_code >= 400:
        r.read()
        raise StoreError(f"GET {url}: HTTP {r.status_code} {r.text[:200].strip()}".rstrip())
    if r.status_code not in (200, 206):
        raise StoreError(f"GET {url}: unexpected HTTP {r.status_code}")
    start = 0
    if r.status_code == 206:
        m = _CONTENT_RANGE.fullmatch(r.headers.get("Content-Range", "").strip())
        if m is None or int(m.group(1)) != have:
            raise StoreError(f"GET {url}: 206 with Content-Range {r.headers.get('Content-Range')!r}, "
                             f"asked for bytes={have}-")
        start = have
    full = _body_total(r, start)
    if size is not None and full is not None and full != size:
        raise StoreError(f"GET {url}: server sends {full} bytes, expected {size}")
    return start


def _body_total(r: httpx.Response, start: int) -> int | None:
    """Full size of the resource from Content-Range or Content-Length, if the server says."""
    m = _CONTENT_RANGE.fullmatch(r.headers.get("Content-Range", "").strip())
    if m and m.group(3) != "*":
        return int(m.group(3))
    length = r.headers.get("Content-Length")
    if length is not None and r.headers.get("Content-Encoding", "identity") == "identity":
        return start + int(length)
    return None


def _write_body(r: httpx.Response, partial: Path, start: int, size: int | None, report) -> int:
    """Append the body at `start` (truncating anything after it); returns bytes now in the file."""
    done = start
    with open(partial, "r+b" if partial.exists() else "w+b") as f:
        f.seek(start)
        f.truncate()
        for chunk in r.iter_bytes():            # as received: a drop loses no buffered bytes
            f.write(chunk)
            done += len(chunk)
            if size is not None and done > size:
                raise StoreError(f"GET {r.url}: body longer than the expected {size} bytes")
            report(done)
        f.flush()
        os.fsync(f.fileno())
    report(done, force=True)
    return done


def _probe(client: httpx.Client, url: str, headers) -> tuple[str | None, int | None]:
    """HEAD url; the sha256 and size named on any hop (HF puts X-Linked-Etag on the redirect)."""
    r = client.head(url, headers={**(headers or {}), "Accept-Encoding": "identity"})
    if r.status_code >= 400:
        raise StoreError(f"HEAD {url}: HTTP {r.status_code}")
    digest = size = None
    for hop in [*r.history, r]:
        for key in ("X-Linked-Etag", "ETag"):
            tag = hop.headers.get(key, "").removeprefix("W/").strip('"').lower()
            if digest is None and re.fullmatch(r"[0-9a-f]{64}", tag):
                digest = "sha256:" + tag
        linked = hop.headers.get("X-Linked-Size")
        if size is None and linked and linked.isdigit():
            size = int(linked)
    if size is None and r.headers.get("Content-Length", "").isdigit() and \
            r.headers.get("Content-Encoding", "identity") == "identity":
        size = int(r.headers["Content-Length"])
    return digest, size


class _Reporter:
    """Throttles per-chunk byte counts into progress(status, digest, completed, total) calls."""

    def __init__(self, progress: ProgressFn | None, status: str, digest: str | None):
        self.progress, self.status, self.digest = progress, status, digest
        self.total, self.last = 0, 0.0

    def __call__(self, completed: int, force: bool = False) -> None:
        now = time.monotonic()
        if self.progress and (force or now - self.last >= REPORT_EVERY_S):
            self.last = now
            self.progress(self.status, self.digest, completed, self.total)


@contextmanager
def _client(client: httpx.Client | None):
    if client is not None:
        yield client
        return
    with new_client() as c:
        yield c


@contextmanager
def _blob_lock(store: Store, digest: str):
    """Exclusive per-digest lock; the lock file goes once the blob is in place (waiters re-check it)."""
    lock = store.partial_path(digest)
    lock = lock.with_name(lock.name + ".lock")
    with _file_lock(lock):
        yield
        if store.has_blob(digest):
            lock.unlink(missing_ok=True)


@contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _truncate(path: Path, n: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(n)


def unreachable(url: str, what: str, e: httpx.TransportError) -> StoreError:
    """A pull's first request got no answer: one line naming the host, the server it is, and why."""
    u = httpx.URL(url)
    host = f"{u.host}:{u.port}" if u.port else u.host
    text = str(e)
    if any(s in text for s in ("Name or service not known", "nodename nor servname", "name resolution",
                               "No address associated")):
        why = "its name does not resolve: offline?"
    elif "Connection refused" in text:
        why = "connection refused"
    else:
        why = _describe(e)
    return StoreError(f"cannot reach {host}, {what} ({why}); nothing was written")


def _describe(e: Exception) -> str:
    if isinstance(e, httpx.TimeoutException):
        return f"timed out ({type(e).__name__})"
    return str(e) or type(e).__name__


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
