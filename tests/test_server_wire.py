"""`llamay serve`'s raw wire format, read with httpx (no SDK in the request path): SSE / NDJSON framing,
event order, error bodies and statuses of each API, overload, client disconnects, and the llama-server
extras. Expected shapes come from ../shared/docs/protocols/*.md and the official SDKs' own types; token ids
from llama.cpp's fixtures."""
import json
import re
import threading
import time

import httpx
import pytest
from anthropic.types import ErrorResponse, RawMessageStreamEvent
from ollama._types import ChatResponse, GenerateResponse, ListResponse, ProcessResponse, ShowResponse
from openai.types import ErrorObject
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import TypeAdapter

from conftest import LiveServer

pytestmark = pytest.mark.model

HI = [{"role": "user", "content": "Hi"}]
STORY = [{"role": "user", "content": "Tell me a long story about a dragon."}]
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
ANTHROPIC_EVENT = TypeAdapter(RawMessageStreamEvent)


@pytest.fixture(scope="module")
def url(live_server) -> str:
    return live_server.url


@pytest.fixture(scope="module")
def model(url) -> str:
    return httpx.get(url + "/v1/models").json()["data"][0]["id"]


@pytest.fixture(scope="module")
def small_server(smollm_path):
    """One running sequence and one queued at most: the third concurrent request is refused."""
    server = LiveServer(["-m", str(smollm_path), "--threads", "2", "--concurrency", "1", "--queue", "1",
                         "-c", "1024"])
    yield server
    server.stop()


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


def wait_for(predicate, timeout: float = 5.0, what: str = "condition"):
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


def scheduler(server, name: str):
    return server.registry.loaded[server.registry.resolve(name)].scheduler


# ---- OpenAI -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/v1/chat/completions", "/chat/completions"])
def test_openai_sse_framing_with_usage(url, model, path):
    body = {"model": model, "messages": HI, "max_tokens": 3, "temperature": 0}
    whole = httpx.post(url + path, json=body)
    assert whole.status_code == 200 and whole.headers["content-type"].startswith("application/json")
    whole = ChatCompletion.model_validate(whole.json())
    r = httpx.post(url + path, json={**body, "stream": True, "stream_options": {"include_usage": True}})
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
    r = httpx.post(url + "/chat/completions", json={"model": model, "messages": HI, "max_tokens": 2, "stream": True})
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
    whole = httpx.post(url + "/v1/messages?beta=true", json=body, headers=headers)
    assert whole.status_code == 200 and whole.json()["type"] == "message"
    r = httpx.post(url + "/v1/messages?beta=true", json={**body, "stream": True}, headers=headers)
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


def check_done_line(obj: dict, eval_count: int):
    assert obj["done"] is True and obj["done_reason"] == "length" and obj["eval_count"] == eval_count
    for key in DURATIONS + ("prompt_eval_count",):
        assert type(obj[key]) is int and obj[key] > 0, key  # nanoseconds as integers
    assert RFC3339.match(obj["created_at"])


def test_ollama_ndjson_chat_and_generate(url, model):
    body = {"model": model, "messages": [{"role": "user", "content": "Hi!"}],
            "options": {"num_predict": 3, "temperature": 0}}
    r = httpx.post(url + "/api/chat", json=body)  # streams by default
    lines = ndjson_lines(r)
    assert [o["done"] for o in lines] == [False] * (len(lines) - 1) + [True]
    for o in lines:
        ChatResponse.model_validate(o)
        assert o["model"] == model and o["message"]["role"] == "assistant" and RFC3339.match(o["created_at"])
    check_done_line(lines[-1], 3)
    one = httpx.post(url + "/api/chat", json={**body, "stream": False})
    assert one.headers["content-type"].startswith("application/json")
    whole = ChatResponse.model_validate(one.json())
    assert whole.message.content == "".join(o["message"]["content"] for o in lines)
    check_done_line(one.json(), 3)
    gen = {"model": model, "prompt": "Why is the sky blue?", "options": {"num_predict": 2, "temperature": 0}}
    lines = ndjson_lines(httpx.post(url + "/api/generate", json=gen))
    for o in lines:
        GenerateResponse.model_validate(o)
    check_done_line(lines[-1], 2)
    assert lines[-1]["context"] and all(type(t) is int for t in lines[-1]["context"])
    one = httpx.post(url + "/api/generate", json={**gen, "stream": False}).json()
    assert one["response"] == "".join(o["response"] for o in lines)


def test_ollama_root_version_and_listings(url, model):
    assert httpx.get(url + "/").text == "Ollama is running"
    head = httpx.head(url + "/")
    assert head.status_code == 200 and head.content == b""
    version = httpx.get(url + "/api/version").json()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version["version"])
    tags = ListResponse.model_validate(httpx.get(url + "/api/tags").json())
    entry = next(m for m in tags.models if m.model == model)
    assert re.fullmatch(r"[0-9a-f]{64}", entry.digest) and entry.size > 0 and entry.details.format == "gguf"
    httpx.post(url + "/api/generate", json={"model": model, "prompt": "Hi", "options": {"num_predict": 1}})
    ps = httpx.get(url + "/api/ps").json()
    ProcessResponse.model_validate(ps)
    loaded = next(m for m in ps["models"] if m["model"] == model)
    assert RFC3339.match(loaded["expires_at"]) and loaded["context_length"] == 2048
    shown = httpx.post(url + "/api/show", json={"model": model})
    show = ShowResponse.model_validate(shown.json())
    assert show.modelinfo["general.architecture"] == "llama" and "completion" in show.capabilities
    assert httpx.post(url + "/api/show", json={"model": "no-such"}).status_code == 404


def test_ollama_copy_use_delete(url, model):
    r = httpx.post(url + "/api/copy", json={"source": model, "destination": "wire-copy"})
    assert r.status_code == 200 and r.content == b""
    out = httpx.post(url + "/api/generate", json={"model": "wire-copy", "prompt": "Hi", "stream": False,
                                                  "options": {"num_predict": 1}})
    assert out.status_code == 200 and out.json()["model"] == "wire-copy" and out.json()["done"] is True
    assert "wire-copy" in [m["model"] for m in httpx.get(url + "/api/tags").json()["models"]]
    r = httpx.request("DELETE", url + "/api/delete", json={"model": "wire-copy"})
    assert r.status_code == 200 and r.content == b""
    assert "wire-copy" not in [m["model"] for m in httpx.get(url + "/api/tags").json()["models"]]
    gone = httpx.post(url + "/api/generate", json={"model": "wire-copy", "prompt": "Hi", "stream": False})
    assert gone.status_code == 404 and set(gone.json()) == {"error"}
    assert httpx.request("DELETE", url + "/api/delete", json={"model": "wire-copy"}).status_code == 404
    assert httpx.post(url + "/api/copy", json={"source": "no-such", "destination": "x"}).status_code == 404


def test_ollama_unload_and_load(small_server):
    url = small_server.url
    name = httpx.get(url + "/v1/models").json()["data"][0]["id"]
    for path, body in (("/api/generate", {"model": name}), ("/api/chat", {"model": name, "messages": []})):
        gone = httpx.post(url + path, json={**body, "keep_alive": 0}).json()
        assert gone["done"] is True and gone["done_reason"] == "unload"
        assert httpx.get(url + "/api/ps").json()["models"] == []
        loaded = httpx.post(url + path, json=body).json()
        assert loaded["done"] is True and loaded["done_reason"] == "load"
        assert type(loaded["load_duration"]) is int and loaded["load_duration"] > 0
        assert [m["model"] for m in httpx.get(url + "/api/ps").json()["models"]] == [name]
    assert "message" in loaded and loaded["message"] == {"role": "assistant", "content": ""}
