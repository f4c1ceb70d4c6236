"""Fake Hugging Face Hub (+ its CDN) and a fake PEP 503/691 package index on 127.0.0.1 (http.server, port 0).

Hub (stores-and-registries.md §C): GET /api/models/<org>/<repo>/tree/main?recursive=true (JSON list, paged
with Link rel="next"); HEAD|GET /<org>/<repo>/resolve/main/<path>: LFS files (.gguf) answer 302 to the CDN
server (another port: another host) with X-Linked-Etag, X-Linked-Size, ETag, X-Repo-Commit; small files
answer 200 with a git-sha1 ETag; errors carry X-Error-Code. The CDN serves bytes with Range (206).
Index: /simple/<project>/ as HTML anchors with #sha256= or as PEP 691 JSON; /files/<name> the files.
Faults are switched on through the `faults` fields."""
import base64
import hashlib
import io
import json
import re
import threading
import zipfile
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import numpy as np

from llamay.gguf import GGUFWriter

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def tiny_gguf(seed: int, n: int = 4096) -> bytes:
    """A small valid GGUF (llama arch key, one F32 tensor of random values)."""
    w = GGUFWriter()
    w.add("general.architecture", "llama")
    w.add("general.name", f"tiny-{seed}")
    w.add_tensor("token_embd.weight", np.random.default_rng(seed).standard_normal((n // 64, 64), dtype=np.float32))
    return w.to_bytes()


def record_hash(data: bytes) -> str:
    """A RECORD hash field: sha256=<urlsafe base64, no padding> (PEP 376 / 427)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(project: str, version: str, members: dict[str, bytes], tag: str = "py3-none-any",
               bad_record: set[str] = frozenset()) -> tuple[str, bytes]:
    """(filename, wheel bytes) with METADATA, WHEEL and a RECORD; members in bad_record get a wrong hash."""
    dist = f"{project.replace('-', '_')}-{version}"
    files = dict(members)
    files[f"{dist}.dist-info/METADATA"] = f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n".encode()
    files[f"{dist}.dist-info/WHEEL"] = f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n".encode()
    rows = [f"{name},{record_hash(data + b'x' if name in bad_record else data)},{len(data)}"
            for name, data in files.items()]
    files[f"{dist}.dist-info/RECORD"] = ("\n".join(rows + [f"{dist}.dist-info/RECORD,,"]) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return f"{dist}-{tag}.whl", buf.getvalue()


@dataclass
class Faults:
    drop_after: int | None = None      # close the connection after this many body bytes of a file...
    drops: int = 1                     # ...in this many responses, then serve normally
    wrong_etag: bool = False           # X-Linked-Etag names other bytes (the download fails verification)
    no_repo_commit: bool = False       # omit X-Repo-Commit (the endpoint is then not a Hub)
    wrong_fragment: bool = False       # the index gives a #sha256 that the wheel does not have
    status: int | None = None          # answer every request with this status


class _Server:
    """One ThreadingHTTPServer on 127.0.0.1:0 whose requests go to `route(handler)`."""

    def __init__(self, route):
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                route(self)

            do_HEAD = do_GET

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _reply(h: BaseHTTPRequestHandler, status: int, body: bytes = b"", headers: dict | None = None,
           length: int | None = None) -> None:
    h.send_response(status)
    for key, value in (headers or {}).items():
        h.send_header(key, str(value))
    h.send_header("Content-Length", str(len(body) if length is None else length))
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(body)


def _serve_bytes(h: BaseHTTPRequestHandler, data: bytes, faults: Faults, lock: threading.Lock,
                 headers: dict | None = None) -> None:
    """200 or 206 (Range: bytes=a- / a-b), maybe dropping the connection partway (faults.drop_after)."""
    start, end, status, extra = 0, len(data) - 1, 200, dict(headers or {})
    m = re.fullmatch(r"bytes=(\d+)-(\d*)", h.headers.get("Range", ""))
    if m:
        start, end = int(m.group(1)), int(m.group(2) or len(data) - 1)
        if start >= len(data):
            return _reply(h, 416, headers={"Content-Range": f"bytes */{len(data)}"})
        status, extra["Content-Range"] = 206, f"bytes {start}-{end}/{len(data)}"
    body = data[start:end + 1]
    with lock:
        drop = faults.drop_after is not None and faults.drops > 0 and h.command == "GET"
        faults.drops -= drop
    if not drop:
        return _reply(h, status, body, extra)
    h.send_response(status)
    for key, value in extra.items():
        h.send_header(key, value)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body[:faults.drop_after])
    h.wfile.flush()
    h.close_connection = True
    h.connection.shutdown(2)


class FakeHub:
    """repos: {"org/repo": {path: bytes}}; .gguf files are LFS (redirect to the CDN), others plain git."""

    def __init__(self, token: str | None = None, page_size: int = 1000):
        self.repos: dict[str, dict[str, bytes]] = {}
        self.faults = Faults()
        self.token = token                             # when set, resolve answers 401 without it
        self.page_size = page_size
        self.plain: set[str] = set()                   # .gguf paths served as small git files (no LFS)
        self.requests: list[tuple[str, str, str, dict]] = []   # (server, method, path, headers)
        self.lock = threading.Lock()
        self.hub = _Server(lambda h: self._route(h, "hub"))
        self.cdn = _Server(lambda h: self._route(h, "cdn"))

    @property
    def url(self) -> str:
        return self.hub.url

    def __enter__(self) -> "FakeHub":
        return self

    def __exit__(self, *exc) -> None:
        self.hub.close()
        self.cdn.close()

    def _route(self, h, server: str) -> None:
        with self.lock:
            self.requests.append((server, h.command, h.path, dict(h.headers)))
        if self.faults.status:
            return _reply(h, self.faults.status, b"fault")
        path = urlsplit(h.path).path
        if server == "cdn":
            return self._cdn(h, path)
        if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/main", path):
            return self._tree(h, m.group(1))
        if m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/main/(.+)", path):
            return self._resolve(h, m.group(1), unquote(m.group(2)))
        _reply(h, 404, b"not found")

    def _error(self, h, status: int, code: str) -> None:
        _reply(h, status, code.encode(), {"X-Error-Code": code, "X-Error-Message": f"{code} (fake hub)"})

    def _tree(self, h, repo: str) -> None:
        if repo not in self.repos:
            return self._error(h, 404, "RepoNotFound")
        entries = [self._entry(path, data) for path, data in sorted(self.repos[repo].items())]
        cursor = int(parse_qs(urlsplit(h.path).query).get("cursor", ["0"])[0])
        page = entries[cursor:cursor + self.page_size]
        headers = {"Content-Type": "application/json"}
        if cursor + self.page_size < len(entries):
            nxt = f"/api/models/{repo}/tree/main?recursive=true&cursor={cursor + self.page_size}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        _reply(h, 200, json.dumps(page).encode(), headers)

    def _lfs(self, path: str) -> bool:
        return path.endswith(".gguf") and path not in self.plain

    def _entry(self, path: str, data: bytes) -> dict:
        git_sha1 = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        entry = {"type": "file", "oid": git_sha1, "size": len(data), "path": path}
        if self._lfs(path):
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return entry

    def _resolve(self, h, repo: str, path: str) -> None:
        if self.token and h.headers.get("Authorization") != f"Bearer {self.token}":
            return self._error(h, 401, "GatedRepo")
        if repo not in self.repos:
            return self._error(h, 404, "RepoNotFound")
        if path not in self.repos[repo]:
            return self._error(h, 404, "EntryNotFound")
        data = self.repos[repo][path]
        headers = {} if self.faults.no_repo_commit else {"X-Repo-Commit": COMMIT}
        if not self._lfs(path):
            headers["ETag"] = f'"{self._entry(path, data)["oid"]}"'
            return _serve_bytes(h, data, self.faults, self.lock, headers)
        sha = hashlib.sha256(data + (b"!" if self.faults.wrong_etag else b"")).hexdigest()
        headers.update({"Location": f"{self.cdn.url}/blob/{hashlib.sha256(data).hexdigest()}?sig=fake",
                        "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": len(data), "ETag": f'W/"{sha}"'})
        _reply(h, 302, b"", headers)

    def _cdn(self, h, path: str) -> None:
        m = re.fullmatch(r"/blob/([0-9a-f]{64})", path)
        blobs = {hashlib.sha256(d).hexdigest(): d for files in self.repos.values() for d in files.values()}
        if not m or m.group(1) not in blobs:
            return _reply(h, 404, b"no such object")
        _serve_bytes(h, blobs[m.group(1)], self.faults, self.lock)


class FakeIndex:
    """projects: {normalized name: [(filename, bytes, yanked)]}; json=True serves PEP 691 JSON when asked."""

    def __init__(self, json_api: bool = False):
        self.projects: dict[str, list[tuple[str, bytes, bool]]] = {}
        self.json_api = json_api
        self.faults = Faults()
        self.requests: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        self.server = _Server(self._route)

    @property
    def url(self) -> str:
        return self.server.url + "/simple"

    def __enter__(self) -> "FakeIndex":
        return self

    def __exit__(self, *exc) -> None:
        self.server.close()

    def add(self, project: str, filename: str, data: bytes, yanked: bool = False) -> None:
        self.projects.setdefault(project, []).append((filename, data, yanked))

    def _sha(self, data: bytes) -> str:
        return hashlib.sha256(data + (b"!" if self.faults.wrong_fragment else b"")).hexdigest()

    def _route(self, h) -> None:
        with self.lock:
            self.requests.append((h.path, dict(h.headers)))
        if self.faults.status:
            return _reply(h, self.faults.status, b"fault")
        path = urlsplit(h.path).path
        if m := re.fullmatch(r"/simple/([^/]+)/", path):
            return self._page(h, m.group(1))
        if m := re.fullmatch(r"/files/([^/]+)", path):
            files = {name: data for entries in self.projects.values() for name, data, _ in entries}
            if m.group(1) in files:
                return _serve_bytes(h, files[m.group(1)], self.faults, self.lock)
        _reply(h, 404, b"not found")

    def _page(self, h, project: str) -> None:
        if project not in self.projects:
            return _reply(h, 404, b"not found")
        entries = self.projects[project]
        if self.json_api and "application/vnd.pypi.simple.v1+json" in h.headers.get("Accept", ""):
            files = [{"filename": name, "url": f"../../files/{name}", "hashes": {"sha256": self._sha(data)},
                      "yanked": yanked} for name, data, yanked in entries]
            body = json.dumps({"meta": {"api-version": "1.1"}, "name": project, "files": files}).encode()
            return _reply(h, 200, body, {"Content-Type": "application/vnd.pypi.simple.v1+json"})
        rows = [f'<a href="../../files/{name}#sha256={self._sha(data)}"{" data-yanked" if yanked else ""}>'
                f"{name}</a><br/>" for name, data, yanked in entries]
        body = ("<!DOCTYPE html><html><body>" + "\n".join(rows) + "</body></html>").encode()
        _reply(h, 200, body, {"Content-Type": "text/html"})
