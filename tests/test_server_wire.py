"""`llamay serve`'s raw wire format, read with httpx (no SDK in the request path): SSE / NDJSON framing and
event order, Ollama's management routes, error bodies and statuses of each API, and the llama-server extras.
Expected shapes come from ../shared/docs/protocols/*.md and the official SDKs' own types; token ids from
llama.cpp's fixtures. Overload, disconnects and failures inside the server: test_server_wire_load.py."""
import json
import re
import time

import httpx
import pytest
from anthropic.types import ErrorResponse, RawMessageStreamEvent
from ollama._types import (
    ChatResponse,
    GenerateResponse,
    ListResponse,
    ProcessResponse,
    ShowResponse,
)
from openai.types import ErrorObject
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import TypeAdapter

pytestmark = pytest.mark.model

HI = [{"role": "user", "content": "Hi"}]
STORY = [{"role": "user", "content": "Tell me a long story about a dragon."}]
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
ANTHROPIC_EVENT = TypeAdapter(RawMessageStreamEvent)
HTTP = httpx.Client(timeout=60)  # generous: other work may share the 2 cores

def sse_blocks(resp: httpx.Response) -> list[list[str]]:
    """The events of a whole SSE body, each as its lines; every event ends with a blank line."""
    assert resp.headers["content-type"].split(";")[0] == "text/event-stream"
    text = resp.text
    assert text.endswith("\n\n") and "\r" not in text
    return [block.split("\n") for block in text[:-2].split("\n\n")]


def ndjson_lines(resp: httpx.Response) -> list[dict]:
    assert resp.headers["content-type"].split(";")[0] == "application/x-ndjson"
    assert resp.text.endswith("\n")
    lines = resp.text[:-1].split("\n")
    objs = [json.loads(line) for line in lines]
    assert all(isinstance(o, dict) for o in objs)
    return objs


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):  # a bound, not a speed
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = predicate()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            result = False
        if result is not False:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# ---- OpenAI -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/v1/chat/completions", "/chat/completions"])
def test_openai_sse_framing_with_usage(url, model, path):
    body = {"model": model, "messages": HI, "max_tokens": 3, "temperature": 0}
    whole = HTTP.post(url + path, json=body)
    assert whole.status_code == 200 and whole.headers["content-type"].startswith("application/json")
    whole = ChatCompletion.model_validate(whole.json())
    r = HTTP.post(url + path, json={**body, "stream": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    blocks = sse_blocks(r)
    assert all(len(b) == 1 and b[0].startswith("data: ") for b in blocks)  # `data: <json>` only, one line
    assert blocks[-1] == ["data: [DONE]"] and ["data: [DONE]"] not in blocks[:-1]
    raw = [json.loads(b[0][len("data: "):]) for b in blocks[:-1]]
    chunks = [ChatCompletionChunk.model_validate(c) for c in raw]
    assert len({(c.id, c.created, c.model) for c in chunks}) == 1
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    with_choices = [c for c in chunks if c.choices]
    assert [c.choices[0].delta.role for c in with_choices] == ["assistant"] + [None] * (len(with_choices) - 1)
    assert [c.choices[0].finish_reason for c in with_choices] == [None] * (len(with_choices) - 1) + ["length"]
    assert "".join(c.choices[0].delta.content or "" for c in with_choices) == whole.choices[0].message.content
    assert all("usage" in c and c["usage"] is None for c in raw[:-1])  # include_usage: null until the last
    assert raw[-1]["choices"] == [] and chunks[-1].usage.completion_tokens == 3
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_openai_stream_without_usage(url, model):
    r = HTTP.post(url + "/chat/completions", json={"model": model, "messages": HI, "max_tokens": 2, "stream": True})
    blocks = sse_blocks(r)
    assert blocks[-1] == ["data: [DONE]"]
    raw = [json.loads(b[0][len("data: "):]) for b in blocks[:-1]]
    assert all(c["choices"] and c.get("usage") is None for c in raw)  # no usage chunk unless asked
    assert raw[-1]["choices"][0]["finish_reason"] == "length" and raw[-1]["choices"][0]["delta"] == {}


# ---- Anthropic ----------------------------------------------------------------------------------------------

ANTHROPIC_ORDER = ["message_start", "content_block_start", "ping", "content_block_delta", "content_block_stop",
                   "message_delta", "message_stop"]


@pytest.mark.parametrize("headers", [{"x-api-key": "any", "anthropic-version": "2023-06-01"},
                                     {"authorization": "Bearer whatever", "anthropic-version": "2026-10-21",
                                      "anthropic-beta": "prompt-caching-2024-07-31,no-such-beta"}])
def test_anthropic_event_stream(url, model, headers):
    body = {"model": model, "max_tokens": 3, "messages": [{"role": "user", "content": "Hello there"}],
            "temperature": 0}
    whole = HTTP.post(url + "/v1/messages?beta=true", json=body, headers=headers)
    assert whole.status_code == 200 and whole.json()["type"] == "message"
    r = HTTP.post(url + "/v1/messages?beta=true", json={**body, "stream": True}, headers=headers)
    assert r.status_code == 200
    names, events = [], []
    for block in sse_blocks(r):
        assert len(block) == 2 and block[0].startswith("event: ") and block[1].startswith("data: ")
        name, data = block[0][len("event: "):], json.loads(block[1][len("data: "):])
        assert data["type"] == name
        names.append(name)
        if name != "ping":
            events.append(ANTHROPIC_EVENT.validate_python(data))
    collapsed = [n for i, n in enumerate(names) if i == 0 or n != names[i - 1]]
    assert collapsed == ANTHROPIC_ORDER and names.count("content_block_delta") >= 1
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == whole.json()["content"][0]["text"]
    start, delta = events[0].message, events[-2]
    assert start.content == [] and start.stop_reason is None
    assert delta.delta.stop_reason == "max_tokens" and delta.usage.output_tokens == 3
    prompt = delta.usage.input_tokens + delta.usage.cache_read_input_tokens
    assert prompt == whole.json()["usage"]["input_tokens"] + whole.json()["usage"]["cache_read_input_tokens"]
    # message_start already carries the prompt's size (anthropic.md §6.4)
    assert start.usage.input_tokens + (start.usage.cache_read_input_tokens or 0) == prompt


# ---- Ollama -------------------------------------------------------------------------------------------------

DURATIONS = ("total_duration", "prompt_eval_duration", "eval_duration")


def check_done_line(obj: dict, eval_count: int, repeat: bool = False):
    """repeat: the same prompt was just answered, so none of it is evaluated again (the logits at its end are
    kept) and prompt_eval_count is 0, omitted as Go's omitempty does; otherwise it is there when > 0 (an
    earlier test may have asked this prompt too)."""
    assert obj["done"] is True and obj["done_reason"] == "length" and obj["eval_count"] == eval_count
    for key in DURATIONS:
        assert type(obj[key]) is int and obj[key] > 0, key  # nanoseconds as integers
    assert "prompt_eval_count" not in obj if repeat else obj.get("prompt_eval_count", 1) > 0
    assert RFC3339.match(obj["created_at"])


def test_ollama_ndjson_chat_and_generate(url, model):
    body = {"model": model, "messages": [{"role": "user", "content": "Hi!"}],
            "options": {"num_predict": 3, "temperature": 0}}
    r = HTTP.post(url + "/api/chat", json=body)  # streams by default
    lines = ndjson_lines(r)
    assert [o["done"] for o in lines] == [False] * (len(lines) - 1) + [True]
    for o in lines:
        ChatResponse.model_validate(o)
        assert o["model"] == model and o["message"]["role"] == "assistant" and RFC3339.match(o["created_at"])
    check_done_line(lines[-1], 3)
    one = HTTP.post(url + "/api/chat", json={**body, "stream": False})
    assert one.headers["content-type"].startswith("application/json")
    whole = ChatResponse.model_validate(one.json())
    assert whole.message.content == "".join(o["message"]["content"] for o in lines)
    check_done_line(one.json(), 3, repeat=True)
    gen = {"model": model, "prompt": "Why is the sky blue?", "options": {"num_predict": 2, "temperature": 0}}
    lines = ndjson_lines(HTTP.post(url + "/api/generate", json=gen))
    for o in lines:
        GenerateResponse.model_validate(o)
    check_done_line(lines[-1], 2)
    assert lines[-1]["context"] and all(type(t) is int for t in lines[-1]["context"])
    one = HTTP.post(url + "/api/generate", json={**gen, "stream": False}).json()
    assert one["response"] == "".join(o["response"] for o in lines)


def test_ollama_root_version_and_listings(url, model):
    assert HTTP.get(url + "/").text == "Ollama is running"
    head = HTTP.head(url + "/")
    assert head.status_code == 200 and head.content == b""
    version = HTTP.get(url + "/api/version").json()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version["version"])
    tags = ListResponse.model_validate(HTTP.get(url + "/api/tags").json())
    entry = next(m for m in tags.models if m.model == model)
    assert re.fullmatch(r"[0-9a-f]{64}", entry.digest) and entry.size > 0 and entry.details.format == "gguf"
    HTTP.post(url + "/api/generate", json={"model": model, "prompt": "Hi", "options": {"num_predict": 1}})
    ps = HTTP.get(url + "/api/ps").json()
    ProcessResponse.model_validate(ps)
    loaded = next(m for m in ps["models"] if m["model"] == model)
    assert RFC3339.match(loaded["expires_at"]) and loaded["context_length"] == 2048
    shown = HTTP.post(url + "/api/show", json={"model": model})
    show = ShowResponse.model_validate(shown.json())
    assert show.modelinfo["general.architecture"] == "llama" and "completion" in show.capabilities
    assert HTTP.post(url + "/api/show", json={"model": "no-such"}).status_code == 404


def test_ollama_copy_use_delete(url, model):
    r = HTTP.post(url + "/api/copy", json={"source": model, "destination": "wire-copy"})
    assert r.status_code == 200 and r.content == b""
    out = HTTP.post(url + "/api/generate", json={"model": "wire-copy", "prompt": "Hi", "stream": False,
                                                  "options": {"num_predict": 1}})
    assert out.status_code == 200 and out.json()["model"] == "wire-copy" and out.json()["done"] is True
    assert "wire-copy" in [m["model"] for m in HTTP.get(url + "/api/tags").json()["models"]]
    r = HTTP.request("DELETE", url + "/api/delete", json={"model": "wire-copy"})
    assert r.status_code == 200 and r.content == b""
    assert "wire-copy" not in [m["model"] for m in HTTP.get(url + "/api/tags").json()["models"]]
    gone = HTTP.post(url + "/api/generate", json={"model": "wire-copy", "prompt": "Hi", "stream": False})
    assert gone.status_code == 404 and set(gone.json()) == {"error"}
    assert HTTP.request("DELETE", url + "/api/delete", json={"model": "wire-copy"}).status_code == 404
    assert HTTP.post(url + "/api/copy", json={"source": "no-such", "destination": "x"}).status_code == 404


# ---- errors -------------------------------------------------------------------------------------------------

def check_error(api: str, r: httpx.Response, status: int, kind: str | None = None) -> dict:
    """The API's own error body at the given status; kind: the OpenAI/Anthropic error type expected."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    if api == "openai":  # a prompt over the context adds llama-server's n_prompt_tokens and n_ctx
        too_long = body.get("error", {}).get("code") == "context_length_exceeded"
        extra = {"n_prompt_tokens", "n_ctx"} if too_long else set()
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"} | extra
        ErrorObject.model_validate(body["error"])
        assert body["error"]["type"] == (kind or "invalid_request_error")
    elif api == "anthropic":
        assert ErrorResponse.model_validate(body).error.type == (kind or "invalid_request_error")
        assert body["type"] == "error" and isinstance(body["error"]["message"], str)
    else:
        assert set(body) <= {"error", "signin_url"} and isinstance(body["error"], str) and body["error"]
    return body


ROUTES = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages", "ollama": "/api/chat",
          "ollama-generate": "/api/generate", "openai-completions": "/v1/completions"}
API = {"openai": "openai", "anthropic": "anthropic", "ollama": "ollama", "ollama-generate": "ollama",
       "openai-completions": "openai"}


def good_body(route: str, model: str) -> dict:
    if route in ("ollama-generate", "openai-completions"):
        return {"model": model, "prompt": "Hi", "max_tokens": 2, "stream": False}
    return {"model": model, "messages": HI, "max_tokens": 2, "stream": False}


@pytest.mark.parametrize("route", list(ROUTES))
def test_malformed_bodies(url, model, route):
    api, path = API[route], url + ROUTES[route]
    for raw in (b'{"model": ', b"[1, 2]", b'"text"', b"\xff\xfe"):
        check_error(api, HTTP.post(path, content=raw, headers={"content-type": "application/json"}), 400)
    body = good_body(route, model)
    not_found = check_error(api, HTTP.post(path, json={**body, "model": "no-such-model"}), 404,
                            "not_found_error" if api == "anthropic" else None)
    if api == "openai":
        assert not_found["error"]["code"] == "model_not_found"
    no_model = HTTP.post(path, json={k: v for k, v in body.items() if k != "model"})  # the default model's
    assert no_model.status_code == 200 and no_model.json()["model"] == model, no_model.text


@pytest.mark.parametrize("route", ["openai", "anthropic", "ollama"])
def test_wrong_fields(url, model, route):
    api, path, body = API[route], url + ROUTES[route], good_body(route, model)
    check_error(api, HTTP.post(path, json={**body, "messages": "Hi"}), 400)
    check_error(api, HTTP.post(path, json={**body, "messages": [{"role": "user", "content": 5}]}), 400)
    if route == "ollama":
        bad = check_error(api, HTTP.post(path, json={**body, "options": {"temperature": "hot"}}), 400)
        assert "temperature" in bad["error"]
        return
    bad = check_error(api, HTTP.post(path, json={**body, "temperature": "hot"}), 400)
    named = bad["error"]["param"] if api == "openai" else bad["error"]["message"]
    assert "temperature" in named
    no_messages = {k: v for k, v in body.items() if k != "messages"}
    check_error(api, HTTP.post(path, json=no_messages), 400)
    if route == "anthropic":
        no_max = {k: v for k, v in body.items() if k != "max_tokens"}
        assert "max_tokens" in check_error(api, HTTP.post(path, json=no_max), 400)["error"]["message"]
        check_error(api, HTTP.post(path, json={**body, "max_tokens": "2"}), 400)


@pytest.mark.parametrize("route", list(ROUTES))
def test_prompt_over_the_context(url, model, route):
    """-c 2048 on the session server; ~2100 words make more tokens than that."""
    api, body = API[route], good_body(route, model)
    text = "hello " * 2100
    if "messages" in body:
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    kind = "exceed_context_size_error" if api == "openai" else None  # llama-server's type beside OpenAI's code
    err = check_error(api, HTTP.post(url + ROUTES[route], json=body), 400, kind)
    if api == "openai":
        assert err["error"]["code"] == "context_length_exceeded"
        assert err["error"]["n_prompt_tokens"] > err["error"]["n_ctx"] == 2048
    check_error(api, HTTP.post(url + ROUTES[route], json={**body, "stream": True}), 400, kind)  # before any frame


# ---- llama-server extras ------------------------------------------------------------------------------------

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([^ ]+)( -?\d+)?$")


def parse_metrics(resp: httpx.Response) -> dict[str, tuple[str, float]]:
    """Prometheus text exposition format 0.0.4: '# HELP name text', '# TYPE name type' (once, before the
    samples), 'name[{labels}] value [timestamp]', lines ending in '\\n' -> {name: (type, value)}."""
    assert resp.status_code == 200
    ctype = resp.headers["content-type"].replace(" ", "")
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype
    assert resp.text.endswith("\n")
    types, values = {}, {}
    for line in resp.text[:-1].split("\n"):
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped")
            assert name not in types and name not in values
            types[name] = kind
        elif line.startswith("# HELP "):
            assert len(line.split(" ", 3)) == 4
        elif line and not line.startswith("#"):
            match = SAMPLE.match(line)
            assert match, line
            assert match[1] in types  # TYPE came first
            values[match[1]] = float(match[3])
    for name, kind in types.items():
        if kind == "counter":  # llama-server declares its n_tokens_max (a maximum) a counter; clients expect it
            assert (name.endswith("_total") or name == "llamacpp:n_tokens_max") and values[name] >= 0
    return {name: (types[name], value) for name, value in values.items()}


def test_health(url):
    for path in ("/health", "/v1/health"):
        r = HTTP.get(url + path)
        assert r.status_code == 200 and r.json() == {"status": "ok"}


def fixture_piece_bytes(piece: str) -> bytes:
    """llama.cpp's piece as the fixture wrote it (UTF-8, invalid bytes as \\xNN) -> its bytes."""
    return re.sub(rb"\\x([0-9a-f]{2})", lambda m: bytes([int(m[1], 16)]), piece.encode())


def test_tokenize_detokenize_match_llamacpp(live_server, url, model, fixtures_dir):
    cases = json.loads((fixtures_dir / "llamacpp" / "smollm2-135m" / "tokenize.json").read_text())["strings"]
    def post(path, body):
        return HTTP.post(url + path, json=body).json()

    post("/tokenize", {"content": ""})  # loads the model
    tok = live_server.registry.loaded[live_server.registry.resolve(model)].llm.tokenizer
    for case in cases:
        text = case["text"]
        for special in (True, False):
            ids = post("/tokenize", {"content": text, "parse_special": special})["tokens"]
            assert ids == case[f"ids_add_bos_false_special_{str(special).lower()}"], text
            assert ids == tok.encode(text, add_special=False, parse_special=special)
        pieces = post("/tokenize", {"content": text, "with_pieces": True})["tokens"]
        assert [p["id"] for p in pieces] == case["ids_add_bos_false_special_true"]
        if "\\" not in text:
            for got, want in zip(pieces, case["pieces_add_bos_false_special_true"], strict=True):
                raw = got["piece"].encode() if isinstance(got["piece"], str) else bytes(got["piece"])
                assert raw == fixture_piece_bytes(want), text
                if not isinstance(got["piece"], str):  # a byte list only when not valid UTF-8
                    pytest.raises(UnicodeDecodeError, raw.decode)
        if case["detok_roundtrip_equal_special_true"]:
            assert post("/detokenize", {"tokens": case["ids_add_bos_false_special_true"]})["content"] == text
    bad = HTTP.post(url + "/detokenize", json={"tokens": "12"})
    check_error("openai", bad, 400)


def test_metrics_count_requests_tokens_and_cache_hits(url, model):
    before = parse_metrics(HTTP.get(url + "/metrics"))
    for name in ("llamay_queue_depth", "llamay_kv_pages_used"):
        assert before[name][0] == "gauge"
    body = {"model": model, "messages": [{"role": "user", "content": f"Say a number. {time.time_ns()}"}],
            "max_tokens": 2, "temperature": 0}
    first = HTTP.post(url + "/v1/chat/completions", json=body).json()["usage"]
    mid = parse_metrics(HTTP.get(url + "/metrics"))
    second = HTTP.post(url + "/v1/chat/completions", json=body).json()["usage"]
    after = parse_metrics(HTTP.get(url + "/metrics"))

    def grew(a, b, name):
        return b[f"llamay_{name}"][1] - a[f"llamay_{name}"][1]

    assert grew(before, mid, "requests_total") == 1 and grew(mid, after, "requests_total") == 1
    assert grew(before, mid, "tokens_generated_total") == first["completion_tokens"] == 2
    assert grew(before, mid, "prompt_tokens_total") == first["prompt_tokens"]
    assert grew(before, mid, "prompt_cache_hit_tokens_total") == first["prompt_tokens_details"]["cached_tokens"]
    hits = second["prompt_tokens_details"]["cached_tokens"]
    assert hits > first["prompt_tokens_details"]["cached_tokens"]  # the repeated prompt was found cached
    assert grew(mid, after, "prompt_cache_hit_tokens_total") == hits
    assert 0 < after["llamay_kv_pages_used"][1] <= after["llamay_kv_pages_total"][1]


def test_ollama_generate_honours_a_plain_template(live_server):
    """The template's text reaches the model: the same tokens as the raw prompt it renders to."""
    opts = {"temperature": 0, "num_predict": 6}
    templated = httpx.post(live_server.url + "/api/generate", timeout=60, json={
        "model": "smollm2:135m", "prompt": "Paris is", "system": "Geography.", "stream": False, "options": opts,
        "template": "Q: {{ .System }} {{ .Prompt }}\nA:"}).json()
    raw = httpx.post(live_server.url + "/api/generate", timeout=60, json={
        "model": "smollm2:135m", "prompt": "Q: Geography. Paris is\nA:", "raw": True, "stream": False,
        "options": opts}).json()
    assert templated["response"] == raw["response"]
    refused = httpx.post(live_server.url + "/api/generate", timeout=60, json={
        "model": "smollm2:135m", "prompt": "x", "template": "{{ if .System }}s{{ end }}", "stream": False})
    assert refused.status_code == 400 and "not supported" in refused.json()["error"]
