"""Attacks a web page can make on `llamay serve`, reproduced against the real app: cross-origin text/plain
POSTs (no CORS preflight), DNS rebinding (a foreign Host), and calls without the API key. Each must be
refused before any route runs, in the error shape of the API the path belongs to, while same-origin pages,
allowed origins and non-browser clients keep working. No model runs except in the streaming test."""
import asyncio
import json

import pytest
from fastapi.testclient import TestClient

from llamay.cli import serve
from llamay.cli.main import build_parser
from llamay.server import guard
from llamay.server.app import create_app
from llamay.server.guard import Guard, GuardSettings
from llamay.server.registry import Registry, Settings
from llamay.settings import LoadOptions

BASE = "http://127.0.0.1:11435"
EVIL = "http://evil.example"
KEY = "sk-local-test-key"


@pytest.fixture(scope="module")
def registry(smollm_path):
    return Registry([str(smollm_path)], Settings(load=LoadOptions(threads=1, n_ctx=256)), use_store=False)


@pytest.fixture(scope="module")
def model(registry):
    return registry.resolve(None)


def client(registry, **settings) -> TestClient:
    return TestClient(create_app(registry, GuardSettings(**settings)), base_url=BASE)


def copy(c: TestClient, model: str, dest: str, **kw):
    return c.post("/api/copy", content=json.dumps({"source": model, "destination": dest}), **kw)


def test_cross_origin_text_plain_post_is_refused_and_creates_nothing(registry, model):
    c = client(registry)
    r = copy(c, model, "stolen:1", headers={"origin": EVIL, "content-type": "text/plain;charset=UTF-8"})
    assert r.status_code == 403 and "evil.example" in r.json()["error"]
    assert "access-control-allow-origin" not in r.headers  # the page cannot even read the refusal
    r = c.post("/v1/contexts", content=json.dumps({"model": model, "prompt": "hi"}),
               headers={"origin": EVIL, "content-type": "text/plain"})
    assert r.status_code == 403
    r = c.post("/api/pull", content=b'{"model": "x:1"}', headers={"origin": "null", "content-type": "text/plain"})
    assert r.status_code == 403  # a sandboxed iframe or a downloaded file is cross-origin too
    assert "stolen:1" not in registry.paths and not c.app.state.contexts


def test_foreign_host_is_refused_dns_rebinding_too(registry, model):
    c = client(registry)
    for host in ("evil.example", "evil.example:11435", "localhost.evil.example", "127.0.0.1.nip.io"):
        r = c.get("/api/tags", headers={"host": host})
        assert r.status_code == 403 and host in r.json()["error"], host
    rebound = {"host": "evil.example:11435", "origin": "http://evil.example:11435"}  # "same-origin" to itself
    assert c.request("DELETE", "/api/delete", json={"model": model}, headers=rebound).status_code == 403
    assert copy(c, model, "rebound:1", headers={**rebound, "content-type": "application/json"}).status_code == 403
    assert c.get("/v1/models", headers=rebound).status_code == 403
    assert model in registry.paths and "rebound:1" not in registry.paths


def test_localhost_names_are_accepted_with_or_without_port(registry):
    c = client(registry)
    for host in ("127.0.0.1:11435", "localhost", "LOCALHOST:1", "[::1]:11435", "::1", "127.0.0.2", "app.localhost:8"):
        assert c.get("/api/tags", headers={"host": host}).status_code == 200, host


def test_no_host_header_is_allowed_a_foreign_one_refused_websocket_too():
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    def call(kind: str, headers: list) -> list[dict]:
        sent = []

        async def send(message):
            sent.append(message)

        scope = {"type": kind, "method": "GET", "path": "/api/tags", "headers": headers, "scheme": "http"}
        asyncio.run(Guard(app)(scope, None, send))
        return sent

    assert call("http", [])[0]["status"] == 200  # HTTP/1.0 tools send no Host
    assert call("http", [(b"host", b"evil.example")])[0]["status"] == 403
    assert call("websocket", [(b"host", b"localhost"), (b"origin", EVIL.encode())]) == \
        [{"type": "websocket.close", "code": 1008}]


def test_allowed_origin_works_and_gets_cors_headers(registry, model):
    c = client(registry, origins=("https://*.example.com",))
    origin = "https://ui.example.com"
    r = copy(c, model, "ui:1", headers={"origin": origin, "content-type": "application/json"})
    assert r.status_code == 200 and "ui:1" in registry.paths
    assert r.headers["access-control-allow-origin"] == origin and "Origin" in r.headers["vary"]
    assert "retry-after" in r.headers["access-control-expose-headers"]
    assert c.get("/api/tags", headers={"origin": "https://example.com.evil.example"}).status_code == 403
    anyone = client(registry, origins=("*",))
    assert anyone.get("/v1/models", headers={"origin": EVIL}).headers["access-control-allow-origin"] == EVIL


def test_preflight_is_answered_for_allowed_origins_only(registry):
    c = client(registry, origins=("https://ui.example.com",), api_key=KEY)
    asked = {"access-control-request-method": "POST",
             "access-control-request-headers": "authorization, content-type, x-stainless-os, anthropic-version",
             "access-control-request-private-network": "true"}
    r = c.options("/v1/chat/completions", headers={"origin": "https://ui.example.com", **asked})
    assert r.status_code == 200  # no key needed: browsers never send one on a preflight
    assert r.headers["access-control-allow-origin"] == "https://ui.example.com"
    assert "POST" in r.headers["access-control-allow-methods"]
    assert r.headers["access-control-allow-headers"] == asked["access-control-request-headers"]
    assert r.headers["access-control-allow-private-network"] == "true"
    r = c.options("/v1/chat/completions", headers={"origin": EVIL, **asked})  # llama-server's: 200, no CORS
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    assert c.post("/v1/chat/completions", headers={"origin": EVIL}, json={}).status_code == 403
    local = client(registry, origins=("localhost",))  # llama-server's --cors-origins localhost: loopback pages
    for origin, ok in (("http://127.0.0.1:3000", True), ("http://[::1]", True), ("http://localhost.evil.com", False)):
        r = local.options("/v1/chat/completions", headers={"origin": origin, **asked})
        assert (r.headers.get("access-control-allow-origin") == origin) == ok, origin


def test_same_origin_and_app_pages_are_allowed_other_local_ports_not(registry):
    c = client(registry)
    r = c.get("/v1/models", headers={"host": "localhost:11435", "origin": "http://localhost:11435"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:11435"
    assert c.get("/v1/models", headers={"origin": "http://127.0.0.1:11435"}).status_code == 200
    assert c.get("/v1/models", headers={"origin": "tauri://localhost"}).status_code == 200  # a desktop app
    assert c.get("/v1/models", headers={"origin": "http://127.0.0.1:3000"}).status_code == 403
    assert c.get("/v1/models", headers={"origin": "file://"}).status_code == 403


def test_api_key_is_required_except_on_health(registry):
    c = client(registry, api_key=KEY)
    r = c.get("/v1/models")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert c.get("/v1/models", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/v1/models", headers={"x-api-key": KEY + "x"}).status_code == 401
    assert c.get("/v1/models", headers={"authorization": f"Bearer {KEY}"}).status_code == 200
    assert c.get("/v1/models", headers={"x-api-key": KEY}).status_code == 200  # Anthropic's header
    assert c.get("/health").json() == {"status": "ok"}
    assert c.get("/api/tags").status_code == 401


def test_refusals_are_in_each_apis_error_shape(registry):
    c = client(registry, api_key=KEY)
    openai_err = c.get("/v1/models").json()["error"]
    assert set(openai_err) == {"message", "type", "param", "code"} and openai_err["code"] == "invalid_api_key"
    anthropic_err = c.post("/v1/messages", json={}).json()
    assert anthropic_err["type"] == "error" and anthropic_err["error"]["type"] == "authentication_error"
    assert set(anthropic_err["error"]) == {"type", "message"}
    ollama_err = c.post("/api/chat", json={}).json()
    assert set(ollama_err) == {"error"} and isinstance(ollama_err["error"], str)
    llama_err = c.post("/tokenize", json={"content": "x"}).json()["error"]  # llama-server's: OpenAI's keys
    assert {"code", "message", "type"} <= set(llama_err)
    forbidden = client(registry).get("/v1/messages/count_tokens", headers={"host": "evil.example"}).json()
    assert forbidden["error"]["type"] == "permission_error" and "evil.example" in forbidden["error"]["message"]


def test_page_bodies_must_be_json_binary_routes_excepted(registry, model):
    c = client(registry, origins=("https://ui.example.com",))
    page = {"origin": "https://ui.example.com"}
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {**page, "content-type": kind} if kind else page
        r = copy(c, model, "form:1", headers=headers)
        assert r.status_code == 415 and "application/json" in r.json()["error"], kind
    assert "form:1" not in registry.paths
    for kind in ("application/json; charset=utf-8", "application/vnd.api+json"):
        assert copy(c, model, "json:1", headers={**page, "content-type": kind}).status_code == 200, kind
    r = c.post("/v1/contexts", params={"model": "no-such"}, content=b"LLAMAYCTX",
               headers={**page, "content-type": "application/octet-stream"})
    # a snapshot restore: past the guard, to the route (the one model answers any name; the bytes are no snapshot)
    assert r.status_code == 400 and "snapshot" in r.json()["error"]["message"], r.text
    r = c.post("/v1/contexts/nope/fork", params={"n": 3}, headers={**page, "content-type": "text/plain"})
    assert r.status_code == 404  # no body: its type does not matter
    assert c.post("/api/show", content=b"{}", headers={**page, "content-type": "application/octet-stream"}) \
        .status_code == 415  # octet-stream only where declared


def test_clients_without_origin_keep_their_defaults(registry, model):
    c = client(registry)
    curl = copy(c, model, "curl:1", headers={"content-type": "application/x-www-form-urlencoded"})  # curl -d
    assert curl.status_code == 200 and "curl:1" in registry.paths


@pytest.mark.model
def test_streamed_response_from_an_allowed_origin_has_cors_headers(registry, model):
    with TestClient(create_app(registry, GuardSettings(origins=("https://ui.example.com",))), base_url=BASE) as c:
        body = {"model": model, "prompt": "Hello", "max_tokens": 2, "stream": True}
        with c.stream("POST", "/v1/completions", json=body, headers={"origin": "https://ui.example.com"}) as r:
            frames = [line for line in r.iter_lines() if line]
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://ui.example.com"
        assert frames[-1] == "data: [DONE]"


def test_serving_settings_by_bind_address(monkeypatch):
    assert guard.serving("127.0.0.1") == GuardSettings()
    assert guard.serving("0.0.0.0").hosts == ("*",)  # exposed: any Host, as Ollama; the key is the defence
    assert guard.serving("0.0.0.0", ("box.lan",)).hosts == ("box.lan",)
    assert guard.serving("192.168.1.5", ("box.lan",)).hosts == ("box.lan", "192.168.1.5")
    monkeypatch.setenv("LLAMAY_ORIGINS", "https://a.example, app://*")
    monkeypatch.setenv("LLAMAY_API_KEY", KEY)
    monkeypatch.setenv("LLAMAY_ALLOWED_HOSTS", "box.lan")
    args = build_parser().parse_args(["serve", "--origins", "https://b.example"])
    assert serve.guard_settings(args) == GuardSettings(("box.lan", "127.0.0.1"), ("https://b.example",), KEY)
    monkeypatch.delenv("LLAMAY_ALLOWED_HOSTS")
    args = build_parser().parse_args(["serve", "--host", "0.0.0.0"])
    assert serve.guard_settings(args) == GuardSettings(("*",), ("https://a.example", "app://*"), KEY)


def test_a_json_body_past_the_limit_is_a_413_in_the_apis_shape(registry):
    from llamay.server.guard import MAX_JSON_BODY
    c = client(registry)
    big = b'{"model": "m", "prompt": "' + b"x" * (MAX_JSON_BODY + 1) + b'"}'
    r = c.post("/v1/completions", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "MAX_JSON_BODY" in r.json()["error"]["message"]

    def chunks():  # no Content-Length: the limit is counted as the body arrives
        yield b'{"model": "m", "messages": [], "x": "'
        for _ in range(MAX_JSON_BODY >> 20):
            yield b"y" * (1 << 20)
        yield b'"}'
    r = c.post("/api/chat", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "MAX_JSON_BODY" in r.json()["error"]
