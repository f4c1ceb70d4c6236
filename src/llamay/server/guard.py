"""The guard in front of every route, so that a web page cannot drive the local server: pure ASGI, so it
covers every route (present and future) and streaming responses. Checks in order: Host (DNS rebinding),
Origin (cross-site pages; CORS headers for allowed ones), the API key, then the body's Content-Type.
Refusals are answered in the shape of the API the path belongs to."""
from __future__ import annotations

import fnmatch
import functools
import hmac
import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse, Response

from .protocol import anthropic, llamacpp, ollama, openai
from .protocol.base import ProtocolError

# Schemes only desktop apps give their pages (Electron, Tauri, VS Code webviews), allowed by default as
# Ollama does; not file:// nor "null": a downloaded HTML file or a sandboxed iframe sends those.
APP_ORIGINS = ("app://*", "tauri://*", "vscode-webview://*", "vscode-file://*")
# answered without the API key: liveness probes, and the Studio's page and assets (no data: its calls need the key)
OPEN_PATHS = frozenset({"/health", "/v1/health", "/studio", "/studio/"})
OPEN_PREFIXES = ("/studio/assets/",)
# The routes that take a binary body besides JSON, and its types: the one place they are declared.
BINARY_ROUTES = {("POST", "/v1/contexts"): ("application/octet-stream",)}  # a snapshot restore
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ALLOW_METHODS = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
EXPOSE_HEADERS = "content-disposition, retry-after, x-should-retry, x-request-id, request-id"
PREFLIGHT_MAX_AGE_S = 600
# JSON bodies past this are refused (413) before they are read: a 128k-token prompt is under 1 MiB of text,
# and every byte read is memory and tokenizer time another client waits for. Snapshot uploads are exempt.
MAX_JSON_BODY = 16 << 20
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class GuardSettings:
    """hosts: Host names (glob patterns, no port) allowed besides localhost names; "*" allows any.
    origins: Origin patterns (globs, e.g. https://*.example.com) allowed besides same-origin pages and
    APP_ORIGINS; "*" allows any. api_key: when set, required on every route but OPEN_PATHS."""
    hosts: tuple[str, ...] = ()
    origins: tuple[str, ...] = ()
    api_key: str | None = None


def serving(bind: str, allowed_hosts: tuple[str, ...] | None = None, origins: tuple[str, ...] = (),
            api_key: str | None = None) -> GuardSettings:
    """The settings for a server bound to `bind`. Without allowed_hosts, a loopback server takes only
    localhost names (DNS rebinding is its one way in), while one bound elsewhere takes any Host, as
    Ollama does with OLLAMA_HOST=0.0.0.0: LAN clients use IPs, hostnames, mDNS names and proxies; there
    the API key is the defence. Given allowed_hosts, those and the bound address (if one) are allowed."""
    name = _split_host(bind)[0]
    if allowed_hosts is None:
        return GuardSettings(() if is_loopback(name) else ("*",), tuple(origins), api_key or None)
    hosts = tuple(allowed_hosts) + (() if _is_unspecified(name) else (name,))
    return GuardSettings(hosts, tuple(origins), api_key or None)


def is_local_name(name: str) -> bool:
    """A Host name that reaches only this machine: a loopback name, or 0.0.0.0 / :: (which clients
    connect to locally). IP literals cannot be rebound; localhost and *.localhost resolve to loopback."""
    return is_loopback(name) or _is_unspecified(name)


def is_loopback(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _is_unspecified(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_unspecified
    except ValueError:
        return False


def _split_host(value: str) -> tuple[str, int | None]:
    """'Host' header or bind address -> (lowercased name without brackets or trailing dot, port or None)."""
    value = value.strip().lower()
    port = None
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
    elif value.count(":") == 1:
        name, port = value.split(":")
    else:
        name = value  # a name, or a bare IPv6 literal
    return name.rstrip("."), int(port) if port and port.isdigit() else None


def _is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def _loopback_origin(origin: str) -> bool:
    """An http(s) page on this machine: llama-server's --cors-origins localhost."""
    try:
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.hostname is not None and is_loopback(parts.hostname)
    except ValueError:
        return False


def _matches(value: str, patterns) -> bool:
    return any(p == "*" or fnmatch.fnmatchcase(value, p.lower()) for p in patterns)


class Guard:
    """ASGI middleware: app = Guard(app, settings) (or app.add_middleware(Guard, settings=...))."""

    def __init__(self, app, settings: GuardSettings = GuardSettings()):
        self.app, self.settings = app, settings

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http" and scope["method"] == "PRI":  # HTTP/2's preface (smg's gRPC probe)
            await Response("HTTP/2 is not served here: this server speaks HTTP/1.1\n", 505,
                           media_type="text/plain")(scope, receive, send)
            return
        check = _Check(self.settings, scope)
        refusal = check.refusal()
        if refusal is not None and scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # before accept: the server answers 403
        elif refusal is not None:
            await refusal(scope, receive, send)
        else:
            await self.app(scope, check.bounded(receive), check.add_cors(send))


class _Check:
    """One request's verdict: refusal() is None to let it through, else the response to send."""

    def __init__(self, settings: GuardSettings, scope):
        self.settings, self.path = settings, scope.get("path", "")
        self.headers = Headers(scope=scope)
        self.method = scope.get("method", "GET")
        self.origin = self.headers.get("origin")

    def refusal(self) -> Response | None:
        host = self.headers.get("host")
        if host is not None and not self._host_allowed(host):
            return self._error(403, f"Host '{host}' is not allowed (llamay serve --allowed-hosts)", "permission")
        if self.origin is not None and self._is_preflight():
            return self._preflight()  # a refused origin's gets no CORS headers: the browser stops there
        if self.origin is not None and not self.origin_ok:
            return self._error(403, f"Origin '{self.origin}' is not allowed (llamay serve --origins)", "permission")
        if self.settings.api_key and not _is_open(self.path) and not self._key_ok():
            return self._error(401, "a valid API key is required (Authorization: Bearer KEY, or x-api-key: KEY)",
                               "authentication", {"www-authenticate": "Bearer"})
        length, limit = self.headers.get("content-length", "").strip(), self._body_limit()
        if limit is not None and length.isdigit() and int(length) > limit:
            return self._error(413, f"the request body is over {limit >> 20} MiB (MAX_JSON_BODY)")
        media = self._bad_body_type()
        if media is not None:
            return self._error(415, f"the request body must be application/json (got {media or 'no content-type'})")
        return None

    def _host_allowed(self, host: str, explicit: bool = False) -> bool:
        """explicit: "*" does not count (for same-origin, where Host is the page's own name)."""
        name = _split_host(host)[0]
        hosts = self.settings.hosts
        if not explicit and "*" in hosts:
            return True
        return is_local_name(name) or any(p != "*" and fnmatch.fnmatchcase(name, _split_host(p)[0]) for p in hosts)

    @functools.cached_property
    def origin_ok(self) -> bool:
        origin = self.origin.strip().lower()
        return _matches(origin, self.settings.origins) or _matches(origin, APP_ORIGINS) or self._same_origin() \
            or "localhost" in self.settings.origins and _loopback_origin(origin)

    def _same_origin(self) -> bool:
        """The page came from this server's own address: Origin's host:port is the Host header's, and
        that name is allowed explicitly (a localhost name, the bound address, --allowed-hosts)."""
        host = self.headers.get("host")
        try:
            parts = urlsplit(self.origin.strip())
            o_name, o_port = parts.hostname, parts.port or DEFAULT_PORTS.get(parts.scheme)
        except ValueError:
            return False
        if host is None or o_name is None or parts.scheme not in ("http", "https"):
            return False
        h_name, h_port = _split_host(host)
        return (o_name, o_port) == (h_name, h_port or DEFAULT_PORTS[parts.scheme]) \
            and self._host_allowed(host, explicit=True)

    def _is_preflight(self) -> bool:
        return self.method == "OPTIONS" and "access-control-request-method" in self.headers

    def _preflight(self) -> Response:
        """200 as llama-server answers, with the CORS headers when the origin is allowed."""
        if not self.origin_ok:
            body = {"error": f"Origin '{self.origin}' is not allowed (llamay serve --origins)"}
            return JSONResponse(body, status_code=200, headers={"vary": "Origin"})
        headers = {"access-control-allow-origin": self.origin, "vary": "Origin",
                   "access-control-allow-methods": ALLOW_METHODS,
                   "access-control-max-age": str(PREFLIGHT_MAX_AGE_S)}
        asked = self.headers.get("access-control-request-headers")
        if asked:
            headers["access-control-allow-headers"] = asked  # any header: the origin is already trusted
        if self.headers.get("access-control-request-private-network") == "true":
            headers["access-control-allow-private-network"] = "true"  # Chrome's Private Network Access
        response = Response(status_code=200)
        response.raw_headers += [(k.title().encode(), v.encode("latin-1")) for k, v in headers.items()]
        return response  # names spelled as llama-server's (clients that keep headers in a plain dict)

    def _key_ok(self) -> bool:
        want = self.settings.api_key.encode()
        scheme, _, token = self.headers.get("authorization", "").partition(" ")
        given = [token.strip() if scheme.lower() == "bearer" else "", self.headers.get("x-api-key", "")]
        return any(hmac.compare_digest(g.encode(), want) for g in given if g)

    def _bad_body_type(self) -> str | None:
        """The media type of a body this route must not take, else None. Bodies must be JSON (or a
        BINARY_ROUTES type). Clients without an Origin header (curl -d, urllib, Node's fetch: all send a
        form or text type by default, and Ollama takes them) are not checked; every browser sends
        Origin on a request with a body, so pages always are."""
        if self.method not in BODY_METHODS or self.origin is None or not self._has_body():
            return None
        media = self.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media == "application/json" or media.endswith("+json"):
            return None
        return None if media in BINARY_ROUTES.get((self.method, self.path), ()) else media

    def _body_limit(self) -> int | None:
        """Bytes this route's body may have: MAX_JSON_BODY, none for a BINARY_ROUTES upload."""
        return None if (self.method, self.path) in BINARY_ROUTES else MAX_JSON_BODY

    def bounded(self, receive):
        """receive, raising a 413 ProtocolError (answered by the route in its API's shape) once a body sent
        without a Content-Length (chunked) passes the limit."""
        limit, seen = self._body_limit(), 0
        if limit is None:
            return receive

        async def wrapped():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                raise ProtocolError(413, f"the request body is over {limit >> 20} MiB (MAX_JSON_BODY)")
            return message
        return wrapped

    def _has_body(self) -> bool:
        length = self.headers.get("content-length")
        return (length is not None and length.strip() != "0") or "transfer-encoding" in self.headers

    def _error(self, status: int, message: str, kind: str = "invalid_request", headers=None) -> Response:
        proto = proto_for(self.path)
        body = proto.error_body(ProtocolError(status, message, kind))
        return JSONResponse(body, status_code=status, headers={**self._cors(), "vary": "Origin", **(headers or {})})

    def _cors(self) -> dict[str, str]:
        """CORS headers for an allowed Origin (none for a missing or refused one); Vary: Origin goes on
        every response, since whether these are sent depends on it."""
        if self.origin is None or not self.origin_ok:
            return {}
        return {"access-control-allow-origin": self.origin, "access-control-expose-headers": EXPOSE_HEADERS}

    def add_cors(self, send):
        """send, with the CORS headers added to the response's start (streamed responses too)."""
        cors = self._cors()

        async def wrapped(message):
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.add_vary_header("Origin")
                headers.update(cors)
            await send(message)
        return wrapped


def proto_for(path: str):
    """The protocol module whose error_body answers for path: Anthropic for /v1/messages, Ollama for
    / and /api/, llama-server's for its native routes, else OpenAI (the /v1 API, and llama-server's
    extras, which answer in OpenAI's shape)."""
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return anthropic
    if path == "/" or path.startswith("/api/"):
        return ollama
    if path in llamacpp.NATIVE_PATHS or path.startswith("/slots/"):
        return llamacpp
    return openai
