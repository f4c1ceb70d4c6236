"""The limits of limits.py checked on a grammar's canonical source before llguidance sees it, in
milliseconds: GBNF / Lark / regex by flat scans (scan.py), JSON schemas by an iterative walk. The first
limit broken is a GrammarError naming it."""
from __future__ import annotations

import json

from llguidance.gbnf_to_lark import is_lark_syntax

from . import limits
from .errors import GrammarError, over
from .scan import check_regex, scan_gbnf, scan_lark


def check_source(kind: str, text: str) -> None:
    """GrammarError naming the first limit the canonical source breaks."""
    size = len(text.encode())
    if size > limits.MAX_SOURCE_BYTES:
        raise over("grammar source size in bytes", size, "MAX_SOURCE_BYTES")
    if kind in ("json_schema", "json_object"):
        _Schemas().check(json.loads(text))
    elif kind == "regex":
        check_regex(text)
    elif kind == "lark" or is_lark_syntax(text):
        scan_lark(text, _Schemas().check)
    else:
        scan_gbnf(text)


_DATA = ("const", "enum", "default", "examples")  # keywords whose values are JSON data, not schemas


def _walk(doc):
    """(node, depth, in_data) for every object and array of doc, iteratively; in_data: under a _DATA
    keyword (no keyword there means anything)."""
    stack = [(doc, 1, False)]
    while stack:
        node, depth, in_data = stack.pop()
        if isinstance(node, dict):
            yield node, depth, in_data
            stack.extend((v, depth + 1, in_data or k in _DATA) for k, v in node.items())
        elif isinstance(node, list):
            yield node, depth, in_data
            stack.extend((v, depth + 1, in_data) for v in node)


class _Schemas:
    """Depth, objects and arrays, alternatives and patterns of JSON schema documents (counted over every
    document one instance checks), and $ref / allOf cycles."""

    def __init__(self):
        self.n_nodes = self.n_alternatives = 0

    def check(self, doc) -> None:
        edges = {}  # id(schema object) -> the schema objects it stands for whatever the output ($ref, allOf)
        for node, depth, in_data in _walk(doc):
            self._count(depth)
            if isinstance(node, dict) and not in_data:
                self._keywords(node)
                edges[id(node)] = _unconditional(doc, node)
        _find_cycle(edges)

    def _count(self, depth: int) -> None:
        self.n_nodes += 1
        if depth > limits.MAX_SCHEMA_DEPTH:
            raise over("JSON schema nesting depth", depth, "MAX_SCHEMA_DEPTH", counting=True)
        if self.n_nodes > limits.MAX_SCHEMA_NODES:
            raise over("JSON schema objects and arrays", self.n_nodes, "MAX_SCHEMA_NODES", counting=True)

    def _keywords(self, node: dict) -> None:
        for key in ("enum", "anyOf", "oneOf", "type"):
            if isinstance(node.get(key), list):
                self.n_alternatives += len(node[key])
                if self.n_alternatives > limits.MAX_ALTERNATIVES:
                    raise over("JSON schema alternatives (enum, anyOf, oneOf, type)", self.n_alternatives,
                               "MAX_ALTERNATIVES", counting=True)
        if isinstance(node.get("pattern"), str):
            check_regex(node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            for pattern in node["patternProperties"]:
                check_regex(pattern)


def _unconditional(doc, node: dict) -> list[dict]:
    """The schema objects node's output must also match at the same position: its local $ref target
    and its allOf entries."""
    targets = list(node["allOf"]) if isinstance(node.get("allOf"), list) else []
    if isinstance(node.get("$ref"), str):
        targets.append(_pointer(doc, node["$ref"]))
    return [t for t in targets if isinstance(t, dict)]


def _find_cycle(edges: dict[int, list]) -> None:
    """GrammarError at a cycle of unconditional edges: it never consumes anything (iterative DFS)."""
    state = {}  # id -> 1 on the current path, 2 done
    for start in edges:
        if start in state:
            continue
        path = [(start, iter(edges[start]))]
        state[start] = 1
        while path:
            node, it = path[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                path.pop()
            elif state.get(id(nxt)) == 1:
                raise GrammarError("JSON schema $ref cycle: a $ref / allOf leads back to itself without "
                                   "any output in between, so it cannot terminate")
            elif id(nxt) not in state and id(nxt) in edges:
                state[id(nxt)] = 1
                path.append((id(nxt), iter(edges[id(nxt)])))


def _pointer(doc, ref: str):
    """The local target of a $ref ('#', '#/$defs/a'), or None (remote, or missing: llguidance reports)."""
    if not ref.startswith("#"):
        return None
    node = doc
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node
