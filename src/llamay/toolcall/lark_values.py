"""Lark (llguidance dialect) pieces shared by the grammars of non-JSON argument syntaxes (xmlcall.py,
pythonic.py): scalar terminals, a JSON-schema node split into single-type branches, and keyword members
written in the schema's order."""
from __future__ import annotations

import json

INT = r"/-?(0|[1-9][0-9]*)/"
NUMBER = r"/-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/"
BOOL = '("true" | "false" | "True" | "False")'  # JSON's words, or Python's (jinja's str() of a bool)
NULL = '("null" | "None")'
SCALARS = {"integer": INT, "number": NUMBER, "boolean": BOOL, "null": NULL}
_BOUNDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def scalar(schema: dict) -> str:
    """An integer, number, boolean or null branch; numbers with bounds as %json, which enforces them."""
    kind = kind_of(schema)
    if kind in ("integer", "number") and _BOUNDS & schema.keys():
        return json_value(schema)
    return SCALARS[kind]


def json_value(schema: dict) -> str:
    """A %json value of the schema, spaced as tojson and json.dumps write it."""
    return "%json " + json.dumps({"x-guidance": JSON_STYLE, **schema}, ensure_ascii=False)


def branches(schema) -> list[dict]:
    """The schema as alternatives of one type each (anyOf/oneOf members, a list of types, nullable);
    a branch without "type" is any value. ValueError for an empty anyOf."""
    if schema is True or not isinstance(schema, dict):
        return [{}]
    for word in ("anyOf", "oneOf"):
        if word in schema:
            if not schema[word]:
                raise ValueError(f"empty {word}: no value is valid")
            rest = {k: v for k, v in schema.items() if k != word}
            return [b for member in schema[word] for b in branches({**rest, **member})]
    kind = schema.get("type")
    found = [{**schema, "type": t} for t in kind] if isinstance(kind, list) else [schema]
    if schema.get("nullable") is True:
        found.append({"type": "null"})
    return found


def one_of(alternatives: list[str]) -> str:
    return alternatives[0] if len(alternatives) == 1 else "(" + " | ".join(alternatives) + ")"


def repeat(lo: int, hi: int | None) -> str:
    """A Lark/regex repetition of lo to hi (None: no bound) times."""
    return "*" if lo == 0 and hi is None else f"{{{lo},{'' if hi is None else hi}}}"


def kind_of(schema: dict) -> str | None:
    """A single-type branch's type (object when it lists properties), None when any."""
    return schema.get("type") or ("object" if "properties" in schema else None)


class Rules:
    """The Lark rules defining one rule name: helper rules `rule-N` (terminals `RULE-N`) in `lines`."""

    def __init__(self, rule: str):
        self.rule, self.lines, self.n = rule, [], 0

    def new(self, body: str, terminal: bool = False) -> str:
        self.n += 1
        name = f"{self.rule}-{self.n}"
        name = name.upper() if terminal else name
        self.lines.append(f"{name}: {body}")
        return name

    def members(self, schema: dict, member, sep: str, any_members) -> str:
        """The rules text: `rule` is an object schema's members in its order, member(key, schema) -> Lark,
        `sep` between; any_members() -> Lark where it lists no properties. ValueError for a required key
        it does not list."""
        props = schema.get("properties") or {}
        if props:
            required = set(schema.get("required", []))
            if required - props.keys():
                raise ValueError(f"required keys {sorted(required - props.keys())} are not among the properties")
            body = ordered([member(k, props[k]) for k in props], [k in required for k in props], sep, self.new)
            body += "" if required else "?"
        else:
            body = any_members()
        return "\n".join([f"{self.rule}: {body}", *self.lines]) + "\n"


def ordered(members: list[str], required: list[bool], sep: str, new_rule) -> str:
    """Lark for the members in their order, `sep` (a Lark expression, or "") between those written, an
    optional member skippable, a required one not. new_rule(body) -> the name of a new rule with that body.
    Matches nothing ("" accepted) only when no member is required: the caller makes it optional then."""
    sep = f"{sep} " if sep else ""
    tails = [""] * (len(members) + 1)  # tails[j]: members j.. after one was written (each after a sep)
    for j in reversed(range(1, len(members))):
        piece = f"{sep}{members[j]}" if required[j] else f"({sep}{members[j]})?"
        tails[j] = new_rule(f"{piece} {tails[j + 1]}".rstrip())
    firsts = []
    for j, member in enumerate(members):  # the first member written: any one up to the first required
        firsts.append(f"{member} {tails[j + 1]}".rstrip())
        if required[j]:
            break
    return "(" + " | ".join(firsts) + ")"
