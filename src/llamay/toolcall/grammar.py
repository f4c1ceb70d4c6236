"""The grammar (llguidance Lark) that keeps tool calls on the offered functions' schemas.

auto: free text, and once the model writes a format's trigger the call that follows is constrained (a lazy
trigger, or a special token). required / a named function: the output is calls from its first token.
Each call names an offered function and its arguments follow that function's parameter schema."""
from __future__ import annotations

import json
import re
import threading
import weakref

from .formats import GENERIC, CallFormat
from .gemma import args_lark
from .lark_values import json_value
from .pythonic import kwargs_lark
from .xmlcall import params_lark

MAX_CALLS = 16  # per response: a model repeating a call cannot run on to the end of the context
TEXT = "TEXT: /(.|\\n)*/"
_MARKER = re.compile(r'(<\|?[A-Za-z_"/|]+\|?>|\[[A-Z_]+\])')
_SPECIALS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def tool_grammar(fmt: CallFormat, tools: list[dict], choice, parallel: bool, tokenizer,
                 think: bool | str = False) -> str:
    """Lark text. tools: chat-template shape; choice: "auto" | "required" | {"name": function}, or "none"
    for the generic form (its answer wrapper only).
    think: the model may reason in <think>...</think> before forced calls; "opened": the prompt opened the
    reasoning (Qwen3.5's, Nemotron 3's templates end it with <think>), so the output reasons up to </think> first.

    A JSON call (or a JSON array of calls) is one %json value, so a token may span its inner boundaries
    (`}}`, `"},`): llguidance refuses a token that crosses from a %json value into the text after it."""
    specials = _special_ids(tokenizer)

    def seq(text: str) -> str:
        return _seq(text, specials)

    functions = [t["function"] for t in tools]
    if isinstance(choice, dict):
        functions = [f for f in functions if f["name"] == choice["name"]]
    in_head = bool(fmt.trigger) and fmt.head.startswith(fmt.trigger)
    rules = []
    if fmt.sep and fmt.keys:  # several calls in one region: a JSON array of call objects
        array = {"type": "array", "items": _one(_call_schemas(fmt, functions)), "minItems": 1,
                 "maxItems": MAX_CALLS if parallel else 1}
        at, to = fmt.open.rindex("["), fmt.close.index("]") + 1
        body = f"{seq(fmt.open[:at])} {json_value(array)} {seq(fmt.close[to:])}"
    else:
        if fmt.keys:
            rules.append(f"call: {json_value(_one(_call_schemas(fmt, functions)))}")
        else:
            rules += [f"call_{i}: {_head_seq(_head(fmt, fn), seq)} {_args(fmt, fn, f'args_{i}', specials, rules)} "
                      f"{seq(fmt.tail)}" for i, fn in enumerate(functions)]
            rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(functions))))
        calls = f"call ({seq(fmt.sep)} call){{0,{MAX_CALLS - 1}}}" if fmt.sep and parallel else "call"
        body = f"{seq(fmt.open)} {calls} {seq(fmt.close)}"
    if in_head:  # the trigger is the head's start: after it, the rest of a head, then the arguments
        rules += [f"rest_{i}: {_head_seq(_head(fmt, fn)[len(fmt.trigger):], seq)} "
                  f"{_args(fmt, fn, f'rest_args_{i}', specials, rules)} {seq(fmt.tail)}"
                  for i, fn in enumerate(functions)]
        rules.append("rest: " + " | ".join(f"rest_{i}" for i in range(len(functions))))
        region, after_trigger = "call", "rest"
    else:
        region, after_trigger = f"{seq(fmt.trigger)} {body}", body
    again = parallel and not fmt.sep
    if fmt is GENERIC:
        listed = {"type": "object", "properties": {"tool_calls": array}, "required": ["tool_calls"],
                  "additionalProperties": False}
        answer = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"],
                  "additionalProperties": False}
        start = json_value({"anyOf": [listed, answer]} if choice == "auto" else answer if choice == "none" else listed)
    elif choice != "auto":
        start = f"{region} ({seq(fmt.region_sep)} {region}){{0,{MAX_CALLS - 1}}}" if again else region
    else:
        trigger = specials.get(fmt.trigger)
        if trigger is not None:
            rules.append(f"tag: TEXT <[{trigger}]> {after_trigger}")
        else:
            rules.append(f"trig[lazy]: TEXT {json.dumps(fmt.trigger)}")
            rules.append(f"tag: trig {after_trigger}")
        start = f"tag{{0,{MAX_CALLS}}} TEXT" if parallel else "TEXT | tag"
    if think and (choice != "auto" or fmt is GENERIC):
        start = f"think_body WS? ({start})" if think == "opened" else f"think? ({start})"
        rules += [] if think == "opened" else [f'think: {seq("<think>")} think_body WS?']
        rules += [f'think_body[lazy]: TEXT {seq("</think>")}',
                  "WS: /[ \\t\\r\\n]+/"]
    return "\n".join(["%llguidance {}", f"start: {start}", *rules, TEXT]) + "\n"


def _head(fmt: CallFormat, fn: dict) -> str:
    return fmt.head_text(json.dumps(fn["name"], ensure_ascii=False)[1:-1] if fmt.quoted_name else fn["name"])


def _head_seq(head: str, seq) -> str:
    """Lark for a head: its literal parts, a call's number where it says {index}."""
    return " /[0-9]{1,2}/ ".join(seq(part) for part in head.split("{index}"))


def _call_schemas(fmt: CallFormat, functions: list[dict]) -> list[dict]:
    """One JSON call object per function, keys in the format's order (llguidance keeps property order)."""
    name_key, args_key = fmt.keys
    return [{"type": "object", "properties": {name_key: {"const": fn["name"]}, args_key: arguments_schema(fn)},
             "required": [name_key, args_key], "additionalProperties": False} for fn in functions]


def _one(schemas: list[dict]) -> dict:
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def _args(fmt: CallFormat, fn: dict, rule: str, specials: dict, rules: list) -> str:
    schema = arguments_schema(fn)
    if fmt.args == "gemma":
        quote = '<|"|>'
        rules.append(args_lark(schema, rule, quote=f"<[{specials[quote]}]>" if quote in specials
                               else json.dumps(quote)))
    elif fmt.args == "xml":
        rules.append(params_lark(schema, rule))
    elif fmt.args == "python":
        rules.append(kwargs_lark(schema, rule))
    else:
        return json_value(schema)
    return rule


def arguments_schema(fn: dict) -> dict:
    """A function's parameter schema; no schema means any object. Undeclared top-level keys are refused
    when the schema lists properties and says nothing of others (a call cannot invent arguments)."""
    schema = fn.get("parameters")
    if not isinstance(schema, dict) or not schema:
        return {"type": "object"}
    if "properties" in schema and "additionalProperties" not in schema:
        schema = {**schema, "additionalProperties": False}
    return schema


def _seq(text: str, specials: dict) -> str:
    """Lark for a literal; the special tokens in it (by their text) as token references."""
    parts = []
    for piece in _MARKER.split(text):
        if not piece:
            continue
        parts.append(f"<[{specials[piece]}]>" if piece in specials else json.dumps(piece, ensure_ascii=False))
    return " ".join(parts) if parts else '""'


def _special_ids(tokenizer) -> dict[str, int]:
    """Text -> id of the tokenizer's control tokens (a grammar can match them only by reference)."""
    with _LOCK:
        found = _SPECIALS.get(tokenizer)
    if found is None:
        found = {}
        for i in range(tokenizer.n_vocab):
            if tokenizer.is_control(i):
                found.setdefault(tokenizer.piece(i).decode("utf-8", "replace"), i)
        with _LOCK:
            _SPECIALS[tokenizer] = found
    return found
