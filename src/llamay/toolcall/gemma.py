"""Gemma 4 tool-call arguments: the object in `<|tool_call>call:NAME{key:value,...}<tool_call|>`.

ref: format_argument in the Gemma 4 chat template (fixtures/templates/google-gemma-4-31B-it.jinja):
strings are wrapped in `<|"|>` with no escaping (so a string cannot contain it), keys are bare and sorted
case-insensitively (jinja's dictsort), booleans print as true/false, numbers and null as Python prints
them (`1e-07`, `None`: the template leaves them to jinja's str()), arrays `[a,b]`, objects `{k:v}`.
No whitespace anywhere.

`args_to_json` parses that text; `args_lark` writes llguidance Lark rules matching exactly the argument
objects a JSON schema allows, so a constrained model cannot emit a missing key, a wrong type or an
undeclared key.
"""
from __future__ import annotations

import json
import math
import re

from .lark_values import Rules

QUOTE = '<|"|>'  # Gemma's string delimiter, as text
QUOTE_LARK = json.dumps(QUOTE)  # the Lark expression of that text; a special token is e.g. `<[id]>`

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_WORDS = (("true", True), ("false", False), ("None", None), ("null", None))
_KEY = re.compile(r"[^:{}\[\],]+")
_VALUE_END = ",}]"
_MAX_DEPTH = 64


def args_to_json(text: str) -> dict:
    """`{key:<|"|>v<|"|>,n:3}` -> {"key": "v", "n": 3}. ValueError (with the offset) on malformed text."""
    parser = _Parser(text)
    if not text.startswith("{"):
        parser.fail("arguments must be an object starting with '{'")
    value = parser.value(0)
    if parser.pos != len(text):
        parser.fail("unexpected text after the arguments object")
    return value


class _Parser:
    """Recursive descent over the Gemma argument syntax; `pos` is the offset of the next character."""

    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def fail(self, what: str):
        snippet = self.text[self.pos:self.pos + 20]
        raise ValueError(f"Gemma tool-call arguments: {what} at offset {self.pos} (near {snippet!r})")

    def value(self, depth: int):
        if depth > _MAX_DEPTH:
            self.fail(f"nesting deeper than {_MAX_DEPTH}")
        if self.text.startswith(QUOTE, self.pos):
            return self.string()
        head = self.text[self.pos:self.pos + 1]
        if head == "{":
            return self.object(depth)
        if head == "[":
            return self.array(depth)
        return self.scalar()

    def string(self) -> str:
        start = self.pos + len(QUOTE)
        end = self.text.find(QUOTE, start)
        if end < 0:
            self.fail("unterminated string")
        self.pos = end + len(QUOTE)
        return self.text[start:end]

    def object(self, depth: int) -> dict:
        self.pos += 1
        result = {}
        if self.eat("}"):
            return result
        while True:
            key = self.key()
            if key in result:
                self.fail(f"duplicate key {key!r}")
            result[key] = self.value(depth + 1)
            if self.eat("}"):
                return result
            if not self.eat(","):
                self.fail("expected ',' or '}'")

    def key(self) -> str:
        if self.text.startswith(QUOTE, self.pos):  # the template's escape_keys form
            key = self.string()
        else:
            found = _KEY.match(self.text, self.pos)
            if found is None or QUOTE in found.group():
                self.fail("expected a key")
            key, self.pos = found.group(), found.end()
        if not self.eat(":"):
            self.fail("expected ':' after a key")
        return key

    def array(self, depth: int) -> list:
        self.pos += 1
        result = []
        if self.eat("]"):
            return result
        while True:
            result.append(self.value(depth + 1))
            if self.eat("]"):
                return result
            if not self.eat(","):
                self.fail("expected ',' or ']'")

    def scalar(self):
        for word, value in _WORDS:
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                self.check_end()
                return value
        found = _NUMBER.match(self.text, self.pos)
        if found is None:
            self.fail("expected a value")
        self.pos = found.end()
        self.check_end()
        is_int = found.group(1) is None and found.group(2) is None
        return int(found.group()) if is_int else float(found.group())

    def check_end(self):
        if self.pos < len(self.text) and self.text[self.pos] not in _VALUE_END:
            self.fail("expected ',', '}' or ']' after a value")

    def eat(self, char: str) -> bool:
        if self.text.startswith(char, self.pos):
            self.pos += 1
            return True
        return False


# ---- grammar -------------------------------------------------------------------------------------------

_INT_LARK = r"/-?(0|[1-9][0-9]*)/"
_NUM_LARK = r"/-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/"
_BOOL_LARK = '("true" | "false")'
_NULL_LARK = '("None" | "null")'
_NO_QUOTE = r'~/(?s:.*)<\|"\|>(?s:.*)/'  # text that does not contain QUOTE
_GENERIC_KEY = r'/[^:{}\[\],<>"]+/'
_RULE_NAME = re.compile(r"[a-z_][a-z0-9_-]*")  # lower case: Lark reads upper case names as terminals


def args_lark(schema: dict, rule: str, quote: str = QUOTE_LARK) -> str:
    """Lark rules (llguidance dialect) defining `rule`: the Gemma argument objects valid for `schema`, a
    JSON schema of function parameters (an object).

    Keys come in the template's order (sorted case-insensitively); required keys must appear; only
    declared keys may (additionalProperties is taken as false when properties are given; an object
    schema without properties allows any keys, in any order). Supported: type (or a list of types),
    properties/required, items/minItems/maxItems, minLength/maxLength, enum, const, anyOf/oneOf,
    nullable, $ref into #/$defs or #/definitions. Numeric bounds, pattern and format are not enforced
    (validate the parsed arguments). quote: the Lark expression of the string delimiter: a string literal
    (default, the text `<|"|>`) or a special token such as `<[id]>`. Helper rules are named `rule-*`,
    terminals `RULE-*` (rule upper-cased), so grammars of several functions can share one file as long
    as their rule names differ beyond case. ValueError for a schema this cannot express, TypeError for
    one that is not a dict.
    """
    if not isinstance(schema, dict):
        raise TypeError(f"parameters schema must be a dict, got {type(schema).__name__}")
    if not _RULE_NAME.fullmatch(rule):
        raise ValueError(f"rule name {rule!r} is not a Lark rule name ([a-z_][a-z0-9_-]*)")
    builder = _Builder(schema, rule, quote)
    top = builder.value(schema if schema else {"type": "object"})
    if not builder.is_object(schema):
        raise ValueError("parameters schema must describe an object")
    return "\n".join([f"{rule}: {top}", *builder.lines]) + "\n"


class _Builder(Rules):
    """Turns schema nodes into Lark expressions, appending helper rules and terminals to `lines`."""

    def __init__(self, root: dict, rule: str, quote: str):
        super().__init__(rule)
        self.root = root
        self.quote = quote
        self.text_quote = quote.startswith('"')  # else a special token: it cannot sit inside a terminal
        self.named: dict[str, str] = {}  # shared helpers and $ref targets -> rule name

    def value(self, schema) -> str:
        if schema is True:
            schema = {}
        if not isinstance(schema, dict):
            raise TypeError(f"a schema must be a dict or true, got {schema!r}")
        expr = self.plain(schema)
        if schema.get("nullable") is True:
            expr = f"({expr} | {_NULL_LARK})"
        return expr

    def plain(self, schema: dict) -> str:
        if "$ref" in schema:
            return self.ref(schema["$ref"])
        if "const" in schema:
            return self.literal(schema["const"])
        if "enum" in schema:
            return self.alternatives([self.literal(v) for v in schema["enum"]], "enum")
        for word in ("anyOf", "oneOf"):
            if word in schema:
                rest = {k: v for k, v in schema.items() if k != word}
                return self.alternatives([self.value({**rest, **b}) for b in schema[word]], word)
        if {"allOf", "not", "prefixItems"} & schema.keys() or isinstance(schema.get("items"), list):
            raise ValueError("allOf, not and tuple items are not supported in tool parameters")
        kind = schema.get("type")
        if isinstance(kind, list):
            return self.alternatives([self.value({**schema, "type": t}) for t in kind], "type")
        if kind is None:
            kind = "object" if "properties" in schema else None
        return self.typed(kind, schema)

    def typed(self, kind: str | None, schema: dict) -> str:
        if kind is None:
            return self.any_value()
        simple = {"integer": _INT_LARK, "number": _NUM_LARK, "boolean": _BOOL_LARK, "null": _NULL_LARK}
        if kind in simple:
            return simple[kind]
        builders = {"string": self.string, "array": self.array, "object": self.object}
        if kind not in builders:
            raise ValueError(f"unknown schema type {kind!r}")
        return builders[kind](schema)

    def alternatives(self, exprs: list[str], word: str) -> str:
        if not exprs:
            raise ValueError(f"empty {word}: no value is valid")
        return exprs[0] if len(exprs) == 1 else "(" + " | ".join(exprs) + ")"

    def ref(self, ref: str) -> str:
        """A named rule per $ref target, so recursive schemas stay finite."""
        if ref not in self.named:
            found = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", ref)
            target = self.root.get(found.group(1), {}).get(found.group(2)) if found else None
            if target is None:
                raise ValueError(f"unresolvable $ref {ref!r} (only #/$defs/NAME and #/definitions/NAME)")
            self.n += 1
            name = self.named[ref] = f"{self.rule}-{self.n}"
            self.lines.append(f"{name}: {self.value(target)}")
        return self.named[ref]

    def is_object(self, schema: dict) -> bool:
        kind = schema.get("type", "object" if "properties" in schema or not schema else None)
        return kind in ("object", ["object"])

    # -- strings

    def string(self, schema: dict) -> str:
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        if lo == 0 and hi is None and "string" in self.named:
            return self.named["string"]
        chars = "/(?s:.*)/" if lo == 0 and hi is None else f"/(?s:.){{{lo},{'' if hi is None else hi}}}/"
        if self.text_quote:
            name = self.new(f"{self.quote} ({chars} & {_NO_QUOTE}) {self.quote}", terminal=True)
        else:
            body = self.new(f"{chars} & {_NO_QUOTE}", terminal=True)
            name = self.new(f"{self.quote} {body} {self.quote}")
        if lo == 0 and hi is None:
            self.named["string"] = name
        return name

    def literal(self, value) -> str:
        """The exact rendering of one JSON value (enum and const members)."""
        if isinstance(value, str):
            if QUOTE in value:
                raise ValueError(f"a string containing {QUOTE!r} cannot be written in Gemma syntax")
            if self.text_quote:
                return json.dumps(QUOTE + value + QUOTE, ensure_ascii=False)
            inner = f" {json.dumps(value, ensure_ascii=False)} " if value else " "
            return f"{self.quote}{inner}{self.quote}"
        if isinstance(value, bool):
            return '"true"' if value else '"false"'
        if value is None:
            return _NULL_LARK
        if isinstance(value, (int, float)):
            if not math.isfinite(value):
                raise ValueError(f"{value!r} is not a JSON number")
            return json.dumps(repr(value))
        if isinstance(value, list):
            parts = ' "," '.join(self.literal(v) for v in value)
            return f'"[" {parts} "]"' if parts else '"[]"'
        if isinstance(value, dict):
            parts = ' "," '.join(f"{_key_lark(k)} {self.literal(value[k])}" for k in _sorted_keys(value))
            return f'"{{" {parts} "}}"' if parts else '"{}"'
        raise ValueError(f"unsupported literal {value!r}")

    # -- arrays and objects

    def array(self, schema: dict) -> str:
        item = self.value(schema.get("items", {}))
        lo, hi = schema.get("minItems", 0), schema.get("maxItems")
        if hi == 0:
            return '"[" "]"'
        if hi is not None and lo > hi:
            raise ValueError(f"minItems {lo} > maxItems {hi}: no array is valid")
        rest = f'("," {item})'
        rest += "*" if lo <= 1 and hi is None else f"{{{max(lo - 1, 0)},{'' if hi is None else hi - 1}}}"
        inner = f"{item} {rest}"
        return self.new(f'"[" ({inner}){"?" if lo == 0 else ""} "]"')

    def object(self, schema: dict) -> str:
        props = schema.get("properties")
        required = list(schema.get("required", []))
        missing = [k for k in required if k not in (props or {})]
        if missing:
            raise ValueError(f"required keys {missing} are not among the properties")
        if props is None and schema.get("additionalProperties") is not False:
            return self.any_object()
        if not props:
            return '"{" "}"'
        keys = _sorted_keys(props)
        members = [f"{_key_lark(k)} {self.value(props[k])}" for k in keys]
        return self.new(self.members(members, [k in required for k in keys]))

    def members(self, members: list[str], required: list[bool]) -> str:
        """`{` members `}` in order, comma-separated, optional ones skippable. tails[j] is the rule for
        members j.. when one was already written (each then starts with a comma)."""
        tails = [""] * (len(members) + 1)
        for j in reversed(range(1, len(members))):
            piece = f'"," {members[j]}' if required[j] else f'("," {members[j]})?'
            tails[j] = self.new(f"{piece} {tails[j + 1]}".rstrip())
        firsts = []
        for j, member in enumerate(members):  # the first member written: any up to the first required
            firsts.append(f"{member} {tails[j + 1]}".rstrip())
            if required[j]:
                break
        optional = "?" if not any(required) else ""
        return f'"{{" ({" | ".join(firsts)}){optional} "}}"'

    # -- any value (schema {} or an object without properties)

    def any_value(self) -> str:
        if "any" not in self.named:
            name = self.named["any"] = f"{self.rule}-any"
            string = self.string({})
            array, obj = f"{self.rule}-anyarray", f"{self.rule}-anyobject"
            self.lines += [
                f"{name}: {string} | {_NUM_LARK} | {_BOOL_LARK} | {_NULL_LARK} | {array} | {obj}",
                f'{array}: "[" ({name} ("," {name})*)? "]"',
                f'{obj}: "{{" ({_GENERIC_KEY} ":" {name} ("," {_GENERIC_KEY} ":" {name})*)? "}}"',
            ]
        return self.named["any"]

    def any_object(self) -> str:
        self.any_value()
        return f"{self.rule}-anyobject"


def _sorted_keys(mapping: dict) -> list[str]:
    # jinja's dictsort (case_sensitive=False); ties between keys equal but for case keep a fixed order
    return sorted(mapping, key=lambda k: (k.lower(), k))


def _key_lark(key: str) -> str:
    if not key or any(c in key for c in ':{}[],') or QUOTE in key:
        raise ValueError(f"property name {key!r} cannot be written as a bare Gemma key")
    return json.dumps(key + ":", ensure_ascii=False)
