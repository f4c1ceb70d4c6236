"""The environment chat templates run in: jinja's ImmutableSandboxedEnvironment with every place where
template code can run long or build something large checked against the render's Budget (limits.py).

Check points: each for-loop step (the code generator wraps every loop's iterable), each call, filter,
test, arithmetic operator, `~`, comparison of two computed values, and each piece of output. Values
are checked where they are made (strings, containers and integers against the size limits, charged to the
memory budget) and where C code walks them whole (str(), JSON, ==, hash(): limits.measure), so no single
C-level operation can run long, nest past the C stack or allocate past the limits. Operations whose result
can be far larger than their inputs (`*`, `**`, `%`, padding, replace, join, ...) are refused before they
run when the result would be over a limit (amplifiers.py)."""
from __future__ import annotations

import functools
import inspect
import operator
import sys
import types
from collections.abc import Iterator
from typing import Any, Callable

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame, optimizeconst
from jinja2.runtime import LoopContext, Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment, modifies_known_mutable
from jinja2.utils import Namespace

from .amplifiers import BINOP_CHECKS, FILTER_CHECKS, check_format, text_method_check, within_items
from .limits import ACTIVE, Budget, current, measure, measure_all

_COMPARE = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "lteq": operator.le, "gt": operator.gt,
            "gteq": operator.ge, "in": lambda a, b: a in b, "notin": lambda a, b: a not in b}
_MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "add"})  # they keep their args
_JINJA_KWARGS = frozenset({"_loop_vars", "_block_vars"})
_COMPARING = frozenset({"index", "count", "remove", "sort"})  # they compare the receiver's elements
# pure-Python text formatting that no chat template uses and that runs for seconds on a string within the limits
_DROPPED_FILTERS = ("pprint", "urlize")
# filters and tests that never walk their arguments deeply (no str(), JSON, == or hash() of a whole value):
# their arguments need no measuring
_SHALLOW_FILTERS = frozenset({"length", "count", "first", "last", "default", "d", "list", "items", "select",
                              "reject", "selectattr", "rejectattr", "map", "batch", "slice", "reverse", "attr",
                              "random", "abs", "round", "int", "float"})
_DEEP_TESTS = frozenset({"eq", "equalto", "==", "ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=",
                         "greaterthan", "lessthan", "in", "sameas"})


class _Steps:
    """Iterates for a for-loop, one budget step per item; keeps len() so LoopContext stays exact."""

    __slots__ = ("_iterator", "_len", "_budget")

    def __init__(self, iterable: Any, budget: Budget):
        self._iterator = iter(iterable)
        self._len = len(iterable) if hasattr(iterable, "__len__") else None
        self._budget = budget

    def __iter__(self) -> _Steps:
        return self

    def __next__(self) -> Any:
        self._budget.step()
        return next(self._iterator)

    def __len__(self) -> int:
        if self._len is None:
            raise TypeError("no len()")
        return self._len


def _needs_guard(node: nodes.Compare) -> bool:
    """A comparison can walk two computed values deeply; one side constant bounds the walk by the
    constant (`in` walks its right side, so only a constant left side bounds it)."""
    left = node.expr
    for operand in node.ops:
        if not isinstance(left, nodes.Const) and (
                operand.op in ("in", "notin") or not isinstance(operand.expr, nodes.Const)):
            return True
        left = operand.expr
    return False


class _CodeGenerator(CodeGenerator):
    """jinja's code generator, with loops, `~`, comparisons and computed dict keys routed through the
    environment's checks."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._loop_iterables: set[int] = set()  # ids of for-loop iterables not yet written (jinja forbids
        # new node types, so the loop's iterable is recognised when visited)

    def visit(self, node: nodes.Node, *args: Any, **kwargs: Any) -> Any:
        if id(node) not in self._loop_iterables:
            return super().visit(node, *args, **kwargs)
        self._loop_iterables.discard(id(node))
        self.write("environment.steps(")
        super().visit(node, *args, **kwargs)
        self.write(")")
        return None

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        self._loop_iterables.add(id(node.iter))
        super().visit_For(node, frame)

    @optimizeconst
    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.joined((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    @optimizeconst
    def visit_Compare(self, node: nodes.Compare, frame: Frame) -> None:
        if not _needs_guard(node):
            return super().visit_Compare(node, frame)
        self.write("environment.compare(")
        self.visit(node.expr, frame)
        for operand in node.ops:
            self.write(f", {operand.op!r}, ")
            self.visit(operand.expr, frame)
        self.write(")")

    @optimizeconst
    def visit_Add(self, node: nodes.Add, frame: Frame) -> None:
        """`a + b + c` (left-nested Adds) as one environment.add(a, b, c)."""
        operands = [node.right]
        while isinstance(node.left, nodes.Add):
            node = node.left
            operands.append(node.right)
        operands.append(node.left)
        self.write("environment.add(")
        for i, operand in enumerate(reversed(operands)):
            self.write(", " if i else "")
            self.visit(operand, frame)
        self.write(")")

    @optimizeconst
    def visit_Getitem(self, node: nodes.Getitem, frame: Frame) -> None:
        if isinstance(node.arg, nodes.Const):
            return super().visit_Getitem(node, frame)
        if not isinstance(node.arg, nodes.Slice):
            self.write("environment.checked_getitem(")
            self.visit(node.node, frame)
            self.write(", ")
            self.visit(node.arg, frame)
            self.write(")")
            return None
        self.write("environment.sliced(")  # jinja itself writes slices as Python slicing
        self.visit(node.node, frame)
        for part in (node.arg.start, node.arg.stop, node.arg.step):
            self.write(", ")
            self.visit(part, frame) if part is not None else self.write("None")
        self.write(")")

    def visit_Dict(self, node: nodes.Dict, frame: Frame) -> None:
        self.write("{")
        for idx, item in enumerate(node.items):
            self.write(", " if idx else "")
            computed = not isinstance(item.key, nodes.Const)
            self.write("environment.hashed(" if computed else "")
            self.visit(item.key, frame)
            self.write("): " if computed else ": ")
            self.visit(item.value, frame)
        self.write("}")


def _local_only_refs() -> int:
    """What sys.getrefcount() says of a value held by one local variable only (2 on CPython 3.11; measured
    here because interpreters count borrowed references differently)."""
    value = object()
    return sys.getrefcount(value)


_LOCAL_ONLY_REFS = _local_only_refs()


class _Namespace(Namespace):
    """namespace(): an attribute overwritten with its old value's last reference frees that value, which is
    refunded to the budget (templates build their prompt by `ns.out = ns.out ~ piece`)."""

    def __setitem__(self, name: str, value: Any) -> None:
        attrs = object.__getattribute__(self, "_Namespace__attrs")
        old = attrs.get(name)
        attrs[name] = value
        if old is not None and sys.getrefcount(old) <= _LOCAL_ONLY_REFS:
            current().refund(old)


def _range(*args: int) -> range:
    numbers = range(*args)
    if len(numbers) > current().limits.items:
        current().over_items()
    return numbers


def _guard_filter(name: str, func: Callable) -> Callable:
    check, deep = FILTER_CHECKS.get(name), name not in _SHALLOW_FILTERS
    # jinja's async_variant filters take an eval context first that their signature does not show
    hidden = int(getattr(func, "jinja_async_variant", False)
                 and not hasattr(inspect.unwrap(func), "jinja_pass_arg"))

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _ticked(deep, args, kwargs)
        if check is not None:
            listed = check(budget, *args[hidden:], **kwargs)
            if listed is not None:  # join consumed its iterable (the argument after eval_ctx) to check it
                args = (args[0], listed, *args[2:])
        return budget.admit(func(*args, **kwargs), deep=True)
    return guarded


def _guard_test(name: str, func: Callable) -> Callable:
    deep = name in _DEEP_TESTS

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _ticked(deep, args, kwargs)
        return func(*args, **kwargs)
    return guarded


def _ticked(deep: bool, args: tuple, kwargs: dict) -> Budget:
    """The render's budget, one step spent; deep: the arguments' sizes measured against the limits too."""
    budget = current()
    budget.tick()
    if deep:
        measure_all(args, budget)
        measure_all(kwargs.values(), budget)
    return budget


def _check_if_format(func: Any, args: tuple, kwargs: dict, budget: Budget) -> None:
    """str.format / format_map, which jinja's sandbox hands out wrapped (the wrapper keeps __wrapped__)."""
    method = getattr(func, "__wrapped__", None)
    source = getattr(method, "__self__", None)
    if isinstance(source, str) and method.__name__ in ("format", "format_map"):
        if method.__name__ == "format_map":
            args, kwargs = (), args[0] if args and isinstance(args[0], dict) else {}
        check_format(source, args, kwargs, budget)


def _finalize(value: Any) -> Any:
    """Every {{ expression }}'s value on its way to the output."""
    if isinstance(value, str):
        return value
    budget = current()
    measure(value, budget)
    return budget.admit(str(value))


class GuardedEnvironment(ImmutableSandboxedEnvironment):
    """Caller data (messages, tools, ...) stays immutable; lists and dicts the template built itself may
    grow (Kimi K2's template appends to a list in a namespace, as llama.cpp's engine allows). Every hook
    checks the Budget of the render running in this thread (limits.ACTIVE)."""

    code_generator_class = _CodeGenerator
    intercepted_binops = frozenset({*BINOP_CHECKS, "+"})  # the code generator writes + as add()

    def __init__(self, **options: Any):
        super().__init__(finalize=_finalize, **options)
        self.globals.pop("lipsum", None)  # lorem ipsum of any length: no use in a chat template
        self.globals.update(range=_range, namespace=_Namespace)
        self.filters = {name: _guard_filter(name, f) for name, f in self.filters.items()
                        if name not in _DROPPED_FILTERS}
        self.tests = {name: _guard_test(name, f) for name, f in self.tests.items()}

    def set_filter(self, name: str, func: Callable) -> None:
        self.filters[name] = _guard_filter(name, func)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if not SandboxedEnvironment.is_safe_attribute(self, obj, attr, value):
            return False
        return not modifies_known_mutable(obj, attr) or id(obj) not in current().caller

    def concat(self, pieces: Any) -> str:  # type: ignore[override]
        """Joins output pieces (the prompt, and every macro's or block's text) within the size limit. The
        pieces are listed first: at most one per loop step or output expression, 8 bytes each."""
        budget = current()
        parts = list(pieces)
        if sum(map(len, parts)) > budget.max_chars:
            budget.over_chars()
        return budget.admit("".join(parts))

    def steps(self, iterable: Any) -> _Steps:
        return _Steps(iterable, current())

    def joined(self, values: tuple) -> str:
        """`a ~ b ~ ...`."""
        budget = current()
        budget.tick()
        measure_all(values, budget)
        return budget.admit("".join([v if isinstance(v, str) else str(v) for v in values]))

    def compare(self, left: Any, *rest: Any) -> Any:
        """`left op1 right1 op2 right2 ...` (rest alternates op names and operands), as Python chains it."""
        budget = current()
        budget.tick()
        measure(left, budget)
        result: Any = True
        for op, right in zip(rest[::2], rest[1::2]):
            if op in ("in", "notin") and isinstance(right, Iterator):
                right = budget.admit(list(right))
            measure(right, budget)
            result = _COMPARE[op](left, right)
            if not result:
                return result
            left = right
        return result

    def hashed(self, key: Any) -> Any:
        """A computed dict key (hash() of nested tuples is C recursion without a depth check)."""
        measure(key, current())
        return key

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = current()
        budget.tick()
        BINOP_CHECKS[operator](left, right, budget)
        return budget.admit(self.binop_table[operator](left, right))

    def add(self, first: Any, *rest: Any) -> Any:
        """`first + rest[0] + rest[1] ...` (left to right), jinja's commonest operator, so kept lean: no clock
        check (its work is bounded by the bytes it creates, which are charged). Only renders run it (+ is
        never folded at compile time), so a budget is set."""
        budget = ACTIVE.get()
        result = first
        for value in rest:
            result = result + value
            if type(result) is str and len(result) > budget.max_chars:
                budget.over_chars()
        if type(result) is not str:
            return budget.admit(result)
        budget.created += sys.getsizeof(result)
        if budget.created > budget.max_created:
            budget.charge(0)
        return result

    def checked_getitem(self, obj: Any, argument: Any) -> Any:
        """`obj[argument]` for a computed argument (a tuple is hashed: measured first)."""
        if type(argument) is tuple:
            measure(argument, current())
        return self.getitem(obj, argument)

    def sliced(self, obj: Any, start: Any, stop: Any, step: Any) -> Any:
        """`obj[start:stop:step]`: a new sequence."""
        return current().admit(obj[start:stop:step])

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        budget = current()
        budget.tick()
        if type(__obj) is Macro:  # walks nothing itself: its body's operations are checked one by one
            return budget.admit(super().call(__context, __obj, *args, **kwargs))
        measure_all(args, budget)
        if kwargs:  # jinja passes a loop's or block's variables along; they are not arguments
            measure_all([v for k, v in kwargs.items() if k not in _JINJA_KWARGS], budget)
        owner = getattr(__obj, "__self__", None)
        if owner is None:
            if isinstance(__obj, LoopContext) and args:  # a recursive loop's next level: its steps count too
                args = (_Steps(args[0], budget), *args[1:])
            else:
                _check_if_format(__obj, args, kwargs, budget)
            return budget.admit(super().call(__context, __obj, *args, **kwargs))
        name = __obj.__name__
        if isinstance(owner, (str, bytes)):
            args = text_method_check(owner, name, args, kwargs, budget)
        elif isinstance(owner, (list, tuple)) and name in _COMPARING:
            measure(owner, budget)
        result = super().call(__context, __obj, *args, **kwargs)
        if name in _MUTATORS and isinstance(owner, (list, dict, set)):
            within_items(len(owner), budget)  # it keeps its arguments: they are charged
            budget.charge(sum(sys.getsizeof(v) for v in (*args, *kwargs.values()) if v is not None))
        return budget.admit(result, deep=isinstance(__obj, types.BuiltinMethodType))
