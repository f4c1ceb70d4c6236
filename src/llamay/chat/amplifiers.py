"""Operations whose result can be far larger than their inputs, refused before they run when the result
would be over a limit: `*`, `**` and `%` on numbers, strings and lists, str.format, the padding, replace,
join and translate methods, and the filters listed in FILTER_CHECKS. Everything else is checked after it
ran (Budget.admit): its result is at most about the size of its inputs."""
from __future__ import annotations

import re
import string
from typing import Any, Callable

from .limits import CONTAINERS, MAX_INT_BITS, Budget, leaf_chars, measure


def _text_size(value: Any, budget: Budget) -> int:
    """An upper bound on len(str(value)), or a generous one for objects that are not data."""
    if isinstance(value, (str, bytes)):
        return len(value)
    return measure(value, budget)[1] if isinstance(value, CONTAINERS) else leaf_chars(value)


def within_chars(n_chars: int, budget: Budget) -> None:
    if n_chars > budget.limits.chars:
        budget.over_chars()


def within_items(n_items: int, budget: Budget) -> None:
    if n_items > budget.limits.items:
        budget.over_items()


_PRINTF = re.compile(r"%(?:\([^)]*\))?[#0 +\-]*(\*|\d+)?(?:\.(\*|\d+))?")
_HUGE = 10**15  # a width written with more digits than int() may read


def _number(digits: str | bytes) -> int:
    return int(digits) if len(digits) < 16 else _HUGE


def _check_printf(fmt: str | bytes, args: Any, budget: Budget) -> None:
    """`fmt % args`: each conversion writes at most its width, precision or largest argument."""
    values = list(args.values()) if isinstance(args, dict) else list(args) if isinstance(args, tuple) else [args]
    widest = max((_text_size(v, budget) for v in values), default=0)
    star = max((v for v in values if isinstance(v, int)), default=0)
    pattern = _PRINTF if isinstance(fmt, str) else re.compile(_PRINTF.pattern.encode())
    total = len(fmt)
    for match in pattern.finditer(fmt):
        sizes = [star if g in ("*", b"*") else _number(g) for g in match.groups() if g]
        total += max(sizes, default=0) + widest
        within_chars(total, budget)


def check_format(fmt: str, args: tuple, kwargs: dict, budget: Budget) -> None:
    """str.format: each field writes at most its widest spec number or its largest argument."""
    values = [*args, *kwargs.values()]
    widest = max((_text_size(v, budget) for v in values), default=0)
    star = max((v for v in values if isinstance(v, int)), default=0)
    total = 0
    for literal, field, spec, _ in string.Formatter().parse(fmt):
        total += len(literal)
        if field is not None:
            spec = spec or ""
            numbers = [_number(n) for n in re.findall(r"\d+", spec)] + ([star] if "{" in spec else [])
            total += max(numbers, default=0) + widest
        within_chars(total, budget)


def _check_mul(left: Any, right: Any, budget: Budget) -> None:
    if isinstance(left, int) and isinstance(right, int):
        if left.bit_length() + right.bit_length() > MAX_INT_BITS:
            budget.trip(f"the chat template computed a number over its limit of {MAX_INT_BITS:,} bits")
        return
    sequence, count = (left, right) if isinstance(right, int) else (right, left)
    if isinstance(count, int) and isinstance(sequence, (str, bytes)):
        within_chars(len(sequence) * count, budget)
    elif isinstance(count, int) and isinstance(sequence, (list, tuple)):
        within_items(len(sequence) * count, budget)


def _check_pow(base: Any, exponent: Any, budget: Budget) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        if (base.bit_length() - 1) * exponent > MAX_INT_BITS:
            budget.trip(f"the chat template computed a number over its limit of {MAX_INT_BITS:,} bits")


def _check_mod(left: Any, right: Any, budget: Budget) -> None:
    if isinstance(left, (str, bytes)):
        _check_printf(left, right, budget)


BINOP_CHECKS = {"*": _check_mul, "**": _check_pow, "%": _check_mod}


def _replaced_size(s: Any, old: Any, new: Any, count: Any, budget: Budget) -> None:
    if isinstance(s, (str, bytes)) and isinstance(old, type(s)) and isinstance(new, type(s)):
        n = s.count(old) if old else len(s) + 1
        n = min(n, count) if isinstance(count, int) and count >= 0 else n
        within_chars(len(s) + n * max(0, len(new) - len(old)), budget)


def _joined_size(separator: Any, values: Any, budget: Budget) -> list:
    """The values, listed (join may get an iterator), once their joined text is known to fit."""
    values = list(values)
    within_items(len(values), budget)
    sep = len(separator) if isinstance(separator, (str, bytes)) else _text_size(separator, budget)
    within_chars(sum(_text_size(v, budget) for v in values) + sep * max(0, len(values) - 1), budget)
    return values


def _padded(s: Any, width: Any, budget: Budget) -> None:
    if isinstance(width, int):
        within_chars(width, budget)


def _tab_size(s: Any, tabsize: Any, budget: Budget) -> None:
    if isinstance(tabsize, int):
        within_chars(len(s) + s.count("\t" if isinstance(s, str) else b"\t") * tabsize, budget)


def _translated(s: Any, table: Any, budget: Budget) -> None:
    if isinstance(table, dict):
        within_chars(len(s) * max((_text_size(v, budget) for v in table.values()), default=1), budget)


def text_method_check(owner: Any, name: str, args: tuple, kwargs: dict, budget: Budget) -> tuple:
    """Refuses a str/bytes method call whose result would be over the limits; returns the args to call with
    (join's iterable, listed)."""
    arg = [*args, *kwargs.values()]
    if name in ("ljust", "rjust", "center", "zfill") and arg:
        _padded(owner, arg[0], budget)
    elif name == "expandtabs":
        _tab_size(owner, arg[0] if arg else 8, budget)
    elif name == "replace" and len(arg) >= 2:
        _replaced_size(owner, arg[0], arg[1], arg[2] if len(arg) > 2 else -1, budget)
    elif name == "join" and len(args) == 1:
        return (_joined_size(owner, args[0], budget),)
    elif name == "translate" and arg:
        _translated(owner, arg[0], budget)
    return args


def _center_check(budget: Budget, value: Any, width: Any = 80) -> None:
    _padded(value, width, budget)


def _indent_check(budget: Budget, s: Any, width: Any = 4, first: bool = False, blank: bool = False) -> None:
    text = s if isinstance(s, str) else str(s)
    per_line = width if isinstance(width, int) else len(str(width))
    within_chars(len(text) + (text.count("\n") + 1) * per_line, budget)


def _wordwrap_check(budget: Budget, environment: Any, s: Any, width: Any = 79, break_long_words: bool = True,
                    wrapstring: Any = None, break_on_hyphens: bool = True) -> None:
    text = s if isinstance(s, str) else str(s)
    n_lines = text.count(" ") + text.count("\n") + len(text) // max(int(width), 1) + 1
    within_chars(len(text) + n_lines * len(wrapstring or "\n"), budget)


def _replace_check(budget: Budget, eval_ctx: Any, s: Any, old: Any, new: Any, count: Any = None) -> None:
    _replaced_size(s, old, new, count, budget)


def _format_check(budget: Budget, value: Any, *args: Any, **kwargs: Any) -> None:
    _check_printf(str(value), kwargs or args, budget)


def _batch_check(budget: Budget, value: Any, linecount: Any, fill_with: Any = None) -> None:
    within_items(linecount if fill_with is not None and isinstance(linecount, int) else 0, budget)


def _slice_check(budget: Budget, value: Any, slices: Any, fill_with: Any = None) -> None:
    within_items(slices if isinstance(slices, int) else 0, budget)


def _list_check(budget: Budget, value: Any) -> None:
    within_items(len(value) if isinstance(value, str) else 0, budget)


def _sum_check(budget: Budget, environment: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> None:
    if isinstance(start, (list, tuple)) and isinstance(iterable, (list, tuple)):  # list sums copy as they go
        within_items(len(start) + sum(len(v) for v in iterable if isinstance(v, (list, tuple))), budget)


def _tojson_check(budget: Budget, value: Any, ensure_ascii: bool = False, indent: Any = None,
                  separators: Any = None, sort_keys: bool = False) -> None:
    """Every node writes its separators and, indented, one indent per level; escapes at most double."""
    n_items, n_chars, depth = measure(value, budget)
    per_level = indent if isinstance(indent, int) else len(indent) if isinstance(indent, str) else 0
    per_item = sum(len(s) for s in separators or (", ", ": ") if isinstance(s, str)) + per_level * depth + 8
    within_chars(n_chars * 2 + n_items * per_item, budget)


def _join_check(budget: Budget, eval_ctx: Any, value: Any, d: Any = "", attribute: Any = None) -> list:
    return _joined_size(d, value, budget)


# the checks of the filters whose result can outgrow their input; each takes the filter's own arguments
FILTER_CHECKS: dict[str, Callable[..., Any]] = {
    "center": _center_check, "indent": _indent_check, "wordwrap": _wordwrap_check, "replace": _replace_check,
    "format": _format_check, "batch": _batch_check, "slice": _slice_check, "list": _list_check,
    "sum": _sum_check, "tojson": _tojson_check, "join": _join_check}
