"""A fake Ollama registry on 127.0.0.1 for the store tests (http.server in a thread, port 0).

Speaks Part B of stores-and-registries.md: GET /v2/<ns>/<model>/manifests/<tag>; GET|HEAD
/v2/<ns>/<model>/blobs/<digest> answers 307 to /cdn/<digest>?sig=... (the CDN hop), which serves the bytes
with Range support (206 + Content-Range, 416 past the end). Faults are switched on through `faults`."""
import hashlib
import json
import random
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"


@dataclass
class Faults:
    only: set = field(default_factory=set)  # digests the blob faults apply to; empty: every blob
    drop_after: int | None = None          # close the connection after this many body bytes...
    drops: int = 1                         # ...in this many responses, then serve normally
    corrupt: bool = False                  # same length, different bytes (digest mismatch)
    status: int | None = None              # answer blob requests (the CDN hop) with this status
    manifest_status: int | None = None
    slow_s: float = 0.0                    # sleep before each chunk
    chunk: int = 16384
    ignore_range: bool = False             # answer a Range request with 200 and the whole body
    short_by: int = 0                      # declare and send this many bytes fewer (clean short body)
    linked_etag: bool = False              # put X-Linked-Etag: "<sha256>" on the redirect hop


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def random_bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


class FakeRegistry:
    def __init__(self):
        self.manifests: dict[str, bytes] = {}        # "ns/model/tag" -> manifest bytes
        self.blobs: dict[str, bytes] = {}            # digest -> bytes
        self.faults = Faults()
        self.requests: list[tuple[str, str, dict]] = []   # (method, path, headers) in arrival order
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FakeRegistry":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add_blob(self, data: bytes) -> str:
        digest = sha256_digest(data)
        self.blobs[digest] = data
        return digest

    def add_manifest(self, repo: str, tag: str, manifest: dict | bytes) -> bytes:
        raw = manifest if isinstance(manifest, bytes) else json.dumps(manifest, indent=2).encode()
        self.manifests[f"{repo}/{tag}"] = raw
        return raw

    def add_model(self, repo: str = "library/tiny", tag: str = "latest", model_size: int = 300_000,
                  seed: int = 1) -> dict:
        """A model layer of random bytes, a template and a params layer, and a config blob."""
        layers = [("application/vnd.ollama.image.model", random_bytes(model_size, seed)),
                  ("application/vnd.ollama.image.template", b"{{ .System }} {{ .Prompt }}"),
                  ("application/vnd.ollama.image.params", b'{"stop": ["<|end|>"], "temperature": 0.5}')]
        config = json.dumps({"model_format": "gguf", "model_family": "llama", "seed": seed}).encode()
        manifest = {"schemaVersion": 2, "mediaType": MANIFEST_V2,
                    "config": {"mediaType": CONFIG_TYPE, "digest": self.add_blob(config), "size": len(config)},
                    "layers": [{"mediaType": t, "digest": self.add_blob(b), "size": len(b)} for t, b in layers]}
        self.add_manifest(repo, tag, manifest)
        return manifest

    def ranges(self, digest: str | None = None) -> list[str | None]:
        """The Range header (or None) of every CDN GET, optionally for one digest."""
        return [h.get("range") for m, p, h in self.cdn_gets(digest)]

    def cdn_gets(self, digest: str | None = None) -> list:
        return [r for r in self.requests if r[0] == "GET" and r[1].startswith("/cdn/")
                and (digest is None or r[1].startswith(f"/cdn/{digest}"))]

    def _faulty(self, digest: str) -> bool:
        return not self.faults.only or digest in self.faults.only

    def _take_drop(self) -> int | None:
        with self.lock:
            if self.faults.drop_after is None or self.faults.drops <= 0:
                return None
            self.faults.drops -= 1
            return self.faults.drop_after


_MANIFEST = re.compile(r"/v2/(.+)/manifests/([^/]+)")
_BLOB = re.compile(r"/v2/(.+)/blobs/([^/?]+)")
_CDN = re.compile(r"/cdn/([^/?]+)(?:\?.*)?")
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


def _handler(reg: FakeRegistry):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_HEAD(self) -> None:
            self._route(head=True)

        def do_GET(self) -> None:
            self._route(head=False)

        def _route(self, head: bool) -> None:
            with reg.lock:
                reg.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
            for pattern, fn in ((_MANIFEST, self._manifest), (_BLOB, self._redirect), (_CDN, self._cdn)):
                m = pattern.fullmatch(self.path)
                if m:
                    try:
                        return fn(*m.groups(), head=head)
                    except (BrokenPipeError, ConnectionResetError):    # the client hung up (timeout test)
                        self.close_connection = True
                        return
            self._send(404, b'{"errors":[{"code":"NOT_FOUND"}]}', "application/json")

        def _manifest(self, repo: str, tag: str, head: bool) -> None:
            raw = reg.manifests.get(f"{repo}/{tag}")
            if reg.faults.manifest_status or raw is None:
                status = reg.faults.manifest_status or 404
                return self._send(status, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}', "application/json")
            self._send(200, b"" if head else raw, MANIFEST_V2, length=len(raw))

        def _redirect(self, repo: str, digest: str, head: bool) -> None:
            if digest not in reg.blobs:
                return self._send(404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}', "application/json")
            extra = {"Location": f"{reg.url}/cdn/{digest}?sig=fake"}
            if reg.faults.linked_etag:
                extra["X-Linked-Etag"] = f'"{digest[7:]}"'
                extra["X-Linked-Size"] = str(len(reg.blobs[digest]))
            self._send(307, b"", "text/plain", extra=extra)

        def _cdn(self, digest: str, head: bool) -> None:
            data = reg.blobs.get(digest)
            faulty = data is not None and reg._faulty(digest)
            if data is None or (faulty and reg.faults.status):
                return self._send(reg.faults.status if data is not None else 404, b"error\n", "text/plain")
            if faulty and reg.faults.corrupt:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            if faulty and reg.faults.short_by:
                data = data[:-reg.faults.short_by]
            if head:
                return self._send(200, b"", "application/octet-stream", length=len(data))
            self._body(data, faulty)

        def _body(self, data: bytes, faulty: bool) -> None:
            m = _RANGE.fullmatch(self.headers.get("Range", ""))
            start, end, status, extra = 0, len(data), 200, {}
            if m and not (faulty and reg.faults.ignore_range):
                start = int(m.group(1))
                end = int(m.group(2)) + 1 if m.group(2) else len(data)
                if start >= len(data):
                    return self._send(416, b"", "text/plain", extra={"Content-Range": f"bytes */{len(data)}"})
                status, extra = 206, {"Content-Range": f"bytes {start}-{end - 1}/{len(data)}"}
            self._head(status, "application/octet-stream", end - start, extra)
            self._stream(data[start:end], reg._take_drop() if faulty else None)

        def _stream(self, body: bytes, drop_after: int | None) -> None:
            step = reg.faults.chunk
            for i in range(0, len(body), step):
                if reg.faults.slow_s:
                    time.sleep(reg.faults.slow_s)
                piece = body[i:i + step]
                if drop_after is not None and i + len(piece) >= drop_after:
                    self.wfile.write(piece[:drop_after - i])
                    return self._drop()
                self.wfile.write(piece)

        def _drop(self) -> None:
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

        def _send(self, status: int, body: bytes, ctype: str, length: int | None = None,
                  extra: dict | None = None) -> None:
            self._head(status, ctype, len(body) if length is None else length, extra or {})
            self.wfile.write(body)

        def _head(self, status: int, ctype: str, length: int, extra: dict) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(length))
            self.send_header("Accept-Ranges", "bytes")
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()

    return Handler
