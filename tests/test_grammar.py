"""llamay.grammar: compiled grammars as per-sequence token masks (llguidance).

Real-model tests sample at temperature 1.0 under each grammar and check every output with a checker we
did not write (jsonschema, json) or an independent one (the arithmetic reducer below)."""
import json
import re

import jsonschema
import numpy as np
import pytest

import llamay
from llamay.engine import Sampler, SamplingParams
from llamay.grammar import Grammar, GrammarError

PROMPT = "<|im_start|>user\nReply with a short JSON value.<|im_end|>\n<|im_start|>assistant\n"
MAX_TOKENS = 120

# Short, bounded JSON schemas (each can finish well within MAX_TOKENS) and two GBNF grammars.
_S = {"type": "string", "maxLength": 12}
_INT = {"type": "integer", "minimum": -50, "maximum": 50}


def _obj(properties: dict, required=None) -> dict:
    return {"type": "object", "properties": properties, "required": list(required or properties),
            "additionalProperties": False}


SCHEMAS = [
    _obj({"name": _S}),
    _obj({"name": _S, "age": {"type": "integer", "minimum": 0, "maximum": 120}}),
    _obj({"ok": {"type": "boolean"}}),
    _obj({"x": {"type": "number", "minimum": 0, "maximum": 1}}),
    _obj({"n": {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 20}}),
    _obj({"v": {"type": "number", "minimum": -5.5, "maximum": 5.5}}),
    _obj({"count": {"type": "integer", "minimum": 100, "maximum": 999}}),
    _obj({"color": {"enum": ["red", "green", "blue"]}}),
    _obj({"level": {"enum": [1, 2, 3, "max", None]}}),
    _obj({"kind": {"const": "point"}, "x": _INT, "y": _INT}),
    _obj({"tags": {"type": "array", "items": _S, "maxItems": 3}}),
    _obj({"ids": {"type": "array", "items": _INT, "minItems": 2, "maxItems": 4}}),
    {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 5},
    {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 4},
    _obj({"pair": {"type": "array", "prefixItems": [_S, _INT], "items": False, "minItems": 2}}),
    _obj({"a": _S, "b": {"type": "integer"}}, required=["a"]),
    _obj({"opt1": _S, "opt2": _INT}, required=[]),
    _obj({"p": _obj({"q": _obj({"r": {"type": "boolean"}})})}),
    _obj({"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}}),
    _obj({"hex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"}}),
    _obj({"word": {"type": "string", "minLength": 2, "maxLength": 5}}),
    _obj({"day": {"type": "string", "format": "date"}}),
    _obj({"at": {"type": "string", "pattern": "^[01][0-9]:[0-5][0-9]$"}}),
    _obj({"id": {"type": "string", "format": "uuid"}}),
    _obj({"ip": {"type": "string", "format": "ipv4"}}),
    _obj({"ip6": {"type": "string", "format": "ipv6"}}),
    {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "boolean"}]},
    _obj({"v": {"anyOf": [_S, _INT, {"type": "null"}]}}),
    _obj({"shape": {"anyOf": [_obj({"r": _INT}), _obj({"w": _INT, "h": _INT})]}}),
    {"$defs": {"pt": _obj({"x": _INT, "y": _INT})},
     **_obj({"from": {"$ref": "#/$defs/pt"}, "to": {"$ref": "#/$defs/pt"}})},
    {"$defs": {"name": _S, "person": _obj({"name": {"$ref": "#/$defs/name"}, "age": _INT})},
     "type": "array", "items": {"$ref": "#/$defs/person"}, "maxItems": 2},
    _obj({"price": {"type": "number", "minimum": 0, "maximum": 1000}, "currency": {"enum": ["EUR", "USD"]}}),
    {"type": "string", "enum": ["yes", "no"]},
    _obj({"n": {"type": ["integer", "null"], "minimum": 0, "maximum": 9}}),
]

ARITH_GBNF = r"""
root ::= term (op term){0,4}
term ::= num | "(" num (op num){0,3} ")"
op ::= [-+*/]
num ::= [0-9]{1,3}
"""

JSON_GBNF = r"""
root ::= object
value ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ( pair ( ", " pair ){0,2} )? "}"
pair ::= string ": " leaf
array ::= "[" ( leaf ( ", " leaf ){0,3} )? "]"
leaf ::= string | number | "true" | "false" | "null" | "[" ( scalar ( ", " scalar ){0,2} )? "]"
scalar ::= string | number
string ::= "\"" [a-zA-Z0-9 ]{0,10} "\""
number ::= "-"? [0-9]{1,4} ("." [0-9]{1,3})?
"""


class ByteTokenizer:
    """A tiny stand-in with the llamay Tokenizer interface: ids 0..255 are bytes, 256 is EOS, 257 a
    second end-of-generation token, 258 a control token whose text looks like JSON."""

    n_vocab, eos_id, bos_id, eog_ids = 259, 256, None, {256, 257}

    def piece(self, tid: int) -> bytes:
        return bytes([tid]) if tid < 256 else [b"</s>", b"<eot>", b"{}"][tid - 256]

    def is_control(self, tid: int) -> bool:
        return tid >= 256

    is_special = is_control

    def encode(self, text: str, add_special: bool = False, parse_special: bool = False) -> list[int]:
        return list(text.encode())


@pytest.fixture(scope="module")
def byte_tok():
    return ByteTokenizer()


def feed(matcher, text: str):
    for b in text.encode():
        matcher.advance(b)


def test_eos_allowed_exactly_when_accepting(byte_tok):
    matcher = Grammar.compile(byte_tok, "regex", "ab+").matcher()
    for step in ["", "a", "b", "b"]:
        feed(matcher, step)
        mask = matcher.allowed()
        assert mask[256] == mask[257] == matcher.is_accepting() == (step == "b")
        assert not mask[258]  # a special token never stands for its text
    with pytest.raises(GrammarError):
        Grammar.compile(byte_tok, "regex", "ab+").matcher().advance(256)


def test_mask_matches_grammar_and_done_after_eos(byte_tok):
    matcher = Grammar.compile(byte_tok, "gbnf", 'root ::= "x" [0-9]').matcher()
    assert np.flatnonzero(matcher.allowed()).tolist() == [ord("x")]
    matcher.advance(ord("x"))
    assert np.flatnonzero(matcher.allowed()).tolist() == list(range(ord("0"), ord("9") + 1))
    assert not matcher.is_done()
    matcher.advance(ord("7"))
    assert matcher.is_accepting() and matcher.is_done()  # nothing more can follow
    assert np.flatnonzero(matcher.allowed()).tolist() == [256, 257]


def test_disallowed_token_raises(byte_tok):
    matcher = Grammar.compile(byte_tok, "json_object", None).matcher()
    with pytest.raises(GrammarError):
        matcher.advance(ord("["))
    with pytest.raises(GrammarError):
        Grammar.compile(byte_tok, "json_object", None).matcher().advance(10_000)


def test_apply_masks_logits_wider_than_vocab(byte_tok):
    matcher = Grammar.compile(byte_tok, "regex", "[ab]").matcher()
    logits = np.zeros(300, dtype=np.float32)
    matcher.apply(logits)
    assert np.flatnonzero(np.isfinite(logits)).tolist() == [ord("a"), ord("b")]
    with pytest.raises(ValueError):
        matcher.apply(np.zeros(100, dtype=np.float32))


def test_clone_continues_independently(byte_tok):
    grammar = Grammar.compile(byte_tok, "json_schema", {"type": "object", "properties": {
        "k": {"enum": ["ab", "cd"]}}, "required": ["k"], "additionalProperties": False})
    first = grammar.matcher()
    feed(first, '{"k": "')
    second = first.clone()
    feed(first, 'ab"}')
    assert first.is_accepting() and not second.is_accepting()
    assert second.allowed()[ord("c")] and not second.allowed()[ord('"')]
    feed(second, 'cd"}')
    assert second.is_accepting()
    with pytest.raises(GrammarError):
        first.clone().advance(ord(" "))


def test_fixed_json_separators(byte_tok):
    grammar = Grammar.compile(byte_tok, "json_schema", '{"type": "array", "items": {"type": "integer"}}')
    matcher = grammar.matcher()
    feed(matcher, "[1,")
    assert np.flatnonzero(matcher.allowed()).tolist() == [ord(" ")]  # ", " only, no free whitespace
    feed(matcher, " 2]")
    assert matcher.is_accepting()


@pytest.mark.parametrize("kind, source, message", [
    ("json_schema", {"type": "array", "uniqueItems": True}, "uniqueItems"),
    ("json_schema", {"not": {"type": "string"}}, "not"),
    ("json_schema", {"type": "string", "format": "bogus"}, "bogus"),
    ("json_schema", {"$ref": "#/$defs/missing"}, "missing"),
    ("json_schema", "{not json", "JSON"),
    ("regex", "a(", "unclosed group"),
    ("gbnf", 'root ::= "a" undefined_rule', "undefined_rule"),
    ("lark", "start: (", "Expected token ')'"),
    ("yaml", "a: 1", "unknown grammar kind"),
])
def test_unsupported_or_invalid_is_an_error(byte_tok, kind, source, message):
    with pytest.raises(GrammarError, match=re.escape(message)):
        Grammar.compile(byte_tok, kind, source)


def test_compile_is_cached_by_content(byte_tok):
    a = Grammar.compile(byte_tok, "json_schema", {"type": "object", "properties": {"a": {"type": "integer"}}})
    b = Grammar.compile(byte_tok, "json_schema", '{"type":"object","properties":{"a":{"type":"integer"}}}')
    c = Grammar.compile(byte_tok, "json_schema", {"properties": {"a": {"type": "integer"}}, "type": "object"})
    assert a is b and a is not c  # key order is generation order: a different grammar
    assert Grammar.compile(ByteTokenizer(), "json_schema", '{"type":"object","properties":{"a":'
                           '{"type":"integer"}}}') is not a


# -- real model --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llm(smollm_path):
    return llamay.load(smollm_path, threads=2)


@pytest.fixture(scope="module")
def prompt_ids(llm):
    return llm.tokenize(PROMPT, parse_special=True)


def sample(llm, prompt_ids, grammar, seed):
    """Sampled text under the grammar -> (text, matcher); stops at EOS, when done, or at MAX_TOKENS."""
    ctx, matcher = llm.create_context(prompt_ids), grammar.matcher()
    sampler, out = Sampler(SamplingParams(temperature=1.0, seed=seed)), []
    try:
        logits = ctx.logits
        for _ in range(MAX_TOKENS):
            logits = np.array(logits, dtype=np.float32)
            matcher.apply(logits)
            assert all(np.isfinite(logits[sorted(llm.tokenizer.eog_ids)]) == matcher.is_accepting())
            token = sampler.sample(logits, ctx.tokens)
            matcher.advance(token)
            if token in llm.tokenizer.eog_ids:
                break
            out.append(token)
            if matcher.is_done():
                break
            logits = ctx.extend([token])
    finally:
        ctx.delete(cache=False)
    return llm.tokenizer.decode(out), matcher


@pytest.mark.model
def test_sampled_json_validates_against_every_schema(llm, prompt_ids):
    assert len(SCHEMAS) >= 30
    failures = []
    for seed, schema in enumerate(SCHEMAS):
        grammar = Grammar.compile(llm.tokenizer, "json_schema", schema)
        # a grammar with unbounded numbers or strings may be sampled past MAX_TOKENS: then another seed
        for attempt in range(3):
            text, matcher = sample(llm, prompt_ids, grammar, seed + 100 * attempt)
            if matcher.is_accepting():
                break
        try:
            assert matcher.is_accepting(), "unfinished"
            jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.FormatChecker())
        except (AssertionError, ValueError, jsonschema.ValidationError) as e:
            failures.append(f"seed {seed} schema {json.dumps(schema)} -> {text!r}: {str(e)[:200]}")
    assert not failures, "\n".join(failures)


@pytest.mark.model
def test_json_object_kind_yields_objects(llm, prompt_ids):
    grammar, finished = Grammar.compile(llm.tokenizer, "json_object", None), []
    for seed in range(2, 6):
        text, matcher = sample(llm, prompt_ids, grammar, seed)
        assert text.startswith("{"), text
        if matcher.is_accepting():  # else it ran out of tokens
            finished.append(json.loads(text))
    assert finished and all(isinstance(value, dict) for value in finished), finished


def reduces_to_arith(text: str) -> bool:
    """Independent check of ARITH_GBNF: innermost parenthesised expressions reduce to a number."""
    flat = r"[0-9]{1,3}(?:[-+*/][0-9]{1,3})*"
    while True:
        reduced = re.sub(rf"\(({flat})\)", "0", text)
        if reduced == text:
            return re.fullmatch(flat, text) is not None
        text = reduced


@pytest.mark.model
def test_gbnf_arithmetic(llm, prompt_ids):
    grammar = Grammar.compile(llm.tokenizer, "gbnf", ARITH_GBNF)
    for seed in range(3):
        text, matcher = sample(llm, prompt_ids, grammar, seed)
        assert matcher.is_accepting() and reduces_to_arith(text), text
        print(text)
    assert not reduces_to_arith("1+(2*3") and not reduces_to_arith("1++2")


@pytest.mark.model
def test_gbnf_json(llm, prompt_ids):
    grammar = Grammar.compile(llm.tokenizer, "gbnf", JSON_GBNF)
    for seed in range(3):
        text, matcher = sample(llm, prompt_ids, grammar, seed)
        assert matcher.is_accepting(), text
        json.loads(text)
        print(text)
        assert _accepts(llm, grammar, text), text


def _accepts(llm, grammar, text: str) -> bool:
    """A fresh matcher fed the retokenized text ends accepting (llguidance over other tokens)."""
    matcher = grammar.matcher()
    try:
        for token in llm.tokenize(text, add_special=False):
            matcher.advance(token)
    except GrammarError:
        return False
    return matcher.is_accepting()


@pytest.mark.model
def test_retokenized_text_is_checked(llm):
    grammar = Grammar.compile(llm.tokenizer, "json_schema", {"type": "object", "properties": {
        "a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False})
    assert _accepts(llm, grammar, '{"a": 12}')
    assert not _accepts(llm, grammar, '{"a": "x"}')
    assert not _accepts(llm, grammar, '{"a":12}')  # fixed separators: ": " only
    assert not _accepts(llm, grammar, '{"a": 12')  # incomplete: not accepting
