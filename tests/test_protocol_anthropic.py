"""Anthropic Messages converter against the official SDK (anthropic 2.14): the SDK builds the request bodies
we parse, and its own response types, SSE decoder and MessageStream accumulator read what we produce."""
import json

import anthropic
import httpx2
import pytest
from anthropic._streaming import SSEDecoder
from anthropic.types import ErrorResponse, Message, MessageTokensCount, RawMessageStreamEvent
from pydantic import TypeAdapter

from llamay.server.protocol.anthropic import (
    MessagesOutput, count_tokens_body, error_body, error_status, parse_count_tokens, parse_messages,
    stream_error)
from llamay.events import Delta, Finish, Usage
from llamay.server.protocol.base import ProtocolError, ResponseMeta

USAGE = Usage(prompt_tokens=30, cached_tokens=12, completion_tokens=7)
HELLO = [Delta(0, content="Hel"), Delta(0, content="lo, é!"), Finish(0, "stop", USAGE)]
THINK = [Delta(0, reasoning="Let me "), Delta(0, reasoning="think."), Delta(0, content="Paris."),
         Finish(0, "length", USAGE)]
BASE = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}


class Route:
    """A stand-in for the app's route: parse, replay scripted engine events, answer as the app would."""

    def __init__(self, events, prompt_usage=None):
        self.events, self.prompt_usage, self.requests = events, prompt_usage, []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        try:
            req = parse_count_tokens(body) if request.url.path.endswith("count_tokens") else parse_messages(body)
        except ProtocolError as err:
            return httpx2.Response(error_status(err), json=error_body(err, "req_1"))
        self.requests.append(req)
        if request.url.path.endswith("count_tokens"):
            return httpx2.Response(200, json=count_tokens_body(41))
        out = MessagesOutput(req, ResponseMeta("msg_01abc", 0, req.model), self.prompt_usage)
        frames = [frame for ev in self.events for frame in out.feed(ev)] + out.end()
        if not req.stream:
            assert frames == []
            return httpx2.Response(200, json=out.body())
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content="".join(frames).encode())


def client(route) -> anthropic.Anthropic:
    http = httpx2.Client(transport=httpx2.MockTransport(route))
    return anthropic.Anthropic(api_key="k", base_url="http://local", http_client=http, max_retries=0)


def frames_of(events, stream=True, prompt_usage=None):
    out = MessagesOutput(parse_messages(BASE | {"stream": stream}), ResponseMeta("msg_1", 0, "m"), prompt_usage)
    return [frame for ev in events for frame in out.feed(ev)] + out.end(), out


def decode(frames):
    """Our frames through the SDK's SSE decoder -> [(event name, data dict)]."""
    events = SSEDecoder().iter_bytes(iter([f.encode() for f in frames]))
    return [(sse.event, sse.json()) for sse in events]


# ---- requests ------------------------------------------------------------------------------------------------

def test_sdk_request_with_tools_and_system_is_parsed():
    route = Route(HELLO)
    tools = [{"name": "get_weather", "description": "Weather now",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "call it", "signature": "sig"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}]},
            {"type": "text", "text": "And"}, {"type": "text", "text": "tomorrow?"}]},
    ]
    client(route).messages.create(
        model="claude-x", max_tokens=64, system=[{"type": "text", "text": "Be brief."}], messages=messages,
        stop_sequences=["END"], tools=tools, tool_choice={"type": "auto"}, metadata={"user_id": "u"},
        thinking={"type": "enabled", "budget_tokens": 1024}, extra_body={"temperature": 0.25, "top_k": 5})
    req = route.requests[0]
    assert (req.model, req.max_tokens, req.stop, req.stream) == ("claude-x", 64, ["END"], False)
    assert req.run_sampling().given() == {"temperature": 0.25, "top_k": 5}
    assert req.tools == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather now", "parameters": tools[0]["input_schema"]}}]
    assert (req.tool_options.choice, req.tool_options.parallel) == ("auto", True)
    assert req.chat.thinking == {"type": "enabled", "budget_tokens": 1024}
    assert req.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "call it", "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "18C", "tool_call_id": "toolu_1"},
        {"role": "user", "content": "And\ntomorrow?"},
    ]


def test_thinking_blocks_are_the_turns_reasoning_content():
    """As llama-server: an assistant's thinking blocks joined as they come (merged turns' too) are its
    reasoning_content; redacted_thinking, and thinking in a user turn, are accepted and left out."""
    req = parse_messages(BASE | {"messages": [
        {"role": "user", "content": [{"type": "thinking", "thinking": "mine", "signature": "s"},
                                     {"type": "text", "text": "Q"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "a", "signature": "s"},
                                          {"type": "redacted_thinking", "data": "x"},
                                          {"type": "thinking", "thinking": "b", "signature": "s"},
                                          {"type": "text", "text": "A"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "c", "signature": "s"}]},
        {"role": "user", "content": "Q2"}]})
    assert req.messages == [{"role": "user", "content": "Q"},
                            {"role": "assistant", "content": "A", "reasoning_content": "abc"},
                            {"role": "user", "content": "Q2"}]


def test_defaults_leave_unset_samplers_to_llamacpp():
    req = parse_messages(BASE)
    assert req.run_sampling().given() == {"temperature": 1.0}
    assert (req.stream, req.stop, req.tools, req.n, req.format) == (False, [], None, 1, None)


def test_system_messages_inside_messages_and_merging():
    req = parse_messages(BASE | {"system": "S0", "messages": [
        {"role": "system", "content": [{"type": "text", "text": "S1"}]},
        {"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "text", "text": "b"}]},
        {"role": "system", "content": "S2"}, {"role": "assistant", "content": "The answer is"}]})
    assert req.messages == [{"role": "system", "content": "S0\nS1"}, {"role": "user", "content": "a\nb"},
                            {"role": "system", "content": "S2"}, {"role": "assistant", "content": "The answer is"}]
    assert req.chat.continue_final is True


def test_output_config_schema_is_kept_as_format():
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    req = parse_messages(BASE | {"output_config": {"format": {"type": "json_schema", "schema": schema}}})
    assert req.format == schema


@pytest.mark.parametrize("change, param", [
    ({"max_tokens": None}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 2.5}, "max_tokens"),
    ({"messages": {"role": "user"}}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "mystery"}]}]}, "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image", "source": {}}]}]},
     "messages.0.content.1"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "messages.0.content.0"),
    ({"messages": [{"role": "bot", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}]}]},
     "messages.0.content.0.content.0"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]},
     "messages.0.content.0"),
    ({"temperature": 1.5}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_p": -0.1}, "top_p"),
    ({"top_k": -2}, "top_k"),
    ({"stop_sequences": "END"}, "stop_sequences"),
    ({"stream": "yes"}, "stream"),
    ({"model": 3}, "model"),
    ({"system": 3}, "system"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
    ({"tools": [{"name": "f", "input_schema": {"type": "array"}}]}, "tools.0.input_schema"),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
])
def test_malformed_requests_are_400_naming_the_field(change, param):
    body = {k: v for k, v in (BASE | change).items() if v is not None}
    with pytest.raises(ProtocolError) as info:
        parse_messages(body)
    err = info.value
    assert (err.status, err.kind, err.param) == (400, "invalid_request", param)
    assert err.message.startswith(param + ":")


def test_sdk_sees_a_bad_request_error():
    with pytest.raises(anthropic.BadRequestError) as info:
        client(Route(HELLO)).messages.create(model="m", max_tokens=8, messages=[
            {"role": "user", "content": [{"type": "image", "source": {
                "type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert "messages.0.content.0" in info.value.body["error"]["message"]
    assert info.value.body["request_id"] == "req_1"


def test_count_tokens_needs_no_max_tokens():
    route = Route([])
    count = client(route).messages.count_tokens(model="m", system="S", messages=[{"role": "user", "content": "hi"}])
    assert isinstance(count, MessageTokensCount) and count.input_tokens == 41
    assert route.requests[0].max_tokens is None
    assert route.requests[0].messages == [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]
    assert MessageTokensCount.model_validate(count_tokens_body(3)).input_tokens == 3


# ---- non-streaming responses ---------------------------------------------------------------------------------

def test_sdk_reads_the_message_body():
    message = client(Route(HELLO)).messages.create(
        model="mine", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert isinstance(message, Message) and message.id.startswith("msg_")
    assert (message.role, message.model, message.stop_reason, message.stop_sequence) == (
        "assistant", "mine", "end_turn", None)
    assert [(b.type, b.text) for b in message.content] == [("text", "Hello, é!")]
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens, message.usage.output_tokens,
            message.usage.cache_creation_input_tokens) == (18, 12, 7, 0)


def test_body_with_reasoning_and_stop_sequence():
    _, out = frames_of(THINK[:-1] + [Finish(0, "stop", USAGE, stop_sequence="###")], stream=False)
    message = Message.model_validate(out.body())
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert (message.content[0].thinking, message.content[1].text) == ("Let me think.", "Paris.")
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "###")


def test_body_of_empty_output_has_an_empty_text_block():
    _, out = frames_of([Finish(0, "length", Usage(5, 0, 0))], stream=False)
    message = Message.model_validate(out.body())
    assert [(b.type, b.text) for b in message.content] == [("text", "")]
    assert message.stop_reason == "max_tokens"


# ---- streaming -------------------------------------------------------------------------------------------------

def stream_final(events, prompt_usage=None):
    route = Route(events, prompt_usage)
    with client(route).messages.stream(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]) as s:
        texts = list(s.text_stream)
        return texts, s.get_final_message()


def test_sdk_accumulates_the_stream():
    texts, message = stream_final(HELLO)
    assert texts == ["Hel", "lo, é!"]
    assert [(b.type, b.text) for b in message.content] == [("text", "Hello, é!")]
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens, message.usage.output_tokens) == (
        18, 12, 7)


def test_sdk_accumulates_thinking_then_text():
    texts, message = stream_final(THINK)
    assert texts == ["Paris."]
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert (message.content[0].thinking, message.content[1].text) == ("Let me think.", "Paris.")
    assert (message.stop_reason, message.stop_sequence) == ("max_tokens", None)


def test_stream_stop_sequence_reaches_the_sdk():
    _, message = stream_final([Delta(0, content="a"), Finish(0, "stop", USAGE, stop_sequence="\n\n")])
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "\n\n")


def test_exact_event_order_and_types():
    frames, _ = frames_of(THINK)
    events = decode(frames)
    assert [name for name, _ in events] == [
        "message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop"]
    assert all(data["type"] == name for name, data in events)
    adapter = TypeAdapter(RawMessageStreamEvent)
    typed = [adapter.validate_python(data) for name, data in events if name != "ping"]
    assert [e.index for e in typed if e.type == "content_block_start"] == [0, 1]
    assert [e.content_block.type for e in typed if e.type == "content_block_start"] == ["thinking", "text"]
    assert [e.delta.type for e in typed if e.type == "content_block_delta"] == [
        "thinking_delta", "thinking_delta", "text_delta"]
    assert all(f.startswith(f"event: {name}\ndata: ") and f.endswith("\n\n") for f, (name, _) in zip(frames, events))
    assert "lo, é!" in "".join(frames_of(HELLO)[0])  # non-ASCII kept as is


def test_message_start_usage():
    frames, _ = frames_of(HELLO, prompt_usage=Usage(30, 12))
    start = decode(frames)[0][1]["message"]
    assert start["usage"] == {"input_tokens": 18, "output_tokens": 1, "cache_read_input_tokens": 12,
                                   "cache_creation_input_tokens": 0}
    assert (start["content"], start["stop_reason"]) == ([], None)


def test_finish_without_deltas_still_streams_a_valid_message():
    frames, _ = frames_of([Finish(0, "stop", Usage(4, 0, 0))])
    events = decode(frames)
    assert [name for name, _ in events] == [
        "message_start", "content_block_start", "ping", "content_block_stop", "message_delta", "message_stop"]
    assert events[0][1]["message"]["usage"]["input_tokens"] == 4


def test_mid_stream_error_raises_in_the_sdk():
    err = ProtocolError(503, "Overloaded", "overloaded")

    def route(request):
        out = MessagesOutput(parse_messages(json.loads(request.content)), ResponseMeta("msg_1", 0, "m"))
        frames = out.feed(Delta(0, content="Hi")) + [stream_error(err)]
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content="".join(frames).encode())

    stream = client(route).messages.stream(model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.APIStatusError) as info, stream as s:
        s.get_final_message()
    assert info.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert stream_error(err).startswith("event: error\ndata: ")


# ---- errors ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("err, sdk_error, error_type", [
    (ProtocolError(400, "x: bad"), anthropic.BadRequestError, "invalid_request_error"),
    (ProtocolError(400, "prompt too long", "context_length"), anthropic.BadRequestError, "invalid_request_error"),
    (ProtocolError(404, "model 'q' not found", "not_found"), anthropic.NotFoundError, "not_found_error"),
    (ProtocolError(401, "bad key", "authentication"), anthropic.AuthenticationError, "authentication_error"),
    (ProtocolError(503, "busy", "overloaded"), anthropic.OverloadedError, "overloaded_error"),
    (ProtocolError(500, "boom", "internal"), anthropic.InternalServerError, "api_error"),
])
def test_error_bodies_map_to_sdk_exceptions(err, sdk_error, error_type):
    def route(request):
        return httpx2.Response(error_status(err), json=error_body(err, "req_9"))

    with pytest.raises(sdk_error) as info:
        client(route).messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    parsed = ErrorResponse.model_validate(info.value.body)
    assert (parsed.error.type, parsed.error.message, parsed.request_id) == (error_type, err.message, "req_9")
