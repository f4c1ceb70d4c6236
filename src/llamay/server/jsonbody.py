"""A request body from untrusted bytes to a JSON object every route can use as it is: strict JSON (no NaN or
Infinity, no number that overflows a float, no integer past MAX_INT_DIGITS), nesting bounded, every string
valid Unicode (no lone UTF-16 surrogates, which no encoder downstream accepts). Pure: no I/O."""
from __future__ import annotations

import json

from .protocol.base import bad_request

MAX_DEPTH = 128  # arrays/objects nested; real requests (schemas included) stay far below
MAX_INT_DIGITS = 64  # integers longer than this are nobody's token id, count or seed


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits is too long")
    return int(text)


def parse_body(raw: bytes, array: bool = False) -> dict | list:
    """The body as a JSON object (or, with array, a JSON array: llama-server's /lora-adapters), or a 400
    ProtocolError saying what is wrong with it."""
    try:
        body = json.loads(raw, parse_constant=_no_constant, parse_float=_float, parse_int=_int)
    except RecursionError:
        raise bad_request(f"the request body nests deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise bad_request(f"the request body is not valid JSON: {e}") from None
    if not isinstance(body, list if array else dict):
        raise bad_request(f"the request body must be a JSON {'array' if array else 'object'}, got {type(body).__name__}")
    check_tree(body)
    return body


def check_tree(value) -> None:
    """Iteratively (no recursion to exhaust): depth <= MAX_DEPTH and every string (keys too) is UTF-8-encodable."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise bad_request(f"the request body nests deeper than {MAX_DEPTH} levels")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(key, str):
                _check_text(key)
            if isinstance(child, str):
                _check_text(child)
            elif isinstance(child, (dict, list)):
                stack.append((child, depth + 1))


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise bad_request(f"the request body holds a lone UTF-16 surrogate ({text[e.start]!r} at character "
                          f"{e.start} of a string): not valid Unicode") from None
