"""Flat scans of GBNF, Lark and regex source (no recursion, linear in the text): the counts and
repetition products precheck.py compares with limits.py.

The counts are conservative: a group or a rule-attribute bracket counts as a group; a repetition applied to
a character class (cheap in llguidance, measured) does not multiply."""
from __future__ import annotations

import json
import re

from . import limits
from .errors import over

_GBNF = re.compile(r'''(?P<skip>\s+|\#[^\n]*)|(?P<define>::=)|(?P<atom>"(?:\\.|[^"\\])*")
    |(?P<cls>\[(?:\\.|[^\]\\])*\]|\.)|(?P<name>[\w-]+)|(?P<rep>\{[\s\d,]*\})|(?P<op>[()|*+?])|(?P<other>.)''',
                   re.S | re.X)
_LARK = re.compile(r'''(?P<skip>\s+|(?:\#|//)[^\n]*)|(?P<json>%(?:json|llguidance|regex)\b)|(?P<kw>%[a-z]+)
    |(?P<atom>"(?:\\.|[^"\\])*"i?|<[^<>\s]+>|@[\w-]+)|(?P<regex>/(?:\\.|[^/\\])+/[imslux]*)
    |(?P<name>!?[_?]?[A-Za-z][\w-]*)|(?P<number>[+-]?\d+)|(?P<dotdot>\.\.)|(?P<rep>\{[\s\d,]*\})
    |(?P<op>[()\[\]|:~*+?,=.{}])|(?P<other>.)''', re.S | re.X)
_REGEX = re.compile(r'''(?P<esc>\\(?:[pPx]\{[^}]*\}|[pP].|.))|(?P<cls>\[\^?\]?(?:\\.|\[[^\]]*\]|[^\]\\])*\]|\.)
    |(?P<rep>\{(?:\d+(?:,\d*)?|,\d+)\})|(?P<op>[()|*+?])|(?P<other>.)''', re.S | re.X)
_CLASS_ESCAPES = set("dDwWsSpP")
_JSON = json.JSONDecoder()


class _Term:
    """What a piece of a rule body costs: its repetition product, and the rules it refers to with the
    repetition applied to each reference. cheap: a character class (its repetition does not multiply)."""

    __slots__ = ("product", "refs", "cheap")

    def __init__(self, product: int = 1, refs: dict | None = None, cheap: bool = False):
        self.product, self.refs, self.cheap = product, refs or {}, cheap

    def absorb(self, other: _Term) -> None:
        self.product = max(self.product, other.product)
        for name, mult in other.refs.items():
            self.refs[name] = max(self.refs.get(name, 0), mult)

    def repeat(self, bound: int) -> None:
        if not self.cheap:  # exact: the caller stops at the first product over the limit
            self.product *= bound
            self.refs = {name: mult * bound for name, mult in self.refs.items()}


_PLAIN = _Term()  # a literal: shared, never changed (a repetition on it makes a new term)
_CLASS = _Term(cheap=True)  # a character class, likewise


class _Shape:
    """Rules, groups, nesting, alternatives and repetition products of a GBNF / Lark grammar, fed its
    tokens in order; `finish()` checks the products through rule references."""

    def __init__(self, syntax: str):
        self.syntax, self.rules = syntax, {}
        self.n_rules = self.n_groups = self.n_alternatives = 0
        self.rule, self.frames = None, [[_Term(), None]]  # per open group: [done, last atom]

    def start_rule(self, name: str) -> None:
        self._end_rule()
        self.n_rules += 1
        self.n_alternatives += 1
        if self.n_rules > limits.MAX_RULES:
            raise over(f"{self.syntax} rules", self.n_rules, "MAX_RULES", counting=True)
        self._count_symbol()
        self.rule, self.frames = name, [[_Term(), None]]

    def atom(self, term: _Term = _PLAIN) -> None:
        frame = self.frames[-1]
        if frame[1] is not None and frame[1] is not _PLAIN and frame[1] is not _CLASS:
            frame[0].absorb(frame[1])
        frame[1] = term

    def ref(self, name: str) -> None:
        self.atom(_Term(1, {name: 1}))

    def open(self) -> None:
        self.n_groups += 1
        self._count_symbol()
        self.frames.append([_Term(), None])
        if len(self.frames) - 1 > limits.MAX_NESTING:
            raise over(f"{self.syntax} group nesting depth", len(self.frames) - 1, "MAX_NESTING", counting=True)

    def close(self) -> None:
        if len(self.frames) > 1:
            self.atom(self._fold(self.frames.pop()))

    def alternative(self) -> None:
        self.n_alternatives += 1
        if self.n_alternatives > limits.MAX_ALTERNATIVES:
            raise over(f"{self.syntax} alternatives", self.n_alternatives, "MAX_ALTERNATIVES",
                       counting=True)

    def repeat(self, low: int, high: int | None) -> None:
        """{low,high} (high None: unbounded) on the last atom."""
        for n in (low, high):
            if n is not None and n > limits.MAX_REPEAT:
                raise over(f"{self.syntax} repetition count", n, "MAX_REPEAT")
        last = self.frames[-1][1]
        if last is _PLAIN:
            last = self.frames[-1][1] = _Term()
        if last is not None:
            last.repeat(max(low, high or 0))
            if last.product > limits.MAX_REPEAT_PRODUCT:
                raise over(f"{self.syntax} nested repetition product", last.product, "MAX_REPEAT_PRODUCT")

    def unrule(self, name: str) -> None:
        """name, just taken for a reference, starts the next rule's definition instead."""
        last = self.frames[-1][1]
        if last is not None and last.refs == {name: 1}:
            self.frames[-1][1] = None

    def finish(self) -> None:
        self._end_rule()
        for name, product in _rule_products(self.rules).items():
            if product > limits.MAX_REPEAT_PRODUCT:
                raise over(f"{self.syntax} repetition product of rule {name!r} through the rules it refers "
                           "to", product, "MAX_REPEAT_PRODUCT", product >= limits.MAX_REPEAT_PRODUCT ** 2)

    def _count_symbol(self) -> None:
        if self.n_rules + self.n_groups > limits.MAX_SYMBOLS:
            raise over(f"{self.syntax} rules and groups", self.n_rules + self.n_groups, "MAX_SYMBOLS",
                       counting=True)

    def _end_rule(self) -> None:
        while len(self.frames) > 1:
            self.close()
        body = self._fold(self.frames[0])
        if self.rule is not None:
            self.rules.setdefault(self.rule, _Term()).absorb(body)

    @staticmethod
    def _fold(frame) -> _Term:
        done, last = frame
        if last is not None:
            done.absorb(last)
        return _Term(done.product, done.refs)


def _rule_products(rules: dict[str, _Term]) -> dict[str, int]:
    """Each rule's repetition product through the rules it refers to (iterative DFS; a reference back
    into the current path counts as 1: recursion is the parser's, not expanded). Capped at the limit
    squared: past the limit only that it is over matters."""
    cap, memo = limits.MAX_REPEAT_PRODUCT ** 2, {}
    for root in rules:
        if root in memo:
            continue
        path, stack = {root}, [[root, iter(rules[root].refs.items()), rules[root].product, 1]]
        while stack:
            top = stack[-1]
            for ref, mult in top[1]:
                if ref in memo or ref in path or ref not in rules:
                    top[2] = max(top[2], mult * memo.get(ref, 1))
                    continue
                top[3] = mult
                path.add(ref)
                stack.append([ref, iter(rules[ref].refs.items()), rules[ref].product, 1])
                break
            else:
                stack.pop()
                path.discard(top[0])
                memo[top[0]] = min(top[2], cap)
                if stack:
                    stack[-1][2] = max(stack[-1][2], min(stack[-1][3] * memo[top[0]], cap))
    return memo


def _bounds(rep: str) -> tuple[int, int | None]:
    """'{n}' -> (n, n); '{m,}' -> (m, None); '{m,n}' / '{,n}' -> (m or 0, n)."""
    parts = [p.strip() for p in rep.strip("{}").split(",")]
    low = int(parts[0]) if parts[0] else 0
    if len(parts) == 1:
        return low, low
    return low, int(parts[1]) if parts[1] else None


def scan_gbnf(text: str) -> None:
    shape, tokens = _Shape("GBNF"), [(m.lastgroup, m.group()) for m in _GBNF.finditer(text)
                                      if m.lastgroup != "skip"]
    for i, (kind, value) in enumerate(tokens):
        if kind == "name":
            if i + 1 < len(tokens) and tokens[i + 1][0] == "define":
                shape.start_rule(value)
            else:
                shape.ref(value)
        elif kind == "atom":
            shape.atom()
        elif kind == "cls":
            shape.atom(_CLASS)
        elif kind == "rep" and re.fullmatch(r"\{\s*\d+\s*(,\s*\d*\s*)?\}", value):
            shape.repeat(*_bounds(value.replace(" ", "")))
        elif value == "(":
            shape.open()
        elif value == ")":
            shape.close()
        elif value == "|":
            shape.alternative()
    shape.finish()


def scan_lark(text: str, check_json) -> None:
    """check_json(value): called with each %json schema."""
    shape, pos, last_name = _Shape("Lark"), 0, None
    tokens = _LARK.scanner(text)
    while (m := tokens.match()) is not None:
        kind, value = m.lastgroup, m.group()
        if kind == "json":
            pos = _skip_json(text, m.end(), value, check_json)
            shape.atom()
            tokens = _LARK.scanner(text, pos)
        elif kind == "name":
            shape.ref(value)
            last_name = value if len(shape.frames) == 1 else last_name
        elif kind == "atom":
            shape.atom()
        elif kind == "regex":
            shape.atom(_Term(check_regex(value[1:value.rindex("/")])))
        elif kind == "rep" and re.fullmatch(r"\{\s*\d*\s*(,\s*\d*\s*)?\}", value) and value.strip("{} "):
            shape.repeat(*_bounds(value.replace(" ", "")))
        elif value == ":" and len(shape.frames) == 1 and last_name is not None:
            shape.unrule(last_name)
            shape.start_rule(last_name)
        elif kind == "op" and value in "([":
            shape.open()
        elif kind == "op" and value in ")]":
            shape.close()
        elif value == "|":
            shape.alternative()
        elif value == "~":
            _lark_range(_LARK.scanner(text, m.end()), shape)
    shape.finish()


def _lark_range(tokens, shape: _Shape) -> None:
    """`~ n` or `~ n..m` after the atom it repeats (only the numbers are read here)."""
    found = []
    while len(found) < 3 and (m := tokens.match()) is not None:
        if m.lastgroup != "skip":
            found.append(m.group())
    if found and found[0].lstrip("+-").isdigit():
        high = found[2] if len(found) == 3 and found[1] == ".." and found[2].isdigit() else found[0]
        shape.repeat(int(found[0]), int(high))


def _skip_json(text: str, pos: int, directive: str, check_json) -> int:
    """The position after the JSON value of a %json / %llguidance / %regex directive (checked as a
    schema when it is %json)."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    try:
        value, end = _JSON.raw_decode(text, pos)
    except RecursionError:
        raise over("JSON nesting depth", limits.MAX_SCHEMA_DEPTH + 1, "MAX_SCHEMA_DEPTH", counting=True) from None
    except ValueError:
        return len(text)  # llguidance reports the syntax error
    if directive == "%json":
        check_json(value)
    return end


def check_regex(pattern: str) -> int:
    """A regex's nested repetition product (its nesting and counts checked)."""
    shape = _Shape("regex")
    for m in _REGEX.finditer(pattern):
        kind, value = m.lastgroup, m.group()
        if kind == "esc" or kind == "cls":
            shape.atom(_CLASS if kind == "cls" or value[1] in _CLASS_ESCAPES else _PLAIN)
        elif kind == "rep":
            shape.repeat(*_bounds(value))
        elif value == "(":
            shape.open()
            shape.n_groups -= 1  # a regex group is no grammar symbol
        elif value == ")":
            shape.close()
        elif value == "|":
            shape.alternative()
        elif kind == "other":
            shape.atom()
    shape.finish()
    return shape._fold(shape.frames[0]).product
