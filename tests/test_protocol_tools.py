"""Tool calls in the three APIs' wire shapes, judged by the official SDKs (openai 3.57, anthropic 2.14,
ollama 0.6.3): the SDKs build the requests we parse, and their own types, stream accumulators and clients
read what we produce from scripted Delta/Finish events (no server, no model)."""
import json

import anthropic
import httpx
import httpx2
import ollama
import openai
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from ollama._types import ChatResponse
from openai._streaming import SSEDecoder
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response
from pydantic import TypeAdapter

from llamay.server.protocol import anthropic as anth
from llamay.server.protocol import ollama as oll
from llamay.events import Delta, Finish, ToolCallDelta, Usage
from llamay.server.protocol.base import ProtocolError, ResponseMeta
from llamay.server.protocol.openai import (
    ChatOutput,
    CompletionOutput,
    ResponsesOutput,
    parse_chat,
    parse_completion,
    parse_responses,
)

MODEL = "smollm2:135m"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather now", "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                   "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
ID0, ID1 = "call_" + "a1" * 12, "call_" + "b2" * 12
USAGE = Usage(prompt_tokens=20, cached_tokens=4, completion_tokens=9)


def call_events(text: str = "Checking.", reason: str = "tool_calls") -> list:
    """Some text, then get_weather({"city":"Paris"}) in three fragments, then get_time({}) whole; the second
    call opens in the Delta that ends the first."""
    events = [Delta(0, content=text)] if text else []
    return events + [
        Delta(0, tool_calls=[ToolCallDelta(0, ID0, "get_weather", "")]),
        Delta(0, tool_calls=[ToolCallDelta(0, arguments='{"city":')]),
        Delta(0, tool_calls=[ToolCallDelta(0, arguments='"Paris"}'), ToolCallDelta(1, ID1, "get_time", "{}")]),
        Finish(0, reason, USAGE)]


def feed_all(out, events) -> list[str]:
    return [f for ev in events for f in out.feed(ev)] + out.end()


def meta(prefix="chatcmpl-") -> ResponseMeta:
    return ResponseMeta(prefix + "abc123", 1735142223, MODEL, 1735142223_000000000)


def sse(frames) -> list:
    return list(SSEDecoder().iter_bytes(iter(["".join(frames).encode()])))


def bad(parse, body) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        parse(body)
    assert info.value.status == 400 and info.value.kind == "invalid_request"
    return info.value


# ---- OpenAI: helpers -----------------------------------------------------------------------------------

def openai_client(frames=None, body=None, seen=None) -> openai.OpenAI:
    """The real client over an in-process transport: records request bodies, answers `frames` (SSE) or
    `body` (JSON), or a 400 when neither is given."""
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(json.loads(request.content))
        if frames is not None:
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content="".join(frames).encode())
        if body is not None:
            return httpx.Response(200, json=body)
        return httpx.Response(400, json={"error": {"message": "x", "type": "t", "param": None, "code": None}})
    return openai.OpenAI(base_url="http://llamay.test/v1", api_key="k", max_retries=0,
                         http_client=httpx.Client(transport=httpx.MockTransport(handler)))


def openai_sent(call) -> dict:
    """The JSON body the OpenAI SDK sends for call(client)."""
    seen = []
    with pytest.raises(openai.BadRequestError):
        call(openai_client(seen=seen))
    return seen[0]


# ---- OpenAI chat: requests -----------------------------------------------------------------------------

@pytest.mark.parametrize("choice, expected", [
    (openai.omit, "auto"), ("auto", "auto"), ("none", "none"), ("required", "required"),
    ({"type": "function", "function": {"name": "get_time"}}, {"name": "get_time"}),
])
def test_chat_tool_choice_forms_from_the_sdk(choice, expected):
    body = openai_sent(lambda c: c.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], tools=[WEATHER, TIME], tool_choice=choice,
        parallel_tool_calls=False))
    req = parse_chat(body)
    assert req.tool_options.choice == expected and req.tool_options.parallel is False
    assert req.tools == [WEATHER, TIME]


def test_chat_defaults_without_tools():
    req = parse_chat({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "tool_choice": "none"})
    assert (req.tools, req.tool_options.choice, req.tool_options.parallel) == (None, "none", True)


@pytest.mark.parametrize("patch, param, words", [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
     "tool_choice", "get_time"),
    ({"tool_choice": "required"}, "tool_choice", "tools"),
    ({"tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice", "get_time"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}}, "tool_choice", "function"),
    ({"tools": [WEATHER], "tool_choice": "any"}, "tool_choice", "any"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "boolean"),
    ({"tools": {"type": "function"}}, "tools", "array"),
    ({"tools": [WEATHER, "get_time"]}, "tools[1]", "object"),
    ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0].type", "custom"),
    ({"tools": [{"type": "function"}]}, "tools[0].function", "required"),
    ({"tools": [{"type": "function", "function": {"description": "d"}}]}, "tools[0].function.name", "required"),
    ({"tools": [{"type": "function", "function": {"name": 3}}]}, "tools[0].function.name", "string"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]},
     "tools[0].function.parameters", "object"),
    ({"tools": [{"type": "function", "function": {"name": "f", "description": 1}}]},
     "tools[0].function.description", "string"),
])
def test_chat_tool_errors_name_the_param(patch, param, words):
    err = bad(parse_chat, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **patch})
    assert err.param == param and words in err.message


# ---- OpenAI chat: outputs ------------------------------------------------------------------------------

def chat_out(stream: bool, n: int = 1) -> ChatOutput:
    return ChatOutput(parse_chat({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                  "tools": [WEATHER, TIME], "stream": stream, "n": n}), meta())


def test_chat_body_has_tool_calls_as_the_sdk_reads_them():
    out = chat_out(stream=False)
    assert feed_all(out, call_events(text="")) == []
    choice = ChatCompletion.model_validate(out.body()).choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls
    assert [(c.id, c.type, c.function.name) for c in calls] == [(ID0, "function", "get_weather"),
                                                                (ID1, "function", "get_time")]
    assert [json.loads(c.function.arguments) for c in calls] == [{"city": "Paris"}, {}]


def test_chat_body_keeps_text_beside_calls():
    out = chat_out(stream=False)
    feed_all(out, call_events())
    message = ChatCompletion.model_validate(out.body()).choices[0].message
    assert message.content == "Checking." and len(message.tool_calls) == 2


def test_chat_stream_chunks_follow_the_wire_rules():
    frames = feed_all(chat_out(stream=True), call_events())
    chunks = [json.loads(e.data) for e in sse(frames) if e.data != "[DONE]"]
    parts = [p for c in chunks for p in c["choices"][0]["delta"].get("tool_calls", [])]
    opening = [p for p in parts if "id" in p]
    assert opening == [
        {"index": 0, "id": ID0, "type": "function", "function": {"name": "get_weather", "arguments": ""}},
        {"index": 1, "id": ID1, "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]
    assert all(set(p) == {"index", "function"} and set(p["function"]) == {"arguments"}
               for p in parts if "id" not in p)
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "tool_calls"
    for c in chunks:
        ChatCompletionChunk.model_validate(c)


def test_chat_stream_accumulates_in_the_sdk_state_with_parsed_arguments():
    frames = feed_all(chat_out(stream=True), call_events())
    state = ChatCompletionStreamState(input_tools=[WEATHER, TIME])
    for e in sse(frames):
        if e.data != "[DONE]":
            state.handle_chunk(ChatCompletionChunk.model_validate(json.loads(e.data)))
    choice = state.get_final_completion().choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Checking."
    calls = choice.message.tool_calls
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [
        (ID0, "get_weather", '{"city":"Paris"}'), (ID1, "get_time", "{}")]
    assert calls[0].function.parsed_arguments == {"city": "Paris"}  # strict tool: the SDK parses it


def test_chat_stream_through_the_sdk_stream_helper():
    client = openai_client(frames=feed_all(chat_out(stream=True), call_events(text="")))
    with client.chat.completions.stream(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                        tools=[WEATHER, TIME]) as stream:
        done = [e for e in stream if e.type == "tool_calls.function.arguments.done"]
        final = stream.get_final_completion()
    assert [(e.name, e.index, e.arguments) for e in done] == [("get_weather", 0, '{"city":"Paris"}'),
                                                              ("get_time", 1, "{}")]
    assert final.choices[0].message.tool_calls[1].id == ID1


def test_chat_two_choices_keep_their_own_calls():
    out = chat_out(stream=False, n=2)
    events = call_events(text="") + [Delta(1, content="No tool."), Finish(1, "stop", USAGE)]
    feed_all(out, events)
    c0, c1 = ChatCompletion.model_validate(out.body()).choices
    assert (len(c0.message.tool_calls), c0.finish_reason) == (2, "tool_calls")
    assert (c1.message.tool_calls, c1.message.content, c1.finish_reason) == (None, "No tool.", "stop")


def test_completions_ignore_tool_deltas():
    out = CompletionOutput(parse_completion({"model": MODEL, "prompt": "x"}), meta("cmpl-"))
    feed_all(out, [Delta(0, content="a"), Delta(0, tool_calls=[ToolCallDelta(0, ID0, "f", "{}")]),
                   Finish(0, "stop", USAGE)])
    assert openai.types.Completion.model_validate(out.body()).choices[0].text == "a"


# ---- Responses: requests -------------------------------------------------------------------------------

FLAT_WEATHER = {"type": "function", **WEATHER["function"]}
FLAT_TIME = {"type": "function", **TIME["function"]}


@pytest.mark.parametrize("choice, expected", [
    (openai.omit, "auto"), ("none", "none"), ("required", "required"),
    ({"type": "function", "name": "get_weather"}, {"name": "get_weather"}),
])
def test_responses_tools_and_tool_choice_from_the_sdk(choice, expected):
    body = openai_sent(lambda c: c.responses.create(model=MODEL, input="hi", tools=[FLAT_WEATHER, FLAT_TIME],
                                                    tool_choice=choice))
    req = parse_responses(body)
    assert req.tools == [WEATHER, TIME]  # the chat-template shape
    assert req.tool_options.choice == expected and req.tool_options.parallel is True


def test_responses_function_call_items_become_a_tool_turn():
    body = openai_sent(lambda c: c.responses.create(model=MODEL, tools=[FLAT_WEATHER], input=[
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": ID0, "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call", "call_id": ID1, "name": "get_weather", "arguments": '{"city":"Oslo"}'},
        {"type": "function_call_output", "call_id": ID0, "output": "18C"},
        {"type": "function_call_output", "call_id": ID1, "output": [{"type": "input_text", "text": "9C"}]}]))
    calls = [{"id": i, "type": "function", "function": {"name": "get_weather", "arguments": f'{{"city":"{c}"}}'}}
             for i, c in ((ID0, "Paris"), (ID1, "Oslo"))]
    assert parse_responses(body).messages == [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": calls},
        {"role": "tool", "content": "18C", "tool_call_id": ID0},
        {"role": "tool", "content": "9C", "tool_call_id": ID1}]


def test_responses_function_call_without_a_preceding_assistant_turn():
    req = parse_responses({"model": MODEL, "input": [
        {"role": "user", "content": "t?"}, {"type": "function_call", "call_id": ID0, "name": "f", "arguments": "{}"}]})
    assert req.messages[1] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": ID0, "type": "function", "function": {"name": "f", "arguments": "{}"}}]}


@pytest.mark.parametrize("patch, param, words", [
    ({"tools": [{"type": "web_search"}]}, "tools[0].type", "web_search"),
    ({"tools": [{"type": "function", "parameters": {}}]}, "tools[0].name", "required"),
    ({"tools": [{"type": "function", "name": "f", "parameters": []}]}, "tools[0].parameters", "object"),
    ({"tools": [{"type": "function", "name": "f", "strict": "yes"}]}, "tools[0].strict", "boolean"),
    ({"tools": [FLAT_WEATHER], "tool_choice": {"type": "function", "name": "get_time"}}, "tool_choice", "get_time"),
    ({"tool_choice": "required"}, "tool_choice", "tools"),
    ({"tools": [FLAT_WEATHER], "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}},
     "tool_choice", "allowed_tools"),
    ({"tools": [FLAT_WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
     "tool_choice", "function"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id", "required"),
    ({"input": [{"type": "function_call", "call_id": ID0, "name": "f", "arguments": {}}]},
     "input[0].arguments", "string"),
    ({"input": [{"type": "function_call_output", "call_id": ID0, "output": 5}]}, "input[0].output", "string"),
])
def test_responses_tool_errors_name_the_param(patch, param, words):
    err = bad(parse_responses, {"model": MODEL, "input": "hi", **patch})
    assert err.param == param and words in err.message


# ---- Responses: outputs --------------------------------------------------------------------------------

def responses_out(stream: bool, **extra) -> ResponsesOutput:
    return ResponsesOutput(parse_responses({"model": MODEL, "input": "hi", "stream": stream,
                                            "tools": [FLAT_WEATHER, FLAT_TIME], **extra}), meta("resp_"))


def test_responses_body_has_function_call_items():
    out = responses_out(False, tool_choice={"type": "function", "name": "get_weather"})
    feed_all(out, call_events())
    response = Response.model_validate(out.body())
    assert response.status == "completed" and response.output_text == "Checking."
    kinds = [item.type for item in response.output]
    assert kinds == ["message", "function_call", "function_call"]
    calls = response.output[1:]
    assert [(c.call_id, c.name, json.loads(c.arguments), c.status) for c in calls] == [
        (ID0, "get_weather", {"city": "Paris"}, "completed"), (ID1, "get_time", {}, "completed")]
    assert all(c.id.startswith("fc_") for c in calls) and len({c.id for c in response.output}) == 3
    assert response.tool_choice.type == "function" and response.tool_choice.name == "get_weather"
    assert [t.name for t in response.tools] == ["get_weather", "get_time"] and response.tools[0].strict is True


def test_responses_calls_only_have_no_empty_message():
    out = responses_out(False)
    feed_all(out, call_events(text=""))
    assert [item.type for item in Response.model_validate(out.body()).output] == ["function_call"] * 2


def test_responses_stream_order_and_sdk_accumulation():
    frames = feed_all(responses_out(True), call_events())
    payloads = [json.loads(e.data) for e in sse(frames)]
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    kinds = [(p["type"], p.get("output_index")) for p in payloads]
    first_call = kinds.index(("response.output_item.added", 1))
    assert kinds[first_call - 1] == ("response.output_item.done", 0)  # the message closes first
    assert kinds[first_call:] == [
        ("response.output_item.added", 1), ("response.function_call_arguments.delta", 1),
        ("response.function_call_arguments.delta", 1), ("response.function_call_arguments.done", 1),
        ("response.output_item.done", 1), ("response.output_item.added", 2),
        ("response.function_call_arguments.delta", 2), ("response.function_call_arguments.done", 2),
        ("response.output_item.done", 2), ("response.completed", None)]
    added = payloads[first_call]["item"]
    assert (added["arguments"], added["status"], added["call_id"]) == ("", "in_progress", ID0)
    client = openai_client(frames=frames)
    with client.responses.stream(model=MODEL, input="hi", tools=[FLAT_WEATHER, FLAT_TIME]) as stream:
        done = [e for e in stream if e.type == "response.function_call_arguments.done"]
        final = stream.get_final_response()
    assert [e.arguments for e in done] == ['{"city":"Paris"}', "{}"]
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [(ID0, "get_weather", '{"city":"Paris"}'),
                                                                 (ID1, "get_time", "{}")]
    assert calls[0].parsed_arguments == {"city": "Paris"}  # strict tool: the SDK parses it


# ---- Anthropic -----------------------------------------------------------------------------------------

ANTH_TOOLS = [{"name": "get_weather", "description": "Weather now",
               "input_schema": WEATHER["function"]["parameters"]},
              {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}]
TOOLU0, TOOLU1 = "toolu_" + ID0.removeprefix("call_"), "toolu_" + ID1.removeprefix("call_")


def anthropic_client(events=None, seen=None) -> anthropic.Anthropic:
    """The real client over an in-process transport: parses each request with our converter (recorded in
    `seen`) and answers with MessagesOutput fed `events`, streamed or whole as the request asked."""
    def route(request: httpx2.Request) -> httpx2.Response:
        try:
            req = anth.parse_messages(json.loads(request.content))
        except ProtocolError as err:
            return httpx2.Response(anth.error_status(err), json=anth.error_body(err))
        if seen is not None:
            seen.append(req)
        out = anth.MessagesOutput(req, ResponseMeta("msg_01abc", 0, req.model))
        frames = feed_all(out, events or [])
        if not req.stream:
            return httpx2.Response(200, json=out.body())
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content="".join(frames).encode())
    return anthropic.Anthropic(api_key="k", base_url="http://local", max_retries=0,
                               http_client=httpx2.Client(transport=httpx2.MockTransport(route)))


@pytest.mark.parametrize("choice, expected", [
    (anthropic.omit, ("auto", True)), ({"type": "auto"}, ("auto", True)), ({"type": "none"}, ("none", True)),
    ({"type": "any", "disable_parallel_tool_use": True}, ("required", False)),
    ({"type": "tool", "name": "get_time"}, ({"name": "get_time"}, True)),
    ({"type": "tool", "name": "get_time", "disable_parallel_tool_use": True}, ({"name": "get_time"}, False)),
])
def test_anthropic_tool_choice_from_the_sdk(choice, expected):
    seen = []
    anthropic_client(call_events(), seen).messages.create(
        model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}], tools=ANTH_TOOLS, tool_choice=choice)
    assert (seen[0].tool_options.choice, seen[0].tool_options.parallel) == expected
    assert [t["function"]["name"] for t in seen[0].tools] == ["get_weather", "get_time"]


@pytest.mark.parametrize("patch, param", [
    ({"tools": ANTH_TOOLS, "tool_choice": {"type": "tool", "name": "get_news"}}, "tool_choice.name"),
    ({"tools": ANTH_TOOLS, "tool_choice": {"type": "tool"}}, "tool_choice.name"),
    ({"tool_choice": {"type": "any"}}, "tool_choice.type"),
    ({"tools": ANTH_TOOLS, "tool_choice": {"type": "auto", "disable_parallel_tool_use": "yes"}},
     "tool_choice.disable_parallel_tool_use"),
])
def test_anthropic_tool_choice_errors(patch, param):
    err = bad(anth.parse_messages, {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
                                    **patch})
    assert err.param == param and err.message.startswith(param + ":")


def test_anthropic_body_has_tool_use_blocks_after_the_text():
    message = anthropic_client(call_events()).messages.create(
        model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}], tools=ANTH_TOOLS)
    assert isinstance(message, Message) and message.stop_reason == "tool_use"
    assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]
    assert message.content[0].text == "Checking."
    assert [(b.id, b.name, b.input) for b in message.content[1:]] == [
        (TOOLU0, "get_weather", {"city": "Paris"}), (TOOLU1, "get_time", {})]


def test_anthropic_calls_only_have_no_empty_text_block():
    message = anthropic_client(call_events(text="")).messages.create(
        model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}], tools=ANTH_TOOLS)
    assert [b.type for b in message.content] == ["tool_use", "tool_use"]


def test_anthropic_stream_accumulates_tool_use_input_objects():
    client = anthropic_client(call_events())
    with client.messages.stream(model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}],
                                tools=ANTH_TOOLS) as stream:
        snapshots = [e.snapshot for e in stream if e.type == "input_json"]
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use" and message.content[0].text == "Checking."
    assert [(b.type, b.id, b.input) for b in message.content[1:]] == [
        ("tool_use", TOOLU0, {"city": "Paris"}), ("tool_use", TOOLU1, {})]
    assert snapshots[-1] == {}  # get_time's input, parsed from its one fragment
    assert {"city": "Paris"} in snapshots


def test_anthropic_stream_event_order():
    req = anth.parse_messages({"model": "m", "max_tokens": 8, "stream": True, "tools": ANTH_TOOLS,
                               "messages": [{"role": "user", "content": "hi"}]})
    frames = feed_all(anth.MessagesOutput(req, ResponseMeta("msg_1", 0, "m")), call_events())
    adapter = TypeAdapter(RawMessageStreamEvent)
    events = [adapter.validate_python(json.loads(e.data)) for e in sse(frames) if e.event != "ping"]
    shape = [(e.type, getattr(e, "index", None)) for e in events]
    assert shape == [("message_start", None), ("content_block_start", 0), ("content_block_delta", 0),
                     ("content_block_stop", 0), ("content_block_start", 1), ("content_block_delta", 1),
                     ("content_block_delta", 1), ("content_block_delta", 1), ("content_block_stop", 1),
                     ("content_block_start", 2), ("content_block_delta", 2), ("content_block_stop", 2),
                     ("message_delta", None), ("message_stop", None)]
    start = events[4].content_block
    assert (start.type, start.id, start.name, start.input) == ("tool_use", TOOLU0, "get_weather", {})
    fragments = [e.delta.partial_json for e in events if e.type == "content_block_delta" and e.index == 1]
    assert fragments == ["", '{"city":', '"Paris"}']
    assert events[-2].delta.stop_reason == "tool_use"


# ---- Ollama --------------------------------------------------------------------------------------------

def ollama_client(events, seen=None) -> ollama.Client:
    """The real client over an in-process transport, answered by our /api/chat converters."""
    def handle(request: httpx.Request) -> httpx.Response:
        try:
            req = oll.parse_chat(json.loads(request.content))
        except ProtocolError as err:
            return httpx.Response(err.status, json=oll.error_body(err))
        if seen is not None:
            seen.append(req)
        out = oll.OllamaChatOutput(req, meta(""), lambda: 1735142223_000000000)
        lines = feed_all(out, events)
        if req.stream:
            return httpx.Response(200, content="".join(lines).encode())
        return httpx.Response(200, json=out.body())
    return ollama.Client(host="http://fake:11434", transport=httpx.MockTransport(handle))


def test_ollama_tools_kept_and_tool_choice_auto():
    seen = []
    ollama_client(call_events(), seen).chat(model="m", messages=[{"role": "user", "content": "hi"}],
                                            tools=[WEATHER, TIME])
    assert seen[0].tools[0]["function"]["name"] == "get_weather" and len(seen[0].tools) == 2
    assert (seen[0].tool_options.choice, seen[0].tool_options.parallel) == ("auto", True)


@pytest.mark.parametrize("tools, param", [
    ([{"type": "function", "function": {"description": "no name"}}], "tools[0].function.name"),
    ([WEATHER, {"type": "function", "function": {"name": "f", "parameters": "x"}}], "tools[1].function.parameters"),
    ([{"type": "retrieval"}], "tools[0].type"),
])
def test_ollama_bad_tools(tools, param):
    """Raw bodies (curl): the client itself validates some of these before sending."""
    err = bad(oll.parse_chat, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools})
    assert err.param == param and param in oll.error_body(err)["error"]


def test_ollama_body_has_tool_calls_with_object_arguments():
    resp = ollama_client(call_events()).chat(model="m", messages=[{"role": "user", "content": "hi"}])
    assert isinstance(resp, ChatResponse) and resp.done_reason == "stop" and resp.message.content == "Checking."
    assert [(c.function.name, c.function.arguments) for c in resp.message.tool_calls] == [
        ("get_weather", {"city": "Paris"}), ("get_time", {})]


def test_ollama_stream_sends_each_call_whole_when_complete():
    req = oll.parse_chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    out = oll.OllamaChatOutput(req, meta(""), lambda: 0)
    per_event = [out.feed(ev) for ev in call_events()]
    lines = [json.loads(line) for frames in per_event for line in frames]
    calls = [(i, json.loads(line)["message"]["tool_calls"]) for i, frames in enumerate(per_event) for line in frames
             if "tool_calls" in json.loads(line)["message"]]
    assert calls == [  # get_weather once the Delta opening get_time came, get_time at the Finish
        (3, [{"id": ID0, "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}}]),
        (4, [{"id": ID1, "function": {"index": 1, "name": "get_time", "arguments": {}}}])]
    assert [line["done"] for line in lines] == [False, False, False, True]
    assert lines[-1]["done_reason"] == "stop" and "tool_calls" not in lines[-1]["message"]
    parts = list(ollama_client(call_events()).chat(model="m", messages=[{"role": "user", "content": "hi"}],
                                                   stream=True))
    assert all(isinstance(p, ChatResponse) for p in parts)
    streamed = [c.function for p in parts for c in p.message.tool_calls or []]
    assert [(f.name, f.arguments) for f in streamed] == [("get_weather", {"city": "Paris"}), ("get_time", {})]


def test_ollama_generate_ignores_tool_deltas():
    req = oll.parse_generate({"model": "m", "prompt": "x", "stream": False})
    out = oll.OllamaGenerateOutput(req, meta(""), lambda: 0)
    feed_all(out, [Delta(0, content="a"), Delta(0, tool_calls=[ToolCallDelta(0, ID0, "f", "{}")]),
                   Finish(0, "tool_calls", USAGE)])
    body = out.body()
    assert (body["response"], body["done_reason"]) == ("a", "stop") and "tool_calls" not in body


def test_call_cut_off_by_max_tokens_gives_an_empty_object():
    from llamay.server.protocol.toolcalls import arguments_object
    assert arguments_object('{"tz": "U', "get_time") == {}
    assert arguments_object('{"tz": "UTC"}', "get_time") == {"tz": "UTC"}
    with pytest.raises(TypeError):
        arguments_object("[1]", "get_time")
