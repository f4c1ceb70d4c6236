"""XML-style call arguments: `<parameter=KEY>\\nVALUE\\n</parameter>\\n` blocks inside
`<function=NAME>\\n...</function>` (Qwen3-Coder, Qwen3.5 / 3.6, Nemotron 3 Nano, Step 3.5 Flash).

ref: the Qwen3.5 chat template (fixtures/templates/Qwen3.5-4B.jinja): a value is raw text, not escaped;
objects and arrays are written as JSON (tojson), everything else as jinja's str() (`True`, `None`, `2`).
So a value's type comes from the function's parameter schema: where it allows a string, a value that does
not decode to one of its other types stays text; numbers, booleans, null, objects and arrays are decoded
(JSON, or Python's True/False/None). A value cannot contain `</parameter>`.

`params_to_json` parses the blocks, `ParamsEnd` finds where they end in streamed text, `params_lark`
writes llguidance Lark rules matching the blocks a schema allows (keys in the schema's order)."""
from __future__ import annotations

import json
import re

from ..chat.reasoning import held_prefix
from .lark_values import SCALARS, Rules, branches, json_value, kind_of, one_of, repeat, scalar

END = "</function>"  # ends a call's parameters
OPEN, CLOSE = "<parameter=", "</parameter>"
_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)
_WORDS = {"True": True, "False": False, "None": None}
_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"),
          (dict, "object"), (type(None), "null"))


def params_to_json(text: str, schema: dict | None) -> dict:
    """The blocks of one call -> its arguments, typed by the function's parameter schema (None or a
    schema without properties: values that decode as JSON are decoded). ValueError on text between blocks."""
    props = (schema or {}).get("properties") or {}
    result, at = {}, 0
    for m in _PARAM.finditer(text):
        if text[at:m.start()].strip():
            raise ValueError(f"XML tool call: unexpected text {text[at:m.start()]!r}")
        key = m.group(1).strip()
        result[key] = typed(m.group(2), props.get(key))
        at = m.end()
    if text[at:].strip():
        raise ValueError(f"XML tool call: unexpected text {text[at:]!r}")
    return result


def typed(raw: str, schema: dict | None):
    """A raw value as the schema types it: decoded where that gives one of its types, else the text."""
    kinds = {k for b in branches(schema) for k in _kinds(b)} if schema else {None}
    if kinds == {"string"}:
        return raw
    try:
        value = _WORDS[raw.strip()] if raw.strip() in _WORDS else json.loads(raw)
    except ValueError:
        return raw
    if None in kinds or _type_of(value) in kinds or (_type_of(value) == "integer" and "number" in kinds):
        return value
    return raw


def _kinds(branch: dict) -> set:
    if "enum" in branch or "const" in branch:
        return {_type_of(v) for v in (branch["enum"] if "enum" in branch else [branch["const"]])}
    return {kind_of(branch)}


def _type_of(value) -> str:
    return next(name for kind, name in _TYPES if isinstance(value, kind))


class ParamsEnd:
    """Where a call's blocks end: at `</function>` outside a block. feed(text) -> how much of text is the
    call's (all but a possible start of the marker at its end, which is fed again with what follows);
    `done` once the marker is found (it is not consumed); `text` holds the blocks."""

    def __init__(self):
        self.text, self.done = "", False

    def feed(self, text: str) -> int:
        seen = self.text + text
        at = seen.find(END)
        while at >= 0 and seen.rfind(OPEN, 0, at) > seen.rfind(CLOSE, 0, at):  # inside a value
            at = seen.find(END, at + 1)
        if at >= 0:
            used = at - len(self.text)
            self.text, self.done = seen[:at], True
            return used
        used = len(text) - min(held_prefix(seen, END), len(text))
        self.text += text[:used]
        return used

    def finish(self):
        pass  # a call cut off inside its blocks keeps no arguments


# ---- grammar -------------------------------------------------------------------------------------------

_NO_CLOSE = r"~/(?s:.*)<\/parameter>(?s:.*)/"
_ANY_KEY = r"/[^>\n]+/"


def params_lark(schema: dict, rule: str) -> str:
    """Lark rules defining `rule`: the blocks valid for a function's parameter schema (an object). Keys in
    the schema's order; required ones must appear; only declared ones may (any key, any number, when the
    schema lists no properties). Strings honour min/maxLength, enum and const; numbers their bounds;
    objects and arrays are JSON under their schema."""
    builder = _Builder(rule)
    return builder.members(schema, builder.member, "",
                           lambda: f'("{OPEN}" {_ANY_KEY} ">\\n" {builder.value({})})*')


class _Builder(Rules):
    """A value is the text after `<parameter=KEY>\\n` up to and including `\\n</parameter>\\n`."""

    def member(self, key: str, schema) -> str:
        return f'{json.dumps(OPEN + key + ">" + chr(10), ensure_ascii=False)} {self.value(schema)}'

    def value(self, schema) -> str:
        end = json.dumps("\n" + CLOSE + "\n")
        alternatives = []
        for branch in branches(schema):
            kind = kind_of(branch)
            if "enum" in branch or "const" in branch:
                values = branch["enum"] if "enum" in branch else [branch["const"]]
                alternatives += [json.dumps(self.rendered(v) + "\n" + CLOSE + "\n", ensure_ascii=False)
                                 for v in values]
            elif kind in (None, "string"):
                return self.text(branch if kind == "string" else {})  # any text: it covers the others
            elif kind in SCALARS:
                alternatives.append(f"{scalar(branch)} {end}")
            elif kind in ("object", "array"):
                alternatives.append(f"{json_value(branch)} {end}")
            else:
                raise ValueError(f"unknown schema type {kind!r}")
        return one_of(alternatives)

    def text(self, schema: dict) -> str:
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        chars = f"/(?s:.){repeat(lo, hi)}/"
        return self.new(f'({chars} & {_NO_CLOSE}) {json.dumps(chr(10) + CLOSE + chr(10))}', terminal=True)

    @staticmethod
    def rendered(value) -> str:
        """An enum member's text: a string raw, anything else as JSON."""
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
