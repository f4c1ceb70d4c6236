"""Tool calls through `llamay serve` with the official openai, anthropic and ollama clients on the default
model (its template has no tool support: llama.cpp's generic JSON form, forced by the grammar). Calls
validate against the offered schemas (jsonschema), streamed calls equal whole ones, and tool results go
back into the next prompt."""
import json

import anthropic
import httpx
import jsonschema
import ollama
import openai
import pytest

from llamay.server.render import render_plan
from llamay.server.protocol.anthropic import parse_messages
from llamay.server.protocol.ollama import parse_chat as parse_ollama_chat
from llamay.server.protocol.openai_chat import parse_chat

pytestmark = pytest.mark.model

WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                                   "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                  "required": ["city", "days"]}
TIME_SCHEMA = {"type": "object", "properties": {"tz": {"enum": ["CET", "UTC", "PST"]}}, "required": ["tz"]}
SCHEMAS = {"get_weather": WEATHER_SCHEMA, "get_time": TIME_SCHEMA}
TOOLS = [{"type": "function", "function": {"name": n, "description": f"{n.replace('_', ' ')}", "parameters": s}}
         for n, s in SCHEMAS.items()]
ASK = [{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}]
RESULT = "Sunny, 18 degrees Celsius, light wind from the west"


@pytest.fixture(scope="module")
def oai(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def claude(url):
    return anthropic.Anthropic(base_url=url, api_key="x", max_retries=0)


def _prompt_text(server, req) -> str:
    """The prompt the live server renders for a parsed request (its model's template, via the tool plan)."""
    loaded = next(iter(server.registry.loaded.values()))
    ids, _ = render_plan(loaded, req)
    return loaded.llm.tokenizer.decode(ids)


def _check(name: str, arguments: dict | str) -> dict:
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    assert name in SCHEMAS
    jsonschema.validate(args, SCHEMAS[name])
    return args


def test_openai_required_call_streamed_and_round_trip(oai, live_server, model):
    kw = dict(model=model, messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
              temperature=0, max_tokens=80)
    whole = oai.chat.completions.create(**kw)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    _check(call.function.name, call.function.arguments)
    with oai.chat.completions.stream(**kw) as stream:
        streamed = stream.get_final_completion().choices[0]
    assert streamed.finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in streamed.message.tool_calls] == \
        [(call.function.name, json.loads(call.function.arguments))]

    history = ASK + [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": RESULT}]
    after = oai.chat.completions.create(model=model, messages=history, tools=TOOLS, tool_choice="none",
                                        temperature=0, max_tokens=24)
    assert after.choices[0].finish_reason in ("stop", "length") and after.choices[0].message.content
    assert not after.choices[0].message.tool_calls
    assert after.usage.prompt_tokens_details.cached_tokens > 100  # the tools' system prompt is reused
    assert RESULT in _prompt_text(live_server, parse_chat({"model": model, "messages": history, "tools": TOOLS}))


def test_openai_sampled_calls_stay_on_schema(oai, model):
    out = oai.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice="required",
                                      temperature=1.0, seed=5, n=3, max_tokens=120)
    complete = [c for c in out.choices if c.finish_reason == "tool_calls"]
    assert complete
    for c in complete:
        for call in c.message.tool_calls:
            _check(call.function.name, call.function.arguments)


def test_openai_named_function_is_the_one_called(oai, model):
    for seed in (1, 2):
        out = oai.chat.completions.create(
            model=model, messages=ASK, tools=TOOLS, temperature=1.0, seed=seed, max_tokens=60,
            tool_choice={"type": "function", "function": {"name": "get_time"}})
        calls = out.choices[0].message.tool_calls
        assert calls and all(c.function.name == "get_time" for c in calls)
        _check("get_time", calls[0].function.arguments)


def test_openai_tool_choice_errors(oai, model):
    with pytest.raises(openai.BadRequestError, match="nope"):
        oai.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                    tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model=model, messages=ASK, tool_choice="required")


def test_a_tool_schema_the_compiler_refuses_is_a_400(oai, model):
    bad = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "format": "no-such-format"}}}}}]
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=model, messages=ASK, tools=bad, tool_choice="required")
    assert "no-such-format" in str(e.value) and e.value.body["param"] == "tools"


def test_openai_auto_answers_or_calls_on_schema(oai, model):
    out = oai.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello."}],
                                      tools=TOOLS, temperature=0, max_tokens=40)
    message = out.choices[0].message
    for call in message.tool_calls or []:
        _check(call.function.name, call.function.arguments)
    assert message.tool_calls or message.content
    assert not (message.content or "").startswith('{"response"')  # the generic wrapper is unwrapped


def _anthropic_tools():
    return [{"name": t["function"]["name"], "description": t["function"]["description"],
             "input_schema": t["function"]["parameters"]} for t in TOOLS]


def test_anthropic_tool_use_streamed_and_round_trip(claude, live_server, model):
    kw = dict(model=model, max_tokens=80, messages=ASK, tools=_anthropic_tools(),
              tool_choice={"type": "any", "disable_parallel_tool_use": True}, extra_body={"temperature": 0})
    msg = claude.messages.create(**kw)
    assert msg.stop_reason == "tool_use"
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].id.startswith("toolu_")
    _check(uses[0].name, uses[0].input)
    with claude.messages.stream(**kw) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [(uses[0].name, uses[0].input)]

    history = ASK + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                                   "content": RESULT}]}]
    after = claude.messages.create(model=model, max_tokens=24, messages=history, tools=_anthropic_tools(),
                                   tool_choice={"type": "none"}, extra_body={"temperature": 0})
    assert after.stop_reason in ("end_turn", "max_tokens")
    assert after.content and after.content[0].type == "text" and after.content[0].text
    assert after.usage.cache_read_input_tokens > 100
    assert RESULT in _prompt_text(live_server, parse_messages({"model": model, "max_tokens": 8, "messages": history,
                                                       "tools": _anthropic_tools()}))


def test_anthropic_named_tool(claude, model):
    msg = claude.messages.create(model=model, max_tokens=60, messages=ASK, tools=_anthropic_tools(),
                                 tool_choice={"type": "tool", "name": "get_time", "disable_parallel_tool_use": True},
                                 extra_body={"temperature": 1.0, "seed": 3})
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert uses and all(b.name == "get_time" for b in uses)
    _check("get_time", uses[0].input)


def test_ollama_tools_streamed_and_round_trip(url, live_server, model):
    client = ollama.Client(host=url)
    ask = [{"role": "user", "content": "Call get_weather for Paris, 3 days."}]
    options = {"temperature": 0, "num_predict": 80}
    whole = client.chat(model=model, messages=ask, tools=TOOLS, options=options)
    calls = whole.message.tool_calls
    assert calls, whole.message.content
    for call in calls:
        assert isinstance(call.function.arguments, dict)
        _check(call.function.name, call.function.arguments)
    streamed = [c for part in client.chat(model=model, messages=ask, tools=TOOLS, options=options, stream=True)
                for c in part.message.tool_calls or []]
    assert [(c.function.name, dict(c.function.arguments)) for c in streamed] == \
        [(c.function.name, dict(c.function.arguments)) for c in calls]

    history = ask + [whole.message.model_dump(exclude_none=True),
                     {"role": "tool", "content": RESULT, "tool_name": calls[0].function.name}]
    after = client.chat(model=model, messages=history, options={"temperature": 0, "num_predict": 24})
    assert after.message.content and after.done
    assert RESULT in _prompt_text(live_server, parse_ollama_chat({"model": model, "messages": history}))


def test_context_chat_calls_tools_and_keeps_the_call_for_the_next_turn(oai, url, model):
    """An agent loop on a named context: the call is recorded as the assistant's turn, so the next turn
    (the tool's result) re-renders the same prefix and computes only the result and what follows."""
    with httpx.Client(base_url=url, timeout=120) as http:
        ctx = http.post("/v1/contexts", json={"model": model, "messages": ASK, "tools": TOOLS}).json()
        try:
            first = oai.post(f"/contexts/{ctx['id']}/chat", cast_to=openai.types.chat.ChatCompletion, body={
                "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False, "temperature": 0,
                "max_tokens": 60})
            call = first.choices[0].message.tool_calls[0]
            assert first.choices[0].finish_reason == "tool_calls"
            _check(call.function.name, call.function.arguments)
            held = http.get(f"/v1/contexts/{ctx['id']}").json()["tokens"]
            result = {"role": "tool", "tool_call_id": call.id, "content": RESULT}
            second = oai.post(f"/contexts/{ctx['id']}/chat", cast_to=openai.types.chat.ChatCompletion, body={
                "messages": [result], "tools": TOOLS, "tool_choice": "none", "temperature": 0, "max_tokens": 16})
            assert second.choices[0].message.content and not second.choices[0].message.tool_calls
            # the recorded call renders as the tokens the model generated: only the turn after it is new
            assert second.usage.prompt_tokens_details.cached_tokens >= held - 2
        finally:
            http.delete(f"/v1/contexts/{ctx['id']}")


def test_openai_responses_function_call_and_output(oai, model):
    tools = [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
              "parameters": t["function"]["parameters"]} for t in TOOLS]
    first = oai.responses.create(model=model, input=ASK[0]["content"], tools=tools, tool_choice="required",
                                 parallel_tool_calls=False, temperature=0, max_output_tokens=60)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and first.status == "completed"
    _check(calls[0].name, calls[0].arguments)
    with oai.responses.stream(model=model, input=ASK[0]["content"], tools=tools, tool_choice="required",
                              parallel_tool_calls=False, temperature=0, max_output_tokens=60) as stream:
        streamed = [i for i in stream.get_final_response().output if i.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in streamed] == [(calls[0].name, json.loads(calls[0].arguments))]
    after = oai.responses.create(model=model, tools=tools, tool_choice="none", temperature=0, max_output_tokens=16,
                                 input=[{"role": "user", "content": ASK[0]["content"]}, calls[0].model_dump(),
                                        {"type": "function_call_output", "call_id": calls[0].call_id,
                                         "output": RESULT}])
    assert after.output_text
