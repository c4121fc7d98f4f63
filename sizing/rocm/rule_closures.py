"""Default rules (sizing/defaults.py) turned into Python closures, for sweeps.

A sweep evaluates the rules that depend on its swept arguments at every point: 100,000
points of a gemm are 300,000 evaluations. `simpleeval` walks the rule's syntax tree at each
one (about 10 µs a rule); here the tree is walked once, into nested closures that do the
same arithmetic (about 1 µs). Only the small grammar the rules use is taken: numbers,
strings, argument names, `+ - * //`, comparisons, `and`/`or`/`not`, `x if c else y`, tuples
and calls of FUNCTIONS; `closure_of` answers None for anything else and the caller falls
back to simpleeval. Nothing is executed: the rules are the project's own data, and the tree
is interpreted, never compiled to code.
"""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Callable, Mapping
from typing import Any, cast

from ..defaults import FUNCTIONS

Closure = Callable[[Mapping[str, Any]], Any]
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


class _Unsupported(Exception):
    pass


@functools.cache
def closure_of(rule: str) -> Closure | None:
    """A function of the argument values that computes `rule`, or None (use simpleeval)."""
    try:
        return _build(ast.parse(rule.strip(), mode="eval").body)
    except (SyntaxError, _Unsupported):
        return None


def _build(node: ast.AST) -> Closure:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, str)):
        value = node.value
        return lambda names: value
    if isinstance(node, ast.Name):
        name = node.id
        return lambda names: names[name]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        op, left, right = _BINARY[type(node.op)], _build(node.left), _build(node.right)
        return lambda names: op(left(names), right(names))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        inner = _build(node.operand)
        if isinstance(node.op, ast.USub):
            return lambda names: -inner(names)
        return lambda names: not inner(names)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        compare = _COMPARE[type(node.ops[0])]
        left, right = _build(node.left), _build(node.comparators[0])
        return lambda names: compare(left(names), right(names))
    if isinstance(node, ast.BoolOp):  # Python's own: the deciding operand, not a bool
        parts = [_build(value) for value in node.values]
        stop_when = not isinstance(node.op, ast.And)  # `and` stops at a falsy operand
        return lambda names: _boolean(parts, names, stop_when)
    if isinstance(node, ast.IfExp):
        test, body, orelse = _build(node.test), _build(node.body), _build(node.orelse)
        return lambda names: body(names) if test(names) else orelse(names)
    if isinstance(node, ast.Tuple):
        items = [_build(item) for item in node.elts]
        return lambda names: tuple(item(names) for item in items)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in FUNCTIONS
        and not node.keywords
    ):
        function = cast(Callable[..., Any], FUNCTIONS[node.func.id])
        arguments = [_build(arg) for arg in node.args]
        return lambda names: function(*(argument(names) for argument in arguments))
    raise _Unsupported(ast.dump(node))


def _boolean(parts: list[Closure], names: Mapping[str, Any], stop_when: bool) -> Any:
    value = None
    for part in parts:
        value = part(names)
        if bool(value) == stop_when:
            return value
    return value
