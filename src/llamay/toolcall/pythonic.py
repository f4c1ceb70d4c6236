"""Pythonic calls (LFM2 / LFM2.5): `<|tool_call_start|>[name(key="text", n=1, on=True), other()]<|tool_call_end|>`,
each call's arguments Python keyword arguments.

ref: render_tool_calls in the LFM2.5-8B-A1B chat template: strings in single quotes, not escaped; objects
as JSON (tojson); other values as jinja's str() (True, None, a list's Python repr). The models write
strings in double quotes (LiquidAI's model cards). So the reader takes Python literals and JSON's
true/false/null alike, strings in either quote with the escapes JSON and Python share (others, and raw
newlines, as written).

`kwargs_to_json` parses one call's arguments, `KwargsEnd` finds their end in streamed text,
`kwargs_lark` writes llguidance Lark rules matching the arguments a schema allows (keys in the schema's
order), `calls_text` writes calls as the model does (for templates that do not render them)."""
from __future__ import annotations

import json
import re

from .lark_values import BOOL, NULL, SCALARS, Rules, branches, json_value, kind_of, one_of, repeat, scalar

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORDS = (("True", True), ("False", False), ("None", None), ("true", True), ("false", False), ("null", None))
_MAX_DEPTH = 64
# the escapes JSON and Python share (a surrogate pair as one); any other backslash stays as written
_ESCAPE = re.compile(r"\\(u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|[\"'\\/bfnrt])")
_SIMPLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def kwargs_to_json(text: str) -> dict:
    """`city="Paris", days=2` -> {"city": "Paris", "days": 2}. ValueError (with the offset) on malformed text."""
    reader = _Reader(text)
    result = {}
    reader.space()
    while reader.pos < len(text):
        key = reader.name()
        if key in result:
            reader.fail(f"duplicate argument {key!r}")
        reader.expect("=")
        result[key] = reader.value(0)
        if reader.pos < len(text):
            reader.expect(",")
    return result


class _Reader:
    """Recursive descent over Python literals (and JSON's words); `pos` is the next character's offset."""

    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def fail(self, what: str):
        raise ValueError(f"pythonic tool call: {what} at offset {self.pos} (near {self.text[self.pos:self.pos + 20]!r})")

    def space(self):
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def expect(self, char: str):
        self.space()
        if not self.text.startswith(char, self.pos):
            self.fail(f"expected {char!r}")
        self.pos += 1
        self.space()

    def name(self) -> str:
        found = _NAME.match(self.text, self.pos)
        if found is None:
            self.fail("expected an argument name")
        self.pos = found.end()
        return found.group()

    def value(self, depth: int):
        if depth > _MAX_DEPTH:
            self.fail(f"nesting deeper than {_MAX_DEPTH}")
        self.space()
        head = self.text[self.pos:self.pos + 1]
        if head in ("'", '"'):
            value = self.string()
        elif head in ("[", "("):
            value = self.items(depth, "]" if head == "[" else ")")
        elif head == "{":
            value = self.mapping(depth)
        else:
            value = self.scalar()
        self.space()
        return value

    def string(self) -> str:
        quote, i = self.text[self.pos], self.pos + 1
        while i < len(self.text) and self.text[i] != quote:
            i += 2 if self.text[i] == "\\" else 1
        if i >= len(self.text):
            self.fail("unterminated string")
        body, self.pos = self.text[self.pos + 1:i], i + 1
        return _ESCAPE.sub(_unescaped, body)

    def items(self, depth: int, close: str) -> list:
        self.expect(self.text[self.pos])
        result = []
        while not self.text.startswith(close, self.pos):
            result.append(self.value(depth + 1))
            if not self.text.startswith(close, self.pos):
                self.expect(",")
        self.pos += 1
        return result

    def mapping(self, depth: int) -> dict:
        self.expect("{")
        result = {}
        while not self.text.startswith("}", self.pos):
            if self.text[self.pos:self.pos + 1] not in ("'", '"'):
                self.fail("expected a string key")
            key = self.string()
            self.expect(":")
            result[key] = self.value(depth + 1)
            if not self.text.startswith("}", self.pos):
                self.expect(",")
        self.pos += 1
        return result

    def scalar(self):
        for word, value in _WORDS:
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return value
        found = _NUMBER.match(self.text, self.pos)
        if found is None or not found.group():
            self.fail("expected a value")
        self.pos = found.end()
        is_int = found.group(1) is None and found.group(2) is None
        return int(found.group()) if is_int else float(found.group())


def _unescaped(m: re.Match) -> str:
    code = m.group(1)
    if code[0] == "u":
        return json.loads(f'"{m.group()}"')
    return _SIMPLE.get(code, code)


class KwargsEnd:
    """Where a call's arguments end: the `)` closing its parenthesis, outside strings and brackets.
    feed(text) -> how much of text is arguments (the `)` is not consumed); `done` once found."""

    def __init__(self):
        self.text, self.done = "", False
        self.depth, self.quote, self.escaped = 0, "", False

    def feed(self, text: str) -> int:
        for i, ch in enumerate(text):
            if self.quote:
                if self.escaped:
                    self.escaped = False
                elif ch == "\\":
                    self.escaped = True
                elif ch == self.quote:
                    self.quote = ""
            elif ch in "'\"":
                self.quote = ch
            elif ch in "([{":
                self.depth += 1
            elif ch in ")]}":
                if self.depth == 0:
                    self.text += text[:i]
                    self.done = True
                    return i
                self.depth -= 1
        self.text += text
        return len(text)

    def finish(self):
        pass  # a call cut off inside its arguments keeps none


def calls_text(fmt, calls: list[dict]) -> str:
    """Calls (chat-template shape; arguments a mapping or JSON text) in the pythonic format `fmt`."""
    written = []
    for call in calls:
        function = call.get("function") or call
        arguments = function.get("arguments") or {}
        if isinstance(arguments, str):  # JSON text that is not an object (adapt() decoded the others)
            arguments = {}
        pairs = ", ".join(f"{key}={_literal(value)}" for key, value in arguments.items())
        written.append(fmt.head_text(function.get("name", "")) + pairs + fmt.tail)
    return fmt.trigger + fmt.open + fmt.sep.join(written) + fmt.close


def _literal(value) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)  # strings double-quoted, numbers, objects as JSON


# ---- grammar -------------------------------------------------------------------------------------------

_ANY_NAME = r"/[A-Za-z_][A-Za-z0-9_]*/"
_ESCAPES = r"""\\(["'\\\/bfnrt]|u([0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))"""  # no lone surrogate


def kwargs_lark(schema: dict, rule: str) -> str:
    """Lark rules defining `rule`: the keyword arguments valid for a function's parameter schema (an
    object), `, `-separated, in the schema's order; required ones must appear, only declared ones may (any,
    when it lists no properties). Strings (either quote) honour min/maxLength, enum and const; numbers
    their bounds; objects are JSON under their schema."""
    builder = _Builder(rule)

    def any_members() -> str:
        member = f'{_ANY_NAME} "=" {builder.value({})}'
        return f'({member} (", " {member})*)?'
    return builder.members(schema, lambda key, value: f'{json.dumps(key + "=")} {builder.value(value)}',
                           '", "', any_members)


class _Builder(Rules):
    any = None  # the rule of any value, once written

    def value(self, schema) -> str:
        alternatives = []
        for branch in branches(schema):
            kind = kind_of(branch)
            if "enum" in branch or "const" in branch:
                alternatives += [self.literal(v) for v in (branch["enum"] if "enum" in branch else [branch["const"]])]
            elif kind is None:
                alternatives.append(self.any_value())
            elif kind == "string":
                alternatives.append(self.string(branch))
            elif kind in SCALARS:
                alternatives.append(scalar(branch))
            elif kind == "array":
                alternatives.append(self.array(branch))
            elif kind == "object":
                alternatives.append(json_value(branch))
            else:
                raise ValueError(f"unknown schema type {kind!r}")
        return one_of(alternatives)

    def string(self, schema: dict) -> str:
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        count = repeat(lo, hi)
        double, single = rf'/"([^"\\]|{_ESCAPES}){count}"/', rf"/'([^'\\]|{_ESCAPES}){count}'/"
        return self.new(f"{double} | {single}", terminal=True)

    def array(self, schema: dict) -> str:
        item = self.value(schema.get("items", {}))
        lo, hi = schema.get("minItems", 0), schema.get("maxItems")
        if hi == 0:
            return '"[]"'
        rest = repeat(max(lo - 1, 0), None if hi is None else hi - 1)
        return self.new(f'"[" ({item} (", " {item}){rest}){"?" if lo == 0 else ""} "]"')

    def literal(self, value) -> str:
        if isinstance(value, bool):
            return f'("{value}" | "{str(value).lower()}")'
        if value is None:
            return NULL
        return json.dumps(_literal(value), ensure_ascii=False)

    def any_value(self) -> str:
        if self.any is None:
            self.any = f"{self.rule}-any"
            string = self.string({})
            self.lines.append(f'{self.any}: {string} | {SCALARS["number"]} | {BOOL} | {NULL} | '
                              f'"[" ({self.any} (", " {self.any})*)? "]" | {json_value({"type": "object"})}')
        return self.any
