"""serve --upstream's converters without a server: a request sent to an upstream, read back by the project's own
parser of that API, is the request the client made; the engine's events written by the project's own writer
of an API, read back by the upstream reader of that API, are the same events (text, reasoning, tool calls,
finish reason, usage). Plus the flag's parsing and the mapping of upstream errors."""
import json

import pytest

from llamay.events import Delta, Finish, ToolCallDelta, Usage
from llamay.server.protocol import anthropic as anth
from llamay.server.protocol import ollama as oll
from llamay.server.protocol import openai as oai
from llamay.server.protocol.base import ProtocolError, ResponseMeta
from llamay.server.upstream import Upstream, UpstreamSpec, parse_spec
from llamay.server.upstream.client import upstream_error
from llamay.server.upstream.decode import reader_for
from llamay.server.upstream.encode import request_for

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
OPENAI_CHAT = {"model": "up/m", "max_tokens": 50, "stop": ["END"], "temperature": 0.5, "top_p": 0.9,
               "tools": [WEATHER], "tool_choice": "required", "messages": [
                   {"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "Weather in Paris?"},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                   {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                   {"role": "user", "content": "And tomorrow?"}]}
PARSERS = {"openai": oai.parse_chat, "anthropic": anth.parse_messages, "ollama": oll.parse_chat}


def _calls(messages):
    """Each message's role, text, (name, arguments object) of its calls and the call its result answers."""
    out = []
    for m in messages:
        calls = [(c["function"]["name"], c["function"]["arguments"] if isinstance(c["function"]["arguments"], dict)
                  else json.loads(c["function"]["arguments"])) for c in m.get("tool_calls") or []]
        out.append((m["role"], m["content"], calls, m.get("tool_call_id")))
    return out


@pytest.mark.parametrize("api", ["openai", "anthropic", "ollama"])
def test_a_chat_sent_upstream_parses_back_to_the_same_request(api):
    req = oai.parse_chat(OPENAI_CHAT)
    path, body = request_for(api, "m", req)
    assert path == {"openai": "/chat/completions", "anthropic": "/v1/messages", "ollama": "/api/chat"}[api]
    back = PARSERS[api](body)
    assert back.model == "m"
    assert _calls(back.messages) == _calls(req.messages)
    assert [t["function"]["name"] for t in back.tools] == ["get_weather"]
    assert back.tools[0]["function"]["parameters"] == WEATHER["function"]["parameters"]
    assert back.stop == ["END"]
    assert back.sampling.temperature == 0.5 and back.sampling.top_p == 0.9
    assert (back.ollama.num_predict if api == "ollama" else back.max_tokens) == 50
    if api != "ollama":  # Ollama has no tool_choice
        assert back.tool_options.choice == "required"


def test_an_anthropic_chat_sent_to_openai_keeps_tool_results_and_ids():
    req = anth.parse_messages({"model": "up/m", "max_tokens": 20, "system": "S", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me look."},
                                          {"type": "tool_use", "id": "toolu_9", "name": "get_weather",
                                           "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "rain"},
                                     {"type": "text", "text": "thanks"}]}],
        "tools": [{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}],
        "tool_choice": {"type": "tool", "name": "get_weather"}})
    _, body = request_for("openai", "m", req)
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    back = oai.parse_chat(body)
    assert _calls(back.messages) == [("system", "S", [], None), ("user", "hi", [], None),
                                     ("assistant", "Let me look.", [("get_weather", {"city": "Oslo"})], None),
                                     ("tool", "rain", [], "toolu_9"), ("user", "thanks", [], None)]
    assert back.messages[2]["tool_calls"][0]["id"] == "toolu_9"


def test_ollama_tool_results_without_ids_answer_the_calls_in_order():
    req = oll.parse_chat({"model": "up/m", "messages": [
        {"role": "user", "content": "two cities"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "A"}}},
            {"function": {"name": "get_weather", "arguments": {"city": "B"}}}]},
        {"role": "tool", "content": "a: sun", "tool_name": "get_weather"},
        {"role": "tool", "content": "b: snow", "tool_name": "get_weather"}]})
    _, body = request_for("anthropic", "m", req)
    turns = body["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    ids = [b["id"] for b in turns[1]["content"] if b["type"] == "tool_use"]
    assert len(set(ids)) == 2
    assert [(b["tool_use_id"], b["content"]) for b in turns[2]["content"]] == [(ids[0], "a: sun"), (ids[1], "b: snow")]


def test_a_raw_completion_goes_to_completions_and_a_generate_prompt_to_chat():
    path, body = request_for("openai", "m", oai.parse_completion({"model": "up/m", "prompt": "Once", "max_tokens": 3}))
    assert (path, body["prompt"], body["max_tokens"]) == ("/completions", "Once", 3)
    path, body = request_for("openai", "m", oll.parse_generate({"model": "up/m", "prompt": "hi", "system": "S"}))
    assert path == "/chat/completions"
    assert body["messages"] == [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]
    path, body = request_for("ollama", "m", oll.parse_generate({"model": "up/m", "prompt": "hi", "raw": True}))
    assert (path, body["prompt"], body["raw"]) == ("/api/generate", "hi", True)


def test_structured_output_is_sent_in_each_api_shape():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = oai.parse_chat({"model": "up/m", "messages": [{"role": "user", "content": "x"}],
                          "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}})
    assert request_for("openai", "m", req)[1]["response_format"]["json_schema"]["schema"] == schema
    assert request_for("anthropic", "m", req)[1]["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert request_for("ollama", "m", req)[1]["format"] == schema


@pytest.mark.parametrize("api, body, param", [
    ("openai", {"prompt": [1, 2, 3]}, "prompt"),
    ("anthropic", {"prompt": "raw text"}, "prompt"),
    ("anthropic", {"messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
    ("ollama", {"messages": [{"role": "user", "content": "x"}], "logprobs": True}, "logprobs"),
    ("openai", {"messages": [{"role": "user", "content": "x"}], "grammar": "root ::= \"a\""}, "grammar"),
])
def test_what_an_upstream_cannot_take_is_a_clear_400(api, body, param):
    parse = oai.parse_completion if "prompt" in body else oai.parse_chat
    with pytest.raises(ProtocolError) as e:
        request_for(api, "m", parse({"model": "up/m", **body}))
    assert (e.value.status, e.value.param) == (400, param)
    assert "upstream" in e.value.message


# ---- the way back: our writer of an API, then the upstream reader of that API ---------------------------------

USAGE = Usage(prompt_tokens=20, cached_tokens=5, completion_tokens=7)
ID0 = "call_" + "a1" * 12


def scripted(reason="tool_calls"):
    return [Delta(0, reasoning="thinking it over"), Delta(0, content="Let me check. "),
            Delta(0, tool_calls=[ToolCallDelta(0, ID0, "get_weather", "")]),
            Delta(0, tool_calls=[ToolCallDelta(0, arguments='{"city": ')]),
            Delta(0, tool_calls=[ToolCallDelta(0, arguments='"Paris"}')]),
            Finish(0, reason, USAGE)]


def summary(events):
    """What a client sees: text, reasoning, calls (id, name, arguments object), finish reason, usage counts."""
    text, reasoning, calls, finish = "", "", [], None
    for ev in events:
        if isinstance(ev, Finish):
            finish = (ev.reason, ev.usage.prompt_tokens, ev.usage.cached_tokens, ev.usage.completion_tokens)
            continue
        text, reasoning = text + ev.content, reasoning + ev.reasoning
        for part in ev.tool_calls:
            if part.id is not None:
                assert part.index == len(calls)
                calls.append([part.id, part.name, ""])
            calls[part.index][2] += part.arguments
    return text, reasoning, [(i, n, json.loads(a)) for i, n, a in calls], finish


def _writer(api, stream):
    meta = ResponseMeta("x-1", 1735142223, "up/m", 1735142223_000000000)
    if api == "openai":
        req = oai.parse_chat({"model": "up/m", "messages": [{"role": "user", "content": "x"}], "stream": stream,
                              "stream_options": {"include_usage": True} if stream else None, "tools": [WEATHER]})
        return oai.ChatOutput(req, meta)
    if api == "anthropic":
        req = anth.parse_messages({"model": "up/m", "max_tokens": 9, "stream": stream,
                                   "messages": [{"role": "user", "content": "x"}]})
        return anth.MessagesOutput(req, meta, Usage(20, 5))
    req = oll.parse_chat({"model": "up/m", "messages": [{"role": "user", "content": "x"}], "stream": stream})
    return oll.OllamaChatOutput(req, meta)


def _items(api, frames):
    """A stream's frames as the upstream client reads them: JSON lines (Ollama) or SSE data."""
    if api == "ollama":
        return [json.loads(f) for f in frames]
    data = [line[6:] for f in frames for line in f.splitlines() if line.startswith("data: ")]
    return [json.loads(d) for d in data if d != "[DONE]"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["openai", "anthropic", "ollama"])
def test_events_written_in_an_api_read_back_the_same(api, stream):
    out = _writer(api, stream)
    frames = [f for ev in scripted() for f in out.feed(ev)] + out.end()
    reader = reader_for(api, "up", 1, chat=True)
    events = reader.whole(out.body()) if not stream else \
        [e for item in _items(api, frames) for e in reader.item(item)] + reader.end()
    text, reasoning, calls, finish = summary(events)
    want_text, want_reasoning, want_calls, want_finish = summary(scripted())
    assert text.strip() == want_text.strip()
    assert reasoning == want_reasoning  # OpenAI's chat: reasoning_content, as llama-server and vLLM send it
    assert [(n, a) for _, n, a in calls] == [(n, a) for _, n, a in want_calls]
    if api != "ollama":  # Ollama's calls carry no id
        assert calls[0][0] == ID0
    if api == "ollama":  # Ollama reports only the evaluated part of the prompt
        assert finish == ("tool_calls", 15, 0, 7)
    else:
        assert finish == want_finish
    if api == "anthropic" and stream:
        assert (reader.prompt.prompt_tokens, reader.prompt.cached_tokens) == (20, 5)


def test_a_stop_sequence_and_length_come_back_from_anthropic():
    reader = reader_for("anthropic", "up", 1, chat=True)
    events = reader.whole({"content": [{"type": "text", "text": "a"}], "stop_reason": "stop_sequence",
                           "stop_sequence": "END", "usage": {"input_tokens": 3, "output_tokens": 1}})
    assert (events[-1].reason, events[-1].stop_sequence) == ("stop", "END")
    reader = reader_for("anthropic", "up", 1, chat=True)
    assert reader.whole({"content": [], "stop_reason": "max_tokens", "usage": {}})[-1].reason == "length"


def test_openai_choices_and_logprobs_come_back():
    reader = reader_for("openai", "up", 2, chat=True)
    lp = {"content": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105],
                       "top_logprobs": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105]}]}]}
    events = reader.whole({"choices": [
        {"index": 0, "message": {"content": "Hi"}, "finish_reason": "stop", "logprobs": lp},
        {"index": 1, "message": {"content": "Yo"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 6}})
    assert [(e.index, e.content) for e in events if isinstance(e, Delta)] == [(0, "Hi"), (1, "Yo")]
    assert events[0].logprobs[0].token == "Hi" and events[0].logprobs[0].top[0].logprob == -0.5
    finishes = [e for e in events if isinstance(e, Finish)]
    assert [(f.index, f.reason) for f in finishes] == [(0, "stop"), (1, "length")]
    assert sum(f.usage.completion_tokens for f in finishes) == 6


@pytest.mark.parametrize("api, items", [
    ("openai", [{"choices": [{"index": 0, "delta": {"content": "a"}}]}]),
    ("anthropic", [{"type": "message_start", "message": {"usage": {}}}]),
    ("ollama", [{"message": {"content": "a"}, "done": False}]),
])
def test_a_stream_cut_short_is_a_502(api, items):
    reader = reader_for(api, "up", 1, chat=True)
    for item in items:
        reader.item(item)
    with pytest.raises(ProtocolError) as e:
        reader.end()
    assert e.value.status == 502 and "upstream 'up'" in e.value.message


# ---- the flag and the errors ----------------------------------------------------------------------------------

def test_the_flag_parses_and_refuses_in_one_line():
    spec = parse_spec("cloud=https://api.example.com/v1/,key-env=CLOUD_KEY,api=anthropic,timeout=2.5")
    assert spec == UpstreamSpec("cloud", "https://api.example.com/v1", "anthropic", "CLOUD_KEY", 2.5)
    assert parse_spec("x=http://h:1").api == "openai"
    for bad, words in [("noequals", "NAME=URL"), ("x=ftp://h", "http://"), ("x=http://h,api=grpc", "api must"),
                       ("x=http://h,key-env=1A", "key-env"), ("x=http://h,timeout=0", "timeout"),
                       ("x=http://h,color=red", "unknown option"), ("a/b=http://h", "NAME")]:
        with pytest.raises(ValueError) as e:
            parse_spec(bad)
        assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("status, want, kind", [(400, 400, "invalid_request"), (401, 502, "upstream"),
                                                (404, 404, "not_found"), (429, 429, "rate_limit"),
                                                (500, 502, "upstream"), (529, 503, "overloaded"),
                                                (504, 504, "timeout")])
def test_upstream_errors_map_to_the_clients_and_never_show_the_key(status, want, kind):
    up = Upstream(UpstreamSpec("cloud", "http://h"), key="sk-SECRET-123")
    err = upstream_error(up, status, json.dumps({"error": {"message": "bad key sk-SECRET-123 given"}}))
    assert (err.status, err.kind) == (want, kind)
    assert "sk-SECRET-123" not in err.message and "upstream 'cloud'" in err.message
    assert "sk-SECRET-123" not in repr(up)
