"""serve --upstream end to end: a front `llamay serve` whose upstreams are a second llamay serve (through its
OpenAI, Anthropic and Ollama APIs) and a fake upstream (a small Starlette app speaking the three APIs, with a
key, tool calls, usage, errors, a cut stream and one that never answers). Every client API to every upstream
API, streamed and not."""
import asyncio
import json
import logging
import os
import threading

import anthropic
import httpx
import openai
import pytest

from conftest import free_port
from server_thread import AppThread, ServerThread

KEY, WRONG = "sk-test-SECRET-4242", "sk-wrong-KEY-1717"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
HI = [{"role": "user", "content": "Say hi"}]
STOP = threading.Event()  # releases the fake's handler that never answers

# ---- the fake upstream ---------------------------------------------------------------------------------------


def _sse(items, named=False):
    for item in items:
        yield (f"event: {item['type']}\n" if named else "") + f"data: {json.dumps(item)}\n\n"


def _openai(model, body):
    if model == "tool":
        call = {"id": "call_up1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        message, reason = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    else:
        message, reason = {"role": "assistant", "content": f"hello from {model}"}, "stop"
    usage = {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27, "prompt_tokens_details": {"cached_tokens": 5}}
    if not body.get("stream"):
        return {"id": "c1", "object": "chat.completion", "model": model, "usage": usage,
                "choices": [{"index": 0, "message": message, "finish_reason": reason}]}
    head = {"id": "c1", "object": "chat.completion.chunk", "model": model}
    chunks = [{"role": "assistant", "content": message["content"]}]
    if model == "tool":
        chunks = [{"tool_calls": [{"index": 0, "id": "call_up1", "type": "function",
                                   "function": {"name": "get_weather", "arguments": ""}}]},
                  {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
                  {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}]
    if model == "broken":
        return list(_sse([head | {"choices": [{"index": 0, "delta": chunks[0]}]}, {"error": {"message": "boom"}}]))
    items = [head | {"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in chunks]
    items += [head | {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}, head | {"choices": [], "usage": usage}]
    return list(_sse(items)) + ["data: [DONE]\n\n"]


def _anthropic(model, body):
    blocks = [{"type": "text", "text": "Checking."}, {"type": "tool_use", "id": "toolu_up1", "name": "get_weather",
                                                      "input": {"city": "Paris"}}] if model == "tool" else \
        [{"type": "text", "text": f"hello from {model}"}]
    usage = {"input_tokens": 15, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 0, "output_tokens": 7}
    reason = "tool_use" if model == "tool" else "end_turn"
    message = {"id": "msg_up", "type": "message", "role": "assistant", "model": model, "content": blocks,
               "stop_reason": reason, "stop_sequence": None, "usage": usage}
    if not body.get("stream"):
        return message
    items = [{"type": "message_start", "message": message | {"content": [], "stop_reason": None,
                                                              "usage": usage | {"output_tokens": 1}}}]
    if model == "broken":
        items += [{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                  {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "so"}}]
        return list(_sse(items + [{"type": "error", "error": {"type": "overloaded_error", "message": "boom"}}], True))
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            items += [{"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                      {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"]}}]
        else:
            items += [{"type": "content_block_start", "index": i, "content_block": b | {"input": {}}}] + [
                {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": p}}
                for p in ('{"city": ', '"Paris"}')]
        items.append({"type": "content_block_stop", "index": i})
    items += [{"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None},
               "usage": {"output_tokens": 7}}, {"type": "message_stop"}]
    return list(_sse(items, True))


def _ollama(model, body):
    calls = [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}] if model == "tool" else []
    text = "" if model == "tool" else f"hello from {model}"
    done = {"model": model, "created_at": "2025-01-01T00:00:00Z", "message": {"role": "assistant", "content": ""},
            "done": True, "done_reason": "stop", "prompt_eval_count": 15, "eval_count": 7, "total_duration": 9000,
            "prompt_eval_duration": 1000, "eval_duration": 8000}
    part = {"model": model, "created_at": "2025-01-01T00:00:00Z", "done": False,
            "message": {"role": "assistant", "content": text} | ({"tool_calls": calls} if calls else {})}
    if not body.get("stream", True):
        return done | {"message": part["message"]}
    if model == "broken":
        return [json.dumps(part) + "\n", json.dumps({"error": "boom"}) + "\n"]
    return [json.dumps(part) + "\n", json.dumps(done) + "\n"]


def fake_upstream(seen: list):
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    def handler(api, answer):
        async def route(request):
            got = request.headers.get("x-api-key") if api == "anthropic" else \
                request.headers.get("authorization", "").removeprefix("Bearer ")
            if got != KEY:
                return JSONResponse({"error": {"message": f"Incorrect API key provided: {got}"}}, 401)
            if request.method == "GET":
                names = ["tool", "slow", "fake-only-model"]
                return JSONResponse({"models": [{"name": n} for n in names]} if api == "ollama" else
                                    {"object": "list", "data": [{"id": n} for n in names]})
            body = await request.json()
            seen.append((api, body))
            model = body["model"]
            if model == "slow":
                while not STOP.is_set():
                    await asyncio.sleep(0.05)
            if model in ("fail", "busy", "gone"):
                status = {"fail": 500, "busy": 429, "gone": 404}[model]
                return JSONResponse({"error": {"message": f"{model} upstream says no"}}, status)
            out = answer(model, body)
            if isinstance(out, dict):
                return JSONResponse(out)
            return StreamingResponse(iter(out), media_type="application/x-ndjson" if api == "ollama" else
                                     "text/event-stream")
        return route

    routes = [Route("/v1/chat/completions", handler("openai", _openai), methods=["POST"]),
              Route("/v1/models", handler("openai", None), methods=["GET"]),
              Route("/v1/messages", handler("anthropic", _anthropic), methods=["POST"]),
              Route("/anthropic/v1/models", handler("anthropic", None), methods=["GET"]),
              Route("/anthropic/v1/messages", handler("anthropic", _anthropic), methods=["POST"]),
              Route("/api/chat", handler("ollama", _ollama), methods=["POST"]),
              Route("/api/tags", handler("ollama", None), methods=["GET"])]
    return Starlette(routes=routes)

# ---- servers -------------------------------------------------------------------------------------------------


class Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(self.format(record))


@pytest.fixture(scope="module")
def servers(smollm_path):
    STOP.clear()
    seen, capture, requests = [], Capture(), []
    logging.getLogger("llamay").addHandler(capture)
    os.environ["LLAMAY_TEST_UP_KEY"], os.environ["LLAMAY_TEST_UP_WRONG"] = KEY, WRONG
    upstream = ServerThread(["-m", str(smollm_path), "--threads", "1", "-c", "1024", "--concurrency", "2"])
    fake = AppThread(fake_upstream(seen))
    key = "key-env=LLAMAY_TEST_UP_KEY,timeout=1"
    front = ServerThread(["-m", str(smollm_path), "--threads", "1", "-c", "1024", "--strict-model-names",
                          "--upstream", f"lo={upstream.url}/v1", "--upstream", f"la={upstream.url},api=anthropic",
                          "--upstream", f"ll={upstream.url},api=ollama",
                          "--upstream", f"fo={fake.url}/v1,{key}",
                          "--upstream", f"fa={fake.url}/anthropic,api=anthropic,{key}",
                          "--upstream", f"fl={fake.url},api=ollama,{key}",
                          "--upstream", f"bad={fake.url}/v1,key-env=LLAMAY_TEST_UP_WRONG",
                          "--upstream", f"dead=http://127.0.0.1:{free_port()}/v1"], log=requests.append)
    yield front, upstream, seen, (capture.lines, requests)
    STOP.set()
    for server in (front, fake, upstream):
        server.stop()
    logging.getLogger("llamay").removeHandler(capture)
    del os.environ["LLAMAY_TEST_UP_KEY"], os.environ["LLAMAY_TEST_UP_WRONG"]

# ---- each client API, read back --------------------------------------------------------------------------------


def ask(url, client, model, stream, **extra) -> httpx.Response:
    path, body = {"openai": ("/v1/chat/completions", {"max_tokens": 8}),
                  "anthropic": ("/v1/messages", {"max_tokens": 8}),
                  "ollama": ("/api/chat", {"options": {"num_predict": 8, "temperature": 0}})}[client]
    body = {"model": model, "messages": HI, "stream": stream, "temperature": 0, **body, **extra}
    if client == "ollama":
        del body["temperature"]
    if client == "anthropic" and "tools" in body:
        body["tools"] = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in body["tools"]]
    if client == "openai" and stream:
        body["stream_options"] = {"include_usage": True}
    return httpx.post(url + path, json=body, timeout=300)


def read(client, stream, r: httpx.Response):
    """-> (text, [(name, arguments)], (prompt, cached, completion), finish) as the client API reports them."""
    assert r.status_code == 200, r.text
    if client == "openai":
        chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")] if stream \
            else [{"choices": [dict(c, delta=c["message"]) for c in r.json()["choices"]], "usage": r.json()["usage"]}]
        text, calls, usage, finish = "", {}, None, None
        for c in chunks:
            usage = c.get("usage") or usage
            for ch in c["choices"]:
                text += ch["delta"].get("content") or ""
                finish = ch.get("finish_reason") or finish
                for t in ch["delta"].get("tool_calls") or []:
                    entry = calls.setdefault(t.get("index", len(calls)), ["", ""])
                    entry[0] += t["function"].get("name") or ""
                    entry[1] += t["function"].get("arguments") or ""
        u = (usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"], usage["completion_tokens"])
        return text, [(n, json.loads(a)) for n, a in calls.values()], u, finish
    if client == "anthropic":
        if stream:
            events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
            blocks, usage, finish = [], {}, None
            for e in events:
                if e["type"] == "content_block_start":
                    blocks.append(dict(e["content_block"], partial=""))
                elif e["type"] == "content_block_delta":
                    block, delta = blocks[e["index"]], e["delta"]
                    if delta["type"] == "text_delta":
                        block["text"] += delta["text"]
                    elif delta["type"] == "input_json_delta":
                        block["partial"] += delta["partial_json"]
                elif e["type"] == "message_delta":
                    usage, finish = e["usage"], e["delta"]["stop_reason"]
            for b in blocks:
                if b["type"] == "tool_use":
                    b["input"] = json.loads(b["partial"])
        else:
            blocks, usage, finish = r.json()["content"], r.json()["usage"], r.json()["stop_reason"]
        text = "".join(b.get("text", "") for b in blocks if b["type"] == "text")
        calls = [(b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]
        cached = usage["cache_read_input_tokens"]
        return text, calls, (usage["input_tokens"] + cached, cached, usage["output_tokens"]), finish
    lines = [json.loads(line) for line in r.text.splitlines() if line.strip()]
    text = "".join(x["message"].get("content", "") for x in lines)
    calls = [(c["function"]["name"], c["function"]["arguments"]) for x in lines for c in x["message"].get("tool_calls") or []]
    last = lines[-1]
    # prompt_eval_count 0 (a prompt answered before, nothing evaluated) is omitted, as Go's omitempty does
    return text, calls, (last.get("prompt_eval_count", 0), 0, last["eval_count"]), last["done_reason"]


CLIENTS = ["openai", "anthropic", "ollama"]

# ---- a second llamay serve upstream ------------------------------------------------------------------------------


def test_upstream_models_are_listed_in_each_api(servers):
    front = servers[0]
    ids = [m["id"] for m in httpx.get(front.url + "/v1/models").json()["data"]]
    names = [m["name"] for m in httpx.get(front.url + "/api/tags").json()["models"]]
    for listing in (ids, names):
        assert "smollm2:135m" in listing
        assert {"lo/smollm2:135m", "la/smollm2:135m", "ll/smollm2:135m", "fo/tool", "fa/tool", "fl/tool"} <= set(listing)
        assert not any(n.startswith(("bad/", "dead/")) for n in listing)  # their lists could not be read
    assert httpx.get(front.url + "/v1/models/fo/tool").json()["id"] == "fo/tool"
    assert httpx.get(front.url + "/v1/models/fo/nope").status_code == 404


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("up", ["lo", "la", "ll"])
def test_every_client_api_through_every_upstream_api_gives_the_upstreams_answer(servers, up, stream):
    front, upstream = servers[0], servers[1]
    direct = read("openai", False, ask(upstream.url, "openai", "smollm2:135m", False))
    assert direct[0]
    for client in CLIENTS:
        text, calls, usage, finish = read(client, stream, ask(front.url, client, f"{up}/smollm2:135m", stream))
        assert text.strip() == direct[0].strip(), (client, up)
        assert calls == []
        assert usage[2] == direct[2][2] == 8
        if up != "ll" and client != "ollama":  # Ollama counts only the prompt tokens evaluated
            assert usage[0] == direct[2][0]
        assert finish == {"openai": "length", "anthropic": "max_tokens", "ollama": "length"}[client]


def test_the_official_clients_through_upstreams(servers):
    front = servers[0]
    oa = openai.OpenAI(base_url=front.url + "/v1", api_key="none")
    out = oa.chat.completions.create(model="la/smollm2:135m", messages=HI, max_tokens=40, temperature=0,
                                     tools=[WEATHER], tool_choice="required")
    call = out.choices[0].message.tool_calls[0]
    assert out.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and "city" in json.loads(call.function.arguments)
    an = anthropic.Anthropic(base_url=front.url, api_key="none")
    with an.messages.stream(model="lo/smollm2:135m", max_tokens=60, messages=HI, extra_body={"temperature": 0},
                            tools=[{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}],
                            tool_choice={"type": "tool", "name": "get_weather"}) as s:
        message = s.get_final_message()
    uses = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and uses[0].name == "get_weather" and "city" in uses[0].input
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) > 0


def test_a_local_model_still_answers_beside_upstreams(servers):
    text, _, _, _ = read("openai", False, ask(servers[0].url, "openai", "smollm2:135m", False))
    assert text

# ---- the fake upstream: tool calls, usage, the key, errors -----------------------------------------------------


PROMPT = {"fo": (20, 5), "fa": (20, 5), "fl": (15, 0)}  # (prompt, cached) each fake API reports


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("up", ["fo", "fa", "fl"])
def test_tool_calls_and_usage_convert_between_every_pair(servers, up, stream):
    for client in CLIENTS:
        text, calls, usage, finish = read(client, stream, ask(servers[0].url, client, f"{up}/tool", stream,
                                                                tools=[WEATHER]))
        assert calls == [("get_weather", {"city": "Paris"})], (client, up)
        prompt, cached = PROMPT[up]  # an Ollama client sees the evaluated part (prompt_eval_count) only
        assert usage == ((prompt - cached, 0, 7) if client == "ollama" else (prompt, cached, 7)), (client, up)
        assert finish == {"openai": "tool_calls", "anthropic": "tool_use", "ollama": "stop"}[client]
        assert text == ("Checking." if up == "fa" else "")


def test_the_request_reaches_the_upstream_in_its_api_with_the_key(servers):
    front, _, seen, _ = servers
    r = httpx.post(front.url + "/v1/messages", json={
        "model": "fo/tool", "max_tokens": 5, "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "w?"},
                     {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_7", "name": "get_weather",
                                                        "input": {"city": "Rome"}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_7", "content": "hot"}]}]})
    assert r.status_code == 200 and r.json()["content"][0]["id"] == "toolu_up1"
    api, body = seen[-1]
    assert api == "openai" and body["model"] == "tool" and body["max_tokens"] == 5
    assert body["messages"][1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Rome"}'}
    assert body["messages"][2] == {"role": "tool", "content": "hot", "tool_call_id": "toolu_7"}


def _error(client, r):
    """The error's message, checked to be in the client API's own shape -> (status, type or None, message)."""
    body = r.json()
    if client == "openai":
        return r.status_code, body["error"]["type"], body["error"]["message"]
    if client == "anthropic":
        assert body["type"] == "error"
        return r.status_code, body["error"]["type"], body["error"]["message"]
    return r.status_code, None, body["error"]


@pytest.mark.parametrize("client", CLIENTS)
def test_upstream_errors_come_in_the_clients_shape(servers, client):
    url = servers[0].url
    cases = [("fo/fail", 502, "api_error", "fail upstream says no"), ("fa/busy", 429, "rate_limit_error", "rate limiting"),
             ("fl/gone", 404, "not_found_error", "gone upstream says no"),
             ("fo/slow", 504, "timeout_error", "did not answer within 1 s"),
             ("bad/tool", 502, "api_error", "refused this server's key"),
             ("dead/any", 502, "api_error", "cannot be reached")]
    for model, status, anthropic_type, words in cases:
        for stream in (False, True):
            got_status, kind, message = _error(client, ask(url, client, model, stream))
            assert got_status == status and words in message, (model, stream, message)
            assert f"upstream '{model.split('/')[0]}'" in message
            if client == "anthropic":
                assert kind == anthropic_type
            assert KEY not in message and WRONG not in message
    text, calls, _, _ = read(client, False, ask(url, client, "fo/tool", False))  # and the next request is fine
    assert calls == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("up", ["fo", "fa", "fl"])
def test_an_error_inside_the_upstreams_stream_ends_the_clients_stream_with_its_error(servers, client, up):
    r = ask(servers[0].url, client, f"{up}/broken", True)
    assert r.status_code == 200
    last = r.text.strip().splitlines()[-1]
    if client == "ollama":
        assert "boom" in json.loads(last)["error"]
    else:
        frame = json.loads(last.removeprefix("data: "))
        assert "boom" in frame["error"]["message"]
        assert client != "anthropic" or frame["type"] == "error"


def test_a_bare_name_only_an_upstream_lists_goes_there_and_local_routes_refuse_upstream_models(servers):
    url = servers[0].url
    text, _, _, _ = read("openai", False, ask(url, "openai", "fake-only-model", False))
    assert text == "hello from fake-only-model"
    assert ask(url, "openai", "nobody-has-this", False).status_code == 404
    r = httpx.post(url + "/api/show", json={"model": "fo/tool"})
    assert r.status_code == 400 and "upstream" in r.json()["error"]
    r = httpx.post(url + "/v1/messages/count_tokens", json={"model": "fa/tool", "messages": HI})
    assert r.status_code == 400 and "local models only" in r.json()["error"]["message"]


def test_the_key_is_never_logged(servers):
    lines = servers[3][0] + servers[3][1]
    assert any("bad" in line and "model list" in line for line in lines)  # the wrong key's listing was logged
    assert any("fo/tool" in line for line in lines)
    assert not [line for line in lines if KEY in line or WRONG in line]


def test_a_key_variable_that_is_not_set_is_refused_at_start(monkeypatch):
    from llamay.cli import serve
    from llamay.cli.common import CLIError
    from llamay.cli.main import build_parser
    monkeypatch.delenv("LLAMAY_TEST_UNSET_KEY", raising=False)
    args = build_parser().parse_args(["serve", "--upstream", "x=http://127.0.0.1:1/v1,key-env=LLAMAY_TEST_UNSET_KEY"])
    with pytest.raises(CLIError) as e:
        serve.build_app(args)
    assert "LLAMAY_TEST_UNSET_KEY" in str(e.value) and "not set" in str(e.value)
