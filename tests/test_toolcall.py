"""Tool-call formats, grammars and the streaming parser.

References: the call text each family's own chat template renders (../shared/fixtures/templates), json for
string decoding, jsonschema for the arguments sampled under the grammars."""
import json
import random

import jsonschema
import numpy as np
import pytest
from conftest import SHARED
from test_toolcall_gemma import accepts as _accepts

from llamay.chat.template import ChatTemplate
from llamay.grammar import Grammar
from llamay.toolcall.formats import FORMATS, GENERIC, detect
from llamay.toolcall.grammar import arguments_schema, tool_grammar
from llamay.toolcall.jsonscan import StringDecoder, ValueEnd
from llamay.toolcall.parser import CallParser

TEMPLATES = SHARED / "fixtures" / "templates"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 9}},
    "required": ["city", "days"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Time now", "parameters": {
    "type": "object", "properties": {"tz": {"enum": ["CET", "UTC"]}}, "required": ["tz"]}}}
TOOLS = [WEATHER, TIME]
CALLS = [("get_weather", {"city": "Paris", "days": 2}), ("get_time", {"tz": "UTC"})]

# template file -> the family format its model writes calls in
FAMILIES = {
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "hermes",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": "hermes",
    "Qwen-Qwen2.5-7B-Instruct": "hermes",
    "Qwen-Qwen3-0.6B": "hermes",
    "Qwen-QwQ-32B": "hermes",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3",
    "meta-llama-Llama-3.3-70B-Instruct": "llama3",
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
    "Mistral-Small-3.2-24B-Instruct-2506": "mistral_args",
    "unsloth-mistral-Devstral-Small-2507": "mistral_args",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": "command_r7b",
    "google-gemma-4-31B-it": "gemma4",
    "google-gemma-2-2b-it": "generic",
}


def source(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


def rendered_calls(name: str, calls=CALLS) -> str:
    """The assistant turn with calls as the family's own template writes it (the text after the user's turn
    up to the template's end-of-turn)."""
    template = ChatTemplate(source(name), "<s>", "</s>")
    user = [{"role": "user", "content": "USER-TURN"}]
    calls_msg = {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"call{i}abcd", "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(calls)]}
    after = template.render(user + [calls_msg], add_generation_prompt=False, tools=TOOLS)
    prompt = template.render(user, add_generation_prompt=True, tools=TOOLS)
    if after.startswith(prompt):  # what the model writes after the generation prompt
        return after[len(prompt):]
    before = template.render(user, add_generation_prompt=False, tools=TOOLS)
    assert after.startswith(before)  # else: from the assistant's header on
    return after[len(before):]


def parse(fmt, text: str, rng: random.Random | None = None):
    """-> (content, [(name, arguments object)]), feeding text in random pieces."""
    parser, content, calls = CallParser(fmt), [], {}
    i = 0
    while i < len(text):
        n = rng.randint(1, 7) if rng else len(text)
        c, deltas = parser.feed(text[i:i + n])
        content.append(c)
        _collect(calls, deltas)
        i += n
    c, deltas = parser.end()
    content.append(c)
    _collect(calls, deltas)
    return "".join(content), [(n, json.loads(a) if a else None) for n, a in calls.values()]


def _collect(calls: dict, deltas):
    for d in deltas:
        if d.name is not None:
            assert d.index == len(calls) and d.id.startswith("call_") and len(d.id) == 29
            calls[d.index] = [d.name, ""]
        else:
            assert d.id is None
        calls[d.index][1] += d.arguments


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_detects_family_format(name):
    assert detect(source(name)).name == FAMILIES[name]


def test_no_tool_support_is_generic():
    assert detect(source("meta-llama-Llama-3.1-8B-Instruct"), supports_tools=False) is GENERIC


@pytest.mark.parametrize("name", [n for n, f in FAMILIES.items() if f != "generic"])
def test_parses_what_the_template_renders(name):
    fmt = FORMATS[FAMILIES[name]]
    calls = CALLS if fmt.name != "llama3" else CALLS[:1]  # Llama 3.1 renders one call per turn
    text = rendered_calls(name, calls)
    rng = random.Random(0)
    for _ in range(10):
        content, got = parse(fmt, text, rng)
        assert got == calls, text
        assert FORMATS[fmt.name].trigger not in content


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_text_without_calls_is_content(fmt):
    text = "The answer is 42, {not a call} [x] <b>done</b>."
    assert parse(FORMATS[fmt], text, random.Random(1)) == (text, [])


def test_generic_response_is_content_decoded_as_json():
    body = {"response": 'Say "hi" \\ \u00e9 \U0001F600\n'}
    text = json.dumps(body)
    for seed in range(10):
        assert parse(GENERIC, text, random.Random(seed)) == (body["response"], [])


def test_a_region_cut_off_keeps_its_whole_calls():
    text = ('<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_wea')
    assert parse(FORMATS["hermes"], text, random.Random(4)) == ("", [("get_time", {"tz": "UTC"})])
    text = '{"tool_calls": [{"name": "get_time", "arguments": {"tz": "UTC"}}, {"name": "get_'
    assert parse(GENERIC, text, random.Random(5)) == ("", [("get_time", {"tz": "UTC"})])


def test_malformed_region_is_given_back_as_content():
    text = "before <tool_call> not json at all"
    assert parse(FORMATS["hermes"], text, random.Random(2)) == (text, [])


@pytest.mark.parametrize("value", ['"a\\"b\\\\c\\u00e9\\ud83d\\ude00\\n"', '"plain"', '""', '"\\/x\\t"'])
def test_string_decoder_matches_json_at_every_split(value):
    for cut in range(1, len(value)):
        dec = StringDecoder()
        a, used_a = dec.feed(value[1:cut])
        b, used_b = dec.feed(value[cut:] + "TAIL")
        assert a + b == json.loads(value) and dec.done
        assert (value[1:cut] + value[cut:] + "TAIL")[used_a + used_b:] == "TAIL"


@pytest.mark.parametrize("value", ['{"a": [1, {"b": "}"}], "c": "\\""}', "[1, 2]", '"x}"', "12.5e3", "true"])
def test_value_end_finds_the_json_value(value):
    for cut in range(1, len(value) + 1):
        scan = ValueEnd()
        n = scan.feed(value[:cut])
        n += scan.feed(value[cut:] + ", rest") if not scan.done else 0
        assert scan.done and json.loads(value[:n]) == json.loads(value)


@pytest.fixture(scope="module")
def tokenizer(smollm_path):
    from llamay.gguf import GGUFReader
    from llamay.tokenizer import Tokenizer
    return Tokenizer.from_gguf(GGUFReader(smollm_path))


@pytest.mark.parametrize("name", ["NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "Qwen-Qwen3-0.6B",
                                  "meta-llama-Llama-3.1-8B-Instruct"])
def test_grammar_accepts_the_templates_own_call_text(name, tokenizer):
    fmt = FORMATS[FAMILIES[name]]
    calls = CALLS[:1]
    text = rendered_calls(name, calls)
    text = text[:text.index(fmt.close) + len(fmt.close)] if fmt.close else text[:text.rindex("}") + 1]
    for choice in ("required", {"name": "get_weather"}):
        think = "<think>" in source(name)
        grammar = Grammar.compile(tokenizer, "lark", tool_grammar(fmt, TOOLS, choice, True, tokenizer, think))
        assert _accepts(grammar, tokenizer, text), text


@pytest.mark.parametrize("fmt", ["hermes", "llama3"])
def test_grammar_refuses_off_schema_calls(fmt, tokenizer):
    f = FORMATS[fmt]
    g = Grammar.compile(tokenizer, "lark", tool_grammar(f, TOOLS, "required", True, tokenizer))
    in_head = f.head.startswith(f.trigger)
    good = {"city": "Paris", "days": 2}
    for name, args in [("get_weather", good), ("get_weather", {"city": "Paris"}),  # missing key
                       ("get_weather", {"city": "Paris", "days": "2"}),  # wrong type
                       ("get_weather", {**good, "extra": 1}),  # undeclared key
                       ("delete_everything", {})]:  # a function nobody offered
        body = f.head_text(name) + json.dumps(args) + f.tail
        text = ("" if in_head else f.trigger + f.open) + body + f.close
        assert _accepts(g, tokenizer, text) == (name == "get_weather" and args == good), text


def _sample(grammar: Grammar, rng, limit=160, prefix_ids=()):
    m, out = grammar.matcher(), []
    for t in prefix_ids:
        m.advance(t)
    for _ in range(limit):
        allowed = np.flatnonzero(m.allowed())
        non_eos = np.setdiff1d(allowed, grammar.eos_ids)
        if m.is_accepting() and (not len(non_eos) or rng.random() < 0.2):
            return out, True
        t = int(rng.choice(non_eos))
        m.advance(t)
        out.append(t)
        if m.is_done():
            return out, True
    return out, m.is_accepting()


SCHEMAS = {t["function"]["name"]: arguments_schema(t["function"]) for t in TOOLS}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("choice", ["required", "named", "auto"])
def test_sampled_calls_parse_and_validate(fmt, choice, tokenizer):
    f = FORMATS[fmt]
    named = {"name": "get_time"} if choice == "named" else choice
    g = Grammar.compile(tokenizer, "lark", tool_grammar(f, TOOLS, named, True, tokenizer))
    rng = np.random.default_rng(7)
    prefix = tokenizer.encode("Sure. " + f.trigger, add_special=False, parse_special=False) \
        if choice == "auto" and f.trigger else []
    for _ in range(3):
        ids, complete = _sample(g, rng, prefix_ids=prefix)
        text = tokenizer.decode(list(prefix) + ids)
        _, calls = parse(f, text, random.Random(3))
        if not complete:  # ran out of the sampling budget mid-call: only what is whole is checked
            calls = calls[:-1]
        elif choice != "auto" or fmt != "generic":
            assert calls, text
        for name, args in calls:
            assert name in SCHEMAS and (choice != "named" or name == "get_time")
            jsonschema.validate(args, SCHEMAS[name] if fmt != "gemma4" else _without_bounds(SCHEMAS[name]))


def _without_bounds(schema):
    """Gemma 4's argument grammar checks types, keys and enums, not numeric bounds (llamay.toolcall.gemma)."""
    if isinstance(schema, dict):
        return {k: _without_bounds(v) for k, v in schema.items() if k not in ("minimum", "maximum")}
    return schema


def test_plan_per_choice(tokenizer):
    from llamay.chat.template import CHATML_SOURCE
    from llamay.toolcall.plan import plan
    hermes, ask = source("Qwen-Qwen2.5-7B-Instruct"), [{"role": "user", "content": "hi"}]
    auto = plan(hermes, ask, TOOLS, tokenizer)
    assert auto.fmt.name == "hermes" and auto.tools and "trig[lazy]" in auto.lark  # <tool_call> is text here
    none = plan(hermes, ask, TOOLS, tokenizer, "none")
    assert none.tools and none.fmt is None and none.lark is None  # rendered, neither forced nor read
    generic_none = plan(CHATML_SOURCE, ask, TOOLS, tokenizer, "none")
    assert generic_none.fmt is GENERIC and "tool_calls" not in generic_none.lark.split("start:")[1].split("\n")[0]
    assert "get_weather" in generic_none.messages[0]["content"]  # described in a system message
    with pytest.raises(ValueError, match="'nope'.*get_weather, get_time"):
        plan(hermes, ask, TOOLS, tokenizer, {"name": "nope"})
    assert plan(hermes, ask, None, tokenizer).lark is None


def test_a_response_holds_at_most_max_calls(tokenizer):
    from llamay.toolcall.grammar import MAX_CALLS
    call = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}'
    grammar = Grammar.compile(tokenizer, "lark", tool_grammar(GENERIC, TOOLS, "required", True, tokenizer))
    for n in (1, 2, MAX_CALLS, MAX_CALLS + 1):  # tokenized as a whole: tokens such as `}},` are fine
        text = '{"tool_calls": [' + ", ".join([call] * n) + "]}"
        assert _accepts(grammar, tokenizer, text) == (n <= MAX_CALLS), n


def test_parses_command_r_plus_actions():
    """Command R+ renders its actions as indented JSON (and needs every parameter described)."""
    described = [{"type": "function", "function": {**t["function"], "parameters": {
        **t["function"]["parameters"], "properties": {k: {**v, "description": k} for k, v in
                                                      t["function"]["parameters"]["properties"].items()}}}}
                 for t in TOOLS]
    template = ChatTemplate(source("CohereForAI-c4ai-command-r-plus-tool_use"), "<s>", "</s>")
    user = [{"role": "user", "content": "USER-TURN"}]
    calls = {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(CALLS)]}
    after = template.render(user + [calls], add_generation_prompt=False, tools=described)
    text = after[after.index("\nAction:\n```json"):]  # the turn and what follows (its instructions)
    assert detect(template.source).name == "command_r"
    for seed in range(5):
        assert parse(FORMATS["command_r"], text, random.Random(seed))[1] == CALLS
