"""OpenAI converters, judged by the official SDK (openai==3.57.0): its pydantic types, its stream
accumulators, its SSE decoder, and the real client over an in-process httpx transport (no server, no model)."""
import json

import httpx
import openai
import pytest
from openai._streaming import SSEDecoder
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types import Completion, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response

from llamay.events import Delta, Finish, TokenLogprob, TopLogprob, Usage
from llamay.server.protocol.base import ModelInfo, ProtocolError, ResponseMeta
from llamay.server.protocol.openai import (
    ChatOutput,
    CompletionOutput,
    ResponsesOutput,
    error_body,
    model_body,
    models_body,
    parse_chat,
    parse_completion,
    parse_responses,
    stream_error,
)
from llamay.server.protocol.request import FRESH_SEED

MODEL = "smollm2:135m"


# ---- helpers ---------------------------------------------------------------------------------------

def sdk_client(handler) -> openai.OpenAI:
    return openai.OpenAI(base_url="http://llamay.test/v1", api_key="sk-no-key-required", max_retries=0,
                         http_client=httpx.Client(transport=httpx.MockTransport(handler)))


def answering(status=200, body=None, frames=None, seen=None):
    """An httpx handler that records the request body and answers with `body` (JSON) or SSE `frames`."""
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(json.loads(request.content))
        if frames is not None:
            return httpx.Response(status, headers={"content-type": "text/event-stream"},
                                  content="".join(frames).encode())
        return httpx.Response(status, json=body)
    return handler


def sent_body(call) -> dict:
    """The JSON body the SDK sends for `call(client)`."""
    seen = []
    client = sdk_client(answering(400, {"error": {"message": "x", "type": "t", "param": None, "code": None}},
                                  seen=seen))
    with pytest.raises(openai.BadRequestError):
        call(client)
    return seen[0]


def sse_events(frames, step=7):
    """Frames through the SDK's SSE decoder, fed in `step`-byte pieces (splits inside UTF-8 too)."""
    raw = "".join(frames).encode()
    pieces = (raw[i:i + step] for i in range(0, len(raw), step))
    return list(SSEDecoder().iter_bytes(pieces))


def run(out, events):
    frames = []
    for ev in events:
        frames += out.feed(ev)
    return frames + out.end()


def usage(prompt=12, cached=4, completion=3):
    return Usage(prompt_tokens=prompt, cached_tokens=cached, completion_tokens=completion)


def meta(prefix="chatcmpl-"):
    return ResponseMeta(id=prefix + "abc123", created=1735142223, model=MODEL)


def logprob(token, lp, alts=()):
    tops = [TopLogprob(t, v, list(t.encode())) for t, v in alts]
    return TokenLogprob(token, lp, list(token.encode()), tops)


def bad(fn, body) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        fn(body)
    assert info.value.status == 400 and info.value.kind == "invalid_request"
    return info.value


CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


# ---- parse_chat ------------------------------------------------------------------------------------

def test_parse_chat_from_the_sdk_request():
    body = sent_body(lambda c: c.chat.completions.create(
        model=MODEL, stream=True, stream_options={"include_usage": True}, n=2, stop="END", seed=7,
        max_tokens=50, max_completion_tokens=20, temperature=0.3, top_p=0.9, presence_penalty=0.5,
        frequency_penalty=-0.5, logit_bias={"15": -100, "42": 2.5}, logprobs=True, top_logprobs=3,
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        tool_choice="required", response_format={"type": "json_object"},
        extra_body={"top_k": 20, "min_p": 0.1, "repeat_penalty": 1.1},
        messages=[{"role": "developer", "content": "be brief"},
                  {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "42"}]))
    req = parse_chat(body)
    assert req.model == MODEL and req.stream and req.include_usage and req.n == 2
    assert req.stop == ["END"] and req.max_tokens == 20  # max_completion_tokens wins
    assert req.sampling.given() == {"temperature": 0.3, "top_p": 0.9, "presence_penalty": 0.5,
                                    "frequency_penalty": -0.5, "min_p": 0.1, "repeat_penalty": 1.1, "top_k": 20,
                                    "seed": 7, "logit_bias": {15: -100.0, 42: 2.5}}
    assert req.logprobs and req.top_logprobs == 3
    assert req.tools[0]["function"]["name"] == "f" and req.tool_options.choice == "required"
    assert req.format == {"type": "json_object"}
    assert [m["role"] for m in req.messages] == ["system", "user", "assistant", "tool"]
    assert req.messages[1]["content"] == "a\nb"
    assert req.messages[2]["content"] == "" and req.messages[2]["tool_calls"][0]["id"] == "call_1"
    assert req.messages[3] == {"role": "tool", "content": "42", "tool_call_id": "call_1"}


def test_earlier_reasoning_goes_to_the_template_and_a_prefills_parts_join_by_a_blank_line():
    """As llama-server: a message's reasoning_content is the template's (Qwen3's renders it in <think>); the
    text parts of the assistant message the reply continues join by a blank line, every other's by a newline."""
    parts = [{"type": "text", "text": "Wh"}, {"type": "text", "text": "ill"}]
    req = parse_chat({"messages": [{"role": "user", "content": parts},
                                   {"role": "assistant", "content": "", "reasoning_content": "think"},
                                   {"role": "user", "content": "go"}, {"role": "assistant", "content": parts}]})
    assert req.messages[0]["content"] == "Wh\nill" and req.messages[3]["content"] == "Wh\n\nill"
    assert req.messages[1] == {"role": "assistant", "content": "", "reasoning_content": "think"}
    assert req.chat.continue_final
    closed = parse_chat({"messages": req.messages[:3] + [{"role": "assistant", "content": parts}],
                         "continue_final_message": False})
    assert closed.messages[3]["content"] == "Wh\nill" and not closed.chat.continue_final


def test_parse_chat_defaults_follow_openai_and_leave_llamacpp_extras_unset():
    req = parse_chat(CHAT)
    assert req.run_sampling().given() == {"temperature": 1.0, "top_p": 1.0}
    assert req.max_tokens is None and req.n == 1 and req.stop == [] and not req.stream
    assert not req.logprobs and req.tools is None and req.format is None and req.prompt is None


@pytest.mark.parametrize("patch, param", [
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"},
                                                {"type": "image_url", "image_url": {"url": "data:,"}}]}]},
     "messages[0].content[1].type"),
    ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
     "messages[0].content[0].type"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ({"messages": []}, "messages"),
    ({"model": 3}, "model"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ({"n": 9}, "n"), ({"n": 0}, "n"), ({"n": True}, "n"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"), ({"stop": 3}, "stop"),
    ({"max_tokens": 0}, "max_tokens"), ({"max_completion_tokens": 0, "max_tokens": 5}, "max_completion_tokens"),
    ({"temperature": 2.5}, "temperature"), ({"temperature": "hot"}, "temperature"), ({"top_p": 1.5}, "top_p"),
    ({"presence_penalty": -3}, "presence_penalty"), ({"frequency_penalty": 2.1}, "frequency_penalty"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"), ({"logit_bias": {"5": 101}}, "logit_bias"),
    ({"top_logprobs": 2}, "top_logprobs"), ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"tool_choice": "sometimes"}, "tool_choice"), ({"seed": 1.5}, "seed"),
    ({"top_k": -2}, "top_k"), ({"min_p": 1.5}, "min_p"), ({"repeat_penalty": 0}, "repeat_penalty"),
])
def test_parse_chat_rejects_naming_the_field(patch, param):
    err = bad(parse_chat, {**CHAT, **patch})
    assert err.param == param and param.split("[")[0].split(".")[0] in err.message


def test_parse_chat_body_must_be_an_object():
    assert bad(parse_chat, ["not", "an", "object"]).param is None


def test_parse_chat_stop_list_and_llama_server_schema_format():
    req = parse_chat({**CHAT, "stop": ["a", "", "b"], "response_format": {"type": "json_schema", "schema": {}}})
    assert req.stop == ["a", "b"] and req.format["schema"] == {}
    assert parse_chat({**CHAT, "response_format": {"type": "text"}}).format is None
    assert parse_chat({**CHAT, "seed": -1}).sampling.seed == FRESH_SEED  # llama.cpp's -1: a random seed


# ---- chat output -----------------------------------------------------------------------------------

def chat_events():
    """Two choices, interleaved with choice 1 first; reasoning, non-ASCII and logprobs on choice 0."""
    return [Delta(1, content="Bon"), Delta(0, reasoning="think "), Delta(0, content="Hé", logprobs=[
                logprob("H", -0.1, [("H", -0.1), ("B", -2.5)]), logprob("é", -0.3, [("é", -0.3)])]),
            Delta(1, content="jour"), Delta(0, content="llo ✓"), Finish(1, "length", usage(completion=2)),
            Finish(0, "stop", usage(completion=5))]


def chat_request(**kw):
    return parse_chat({**CHAT, "n": 2, **kw})


def test_chat_body_validates_with_the_sdk():
    out = ChatOutput(chat_request(logprobs=True, top_logprobs=2), meta())
    assert run(out, chat_events()) == []
    completion = ChatCompletion.model_validate(out.body())
    assert completion.id == "chatcmpl-abc123" and completion.object == "chat.completion"
    c0, c1 = completion.choices
    assert (c0.message.content, c0.finish_reason, c1.message.content, c1.finish_reason) == \
        ("Héllo ✓", "stop", "Bonjour", "length")
    assert c0.message.role == "assistant" and c0.message.reasoning_content == "think "
    assert [t.token for t in c0.logprobs.content] == ["H", "é"]
    assert c0.logprobs.content[1].bytes == list("é".encode())
    assert [t.token for t in c0.logprobs.content[0].top_logprobs] == ["H", "B"]
    assert completion.usage.prompt_tokens == 12 and completion.usage.completion_tokens == 7
    assert completion.usage.total_tokens == 19 and completion.usage.prompt_tokens_details.cached_tokens == 4


def test_chat_stream_accumulates_in_the_sdk_state():
    out = ChatOutput(chat_request(stream=True, stream_options={"include_usage": True}, logprobs=True), meta())
    frames = run(out, chat_events())
    assert frames[-1] == "data: [DONE]\n\n"
    events = sse_events(frames)
    assert len(events) == len(frames) and events[-1].data == "[DONE]"  # one SSE event per frame
    payloads = [json.loads(e.data) for e in events[:-1]]
    state = ChatCompletionStreamState()
    for data in payloads:
        state.handle_chunk(ChatCompletionChunk.model_validate(data))
    final = state.current_completion_snapshot  # get_final_completion() refuses a 'length' choice
    c0, c1 = final.choices
    assert (c0.message.content, c1.message.content) == ("Héllo ✓", "Bonjour")
    assert c0.message.role == c1.message.role == "assistant"
    assert (c0.finish_reason, c1.finish_reason) == ("stop", "length")
    assert c0.message.reasoning_content == "think "
    assert [t.token for t in c0.logprobs.content] == ["H", "é"]
    assert final.usage.completion_tokens == 7 and final.usage.prompt_tokens_details.cached_tokens == 4
    assert all(p["usage"] is None for p in payloads[:-1])
    assert payloads[-1]["choices"] == [] and payloads[-1]["usage"]["total_tokens"] == 19
    for data in payloads:  # finish_reason only on the empty-delta finish chunks
        for choice in data["choices"]:
            assert (choice["finish_reason"] is None) == (choice["delta"] != {})


def test_chat_stream_through_the_sdk_client_helper():
    out = ChatOutput(parse_chat({**CHAT, "stream": True}), meta())
    frames = run(out, [Delta(0, content="Hel"), Delta(0), Delta(0, content="lo"), Finish(0, "stop", usage())])
    assert "usage" not in json.loads(frames[0][6:])  # usage is only streamed when asked for
    client = sdk_client(answering(frames=frames))
    with client.chat.completions.stream(model=MODEL, messages=CHAT["messages"]) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        final = stream.get_final_completion()
    assert "".join(deltas) == "Hel" + "lo" and final.choices[0].message.content == "Hello"
    assert final.choices[0].finish_reason == "stop" and final.usage is None


def test_chat_stream_of_an_empty_choice_still_opens_it():
    out = ChatOutput(parse_chat({**CHAT, "stream": True}), meta())
    frames = run(out, [Finish(0, "length", usage(completion=0))])
    chunks = [ChatCompletionChunk.model_validate(json.loads(e.data)) for e in sse_events(frames)[:-1]]
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices[0].finish_reason == "length"


def test_chat_mid_stream_error_raises_in_the_sdk():
    out = ChatOutput(parse_chat({**CHAT, "stream": True}), meta())
    frames = out.feed(Delta(0, content="partial"))
    frames += out.fail(ProtocolError(500, "engine crashed", "internal"))
    assert frames[-1] == stream_error(ProtocolError(500, "engine crashed", "internal"))
    client = sdk_client(answering(frames=frames))
    got = []
    with pytest.raises(openai.APIError, match="engine crashed"):
        for chunk in client.chat.completions.create(model=MODEL, messages=CHAT["messages"], stream=True):
            got.append(chunk.choices[0].delta.content)
    assert got == [None, "partial"]  # the role chunk's content is null, as llama-server sends it


# ---- completions -----------------------------------------------------------------------------------

COMPLETION = {"model": MODEL, "prompt": "Once upon"}


def test_parse_completion_from_the_sdk_request():
    body = sent_body(lambda c: c.completions.create(model=MODEL, prompt=["Once"], suffix="end", echo=True,
                                                    logprobs=3, max_tokens=8, stop=["\n"], n=2, seed=1))
    req = parse_completion(body)
    assert req.prompt == "Once" and req.raw and req.echo and req.suffix == "end" and req.messages is None
    assert req.logprobs and req.top_logprobs == 3 and req.max_tokens == 8 and req.stop == ["\n"]
    assert req.n == 2 and req.run_sampling().given() == {"temperature": 1.0, "top_p": 1.0, "seed": 1}
    assert parse_completion({**COMPLETION, "prompt": [1, 2, 3]}).prompt == [1, 2, 3]
    assert parse_completion({**COMPLETION, "prompt": [[4, 5]]}).prompt == [4, 5]
    assert parse_completion({**COMPLETION, "logprobs": 0}).logprobs


@pytest.mark.parametrize("patch", [{"prompt": ["a", "b"]}, {"prompt": [[1], [2]]}, {"prompt": None},
                                   {"prompt": []}, {"prompt": [1, -2]}, {"prompt": [1, "a"]}, {"prompt": 5}])
def test_parse_completion_prompt_forms_refused(patch):
    assert bad(parse_completion, {**COMPLETION, **patch}).param == "prompt"


@pytest.mark.parametrize("patch, param", [({"logprobs": 6}, "logprobs"), ({"logprobs": True}, "logprobs"),
                                          ({"best_of": 3}, "best_of"), ({"max_tokens": 0}, "max_tokens"),
                                          ({"echo": "yes"}, "echo"), ({"suffix": 1}, "suffix")])
def test_parse_completion_rejects_naming_the_field(patch, param):
    assert bad(parse_completion, {**COMPLETION, **patch}).param == param


def completion_events():
    return [Delta(0, content="Hi", logprobs=[logprob("H", -0.5, [("H", -0.5), ("h", -1.0)]), logprob("i", -0.2)]),
            Delta(0, content=" there", logprobs=[logprob(" there", -0.7)]), Finish(0, "length", usage())]


def test_completion_body_validates_with_the_sdk():
    out = CompletionOutput(parse_completion({**COMPLETION, "logprobs": 2}), meta("cmpl-"))
    run(out, completion_events())
    completion = Completion.model_validate(out.body())
    choice = completion.choices[0]
    assert completion.object == "text_completion" and completion.id == "cmpl-abc123"
    assert choice.text == "Hi there" and choice.finish_reason == "length"
    assert choice.logprobs.tokens == ["H", "i", " there"] and choice.logprobs.token_logprobs == [-0.5, -0.2, -0.7]
    assert choice.logprobs.text_offset == [0, 1, 2]  # offsets into "Hi there"
    assert choice.logprobs.top_logprobs[0] == {"H": -0.5, "h": -1.0}
    assert completion.usage.prompt_tokens_details.cached_tokens == 4


def test_completion_stream_through_the_sdk_client():
    out = CompletionOutput(parse_completion({**COMPLETION, "stream": True, "logprobs": 1,
                                             "stream_options": {"include_usage": True}}), meta("cmpl-"))
    frames = run(out, completion_events())
    client = sdk_client(answering(frames=frames))
    chunks = list(client.completions.create(model=MODEL, prompt="Once upon", stream=True))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == "Hi there" and chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 15
    offsets = [o for c in chunks if c.choices and c.choices[0].logprobs for o in c.choices[0].logprobs.text_offset]
    assert offsets == [0, 1, 2]


# ---- responses -------------------------------------------------------------------------------------

RESPONSES = {"model": MODEL, "input": "Say hi"}


def test_parse_responses_from_the_sdk_request():
    body = sent_body(lambda c: c.responses.create(
        model=MODEL, instructions="be brief", max_output_tokens=30, temperature=0.2, top_p=0.5, stream=True,
        input=[{"role": "developer", "content": "dev"},
               {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
               {"type": "message", "role": "assistant", "content": "prev"}]))
    req = parse_responses(body)
    assert req.messages == [{"role": "system", "content": "be brief"}, {"role": "system", "content": "dev"},
                            {"role": "user", "content": "a\nb"}, {"role": "assistant", "content": "prev"}]
    assert req.max_tokens == 30 and req.stream and req.run_sampling().given() == {"temperature": 0.2, "top_p": 0.5}
    assert parse_responses(RESPONSES).messages == [{"role": "user", "content": "Say hi"}]


@pytest.mark.parametrize("patch, param", [
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0].type"),
    ({"input": [{"type": "web_search_call", "id": "ws_1", "status": "completed"}]}, "input[0].type"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ({"input": []}, "input"), ({"input": None}, "input"), ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"previous_response_id": "resp_1"}, "previous_response_id"), ({"temperature": 3}, "temperature"),
])
def test_parse_responses_rejects_naming_the_field(patch, param):
    assert bad(parse_responses, {**RESPONSES, **patch}).param == param


def responses_events(reason="stop"):
    return [Delta(0, reasoning="hmm "), Delta(0, reasoning="ok"), Delta(0, content="Hi"),
            Delta(0, content=" ✓"), Finish(0, reason, usage())]


def test_responses_body_validates_with_the_sdk():
    out = ResponsesOutput(parse_responses({**RESPONSES, "instructions": "x"}), meta("resp_"))
    assert run(out, responses_events()) == []
    response = Response.model_validate(out.body())
    assert response.id == "resp_abc123" and response.status == "completed" and response.output_text == "Hi ✓"
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.output[0].content[0].text == "hmm ok" and response.instructions == "x"
    assert response.usage.input_tokens_details.cached_tokens == 4 and response.usage.total_tokens == 15


def test_responses_logprobs_when_asked():
    out = ResponsesOutput(parse_responses({**RESPONSES, "top_logprobs": 2}), meta("resp_"))
    run(out, [Delta(0, content="Hi", logprobs=[logprob("Hi", -0.25, [("Hi", -0.25), ("Ho", -2.0)])]),
              Finish(0, "stop", usage())])
    text = Response.model_validate(out.body()).output[0].content[0]
    assert text.logprobs[0].token == "Hi" and [t.token for t in text.logprobs[0].top_logprobs] == ["Hi", "Ho"]


def test_responses_length_is_incomplete():
    out = ResponsesOutput(parse_responses(RESPONSES), meta("resp_"))
    run(out, [Delta(0, content="Hi"), Finish(0, "length", usage())])
    response = Response.model_validate(out.body())
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"


def test_responses_stream_accumulates_in_the_sdk_state():
    out = ResponsesOutput(parse_responses({**RESPONSES, "stream": True}), meta("resp_"))
    frames = run(out, responses_events())
    events = sse_events(frames)
    payloads = [json.loads(e.data) for e in events]
    assert [e.event for e in events] == [p["type"] for p in payloads]  # event: line names the payload type
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    client = sdk_client(answering(frames=frames))
    with client.responses.stream(model=MODEL, input="Say hi") as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert final.output_text == "Hi ✓" and final.status == "completed" and final.usage.output_tokens == 3
    message = kinds[kinds.index("response.output_text.delta") - 2:]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert message == ["response.output_item.added", "response.content_part.added", "response.output_text.delta",
                       "response.output_text.delta", "response.output_text.done", "response.content_part.done",
                       "response.output_item.done", "response.completed"]


def test_responses_stream_state_directly_and_empty_output():
    from openai._models import construct_type
    from openai.types.responses import ResponseStreamEvent
    out = ResponsesOutput(parse_responses({**RESPONSES, "stream": True}), meta("resp_"))
    frames = run(out, [Finish(0, "stop", usage(completion=0))])
    state = ResponseStreamState(input_tools=openai.omit, text_format=openai.omit)
    handled = [ev for e in sse_events(frames)
               for ev in state.handle_event(construct_type(type_=ResponseStreamEvent, value=json.loads(e.data)))]
    assert handled[-1].type == "response.completed"
    assert handled[-1].response.output_text == "" and handled[-1].response.output[0].type == "message"


def test_responses_mid_stream_error_events():
    out = ResponsesOutput(parse_responses({**RESPONSES, "stream": True}), meta("resp_"))
    frames = out.feed(Delta(0, content="Hi")) + out.fail(ProtocolError(503, "busy", "overloaded"))
    client = sdk_client(answering(frames=frames))
    events = list(client.responses.create(model=MODEL, input="x", stream=True))
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert events[-2].message == "busy" and events[-1].response.status == "failed"
    assert events[-1].response.error.code == "server_error"


# ---- models and errors -----------------------------------------------------------------------------

def model_info(name):
    return ModelInfo(name=name, path="/m.gguf", size=1, digest="0" * 64, modified_at=1735142223.7,
                     architecture="llama", parameter_size="135M", quantization_level="Q4_1", context_length=2048)


def test_models_list_and_retrieve_through_the_sdk():
    body = models_body([model_info(MODEL), model_info("org/name:tag")])
    models = list(sdk_client(answering(body=body)).models.list())
    assert [m.id for m in models] == [MODEL, "org/name:tag"]
    one = sdk_client(answering(body=model_body(model_info(MODEL)))).models.retrieve(MODEL)
    assert Model.model_validate(model_body(model_info(MODEL))) == one
    assert one.created == 1735142223 and one.owned_by == "llamay" and one.object == "model"


@pytest.mark.parametrize("err, exc, type_, code", [
    (ProtocolError(400, "'n' is too big", "invalid_request", "n"), openai.BadRequestError, "invalid_request_error",
     None),
    (ProtocolError(400, "prompt too long", "context_length", "messages"), openai.BadRequestError,
     "exceed_context_size_error", "context_length_exceeded"),  # llama-server's type, OpenAI's code
    (ProtocolError(404, "no model", "not_found", "model"), openai.NotFoundError, "invalid_request_error",
     "model_not_found"),
    (ProtocolError(401, "bad key", "authentication"), openai.AuthenticationError, "invalid_request_error",
     "invalid_api_key"),
    (ProtocolError(503, "busy", "overloaded"), openai.InternalServerError, "server_error", None),
    (ProtocolError(500, "boom", "internal"), openai.InternalServerError, "server_error", None),
])
def test_error_bodies_as_the_sdk_reads_them(err, exc, type_, code):
    body = error_body(err)
    assert set(body["error"]) == {"message", "type", "param", "code"}
    client = sdk_client(answering(err.status, body))
    with pytest.raises(exc) as info:
        client.chat.completions.create(model=MODEL, messages=CHAT["messages"])
    assert info.value.body == body["error"] and info.value.message.endswith(err.message)
    assert (info.value.type, info.value.code, info.value.param) == (type_, code, err.param)


def test_frames_are_compact_json_with_non_ascii_kept():
    out = ChatOutput(parse_chat({**CHAT, "stream": True}), meta())
    frame = out.feed(Delta(0, content="é"))[-1]
    assert frame.startswith("data: {") and frame.endswith("}\n\n") and "é" in frame and ", " not in frame
