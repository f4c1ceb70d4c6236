"""Gemma 4 tool-call arguments: calls rendered by the real Gemma 4 chat template (jinja2 is the reference)
parse back to the original arguments, are accepted by the grammar built from the schema, and sampled
grammar output validates against the schema (jsonschema is the reference)."""
import json

import jsonschema
import numpy as np
import pytest

from llamay.chat.template import ChatTemplate
from llamay.grammar import Grammar, GrammarError
from llamay.toolcall.gemma import QUOTE, args_lark, args_to_json

CALL_OPEN, CALL_CLOSE = "<|tool_call>call:", "<tool_call|>"


def _obj(properties: dict, required=()) -> dict:
    # additionalProperties false: what args_lark enforces, so that jsonschema judges the same language
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}


WEATHER = _obj({"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"}}, ["city"])
SCALARS = _obj({"x": {"type": "number"}, "y": {"type": "number"}, "n": {"type": "integer"},
                "flag": {"type": "boolean"}, "nothing": {"type": "null"}}, ["x", "y", "n", "flag", "nothing"])
CASES = _obj({"Zeta": {"type": "integer"}, "alpha": {"type": "string"}, "Beta": {"type": "boolean"}},
             ["Zeta", "alpha", "Beta"])
NESTED = _obj({
    "filter": _obj({"min": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}}}, ["min"]),
    "rows": {"type": "array", "items": _obj({"id": {"type": "integer"}, "label": {"type": ["string", "null"]}},
                                            ["id", "label"])},
}, ["filter", "rows"])
MIXED = {**_obj({"value": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                 "maybe": {"type": "string", "nullable": True},
                 "node": {"$ref": "#/$defs/node"},
                 "meta": {}}, ["value", "node"]),
         "$defs": {"node": _obj({"name": {"type": "string"}, "kids": {"type": "array",
                                                                    "items": {"$ref": "#/$defs/node"}}},
                                ["name"])}}
EMPTY = _obj({})

ROUND_TRIPS = [
    (WEATHER, {"city": "Paris", "unit": "celsius", "days": 3}),
    (WEATHER, {"city": 'Zürich, "CH"\n{x:1,y:[2]} <|tool_call> é'}),
    (WEATHER, {"city": ""}),
    (SCALARS, {"x": 1.5, "y": -2e-07, "n": 0, "flag": False, "nothing": None}),
    (SCALARS, {"x": 3, "y": 1e+20, "n": -42, "flag": True, "nothing": None}),
    (CASES, {"Zeta": 7, "alpha": "a", "Beta": True}),
    (NESTED, {"filter": {"min": 0.25, "tags": ["a", "b,c"]}, "rows": [{"id": 1, "label": None},
                                                                     {"id": 2, "label": "two"}]}),
    (NESTED, {"filter": {"min": -1}, "rows": []}),
    (MIXED, {"value": "v", "node": {"name": "root", "kids": [{"name": "leaf", "kids": []}]},
             "meta": {"k": [1, "a", True, None, {"z": 2.5}]}}),
    (MIXED, {"value": 12, "maybe": "m", "node": {"name": "x"}}),
    (EMPTY, {}),
]


class ByteTokenizer:
    """The llamay Tokenizer interface over bytes: ids 0..255 are bytes, 256 is `<|"|>` (special, as in a
    control token, when special_quote), 257 is EOS."""

    n_vocab, eos_id, bos_id, eog_ids = 258, 257, None, {257}

    def __init__(self, special_quote: bool):
        self.special_quote = special_quote

    def piece(self, tid: int) -> bytes:
        return bytes([tid]) if tid < 256 else [QUOTE.encode(), b"</s>"][tid - 256]

    def is_control(self, tid: int) -> bool:
        return tid >= 256 if self.special_quote else tid == 257

    is_special = is_control

    def encode(self, text: str, add_special: bool = False, parse_special: bool = False) -> list[int]:
        if not self.special_quote:
            return list(text.encode())
        ids = []
        for i, part in enumerate(text.split(QUOTE)):
            ids += ([256] if i else []) + list(part.encode())
        return ids

    def decode(self, ids) -> str:
        return b"".join(self.piece(t) for t in ids).decode()


@pytest.fixture(scope="module")
def template(fixtures_dir):
    return ChatTemplate((fixtures_dir / "templates" / "google-gemma-4-31B-it.jinja").read_text(),
                        bos_token="<bos>")


@pytest.fixture(scope="module")
def smol_tok(smollm_path):
    from llamay.gguf import GGUFReader
    from llamay.tokenizer import Tokenizer
    return Tokenizer.from_gguf(GGUFReader(smollm_path))


@pytest.fixture(params=["bytes", pytest.param("smollm", marks=pytest.mark.model)])
def tok(request):
    return ByteTokenizer(False) if request.param == "bytes" else request.getfixturevalue("smol_tok")


def render_call(template, name: str, args: dict) -> str:
    """`<|tool_call>call:NAME{...}<tool_call|>` as the template writes an assistant turn's call."""
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}]}]
    text = template.render(messages, add_generation_prompt=False)
    return text[text.index(CALL_OPEN):text.rindex(CALL_CLOSE) + len(CALL_CLOSE)]


def body_of(call: str, name: str) -> str:
    assert call.startswith(CALL_OPEN + name + "{") and call.endswith("}" + CALL_CLOSE), call
    return call[len(CALL_OPEN + name):-len(CALL_CLOSE)]


def compile_args(tokenizer, schema: dict, quote=None) -> Grammar:
    rules = args_lark(schema, "args") if quote is None else args_lark(schema, "args", quote=quote)
    return Grammar.compile(tokenizer, "lark", "start: args\n" + rules)


def accepts(grammar: Grammar, tokenizer, text: str) -> bool:
    matcher = grammar.matcher()
    try:
        for t in tokenizer.encode(text, add_special=False, parse_special=False):
            matcher.advance(t)
    except GrammarError:
        return False
    return matcher.is_accepting()


@pytest.mark.parametrize("schema, args", ROUND_TRIPS)
def test_rendered_arguments_parse_back_exactly(template, schema, args):
    jsonschema.validate(args, schema)  # the case itself is valid
    parsed = args_to_json(body_of(render_call(template, "f", args), "f"))
    assert parsed == args
    assert json.dumps(parsed, sort_keys=True) == json.dumps(args, sort_keys=True)  # same types too: 3 stays int, 3.0 float


@pytest.mark.parametrize("schema, args", ROUND_TRIPS)
def test_rendered_arguments_are_accepted_by_the_grammar(template, tok, schema, args):
    grammar = compile_args(tok, schema)
    assert accepts(grammar, tok, body_of(render_call(template, "f", args), "f"))


def test_whole_rendered_call_is_accepted(template, tok):
    rules = args_lark(WEATHER, "get_weather_args")
    grammar = Grammar.compile(tok, "lark", f'start: "{CALL_OPEN}get_weather" get_weather_args '
                                           f'"{CALL_CLOSE}"\n{rules}')
    call = render_call(template, "get_weather", {"city": "Oslo", "days": 2})
    assert accepts(grammar, tok, call)
    assert not accepts(grammar, tok, call.replace("get_weather", "get_wether", 1))


Q = QUOTE
REJECTED = [  # (schema, text, what is wrong, still valid JSON-schema-wise once parsed)
    (WEATHER, f"{{unit:{Q}celsius{Q}}}", "missing required key", False),
    (WEATHER, "{}", "missing required key", False),
    (WEATHER, "{city:3}", "string expected", False),
    (WEATHER, f"{{city:{Q}P{Q},days:1.5}}", "integer expected", False),
    (WEATHER, f"{{city:{Q}P{Q},days:{Q}3{Q}}}", "integer expected", False),
    (WEATHER, f"{{city:{Q}P{Q},unit:{Q}kelvin{Q}}}", "not in enum", False),
    (WEATHER, f"{{city:{Q}P{Q},zone:1}}", "unknown key", False),
    (WEATHER, f"{{days:3,city:{Q}P{Q}}}", "keys out of the template's order", True),
    (WEATHER, f"{{city:{Q}P{Q},}}", "trailing comma", None),
    (WEATHER, f"{{city: {Q}P{Q}}}", "whitespace", None),
    (WEATHER, f"{{city:{Q}a{Q}b{Q}}}", "delimiter inside a string", None),
    (SCALARS, "{flag:1,n:0,nothing:None,x:1,y:2}", "boolean expected", False),
    (SCALARS, "{flag:true,n:0,nothing:0,x:1,y:2}", "null expected", False),
    (CASES, f"{{Beta:true,Zeta:1,alpha:{Q}a{Q}}}", "case-sensitive order instead of dictsort", True),
    (NESTED, "{filter:{min:1},rows:[{id:1}]}", "missing nested required key", False),
    (NESTED, "{filter:{min:1,extra:2},rows:[]}", "unknown nested key", False),
    (NESTED, "{filter:{min:1},rows:[1]}", "object expected in array", False),
    (EMPTY, "{a:1}", "no keys declared", False),
]


@pytest.mark.parametrize("schema, text, why, valid_json", REJECTED, ids=[r[2] for r in REJECTED])
def test_invalid_arguments_are_rejected(tok, schema, text, why, valid_json):
    assert not accepts(compile_args(tok, schema), tok, text), why
    if valid_json is not None:  # the grammar agrees with jsonschema (order is the template's, not JSON's)
        assert jsonschema.Draft202012Validator(schema).is_valid(args_to_json(text)) == valid_json


SAMPLED = _obj({
    "query": {"type": "string", "maxLength": 12},
    "mode": {"enum": ["fast", "exact", 3, None]},
    "limit": {"type": "integer"},
    "ratio": {"type": "number"},
    "on": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 1, "maxItems": 3},
    "where": _obj({"field": {"type": "string", "minLength": 1, "maxLength": 6},
                   "value": {"type": ["integer", "null"]}}, ["field"]),
}, ["query", "tags", "where"])


def sample(grammar: Grammar, tokenizer, rng, max_tokens=400) -> str:
    """Uniform over the allowed tokens, with tokens holding a closing character favoured (else digits and
    text go on for long) until the arguments are complete."""
    pieces = [tokenizer.piece(i) for i in range(tokenizer.n_vocab)]
    closing = np.array([any(c in p for c in b",}]>") for p in pieces], dtype=np.float64)
    matcher, ids = grammar.matcher(), []
    while not matcher.is_accepting():
        assert len(ids) < max_tokens, f"no complete arguments after {max_tokens} tokens"
        weights = matcher.allowed() * (1.0 + 30.0 * closing)
        weights[list(set(tokenizer.eog_ids) | {tokenizer.eos_id})] = 0.0
        ids.append(int(rng.choice(len(weights), p=weights / weights.sum())))
        matcher.advance(ids[-1])
    return tokenizer.decode(ids)


def test_sampled_arguments_validate(tok):
    grammar = compile_args(tok, SAMPLED)
    seen = set()
    for seed in range(4):
        text = sample(grammar, tok, np.random.default_rng(seed))
        args = args_to_json(text)
        jsonschema.validate(args, SAMPLED)
        seen.add(text)
    assert len(seen) == 4  # really random draws, not one forced text


def test_special_token_quote(template):
    """With `<|"|>` a control token, the grammar takes it as a token (`<[id]>`), not as text."""
    tok = ByteTokenizer(True)
    grammar = compile_args(tok, NESTED, quote="<[256]>")
    args = {"filter": {"min": 1, "tags": ["x", ""]}, "rows": [{"id": 3, "label": "a<|\"|b"}]}
    body = body_of(render_call(template, "f", args), "f")
    assert accepts(grammar, tok, body)
    spelled = [b for t in tok.encode(body) for b in tok.piece(t)]  # the same text as plain bytes
    matcher = grammar.matcher()
    with pytest.raises(GrammarError):
        for t in spelled:
            matcher.advance(t)
    for seed in range(2):
        jsonschema.validate(args_to_json(sample(grammar, tok, np.random.default_rng(seed))), NESTED)


def test_nullable_takes_none(tok):
    """OpenAPI's nullable (which the template also renders in declarations) adds null to a type."""
    grammar = compile_args(tok, MIXED)
    assert accepts(grammar, tok, "{maybe:None,node:{name:<|\"|>n<|\"|>},value:1}")
    assert not accepts(grammar, tok, "{maybe:1,node:{name:<|\"|>n<|\"|>},value:1}")


def test_two_functions_share_one_grammar(tok):
    rules = args_lark(WEATHER, "weather") + args_lark(SCALARS, "scalars")
    grammar = Grammar.compile(tok, "lark", 'start: "w" weather | "s" scalars\n' + rules)
    assert accepts(grammar, tok, f"w{{city:{Q}x{Q}}}")
    assert accepts(grammar, tok, "s{flag:true,n:1,nothing:None,x:1,y:2.5}")
    assert not accepts(grammar, tok, "s{city:1}")


@pytest.mark.parametrize("text", [
    "", "[1]", "{", "{a:1", "{a:1,}", "{a:1}x", "{a}", "{:1}", "{a:tru}", "{a:1 }", "{a:01}",
    f"{{a:{Q}x}}", "{a:1,a:2}", "{a:[1,]}", "{a:-}", "{a:1.}", "{a:inf}", "{a:{b:1}", " {a:1}",
])
def test_malformed_arguments_raise(text):
    with pytest.raises(ValueError, match="Gemma tool-call arguments"):
        args_to_json(text)


@pytest.mark.parametrize("schema", [
    {"type": "string"},
    _obj({"a": {"allOf": [{"type": "string"}]}}),
    _obj({"a": {"type": "array", "items": [{"type": "string"}]}}),
    _obj({"a": "string"}),
    _obj({"a": {"type": "date"}}),
    _obj({"a": {"enum": []}}),
    _obj({"a": {"enum": [f"x{QUOTE}y"]}}),
    _obj({"a:b": {"type": "string"}}),
    _obj({"a": {"$ref": "#/$defs/missing"}}),
    _obj({"a": {"type": "string"}}, ["b"]),
])
def test_inexpressible_schemas_raise(schema):
    with pytest.raises((ValueError, TypeError)):
        args_lark(schema, "args")


@pytest.mark.parametrize("rule", ["getWeather", "Args", "1args", "a b", ""])
def test_rule_names_must_be_lark_rule_names(rule):
    with pytest.raises(ValueError, match="rule name"):
        args_lark(WEATHER, rule)
