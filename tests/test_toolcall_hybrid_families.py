"""Tool calls of the hybrid model families: Qwen3-Coder / Qwen3.5 / Nemotron 3 Nano / Step 3.5 (XML parameter
blocks), LFM2 / LFM2.5 (pythonic calls), Granite 4.0 / 4.1 (Hermes JSON) and Nemotron Nano 2 (a <TOOLCALL>
JSON array): detection, rendering by each family's own template, parsing back, model outputs, grammars.

References: the families' chat templates (../shared/fixtures/templates) for what a call looks like,
jsonschema for sampled arguments. No model is needed: grammars run over a byte tokenizer."""
import json
import random

import jsonschema
import numpy as np
import pytest
from conftest import SHARED
from test_toolcall import _collect, parse
from test_toolcall_gemma import ByteTokenizer, accepts, sample

from llamay.chat.reasoning import ReasoningSplitter
from llamay.chat.template import ChatTemplate
from llamay.grammar import Grammar, GrammarError
from llamay.toolcall.formats import FORMATS, detect
from llamay.toolcall.grammar import arguments_schema, tool_grammar
from llamay.toolcall.parser import CallParser
from llamay.toolcall.plan import plan
from llamay.toolcall.pythonic import kwargs_to_json
from llamay.toolcall.xmlcall import params_to_json, typed

TEMPLATES = SHARED / "fixtures" / "templates"
FAMILIES = {  # template -> the format its model writes calls in
    "Qwen3.5-4B": "qwen_xml", "Qwen3-Coder": "qwen_xml", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "qwen_xml",
    "StepFun3.5-Flash": "qwen_xml",
    "LFM2.5-Instruct": "lfm2", "LFM2-8B-A1B": "lfm2", "LFM2.5-8B-A1B": "lfm2",
    "ibm-granite-granite-4.0": "hermes", "ibm-granite-granite-4.1": "hermes",
    "NVIDIA-Nemotron-Nano-v2": "nemotron",
    "Kimi-K2-Instruct": "kimi_k2", "Kimi-K2-Thinking": "kimi_k2", "moonshotai-Kimi-K2": "kimi_k2",  # and Kimi-Linear's
}
REGION = {"qwen_xml": ("<tool_call>", "</tool_call>"), "hermes": ("<tool_call>", "</tool_call>"),
          "lfm2": ("<|tool_call_start|>", "<|tool_call_end|>"), "nemotron": ("<TOOLCALL>", "</TOOLCALL>"),
          "kimi_k2": ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")}


def _tool(name: str, properties: dict, required: list) -> dict:
    return {"type": "function", "function": {"name": name, "description": f"the {name} tool", "parameters": {
        "type": "object", "properties": properties, "required": required}}}


WEATHER = _tool("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}}, ["city", "days"])
SEARCH = _tool("search", {  # properties in the order the calls below list their arguments (templates keep it)
    "query": {"type": "string"}, "limit": {"type": "integer"}, "ratio": {"type": "number"},
    "exact": {"type": "boolean"}, "code": {"type": "string"}, "note": {"type": ["string", "null"]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "filters": {"type": "object", "properties": {"year": {"type": "integer"}, "lang": {"type": "string"},
                                                 "deep": {"type": "object"}}}}, ["query"])
TOOLS = [WEATHER, SEARCH]
ONE = [("get_weather", {"city": "Paris", "days": 3})]
TWO = [("get_weather", {"city": "Nuuk", "days": 1}),
       ("search", {"query": 'line one\nline "two" <b>x</b> & y', "limit": 10, "ratio": 0.25, "exact": False,
                   "code": "007", "note": None, "tags": ["a", "b c"],
                   "filters": {"year": 2024, "lang": "fr", "deep": {"on": True, "list": [1, 2.5, None]}}})]
USER, FOLLOW_UP, CONTENT = "USER-question-1", "USER-follow-up-2", "ASSISTANT-checking-3"


def source(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


def call_message(calls, content=CONTENT) -> dict:
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(calls)]}


def conversation(calls, last: bool) -> list[dict]:
    """System, user, the assistant's calls, and (unless `last`) their results and a user turn."""
    results = [{"role": "tool", "tool_call_id": f"call_{i}", "content": f"RESULT-{i}"} for i in range(len(calls))]
    head = [{"role": "system", "content": "SYSTEM-0"}, {"role": "user", "content": USER}, call_message(calls)]
    return head if last else head + results + [{"role": "user", "content": FOLLOW_UP}]


def render(name: str, messages: list[dict], tok=None, choice="auto"):
    """The template's text for messages as plan() prepares them, and the plan."""
    tok = tok or ByteTokenizer(False)
    tool_plan = plan(source(name), messages, TOOLS, tok, choice)
    template = ChatTemplate(source(name), "<s>", "</s>")
    return template.render(tool_plan.messages, add_generation_prompt=False, tools=tool_plan.tools), tool_plan


def region(fmt_name: str, text: str) -> str:
    """The assistant's rendered call region(s): from the first opening marker after its content to the last
    closing one (the system prompt may show an example before)."""
    start, end = REGION[fmt_name]
    text = text[text.index(CONTENT):]
    return text[text.index(start):text.rindex(end) + len(end)]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_detects_family_format(name):
    assert detect(source(name)).name == FAMILIES[name]


@pytest.mark.parametrize("name", ["ByteDance-Seed-OSS", "meetkai-functionary-medium-v3.1", "Qwen-Qwen3-0.6B"])
def test_xml_needs_all_its_markers(name):
    """<function= alone (functionary 3.1's JSON calls) or <seed:tool_call> is not Qwen's XML format."""
    assert detect(source(name)).name != "qwen_xml"


@pytest.mark.parametrize("calls", [ONE, TWO], ids=["one", "two"])
@pytest.mark.parametrize("last", [False, True], ids=["history", "last"])
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_rendered_calls_parse_back(name, last, calls):
    text, tool_plan = render(name, conversation(calls, last))
    assert tool_plan.fmt.name == FAMILIES[name]
    for needle in ("SYSTEM-0", USER, CONTENT, *([] if last else ["RESULT-0", FOLLOW_UP])):
        assert needle in text, needle
    turn = text[text.index(CONTENT) + len(CONTENT):]
    turn = turn if last else turn[:turn.index("RESULT-0")]
    assert '"tool_calls"' not in turn  # the calls in the family's format, not llamay's generic JSON
    rng = random.Random(len(turn))
    for _ in range(5):
        content, got = parse(tool_plan.fmt, turn, rng)
        assert got == calls, turn
        assert REGION[FAMILIES[name]][0] not in content


# (template, output as the model writes it, reasoning, content, calls)
OUTPUTS = [
    ("Qwen3.5-4B", "<think>\nThe user wants the weather.\n</think>\n\nLet me check both.\n\n<tool_call>\n"
     "<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
     "</function>\n</tool_call>\n<tool_call>\n<function=search>\n<parameter=query>\nrain\n</parameter>\n"
     "<parameter=exact>\ntrue\n</parameter>\n<parameter=filters>\n{\"year\": 2025}\n</parameter>\n"
     "</function>\n</tool_call>",
     "The user wants the weather.", "Let me check both.",
     [("get_weather", {"city": "São Paulo", "days": 2}), ("search", {"query": "rain", "exact": True,
                                                                     "filters": {"year": 2025}})]),
    ("Qwen3-Coder", "I'll search.\n<tool_call>\n<function=search>\n<parameter=query>\n"
     "def f():\n    return '</function>'\n</parameter>\n<parameter=limit>\n5\n</parameter>\n</function>\n"
     "</tool_call>", "", "I'll search.",
     [("search", {"query": "def f():\n    return '</function>'", "limit": 5})]),
    ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "<think>Weather lookup.</think>\n<tool_call>\n<function=get_weather>\n"
     "<parameter=city>\n12\n</parameter>\n<parameter=days>\n7\n</parameter>\n</function>\n</tool_call>\n",
     "Weather lookup.", "", [("get_weather", {"city": "12", "days": 7})]),
    ("LFM2.5-8B-A1B", '<think>I need the weather.</think>Checking.<|tool_call_start|>[get_weather(city="Paris", '
     'days=3), search(query="caf\\u00e9 \\"open\\"", exact=true, note=None, tags=["x"], filters={"year": 2025})]'
     "<|tool_call_end|>", "I need the weather.", "Checking.",
     [("get_weather", {"city": "Paris", "days": 3}),
      ("search", {"query": 'café "open"', "exact": True, "note": None, "tags": ["x"], "filters": {"year": 2025}})]),
    ("LFM2.5-Instruct", "<|tool_call_start|>[search(query='it\\'s', ratio=-1.5e-3)]<|tool_call_end|>Done.", "",
     "Done.", [("search", {"query": "it's", "ratio": -0.0015})]),
    ("LFM2-8B-A1B", 'Sure.<|tool_call_start|>[get_weather(city="Oslo", days=1)]<|tool_call_end|>', "", "Sure.",
     [("get_weather", {"city": "Oslo", "days": 1})]),
    ("NVIDIA-Nemotron-Nano-v2", '<think>\nTwo lookups.\n</think>\n\nOn it.\n<TOOLCALL>[{"name": "get_weather", '
     '"arguments": {"city": "Rome", "days": 4}}, {"name": "search", "arguments": {"query": "[x]"}}]</TOOLCALL>',
     "Two lookups.", "On it.",
     [("get_weather", {"city": "Rome", "days": 4}), ("search", {"query": "[x]"})]),
    ("ibm-granite-granite-4.0", 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lima", '
     '"days": 2}}\n</tool_call>', "", "Let me look.", [("get_weather", {"city": "Lima", "days": 2})]),
    ("ibm-granite-granite-4.1", '<tool_call>\n{"name": "search", "arguments": {"query": "q"}}\n</tool_call>\n'
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Baku", "days": 1}}\n</tool_call>', "", "",
     [("search", {"query": "q"}), ("get_weather", {"city": "Baku", "days": 1})]),
    ("Kimi-K2-Thinking", "<think>Two lookups.</think>Checking. <|tool_calls_section_begin|> <|tool_call_begin|>"
     'functions.get_weather:0<|tool_call_argument_begin|>{"city": "Baku", "days": 1}<|tool_call_end|>\n'
     '<|tool_call_begin|>functions.search:1<|tool_call_argument_begin|>{"query": "a:b <x>"}<|tool_call_end|>'
     "<|tool_calls_section_end|>", "Two lookups.", "Checking.",
     [("get_weather", {"city": "Baku", "days": 1}), ("search", {"query": "a:b <x>"})]),
]


@pytest.mark.parametrize("name, output, reasoning, content, calls", OUTPUTS, ids=[o[0] for o in OUTPUTS])
def test_model_output_is_read(name, output, reasoning, content, calls):
    """The server's reading: the reasoning split, then calls read from the content, in random pieces."""
    fmt = plan(source(name), [{"role": "user", "content": "hi"}], TOOLS, ByteTokenizer(False)).fmt
    rng = random.Random(7)
    for _ in range(5):
        splitter, parser, said, thought, got = ReasoningSplitter(source(name)), CallParser(fmt), "", "", {}
        i = 0
        while i <= len(output):
            piece = output[i:i + rng.randint(1, 9)]
            i += max(len(piece), 1)
            text, reason = splitter.feed(piece) if piece else splitter.flush()
            thought += reason
            text, deltas = parser.feed(text)
            said += text
            _collect(got, deltas)
        text, deltas = parser.end()
        said += text
        _collect(got, deltas)
        assert (thought.strip(), said.strip()) == (reasoning, content)
        assert [(n, json.loads(a)) for n, a in got.values()] == calls


INT, STR = {"type": "integer"}, {"type": "string"}
TYPED = [  # (raw XML value, its schema, the argument)
    ("2", STR, "2"), ("007", STR, "007"), ("true", STR, "true"), ('{"a": 1}', STR, '{"a": 1}'),
    ("2", INT, 2), ("-2", {"type": "number"}, -2), ("2.5", {"type": "number"}, 2.5),
    ("True", {"type": "boolean"}, True), ("false", {"type": "boolean"}, False),
    ('{"a": [1, null]}', {"type": "object"}, {"a": [1, None]}), ("[1, 2]", {"type": "array"}, [1, 2]),
    ("None", {"type": ["string", "null"]}, None), ("none", {"type": ["string", "null"]}, "none"),
    ("3", {"anyOf": [INT, STR]}, 3), ("three", {"anyOf": [INT, STR]}, "three"),
    ("1", {"enum": ["1", "2"]}, "1"), ("1", {"enum": [1, 2]}, 1),
    ("2.5", INT, "2.5"),  # not the schema's type: the text as written (possible only without the grammar)
    ("2", None, 2), ("Paris", None, "Paris"),  # no schema: JSON where it decodes
]


@pytest.mark.parametrize("raw, schema, value", TYPED)
def test_xml_values_are_typed_by_the_schema(raw, schema, value):
    got = typed(raw, schema)
    assert got == value and type(got) is type(value)


def test_xml_blocks_keep_their_newlines():
    text = "<parameter=a>\n\nx\n\n</parameter>\n<parameter=b>\n1\n</parameter>\n"
    assert params_to_json(text, {"properties": {"a": STR, "b": INT}}) == {"a": "\nx\n", "b": 1}
    with pytest.raises(ValueError):
        params_to_json("stray " + text, None)


KWARGS = [  # (arguments as written, as JSON)
    ('city="Paris", days=3', {"city": "Paris", "days": 3}),
    ("city='Paris' ,days = -3,", {"city": "Paris", "days": -3}),
    (r'q="a\"b\\c\n\u00e9\ud83d\ude00\q"', {"q": 'a"b\\c\né\U0001F600\\q'}),
    ("q='it\\'s', r='line\none'", {"q": "it's", "r": "line\none"}),
    ("a=True, b=false, c=None, d=null, e=1.5e3", {"a": True, "b": False, "c": None, "d": None, "e": 1500.0}),
    ("t=['x', 1, [True]], u=(1, 2), o={\"k\": {'z': [null]}}", {"t": ["x", 1, [True]], "u": [1, 2],
                                                               "o": {"k": {"z": [None]}}}),
    ("", {}),
]


@pytest.mark.parametrize("text, args", KWARGS)
def test_pythonic_arguments(text, args):
    assert kwargs_to_json(text) == args


@pytest.mark.parametrize("text", ["city=Paris", "city=", "=1", 'a="x" b=1', "a=1, a=2", "a='open", "a=[1, 2"])
def test_malformed_pythonic_arguments_are_refused(text):
    with pytest.raises(ValueError):
        kwargs_to_json(text)


def test_a_cut_off_xml_call_keeps_the_whole_ones():
    fmt = FORMATS["qwen_xml"].with_tools(TOOLS)
    text = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n"
            "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n<parameter=query>\nra")
    content, got = parse(fmt, text, random.Random(3))
    assert content == "" and got[0] == ("get_weather", {"city": "Paris", "days": 2}) and got[1][0] == "search"


FREE = {"type": "function", "function": {"name": "free", "parameters": {"type": "object"}}}


@pytest.mark.parametrize("name, text, args", [
    ("Qwen3.5-4B", "<tool_call>\n<function=free>\n<parameter=n>\n1\n</parameter>\n<parameter=s>\nx y\n"
     "</parameter>\n</function>\n</tool_call>", {"n": 1, "s": "x y"}),
    ("LFM2.5-8B-A1B", '<|tool_call_start|>[free(n=1, s="x y", o={"k": [true]})]<|tool_call_end|>',
     {"n": 1, "s": "x y", "o": {"k": [True]}}),
])
def test_parameters_without_properties_take_any_arguments(name, text, args):
    tok = ByteTokenizer(False)
    tool_plan = plan(source(name), [{"role": "user", "content": "hi"}], [FREE], tok, "required")
    assert accepts(Grammar.compile(tok, "lark", tool_plan.lark), tok, text)
    assert parse(tool_plan.fmt, text) == ("", [("free", args)])


def test_malformed_pythonic_call_is_content():
    text = "See <|tool_call_start|>[not a call at all"
    assert parse(FORMATS["lfm2"], text, random.Random(1)) == (text, [])


# ---- grammars ------------------------------------------------------------------------------------------

class SpecialTokenizer(ByteTokenizer):
    """Bytes, then the given texts as control tokens (as a family's vocabulary holds its markers), then EOS."""

    def __init__(self, specials: list[str]):
        super().__init__(False)
        self.specials = specials
        self.n_vocab = 256 + len(specials) + 1
        self.eos_id = self.n_vocab - 1
        self.eog_ids = {self.eos_id}

    def piece(self, tid: int) -> bytes:
        return bytes([tid]) if tid < 256 else ([s.encode() for s in self.specials] + [b"</s>"])[tid - 256]

    def is_control(self, tid: int) -> bool:
        return tid >= 256

    is_special = is_control

    def encode(self, text: str, add_special: bool = False, parse_special: bool = False) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            hit = next((k for k, s in enumerate(self.specials) if text.startswith(s, i)), None)
            if hit is None:
                ids += list(text[i].encode())
                i += 1
            else:
                ids.append(256 + hit)
                i += len(self.specials[hit])
        return ids


def compiled(name: str, choice, tok=None) -> Grammar:
    tok = tok or ByteTokenizer(False)
    lark = plan(source(name), [{"role": "user", "content": "hi"}], TOOLS, tok, choice).lark
    return Grammar.compile(tok, "lark", lark)


@pytest.mark.parametrize("calls", [ONE, TWO], ids=["one", "two"])
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_grammar_accepts_the_templates_own_calls(name, calls):
    tok = ByteTokenizer(False)
    text = region(FAMILIES[name], render(name, conversation(calls, True))[0])
    # Step 3.5 writes parallel calls with nothing between them; the grammar generates Qwen's "\n" there
    forced_ok = not (name == "StepFun3.5-Flash" and len(calls) > 1)
    assert accepts(compiled(name, "required", tok), tok, text) == forced_ok, text
    assert accepts(compiled(name, "auto", tok), tok, "Let me see. " + text + " Done."), text
    if len(calls) == 1:
        assert accepts(compiled(name, {"name": "get_weather"}, tok), tok, text)
        assert not accepts(compiled(name, {"name": "search"}, tok), tok, text)


def _xml(name: str, params: list[tuple[str, str]]) -> str:
    blocks = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{blocks}</function>\n</tool_call>"


def _json_call(name: str, args: dict, start="<TOOLCALL>[", end="]</TOOLCALL>") -> str:
    return f'{start}{{"name": "{name}", "arguments": {json.dumps(args)}}}{end}'


def _kimi(*calls, end="<|tool_call_end|>") -> str:
    body = "".join(f"<|tool_call_begin|>functions.{name}:{i}<|tool_call_argument_begin|>{json.dumps(args)}{end}"
                   for i, (name, args) in enumerate(calls))
    return f"<|tool_calls_section_begin|>{body}<|tool_calls_section_end|>"


GOOD = {
    "kimi_k2": _kimi(("get_weather", {"city": "Paris", "days": 3})),
    "qwen_xml": _xml("get_weather", [("city", "Paris"), ("days", "3")]),
    "lfm2": '<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>',
    "nemotron": _json_call("get_weather", {"city": "Paris", "days": 3}),
    "hermes": _json_call("get_weather", {"city": "Paris", "days": 3}, "<tool_call>\n", "\n</tool_call>"),
}
BAD = {  # (what is wrong, text)
    "kimi_k2": [
        ("missing required", _kimi(("get_weather", {"city": "Paris"}))),
        ("integer expected", _kimi(("get_weather", {"city": "Paris", "days": "3"}))),
        ("unknown function", _kimi(("get_time", {"tz": "UTC"}))),
        ("no call end", _kimi(("get_weather", {"city": "Paris", "days": 3}), end="")),
        ("no functions. prefix", _kimi(("get_weather", {"city": "Paris", "days": 3})).replace("functions.", "")),
    ],
    "qwen_xml": [
        ("missing required", _xml("get_weather", [("city", "Paris")])),
        ("integer expected", _xml("get_weather", [("city", "Paris"), ("days", "three")])),
        ("undeclared parameter", _xml("get_weather", [("city", "Paris"), ("days", "3"), ("zone", "x")])),
        ("out of the schema's order", _xml("get_weather", [("days", "3"), ("city", "Paris")])),
        ("unknown function", _xml("get_time", [("tz", "UTC")])),
        ("no </parameter>", GOOD["qwen_xml"].replace("Paris\n</parameter>", "Paris\n")),
        ("no newline before </function>", GOOD["qwen_xml"].replace("</parameter>\n</function>",
                                                                  "</parameter></function>")),
    ],
    "lfm2": [
        ("missing required", '<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>'),
        ("integer expected", '<|tool_call_start|>[get_weather(city="Paris", days="3")]<|tool_call_end|>'),
        ("unquoted string", "<|tool_call_start|>[get_weather(city=Paris, days=3)]<|tool_call_end|>"),
        ("undeclared argument", '<|tool_call_start|>[get_weather(city="P", days=3, zone=1)]<|tool_call_end|>'),
        ("unknown function", '<|tool_call_start|>[get_time(tz="UTC")]<|tool_call_end|>'),
        ("no closing bracket", '<|tool_call_start|>[get_weather(city="Paris", days=3)<|tool_call_end|>'),
        ("unterminated string", '<|tool_call_start|>[get_weather(city="Paris, days=3)]<|tool_call_end|>'),
    ],
    "nemotron": [
        ("missing required", _json_call("get_weather", {"city": "Paris"})),
        ("integer expected", _json_call("get_weather", {"city": "Paris", "days": "3"})),
        ("unknown function", _json_call("get_time", {"tz": "UTC"})),
        ("no closing tag", _json_call("get_weather", {"city": "Paris", "days": 3}, end="]")),
    ],
    "hermes": [
        ("missing required", _json_call("get_weather", {"city": "Paris"}, "<tool_call>\n", "\n</tool_call>")),
        ("no closing tag", _json_call("get_weather", {"city": "Paris", "days": 3}, "<tool_call>\n", "\n")),
    ],
}
GRAMMAR_CASES = [(name, why, text) for name, fmt in sorted(FAMILIES.items()) for why, text in BAD[fmt]]


@pytest.mark.parametrize("name, why, text", GRAMMAR_CASES, ids=[f"{c[0]}-{c[1]}" for c in GRAMMAR_CASES])
def test_grammar_rejects_malformed_calls(name, why, text):
    tok = ByteTokenizer(False)
    grammar = compiled(name, "required", tok)
    assert accepts(grammar, tok, GOOD[FAMILIES[name]])  # the well-formed twin passes
    assert not accepts(grammar, tok, text), why


def test_lfm2_markers_as_control_tokens():
    """Where the vocabulary holds <|tool_call_start|> / <|tool_call_end|> as control tokens, the grammar takes
    them as those tokens; spelled out in bytes they are refused."""
    tok = SpecialTokenizer(["<|tool_call_start|>", "<|tool_call_end|>"])
    text = GOOD["lfm2"]
    assert accepts(compiled("LFM2.5-8B-A1B", "auto", tok), tok, "Sure. " + text)
    grammar = compiled("LFM2.5-8B-A1B", "required", tok)
    assert accepts(grammar, tok, text)
    matcher = grammar.matcher()
    with pytest.raises(GrammarError):
        for byte in text.encode():
            matcher.advance(byte)


SAMPLED = _tool("probe", {
    "text": {"type": "string", "maxLength": 6}, "n": {"type": "integer", "minimum": -5, "maximum": 50},
    "x": {"type": "number"}, "on": {"type": "boolean"}, "mode": {"enum": ["fast", "slow"]},
    "maybe": {"type": ["integer", "null"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
    "where": {"type": "object", "properties": {"k": {"type": "integer"}}, "required": ["k"],
              "additionalProperties": False}}, ["text", "n", "on"])


@pytest.mark.parametrize("name", ["Qwen3.5-4B", "LFM2.5-8B-A1B", "NVIDIA-Nemotron-Nano-v2"])
def test_sampled_calls_parse_and_validate(name):
    """Random walks through the grammar: every complete output parses to calls whose arguments validate."""
    tok = ByteTokenizer(False)
    fmt = plan(source(name), [{"role": "user", "content": "hi"}], [SAMPLED], tok, "required").fmt
    grammar = Grammar.compile(tok, "lark", tool_grammar(fmt, [SAMPLED], "required", True, tok))
    schema = arguments_schema(SAMPLED["function"])
    seen = set()
    for seed in range(4):
        text = sample(grammar, tok, np.random.default_rng(seed), max_tokens=1500)
        _, calls = parse(fmt, text)
        assert calls and all(n == "probe" for n, _ in calls), text
        for _, args in calls:
            jsonschema.validate(args, schema)
        seen.add(text)
    assert len(seen) == 4


@pytest.mark.parametrize("choice", ["required", {"name": "get_weather"}])
def test_forced_calls_follow_the_reasoning_the_prompt_opened(choice):
    """Qwen3.5's template ends the prompt with <think>: under a forced call the output reasons first, up to
    </think>, then calls; a prompt that did not open it keeps the optional <think> block."""
    tok = ByteTokenizer(False)
    lark = plan(source("Qwen3.5-4B"), [{"role": "user", "content": "hi"}], TOOLS, tok, choice, opened=True).lark
    g = Grammar.compile(tok, "lark", lark)
    call = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>")
    assert accepts(g, tok, "hm, the weather\n</think>\n\n" + call)
    assert not accepts(g, tok, call)  # it must close the reasoning first
    assert accepts(compiled("Qwen3.5-4B", choice, tok), tok, call)
    assert accepts(compiled("Qwen3.5-4B", choice, tok), tok, "<think>\nhm\n</think>\n\n" + call)
