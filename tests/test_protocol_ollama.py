"""Ollama native API converters (server/protocol/ollama.py, ollama_out.py), with no server and no model.

Expected shapes come from the official client (ollama==0.6.3): its request bodies are what we parse, and its
pydantic types and its own stream loop (an httpx MockTransport stands in for the network) read what we
write. Durations are checked against the table of Go's own time.ParseDuration tests (src/time/time_test.go)
and the wire reference (shared/docs/protocols/ollama.md)."""
from __future__ import annotations

import calendar
import json
from datetime import UTC, datetime

import httpx
import ollama
import pytest
from ollama._types import (
    ChatResponse,
    GenerateResponse,
    ListResponse,
    Message,
    Options,
    ProcessResponse,
    ShowResponse,
)

from llamay.events import Delta, Finish, TokenLogprob, TopLogprob, Usage
from llamay.server.protocol.base import ModelInfo, ProtocolError, ResponseMeta
from llamay.server.protocol.ollama import (
    OllamaChatOutput,
    OllamaGenerateOutput,
    error_body,
    parse_chat,
    parse_copy,
    parse_delete,
    parse_generate,
    parse_go_duration,
    parse_keep_alive,
    parse_show,
    ps_body,
    rfc3339_nano,
    show_body,
    stream_error,
    tags_body,
    version_body,
)
from llamay.server.protocol.request import FRESH_SEED, OllamaOptions

SECOND, MINUTE, HOUR = 10**9, 60 * 10**9, 3600 * 10**9
MS, US = 10**6, 10**3
FIXED_NS = 1_700_000_000_123_456_789


def clock() -> int:
    return FIXED_NS

# ------------------------------------------------------------------------------------ Go durations

# Go's parseDurationTests (src/time/time_test.go), values in nanoseconds.
GO_DURATIONS = [
    ("0", 0), ("5s", 5 * SECOND), ("30s", 30 * SECOND), ("1478s", 1478 * SECOND),
    ("-5s", -5 * SECOND), ("+5s", 5 * SECOND), ("-0", 0), ("+0", 0),
    ("5.0s", 5 * SECOND), ("5.6s", 5 * SECOND + 600 * MS), ("5.s", 5 * SECOND), (".5s", 500 * MS),
    ("1.0s", SECOND), ("1.00s", SECOND), ("1.004s", SECOND + 4 * MS), ("1.0040s", SECOND + 4 * MS),
    ("100.00100s", 100 * SECOND + MS),
    ("10ns", 10), ("11us", 11 * US), ("12\u00b5s", 12 * US), ("12\u03bcs", 12 * US), ("13ms", 13 * MS),
    ("14s", 14 * SECOND), ("15m", 15 * MINUTE), ("16h", 16 * HOUR),
    ("3h30m", 3 * HOUR + 30 * MINUTE), ("10.5s4m", 4 * MINUTE + 10 * SECOND + 500 * MS),
    ("-2m3.4s", -(2 * MINUTE + 3 * SECOND + 400 * MS)),
    ("1h2m3s4ms5us6ns", HOUR + 2 * MINUTE + 3 * SECOND + 4 * MS + 5 * US + 6),
    ("39h9m14.425s", 39 * HOUR + 9 * MINUTE + 14 * SECOND + 425 * MS),
    ("52763797000ns", 52763797000), ("0.3333333333333333333h", 20 * MINUTE),
    ("9007199254740993ns", (1 << 53) + 1), ("9223372036854775807ns", (1 << 63) - 1),
    ("9223372036854775.807us", (1 << 63) - 1), ("9223372036s854ms775us807ns", (1 << 63) - 1),
    ("-9223372036854775808ns", -(1 << 63)), ("-9223372036854775.808us", -(1 << 63)),
    ("-9223372036s854ms775us808ns", -(1 << 63)), ("-2562047h47m16.854775808s", -(1 << 63)),
    ("0.100000000000000000000h", 6 * MINUTE),
    ("0.830103483285477580700h", 49 * MINUTE + 48 * SECOND + 372539827),
]

# Go's parseDurationErrorTests: input, and what the error message must contain.
GO_DURATION_ERRORS = [
    ("", '""'), ("3", '"3"'), ("-", '"-"'), ("s", '"s"'), (".", '"."'), ("-.", '"-."'), (".s", '".s"'),
    ("+.s", '"+.s"'), ("1d", '"1d"'),
    ("9223372036854775810ns", '"9223372036854775810ns"'), ("9223372036854775808ns", '"9223372036854775808ns"'),
    ("-9223372036854775809ns", '"-9223372036854775809ns"'), ("9223372036854776us", '"9223372036854776us"'),
    ("3000000h", '"3000000h"'), ("9223372036854775.808us", '"9223372036854775.808us"'),
    ("9223372036854ms775us808ns", '"9223372036854ms775us808ns"'),
]


@pytest.mark.parametrize("text,want", GO_DURATIONS)
def test_go_duration_values(text, want):
    assert parse_go_duration(text) == want


@pytest.mark.parametrize("text,fragment", GO_DURATION_ERRORS)
def test_go_duration_errors(text, fragment):
    with pytest.raises(ValueError) as e:
        parse_go_duration(text)
    assert fragment in str(e.value)


@pytest.mark.parametrize("value,seconds", [
    ("10m", 600.0), ("24h", 86400.0), ("1h30m", 5400.0), ("5m", 300.0), ("0", 0.0),  # doc §9 strings
    ("-1m", -1.0), (-1, -1.0), (-0.5, -1.0),  # negative: forever
    (3600, 3600.0), (1.5, 1.5), (0, 0.0), (None, None),  # numbers are seconds
])
def test_keep_alive_forms(value, seconds):
    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value,fragment", [
    ("3600", "missing unit"), ("-1", "missing unit"), ("1d", "unknown unit"),  # doc §9: a unit is needed
    (True, "Unsupported type"), ([5], "Unsupported type"), ({"s": 1}, "Unsupported type"),
])
def test_keep_alive_rejected(value, fragment):
    with pytest.raises(ProtocolError) as e:
        parse_generate({"model": "m", "prompt": "x", "keep_alive": value})
    assert (e.value.status, e.value.kind, e.value.param) == (400, "invalid_request", "keep_alive")
    assert fragment in e.value.message

# --------------------------------------------------------------------------- a fake server, pure converters


class FakeOllama:
    """Routes the official client's requests through our converters; `script` is the engine's events."""

    def __init__(self, script=(), models=(), error_after=None):
        self.script, self.models, self.error_after = list(script), list(models), error_after
        self.requests = []

    def client(self) -> ollama.Client:
        return ollama.Client(host="http://fake:11434", transport=httpx.MockTransport(self.handle))

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else None
        try:
            return self._route(request.method, path, body)
        except ProtocolError as err:
            return httpx.Response(err.status, json=error_body(err))

    def _route(self, method, path, body):
        if path in ("/api/generate", "/api/chat"):
            req = (parse_generate if path == "/api/generate" else parse_chat)(body)
            self.requests.append(req)
            out = (OllamaGenerateOutput if path == "/api/generate" else OllamaChatOutput)(req, META, clock)
            if req.ollama.load:
                return httpx.Response(200, json=out.load_body())
            return self._generate(req, out)
        if path == "/api/tags":
            return httpx.Response(200, json=tags_body(self.models))
        if path == "/api/ps":
            return httpx.Response(200, json=ps_body(self.models, clock))
        if path == "/api/show":
            info = next(m for m in self.models if m.name == parse_show(body))
            return httpx.Response(200, json=show_body(info, bool(body.get("verbose"))))
        if path == "/api/delete":
            self.requests.append(parse_delete(body))
            return httpx.Response(200)
        if path == "/api/copy":
            self.requests.append(parse_copy(body))
            return httpx.Response(200)
        return httpx.Response(404, text="404 page not found")

    def _generate(self, req, out):
        frames = []
        for i, ev in enumerate(self.script):
            if self.error_after is not None and i == self.error_after:
                frames.append(stream_error(ProtocolError(500, "runner crashed", "internal")))
                break
            frames += out.feed(ev)
        frames += out.end()
        if req.stream:
            return httpx.Response(200, content="".join(frames).encode(),
                                  headers={"content-type": "application/x-ndjson"})
        return httpx.Response(200, json=out.body())


META = ResponseMeta(id="r1", created=1_700_000_000, model="smollm2:135m", created_ns=FIXED_NS)
USAGE = Usage(prompt_tokens=12, cached_tokens=9, completion_tokens=3, load_ns=5_000, prompt_eval_ns=7_000,
              eval_ns=11_000, total_ns=30_000)
SCRIPT = [Delta(0, content="Hel"), Delta(0, content=""), Delta(0, content="lo ✓"), Delta(0, content="!"),
          Finish(0, "length", USAGE, context=[1, 2, 3, 4])]
THINK_SCRIPT = [Delta(0, reasoning="Let me "), Delta(0, reasoning="see."), Delta(0, content="42"),
                Finish(0, "stop", USAGE)]


def check_final(final, reason="length"):
    """The metrics as the client reads them: prompt_eval_count is what was evaluated (12 - 9 cached)."""
    assert final.done is True and final.done_reason == reason
    assert (final.total_duration, final.load_duration, final.prompt_eval_count, final.prompt_eval_duration,
            final.eval_count, final.eval_duration) == (30_000, 5_000, 3, 7_000, 3, 11_000)

# ----------------------------------------------------------------------------------------- generate


def test_generate_request_from_client():
    fake = FakeOllama(SCRIPT)
    opts = Options(temperature=0.2, top_k=7, top_p=0.5, num_predict=64, seed=42, stop=["\n\n"], num_ctx=2048,
                   repeat_penalty=1.3, repeat_last_n=32, presence_penalty=0.1, frequency_penalty=0.2)
    fake.client().generate(model="smollm2:135m", prompt="Why?", system="Be brief.", suffix="end",
                           options=opts, keep_alive="1h30m", format="json", context=[5, 6], think=True)
    req = fake.requests[0]
    assert (req.model, req.prompt, req.system, req.suffix, req.raw) == ("smollm2:135m", "Why?", "Be brief.", "end",
                                                                       False)
    assert req.stream is False  # the client sends stream: false unless asked
    assert (req.max_tokens, req.stop, req.keep_alive, req.format, req.context) == (64, ["\n\n"], 5400.0, "json",
                                                                                   [5, 6])
    assert req.run_sampling().given() == {"temperature": 0.2, "top_k": 7, "top_p": 0.5, "min_p": 0.0,
                                          "repeat_penalty": 1.3, "repeat_last_n": 32, "presence_penalty": 0.1,
                                          "frequency_penalty": 0.2, "seed": 42}
    assert req.ollama == OllamaOptions(num_predict=64, think=True)  # num_ctx: accepted, not run


def test_generate_defaults_follow_ollama():
    """Unset options take Ollama's server defaults (doc §8); seed -1 (random) is SamplingParams' None."""
    req = parse_generate({"model": "m", "prompt": "hi"})
    assert req.stream is True  # doc §0: absent stream means streaming
    assert req.run_sampling().given() == {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.0,
                                          "repeat_penalty": 1.0, "repeat_last_n": 64, "presence_penalty": 0.0,
                                          "frequency_penalty": 0.0}  # no seed: a fresh one
    assert (req.max_tokens, req.stop, req.keep_alive, req.ollama) == (None, [], None, OllamaOptions())
    assert parse_generate({"model": "m", "prompt": "hi", "options": {"seed": -1}}).sampling.seed == FRESH_SEED


def test_sampling_layers_sent_then_model_then_server_then_ollama():
    """What the request set wins; a stored model's params come next (and its num_predict where the request
    sent none), then serve's flags, then Ollama's defaults."""
    from types import SimpleNamespace

    from llamay.server.registry import Settings
    from llamay.server.prepare import with_model_defaults, with_server_defaults
    stored = SimpleNamespace(system=None, template=None, params={"temperature": 0.3, "top_k": 5, "num_predict": 9})
    req = parse_generate({"model": "m", "prompt": "x", "options": {"top_k": 7}})
    req = with_server_defaults(req, Settings(sampling={"temperature": 0.1, "top_p": 0.5}))
    run = with_model_defaults(req, stored)
    assert (run.run_sampling().temperature, run.run_sampling().top_k, run.run_sampling().top_p) == (0.3, 7, 0.5)
    assert run.run_sampling().min_p == 0.0 and run.max_tokens == 9 and req.max_tokens is None
    sent = with_model_defaults(parse_generate({"model": "m", "prompt": "x", "options": {"num_predict": -1}}), stored)
    assert sent.max_tokens is None


@pytest.mark.parametrize("n_predict", [-1, -2, 0])
def test_num_predict_unlimited(n_predict):
    assert parse_generate({"model": "m", "prompt": "x", "options": {"num_predict": n_predict}}).max_tokens is None


def test_options_types_like_go():
    """Numbers for int options are truncated; unknown and retired keys are ignored, whatever their type."""
    req = parse_generate({"model": "m", "prompt": "x", "options": {
        "top_k": 5.9, "temperature": 1, "stop": "###", "num_thread": 2, "use_mmap": False, "typical_p": 0.7,
        "mirostat": "on", "tfs_z": [1], "penalize_newline": "yes", "made_up": {}, "top_p": None}})
    run = req.run_sampling()
    assert (run.top_k, run.temperature, run.top_p) == (5, 1.0, 0.9)
    assert isinstance(run.temperature, float)
    assert req.stop == ["###"]  # num_thread, use_mmap, typical_p: checked, accepted, not run


@pytest.mark.parametrize("key,value,fragment", [
    ("top_k", "40", "must be of type integer"), ("top_k", True, "must be of type integer"),
    ("temperature", "hot", "must be of type float32"), ("use_mmap", 1, "must be of type boolean"),
    ("stop", [1], "must be of an array of strings"), ("stop", 3, "must be of type array"),
])
def test_options_wrong_type(key, value, fragment):
    with pytest.raises(ProtocolError) as e:
        parse_generate({"model": "m", "prompt": "x", "options": {key: value}})
    assert e.value.status == 400 and e.value.param == f"options.{key}"
    assert fragment in e.value.message and key in e.value.message


@pytest.mark.parametrize("body,param", [
    ({"model": 3}, "model"),
    ({"model": "m", "prompt": 5}, "prompt"), ({"model": "m", "prompt": "x", "stream": "yes"}, "stream"),
    ({"model": "m", "prompt": "x", "raw": True, "system": "s"}, "raw"),
    ({"model": "m", "prompt": "x", "raw": True, "context": [1]}, "raw"),
    ({"model": "m", "prompt": "x", "raw": True, "template": "{{ .Prompt }}"}, "raw"),
    ({"model": "m", "prompt": "x", "images": ["aGVsbG8="]}, "images"),
    ({"model": "m", "prompt": "x", "format": "yaml"}, "format"), ({"model": "m", "prompt": "x", "format": 3}, "format"),
    ({"model": "m", "prompt": "x", "think": "extreme"}, "think"),
    ({"model": "m", "prompt": "x", "top_logprobs": 21}, "top_logprobs"),
    ({"model": "m", "prompt": "x", "context": ["a"]}, "context"),
    ({"model": "m", "prompt": "x", "options": [1]}, "options"),
])
def test_generate_bad_requests(body, param):
    with pytest.raises(ProtocolError) as e:
        parse_generate(body)
    assert (e.value.status, e.value.kind, e.value.param) == (400, "invalid_request", param)


def test_raw_message_is_ollamas():
    with pytest.raises(ProtocolError) as e:
        parse_generate({"model": "m", "prompt": "x", "raw": True, "system": "s"})
    assert e.value.message == "raw mode does not support template, system, or context"  # doc §3


def test_generate_format_and_think_kept():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = parse_generate({"model": "m", "prompt": "x", "format": schema, "think": "high", "logprobs": True,
                          "top_logprobs": 3, "truncate": False})
    assert (req.format, req.ollama.think, req.logprobs, req.top_logprobs) == (schema, "high", True, 3)
    assert req.ollama.truncate is False
    assert parse_generate({"model": "m", "prompt": "x", "format": ""}).format is None


def test_generate_stream_read_by_client():
    parts = list(FakeOllama(SCRIPT).client().generate(model="smollm2:135m", prompt="hi", stream=True))
    assert "".join(p.response for p in parts) == "Hello ✓!"
    assert [p.done for p in parts] == [False, False, False, True]  # the empty Delta sends nothing
    check_final(parts[-1])
    assert list(parts[-1].context) == [1, 2, 3, 4]
    assert all(p.model == "smollm2:135m" and p.created_at == "2023-11-14T22:13:20.123456789Z" for p in parts)
    assert parts[0].context is None and parts[0].done_reason is None


def test_generate_whole_body_read_by_client():
    resp = FakeOllama(SCRIPT).client().generate(model="smollm2:135m", prompt="hi")
    assert isinstance(resp, GenerateResponse) and resp.response == "Hello ✓!"
    check_final(resp)
    assert list(resp.context) == [1, 2, 3, 4]


def test_generate_raw_has_no_context():
    resp = FakeOllama(SCRIPT).client().generate(model="m", prompt="hi", raw=True)
    assert resp.context is None and resp.response == "Hello ✓!"


def test_thinking_field():
    parts = list(FakeOllama(THINK_SCRIPT).client().generate(model="m", prompt="q", stream=True, think=True))
    assert "".join(p.thinking or "" for p in parts) == "Let me see."
    assert "".join(p.response for p in parts) == "42"
    whole = FakeOllama(THINK_SCRIPT).client().generate(model="m", prompt="q", think=True)
    assert (whole.thinking, whole.response, whole.done_reason) == ("Let me see.", "42", "stop")


def test_zero_metrics_omitted_and_non_ascii_kept():
    req = parse_generate({"model": "m", "prompt": "x"})
    out = OllamaGenerateOutput(req, META, clock)
    lines = out.feed(Delta(0, content="é")) + out.feed(Finish(0, "stop", Usage(prompt_tokens=4, cached_tokens=0)))
    assert lines[0] == '{"model":"smollm2:135m","created_at":"2023-11-14T22:13:20.123456789Z","response":"é",' \
                       '"done":false}\n'
    final = json.loads(lines[1])
    assert final["prompt_eval_count"] == 4
    assert not {"total_duration", "load_duration", "eval_count", "eval_duration", "context"} & final.keys()
    assert out.end() == []


def test_logprobs_read_by_client():
    lp = TokenLogprob("Hi", -0.25, [72, 105], [TopLogprob("Hi", -0.25, [72, 105]), TopLogprob("Yo", -1.5, [89, 111])])
    script = [Delta(0, content="Hi", logprobs=[lp]), Finish(0, "stop", USAGE)]
    resp = FakeOllama(script).client().generate(model="m", prompt="x", logprobs=True, top_logprobs=1)
    assert [(x.token, x.logprob) for x in resp.logprobs] == [("Hi", -0.25)]
    assert [(t.token, t.logprob) for t in resp.logprobs[0].top_logprobs] == [("Hi", -0.25)]
    plain = FakeOllama(script).client().generate(model="m", prompt="x")
    assert plain.logprobs is None

# --------------------------------------------------------------------------------------------- chat


def test_chat_request_from_client():
    fake = FakeOllama(THINK_SCRIPT)
    call = Message.ToolCall(function=Message.ToolCall.Function(name="get_weather", arguments={"city": "Tokyo"}))
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                             "parameters": {"type": "object", "required": ["city"],
                                                            "properties": {"city": {"type": "string"}}}}}
    messages = [{"role": "SYSTEM", "content": "Be brief."}, {"role": "user", "content": "Weather?"},
                Message(role="assistant", content="", tool_calls=[call]),
                Message(role="tool", content="sunny", tool_name="get_weather")]
    fake.client().chat(model="m", messages=messages, tools=[tool], options={"temperature": 0.1}, keep_alive=-1,
                       think="low")
    req = fake.requests[0]
    assert req.messages[0] == {"role": "system", "content": "Be brief."}
    assert req.messages[2]["tool_calls"] == [{"type": "function",
                                              "function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}}]
    assert req.messages[3] == {"role": "tool", "content": "sunny", "name": "get_weather"}
    assert req.tools[0]["function"]["name"] == "get_weather"
    assert (req.sampling.temperature, req.keep_alive, req.ollama.think, req.prompt) == (0.1, -1.0, "low",
                                                                                               None)


def test_chat_stream_read_by_client():
    parts = list(FakeOllama(THINK_SCRIPT).client().chat(model="m", messages=[{"role": "user", "content": "q"}],
                                                         stream=True))
    assert all(isinstance(p, ChatResponse) and p.message.role == "assistant" for p in parts)
    assert "".join(p.message.content for p in parts) == "42"
    assert "".join(p.message.thinking or "" for p in parts) == "Let me see."
    check_final(parts[-1], "stop")
    assert parts[-1].message.content == "" and "context" not in parts[-1].model_fields_set


def test_chat_whole_body_read_by_client():
    resp = FakeOllama(THINK_SCRIPT).client().chat(model="m", messages=[{"role": "user", "content": "q"}])
    assert (resp.message.content, resp.message.thinking) == ("42", "Let me see.")
    check_final(resp, "stop")


@pytest.mark.parametrize("message,param", [
    ({"role": "user", "content": "x", "images": ["aGVsbG8="]}, "messages[0].images"),
    ({"role": "user", "content": ["part"]}, "messages[0].content"),
    ({"content": "x"}, "messages[0].role"),
    ({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
     "messages[0].tool_calls[0].function.arguments"),
    ({"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": {}}}]},
     "messages[0].tool_calls[0].function.name"),
    ("hello", "messages[0]"),
])
def test_chat_bad_messages(message, param):
    with pytest.raises(ProtocolError) as e:
        parse_chat({"model": "m", "messages": [message]})
    assert (e.value.status, e.value.param) == (400, param)


def test_chat_rejects_non_list_messages_and_tools():
    for body, param in (({"model": "m", "messages": "hi"}, "messages"),
                        ({"model": "m", "messages": [], "tools": [1]}, "tools")):
        with pytest.raises(ProtocolError) as e:
            parse_chat(body)
        assert e.value.param == param

# ------------------------------------------------------------------------------------- load / unload


@pytest.mark.parametrize("keep_alive,reason", [(None, "load"), ("5m", "load"), (0, "unload"), ("0", "unload"),
                                               ("0s", "unload"), (-1, "load")])
def test_generate_load_and_unload(keep_alive, reason):
    fake = FakeOllama()
    resp = fake.client().generate(model="m", keep_alive=keep_alive)  # the client's own load form: no prompt
    assert (resp.done, resp.done_reason, resp.response, resp.model) == (True, reason, "", "smollm2:135m")
    assert fake.requests[0].ollama.load == reason


@pytest.mark.parametrize("keep_alive,reason", [(None, "load"), (0, "unload")])
def test_chat_load_and_unload(keep_alive, reason):
    fake = FakeOllama()
    resp = fake.client().chat(model="m", messages=[], keep_alive=keep_alive)
    assert (resp.done, resp.done_reason, resp.message.role, resp.message.content) == (True, reason, "assistant", "")
    assert fake.requests[0].ollama.load == reason


@pytest.mark.parametrize("reason", ["load", "unload"])
def test_load_reason_through_finish(reason):
    """A Finish with reason load / unload (how the route answers) reads as Ollama's load reply."""
    out = OllamaChatOutput(parse_chat({"model": "m", "messages": [], "stream": True}), META, clock)
    out.feed(Finish(0, reason, Usage(load_ns=900, total_ns=900)))
    resp = ChatResponse.model_validate(out.body())
    assert (resp.done, resp.done_reason, resp.load_duration, resp.message.content) == (True, reason, 900, "")
    assert resp.eval_count is None and resp.prompt_eval_count is None


def test_non_empty_prompt_is_no_load():
    assert parse_generate({"model": "m", "prompt": " "}).ollama.load is None
    assert parse_generate({"model": "m", "prompt": "x", "keep_alive": 0}).ollama.load is None

# ---------------------------------------------------------------------------------------------- errors


def test_error_bodies():
    err = ProtocolError(404, "model 'x' not found", "not_found")
    assert error_body(err) == {"error": "model 'x' not found"}
    assert stream_error(err) == '{"error":"model \'x\' not found"}\n'


def test_error_status_reaches_client():
    with pytest.raises(ollama.ResponseError) as e:
        FakeOllama().client().generate(model="m", prompt="x", options={"top_k": "many"})
    assert e.value.status_code == 400 and 'option "top_k" must be of type integer' in e.value.error


def test_mid_stream_error_raised_by_client():
    parts = FakeOllama(SCRIPT, error_after=2).client().generate(model="m", prompt="x", stream=True)
    got = []
    with pytest.raises(ollama.ResponseError) as e:
        for p in parts:
            got.append(p.response)
    assert got == ["Hel"] and e.value.error == "runner crashed"

# -------------------------------------------------------------------------------------- time stamps


def test_rfc3339_nano_matches_doc_example():
    ns = calendar.timegm((2023, 8, 4, 8, 52, 19)) * SECOND + 385406455
    assert rfc3339_nano(ns) == "2023-08-04T08:52:19.385406455Z"  # doc §3, intermediate line
    assert rfc3339_nano(ns - 385406455) == "2023-08-04T08:52:19Z"  # Go trims a zero fraction
    assert rfc3339_nano(ns - 385406455 + 110811000) == "2023-08-04T08:52:19.110811Z"  # doc §0 style
    parsed = datetime.fromisoformat(rfc3339_nano(ns))
    assert parsed == datetime(2023, 8, 4, 8, 52, 19, 385406, tzinfo=UTC)

# ---------------------------------------------------------------------------------------- model listing


def model_info(name, loaded=False, expires_at=None, **metadata) -> ModelInfo:
    base = {"general.architecture": "llama", "llama.context_length": 8192, "llama.block_count": 30,
            "tokenizer.ggml.merges": ["a b"] * 9, "tokenizer.ggml.bos_token_id": 1}
    return ModelInfo(name=name, path=f"/store/{name}.gguf", size=100_000_000, digest="ab" * 32,
                     modified_at=1_700_000_000.5, architecture="llama", parameter_size="135M",
                     quantization_level="Q4_1", context_length=4096, metadata={**base, **metadata},
                     template="{% for m in messages %}{{ m.content }}{% endfor %}", loaded=loaded,
                     expires_at=expires_at, size_vram=0)


def test_tags_read_by_client():
    models = [model_info("smollm2:135m"), model_info("gemma3:270m")]
    resp = FakeOllama(models=models).client().list()
    assert isinstance(resp, ListResponse)
    assert [m.model for m in resp.models] == ["smollm2:135m", "gemma3:270m"]
    first = resp.models[0]
    assert (first.size, first.digest, first.details.format, first.details.family) == (100_000_000, "ab" * 32,
                                                                                      "gguf", "llama")
    assert (first.details.parameter_size, first.details.quantization_level) == ("135M", "Q4_1")
    assert first.modified_at == datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=UTC)
    assert ListResponse.model_validate(tags_body([])).models == []


def test_show_read_by_client():
    fake = FakeOllama(models=[model_info("smollm2:135m")])
    resp = fake.client().show("smollm2:135m")
    assert isinstance(resp, ShowResponse)
    assert resp.modelinfo["general.architecture"] == "llama" and resp.modelinfo["llama.context_length"] == 8192
    assert resp.modelinfo["tokenizer.ggml.merges"] == []  # arrays over 5 emptied unless verbose
    assert resp.capabilities == ["completion"]
    assert resp.details.family == "llama" and resp.template.startswith("{% for m")
    assert "FROM /store/smollm2:135m.gguf" in resp.modelfile and "num_ctx 4096" in resp.parameters
    verbose = ShowResponse.model_validate(show_body(model_info("m"), verbose=True))
    assert verbose.modelinfo["tokenizer.ggml.merges"] == ["a b"] * 9


def test_show_capabilities():
    tools = model_info("t")
    tools.template = "{% if tools %}{{ tools | tojson }}{% endif %}<think>"
    assert ShowResponse.model_validate(show_body(tools)).capabilities == ["completion", "tools", "thinking"]
    fim = model_info("f", **{"tokenizer.ggml.fim_pre_token_id": 1, "tokenizer.ggml.fim_suf_token_id": 2})
    assert show_body(fim)["capabilities"] == ["completion", "insert"]
    assert show_body(model_info("e", **{"llama.pooling_type": 1}))["capabilities"] == ["embedding"]


def test_show_model_info_numpy_values():
    np = pytest.importorskip("numpy")
    info = model_info("n", **{"llama.rope.freq_base": np.float32(10000.0), "tokenizer.ggml.token_type":
                              np.arange(3, dtype=np.int32)})
    body = json.loads(json.dumps(show_body(info)))
    assert body["model_info"]["llama.rope.freq_base"] == 10000.0
    assert body["model_info"]["tokenizer.ggml.token_type"] == [0, 1, 2]


def test_ps_read_by_client():
    models = [model_info("idle"), model_info("soon", loaded=True, expires_at=1_700_000_300.0),
              model_info("forever", loaded=True, expires_at=None)]
    resp = FakeOllama(models=models).client().ps()
    assert isinstance(resp, ProcessResponse)
    assert [m.model for m in resp.models] == ["forever", "soon"]  # loaded only, latest expiry first
    assert resp.models[1].expires_at == datetime(2023, 11, 14, 22, 18, 20, tzinfo=UTC)
    assert resp.models[0].expires_at.year > 2200  # never expires: Go's now + MaxInt64 ns
    assert (resp.models[1].size_vram, resp.models[1].context_length, resp.models[1].details.format) == (0, 4096,
                                                                                                        "gguf")


def test_name_requests():
    fake = FakeOllama()
    client = fake.client()
    client.delete("smollm2:135m")
    client.copy("smollm2:135m", "backup")
    assert fake.requests == ["smollm2:135m", ("smollm2:135m", "backup")]
    assert parse_show({"name": "old:latest"}) == "old:latest"  # the older alias
    assert parse_show({"model": "m", "name": "other", "verbose": True}) == "m"
    assert parse_delete({"name": "x"}) == "x"


@pytest.mark.parametrize("parse,body,param", [
    (parse_show, {}, "model"), (parse_delete, {"model": ""}, "model"), (parse_show, {"model": 1}, "model"),
    (parse_copy, {"source": "a"}, "destination"), (parse_copy, {"destination": "b"}, "source"),
])
def test_name_requests_missing(parse, body, param):
    with pytest.raises(ProtocolError) as e:
        parse(body)
    assert (e.value.status, e.value.param) == (400, param)


def test_version_body():
    assert version_body("0.33.0") == {"version": "0.33.0"}
