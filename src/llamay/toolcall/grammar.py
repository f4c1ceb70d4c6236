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

JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
TEXT = "TEXT: /(.|\\n)*/"
_MARKER = re.compile(r'(<\|?[A-Za-z_"/|]+\|?>|\[[A-Z_]+\])')
_SPECIALS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def tool_grammar(fmt: CallFormat, tools: list[dict], choice, parallel: bool, tokenizer,
                 think: bool = False) -> str:
    """Lark text. tools: chat-template shape; choice: "auto" | "required" | {"name": function}, or "none"
    for the generic form (its answer wrapper only).
    think: the model may reason in <think>...</think> before forced calls."""
    specials = _special_ids(tokenizer)
    seq = lambda text: _seq(text, specials)
    functions = [t["function"] for t in tools]
    if isinstance(choice, dict):
        functions = [f for f in functions if f["name"] == choice["name"]]
    in_head = bool(fmt.trigger) and fmt.head.startswith(fmt.trigger)
    rules, names = [], []
    for i, fn in enumerate(functions):
        head = fmt.head_text(json.dumps(fn["name"], ensure_ascii=False)[1:-1] if fmt.quoted_name else fn["name"])
        rules.append(f"call_{i}: {seq(head)} {_args(fmt, fn, f'args_{i}', specials, rules)} {seq(fmt.tail)}")
        rules.append(f"rest_{i}: {seq(head[len(fmt.trigger):])} {_args(fmt, fn, f'args_{i}', specials, [])} "
                     f"{seq(fmt.tail)}" if in_head else "")
        names.append(i)
    rules = [r for r in rules if r]
    rules.append("call: " + " | ".join(f"call_{i}" for i in names))
    many = f"({seq(fmt.sep)} call)*" if fmt.sep and parallel else ""
    body = f"{seq(fmt.open)} call {many} {seq(fmt.close)}"
    if in_head:
        rules.append("rest: " + " | ".join(f"rest_{i}" for i in names))
        region, after_trigger = "call", "rest"
    else:
        region, after_trigger = f"{seq(fmt.trigger)} {body}", body
    again = parallel and not fmt.sep
    if fmt is GENERIC:
        answer = '"{\\"response\\": " %json{"type": "string"} "}"'
        start = f"{body} | {answer}" if choice == "auto" else answer if choice == "none" else body
    elif choice != "auto":
        start = f"{region} ({seq(fmt.region_sep)} {region})*" if again else region
    else:
        trigger = specials.get(fmt.trigger)
        if trigger is not None:
            rules.append(f"tag: TEXT <[{trigger}]> {after_trigger}")
        else:
            rules.append(f"trig[lazy]: TEXT {json.dumps(fmt.trigger)}")
            rules.append(f"tag: trig {after_trigger}")
        start = "tag* TEXT" if parallel else "TEXT | tag"
    if think and (choice != "auto" or fmt is GENERIC):
        start = f"think? ({start})"
        rules += [f'think: {seq("<think>")} think_body WS?', f'think_body[lazy]: TEXT {seq("</think>")}',
                  "WS: /[ \\t\\r\\n]+/"]
    return "\n".join(["%llguidance {}", f"start: {start}", *rules, TEXT]) + "\n"


def _args(fmt: CallFormat, fn: dict, rule: str, specials: dict, rules: list) -> str:
    schema = arguments_schema(fn)
    if fmt.args == "gemma":
        from .gemma import args_lark
        quote = '<|"|>'
        rules.append(args_lark(schema, rule, quote=f"<[{specials[quote]}]>" if quote in specials
                               else json.dumps(quote)))
        return rule
    return "%json " + json.dumps({"x-guidance": JSON_STYLE, **schema}, ensure_ascii=False)


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
