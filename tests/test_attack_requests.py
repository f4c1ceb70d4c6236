"""Hostile requests against a real server: each is a 4xx in the API's own error shape, costs nobody else
anything, and leaves no traceback in the log (the attacks of the hardening issue, one test each)."""
import asyncio
import json
import logging
import socket
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from llamay.kv.snapshot_format import SnapshotError, _parse_meta
from llamay.server import contexts as contexts_mod
from llamay.server.jsonbody import MAX_DEPTH, parse_body
from llamay.server.registry import describe
from llamay.server.protocol.base import ProtocolError
from llamay.server.protocol.ollama_out import show_body
from server_thread import ServerThread

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def server(smollm_path):
    s = ServerThread(["-m", str(smollm_path), "--threads", "2", "-c", "512", "--max-contexts", "8"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def model(server):
    return server.registry.resolve(None)


def _raw_post(http, path: str, text: str) -> httpx.Response:
    return http.post(path, content=text.encode("utf-8", "surrogatepass"),
                     headers={"content-type": "application/json"})


# --- the body: strict JSON, bounded nesting, valid Unicode -------------------------------------------------

@pytest.mark.parametrize("raw, says", [
    (b'{"temperature": NaN}', "not a JSON number"), (b'{"top_p": Infinity}', "not a JSON number"),
    (b'{"temperature": 1e400}', "out of range"), (b'{"seed": 1' + b"0" * 5000 + b"}", "too long"),
    (b"[" * 100_000 + b"]" * 100_000, "nests deeper"), (b'{"a": ' + b"[" * 200 + b"]" * 200 + b"}", "nests deeper"),
    (b'{"content": "\\ud800"}', "surrogate"), (b'{"\\udfff": 1}', "surrogate"), (b"[1]", "JSON object"),
])
def test_a_hostile_body_is_a_400_saying_why(raw, says):
    with pytest.raises(ProtocolError) as e:
        parse_body(raw)
    assert e.value.status == 400 and says in e.value.message


def test_a_body_as_deep_as_the_limit_parses():
    deep = b'{"a": ' + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"}"
    assert "a" in parse_body(deep)


SURROGATE = '"\\ud800"'


@pytest.mark.parametrize("path, body, shape", [
    ("/v1/chat/completions", '{"model": "M", "messages": [{"role": "user", "content": %s}]}', "openai"),
    ("/v1/messages", '{"model": "M", "max_tokens": 8, "messages": [{"role": "user", "content": %s}]}', "anthropic"),
    ("/api/chat", '{"model": "M", "messages": [{"role": "user", "content": %s}]}', "ollama"),
])
def test_a_lone_surrogate_is_a_400_in_each_apis_shape(http, model, path, body, shape):
    r = _raw_post(http, path, body.replace("M", model) % SURROGATE)
    assert r.status_code == 400, r.text
    err = r.json()
    message = {"openai": lambda: err["error"]["message"], "anthropic": lambda: err["error"]["message"],
               "ollama": lambda: err["error"]}[shape]()
    assert "surrogate" in message
    if shape == "anthropic":
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("field", ["temperature", "top_p", "presence_penalty"])
def test_nan_sampling_values_are_refused(http, model, field):
    r = _raw_post(http, "/v1/completions", '{"model": "%s", "prompt": "Hi", "max_tokens": 2, "%s": NaN}' % (model, field))
    assert r.status_code == 400 and "NaN" in r.json()["error"]["message"]


def test_logit_bias_ids_are_checked_against_the_vocabulary(http, model):
    r = http.post("/v1/completions", json={"model": model, "prompt": "Hi", "max_tokens": 2,
                                           "logit_bias": {"999999": 5}})
    assert r.status_code == 400 and "outside the vocabulary" in r.json()["error"]["message"]
    r = http.post("/v1/completions", json={"model": model, "prompt": "Hi", "max_tokens": 2,
                                           "logit_bias": {"1" * 5000: 5}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias"


def test_an_earlier_tool_call_without_a_name_is_a_400(http, model):
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                                                                      "function": {"arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    r = http.post("/v1/chat/completions", json={"model": model, "messages": messages, "max_tokens": 2})
    assert r.status_code == 400 and "function.name" in r.json()["error"]["message"]


def test_show_turns_a_files_nan_into_null(smollm_path):
    info = describe("m", str(smollm_path))
    info.metadata = {**info.metadata, "general.weird": float("nan"), "general.weirder": [1.0, float("inf")]}
    body = json.loads(json.dumps(show_body(info), allow_nan=False))
    assert body["model_info"]["general.weird"] is None and body["model_info"]["general.weirder"] == [1.0, None]


def test_deeply_nested_snapshot_meta_is_a_snapshot_error():
    with pytest.raises(SnapshotError, match="nests too deeply"):
        _parse_meta(b"[" * 100_000 + b"]" * 100_000)


# --- routes nobody has ------------------------------------------------------------------------------------

@pytest.mark.parametrize("method, path, shape", [
    ("GET", "/v1/nothing", "openai"), ("POST", "/api/nothing", "ollama"), ("GET", "/v1/chat/completions", "openai"),
    ("DELETE", "/api/tags", "ollama"), ("GET", "/v1/messages", "anthropic"),
])
def test_unknown_routes_and_methods_answer_in_the_apis_shape(http, method, path, shape):
    r = http.request(method, path)
    assert r.status_code in (404, 405)
    err = r.json()
    assert "detail" not in err
    if shape == "ollama":
        assert isinstance(err["error"], str)
    elif shape == "anthropic":
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"  # a 405: POST only
    else:
        assert isinstance(err["error"]["message"], str) and "type" in err["error"]


# --- named contexts: bounded, expiring, never a 500 -------------------------------------------------------

def _delete_all(http):
    for c in http.get("/v1/contexts").json()["data"]:
        http.delete(f"/v1/contexts/{c['id']}")


def test_contexts_past_their_page_share_are_a_429_not_a_500(http, model, server):
    _delete_all(http)
    try:
        codes = []
        for i in range(6):  # 480-token contexts, 15 pages each: the default budget's share holds 3
            r = http.post("/v1/contexts", json={"model": model, "prompt": list(range(100 + i, 580 + i))})
            codes.append(r.status_code)
            if r.status_code != 201:
                assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
                assert "share" in r.json()["error"]["message"]
        assert codes[0] == 201 and 429 in codes
        r = http.post("/v1/completions", json={"model": model, "prompt": "Hello", "max_tokens": 4})
        assert r.status_code == 200  # the rest of the pages still serve everyone else
        server.check_pages()
    finally:
        _delete_all(http)


def test_more_contexts_than_the_limit_are_a_429(http, model):
    _delete_all(http)
    try:
        first = http.post("/v1/contexts", json={"model": model, "prompt": "Hello there"}).json()["id"]
        r = http.post(f"/v1/contexts/{first}/fork?n=8")  # 1 + 8 > --max-contexts 8
        assert r.status_code == 429 and "--max-contexts" in r.json()["error"]["message"]
        assert http.post(f"/v1/contexts/{first}/fork?n=7").status_code == 201
        r = http.post("/v1/contexts", json={"model": model, "prompt": "One more"})
        assert r.status_code == 429
    finally:
        _delete_all(http)


def test_idle_contexts_expire_and_free_their_pages(http, model, server):
    _delete_all(http)
    table = server.app.state.contexts
    cid = http.post("/v1/contexts", json={"model": model, "prompt": "Hello there, old friend"}).json()["id"]
    kept = http.post("/v1/contexts", json={"model": model, "prompt": "Still in use"}).json()["id"]
    try:
        table.by_id[cid].last_used -= table.ttl + 1
        assert asyncio.run(contexts_mod.expire(table, server.registry)) == [cid]
        assert http.get(f"/v1/contexts/{cid}").status_code == 404
        assert http.get(f"/v1/contexts/{kept}").status_code == 200
        server.check_pages()
    finally:
        _delete_all(http)


def test_a_restored_snapshots_grammar_is_replayed_off_the_scheduler_thread(http, model, monkeypatch):
    from llamay.grammar import Grammar
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    cid = http.post("/v1/contexts", json={"model": model, "prompt": "JSON:"}).json()["id"]
    try:
        http.post(f"/v1/contexts/{cid}/generate", json={"max_tokens": 3, "temperature": 0, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
        snap = http.get(f"/v1/contexts/{cid}/snapshot").content
        threads, resume = [], Grammar.resume.__func__

        def spy(cls, tokenizer, state):
            threads.append(threading.current_thread().name)
            return resume(cls, tokenizer, state)
        monkeypatch.setattr(Grammar, "resume", classmethod(spy))
        r = http.post(f"/v1/contexts?model={model}", content=snap, headers={"content-type": "application/octet-stream"})
        assert r.status_code == 201, r.text
        assert threads and "llamay-scheduler" not in threads
    finally:
        _delete_all(http)


# --- a client that leaves -----------------------------------------------------------------------------------

class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def test_a_client_that_leaves_a_whole_response_leaves_no_traceback(server, model):
    records = _Records()
    loggers = [logging.getLogger(n) for n in ("uvicorn.error", "uvicorn", "llamay.server")]
    for lg in loggers:
        lg.addHandler(records)
    try:
        host, port = server.url.removeprefix("http://").split(":")
        body = json.dumps({"model": model, "prompt": "Count: 1, 2,", "max_tokens": 400, "temperature": 0}).encode()
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (f"{host}:{port}".encode(), len(body), body))
            time.sleep(0.5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and server.registry.loaded[model].busy:
            time.sleep(0.1)
        time.sleep(0.5)
        assert not server.registry.loaded[model].busy  # the generation was cancelled
        assert not [r for r in records.records if r.exc_info], [r.getMessage() for r in records.records]
    finally:
        for lg in loggers:
            lg.removeHandler(records)


def test_mutated_requests_get_no_5xx(http, model, server):
    """A bounded run of scripts/fuzz_requests.py (seeded mutations of valid bodies for every API) against
    this server: no answer is a 5xx other than overload, and no page is left held."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from fuzz_requests import run_case
    bad = []
    for i in range(300):
        status, route, detail = run_case(http, model, 1, i)
        if status >= 500 and status not in (503, 529):
            bad.append((i, status, route, detail["answer"][:200]))
    _delete_all(http)
    assert not bad, bad[:5]
    assert server.check_pages() == 0


def test_text_too_long_for_any_tokenization_is_refused_before_tokenizing(http, model, server):
    tok = server.registry.loaded[model].llm.tokenizer  # loaded by the earlier requests of this module
    text = "x" * 4_000_000  # one 4 MB word: seconds and gigabytes to tokenize, and it cannot fit 512 tokens
    encode, longest = tok.encode, []

    def watched(text, *args, **kwargs):
        longest.append(len(text))
        return encode(text, *args, **kwargs)
    tok.encode = watched
    try:
        for path, body in (("/v1/completions", {"model": model, "prompt": text, "max_tokens": 1}),
                           ("/api/chat", {"model": model, "stream": False,
                                          "messages": [{"role": "user", "content": text}]})):
            r = http.post(path, json=body)
            assert r.status_code == 400 and "bytes of text" in r.text, r.text[:300]
    finally:
        del tok.encode
    assert max(longest, default=0) < len(text)  # refused before it was tokenized
    assert tok.max_piece_bytes * 2 * 512 < len(text)


def test_snapshot_uploads_are_bounded_by_what_the_context_can_hold(http, model, server):
    from llamay.engine.snapshots import max_bytes
    limit = max_bytes(server.registry.loaded[model].llm)
    cid = http.post("/v1/contexts", json={"model": model, "prompt": list(range(100, 610))}).json()["id"]
    try:
        snap = http.get(f"/v1/contexts/{cid}/snapshot").content  # 510 of 512 tokens: near the largest
        assert len(snap) <= limit
        r = http.post(f"/v1/contexts?model={model}", content=snap, headers={"content-type": "application/octet-stream"})
        assert r.status_code == 201, r.text
        r = http.post(f"/v1/contexts?model={model}", content=b"\0" * (limit + 1),
                      headers={"content-type": "application/octet-stream"})
        assert r.status_code == 413 and "largest" in r.json()["error"]["message"]

        def chunks():  # no Content-Length: counted as it arrives
            for _ in range(limit // (1 << 20) + 2):
                yield b"\0" * (1 << 20)
        r = http.post(f"/v1/contexts?model={model}", content=chunks(), headers={"content-type": "application/octet-stream"})
        assert r.status_code == 413
    finally:
        _delete_all(http)
