"""`llamay serve` under load and failure, on the wire (httpx): a full queue refuses at once in each API's
shape, a client that goes away cancels its generation, a failure inside the server still ends in the API's
own error body or frame; and after each, no KV page is left held (ServerThread.check_pages)."""
import json
import threading

import httpx
import pytest
from anthropic.types import ErrorResponse
from conftest import LiveServer
from openai.types import ErrorObject
from test_server_wire import (
    HI,
    HTTP,
    STORY,
    check_error,
    ndjson_lines,
    parse_metrics,
    sse_blocks,
    wait_for,
)

pytestmark = pytest.mark.model
# SmolLM2's end-of-generation tokens <|endoftext|> 0 and <|im_end|> 2 (llama.cpp's tokenize.json, case 29),
# banned so that a "long" request cannot end early
NO_EOS = {"logit_bias": {"0": -100, "2": -100}}


@pytest.fixture(scope="module")
def small_server(smollm_path):
    """One running sequence and one queued at most: the third concurrent request is refused."""
    server = LiveServer(["-m", str(smollm_path), "--threads", "2", "--concurrency", "1", "--queue", "1",
                         "-c", "1024"])
    yield server
    server.stop()


def scheduler(server, name: str):
    return server.registry.loaded[server.registry.resolve(name)].scheduler


def watch_endings(monkeypatch, sched) -> list[tuple[str, int]]:
    """(reason, tokens generated) of each sequence sched ends from now on: "cancelled" with fewer tokens than
    asked says the server cancelled it, however fast or slow the machine."""
    ended, finish = [], sched._finish

    def record(seq, reason, error=None):
        ended.append((reason, seq.n_gen))
        return finish(seq, reason, error)
    monkeypatch.setattr(sched, "_finish", record)
    return ended


# ---- overload and disconnects -------------------------------------------------------------------------------

def open_stream(client: httpx.Client, path: str, body: dict) -> httpx.Response:
    resp = client.send(client.build_request("POST", path, json=body), stream=True)
    assert resp.status_code == 200
    return resp


def test_overload_refuses_at_once_then_frees(small_server):
    url, sched_of = small_server.url, lambda: scheduler(small_server, name)
    name = HTTP.get(url + "/v1/models").json()["data"][0]["id"]
    long = {"model": name, "messages": STORY, "max_tokens": 400, "stream": True, **NO_EOS}
    with httpx.Client(base_url=url, timeout=30) as client:
        running = open_stream(client, "/v1/chat/completions", long)
        lines = running.iter_lines()  # kept: a dropped iterator closes the connection (and so cancels)
        assert next(lines).startswith("data: ")  # it has a slot and generates
        queued = open_stream(client, "/v1/chat/completions", long)
        wait_for(lambda: sched_of().queue_depth == 1 and sched_of().n_running == 1, what="one running, one queued")
        gauges = parse_metrics(client.get("/metrics"))
        assert gauges["llamay_queue_depth"] == ("gauge", 1) and gauges["llamay_running_sequences"] == ("gauge", 1)
        assert gauges["llamay_kv_pages_used"][1] > 0
        third = [("openai", "/v1/chat/completions", {**long, "stream": False}, 503, "server_error"),
                 ("openai", "/v1/chat/completions", long, 503, "server_error"),
                 ("anthropic", "/v1/messages", long, 529, "overloaded_error"),
                 ("ollama", "/api/chat", long, 503, None),
                 ("ollama", "/api/generate", {"model": name, "prompt": "Hi"}, 503, None)]
        for api, path, body, status, kind in third:
            r = client.post(path, json=body)
            check_error(api, r, status, kind)
            # refused at once: the running and the queued request still hold the scheduler
            assert sched_of().queue_depth == 1 and sched_of().n_running == 1, path
        running.close()
        queued.close()
    wait_for(lambda: sched_of().n_running == 0 and sched_of().queue_depth == 0, what="the scheduler to drain")
    wait_for(small_server.check_pages, what="the pages to be freed")
    ok = HTTP.post(url + "/api/generate", json={"model": name, "prompt": "Hi", "stream": False,
                                                 "options": {"num_predict": 1}})
    assert ok.status_code == 200 and ok.json()["done"] is True


STREAMS = {"openai": ("/v1/chat/completions", {"max_tokens": 400, "stream": True, **NO_EOS}),
           "anthropic": ("/v1/messages", {"max_tokens": 400, "stream": True}),
           "ollama": ("/api/chat", {"options": {"num_predict": 400}})}


@pytest.mark.parametrize("api", list(STREAMS))
def test_stream_disconnect_cancels_generation(live_server, url, model, api, monkeypatch):
    path, extra = STREAMS[api]
    with httpx.Client(base_url=url, timeout=30) as client, \
            client.stream("POST", path, json={"model": model, "messages": STORY, **extra}) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            seen = [next(lines) for _ in range(6)]  # a few tokens in, far from the 400 asked
            sched = scheduler(live_server, model)
            ended = watch_endings(monkeypatch, sched)
            assert sched.n_running == 1 and not any("[DONE]" in s or '"done":true' in s for s in seen)
    wait_for(lambda: bool(ended), what="the generation to end")
    assert ended[0][0] == "cancelled" and ended[0][1] < 400, ended
    wait_for(live_server.check_pages, what="the pages to be freed")


def test_non_streaming_client_timeout_cancels_generation(live_server, url, model, monkeypatch):
    timed_out = []

    def call():
        try:
            body = {"model": model, "messages": STORY, "max_tokens": 400, **NO_EOS}
            httpx.post(url + "/v1/chat/completions", json=body, timeout=httpx.Timeout(30, read=1.0))
        except httpx.ReadTimeout:
            timed_out.append(True)

    thread = threading.Thread(target=call)
    HTTP.post(url + "/v1/completions", json={"model": model, "prompt": "Hi", "max_tokens": 1})  # loaded
    sched = scheduler(live_server, model)
    ended = watch_endings(monkeypatch, sched)
    thread.start()
    wait_for(lambda: sched.n_running == 1 or bool(ended), what="the request to run")
    thread.join(timeout=60)
    assert timed_out == [True]
    wait_for(lambda: bool(ended), what="the generation to end")
    assert ended[0][0] == "cancelled" and ended[0][1] < 400, ended
    wait_for(live_server.check_pages, what="the pages to be freed")


def test_ollama_unload_and_load(small_server):
    url = small_server.url
    name = HTTP.get(url + "/v1/models").json()["data"][0]["id"]
    for path, body in (("/api/generate", {"model": name}), ("/api/chat", {"model": name, "messages": []})):
        gone = HTTP.post(url + path, json={**body, "keep_alive": 0}).json()
        assert gone["done"] is True and gone["done_reason"] == "unload"
        assert HTTP.get(url + "/api/ps").json()["models"] == []
        loaded = HTTP.post(url + path, json=body).json()
        assert loaded["done"] is True and loaded["done_reason"] == "load"
        assert type(loaded["load_duration"]) is int and loaded["load_duration"] > 0
        assert [m["model"] for m in HTTP.get(url + "/api/ps").json()["models"]] == [name]
    assert "message" in loaded and loaded["message"] == {"role": "assistant", "content": ""}



# ---- failures inside the server -----------------------------------------------------------------------------

def failing_after(cls, monkeypatch, calls: int):
    """cls.feed raises (a stand-in for a server bug) from its calls-th call on."""
    original, count = cls.feed, [0]

    def feed(self, ev):
        count[0] += 1
        if count[0] >= calls:
            raise RuntimeError("injected failure")
        return original(self, ev)

    monkeypatch.setattr(cls, "feed", feed)


@pytest.mark.parametrize("api", list(STREAMS))
def test_failure_mid_stream_ends_with_the_api_error_frame(live_server, url, model, api, monkeypatch):
    from llamay.server.protocol import anthropic, ollama, openai
    cls = {"openai": openai.ChatOutput, "anthropic": anthropic.MessagesOutput, "ollama": ollama.OllamaChatOutput}[api]
    failing_after(cls, monkeypatch, 3)
    path, extra = STREAMS[api]
    r = HTTP.post(url + path, json={"model": model, "messages": HI, **extra})
    assert r.status_code == 200  # headers went out before the failure
    if api == "openai":
        last = sse_blocks(r)[-1]
        assert len(last) == 1 and last[0].startswith("data: ")
        error = json.loads(last[0][len("data: "):])["error"]
        assert ErrorObject.model_validate(error).type == "server_error"
    elif api == "anthropic":
        last = sse_blocks(r)[-1]
        assert last[0] == "event: error"
        assert ErrorResponse.model_validate(json.loads(last[1][len("data: "):])).error.type == "api_error"
    else:
        last = ndjson_lines(r)[-1]
        assert set(last) == {"error"} and "injected failure" in last["error"]
    wait_for(lambda: scheduler(live_server, model).n_running == 0, what="the generation to end")
    wait_for(live_server.check_pages, what="the pages to be freed")


def test_failure_before_the_response_is_a_500_in_the_api_shape(live_server, url, model, monkeypatch):
    HTTP.post(url + "/tokenize", json={"content": ""})  # loads the model
    tok = live_server.registry.loaded[live_server.registry.resolve(model)].llm.tokenizer

    def encode(*args, **kwargs):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(tok, "encode", encode)
    check_error("openai", HTTP.post(url + "/tokenize", json={"content": "x"}), 500, "server_error")
    monkeypatch.undo()
    check_error("openai", HTTP.post(url + "/tokenize", json={"content": "x", "model": 5}), 400)
    check_error("openai", HTTP.post(url + "/detokenize", json={"tokens": [1], "model": 5}), 400)
