"""Python call syntax → `Call`s, via `ast` (never `eval`).

Reads what BFCL uses for ground truth (`"calc(n=20, p=0.6)"`) and what
prompt-based models answer (`"[f(a=1), g(b='x')]"`). Literal arguments become
JSON values (tuples → lists); a bare identifier becomes its name as a string
(Java answers such as `controller=mapController`); other expressions (a
lambda, `x**2`, a nested call) become their source text, as BFCL does.
Positional arguments are bound to parameter names when the tool's schema is
known, else kept as `_pos0`, `_pos1`, ….
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from typing import Any

from data.schema import Call

POSITIONAL_PREFIX = "_pos"


class PyCallError(ValueError):
    """Text that is not Python call syntax; the message says why."""


def dotted_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted_name(node.value)}.{node.attr}"
    # `"f"(a=1)`: some models quote the function name; the string is the name.
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip():
        return node.value.strip()
    raise PyCallError(f"call target is not a (dotted) name: {ast.unparse(node)!r}")


def literal_value(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bytes):
            return node.value.decode("utf-8", "replace")
        if isinstance(node.value, complex) or node.value is Ellipsis:
            return ast.unparse(node)
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [literal_value(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if k is None:  # {**x}
                return ast.unparse(node)
            key = literal_value(k)
            out[key if isinstance(key, str) else str(key)] = literal_value(v)
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = literal_value(node.operand)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.Name):
        return node.id
    # lambda, x**2, f(x), a.b, ...: keep the source text.
    return ast.unparse(node)


def call_from_node(node: ast.Call, param_order: Mapping[str, Sequence[str]] | None = None) -> Call:
    name = dotted_name(node.func)
    args: dict[str, Any] = {}
    names = list((param_order or {}).get(name, ()))
    for i, a in enumerate(node.args):
        if isinstance(a, ast.Starred):
            raise PyCallError(f"{name}: *args are not supported")
        key = names[i] if i < len(names) else f"{POSITIONAL_PREFIX}{i}"
        args[key] = literal_value(a)
    for kw in node.keywords:
        if kw.arg is None:
            raise PyCallError(f"{name}: **kwargs are not supported")
        if kw.arg in args:
            raise PyCallError(f"{name}: argument {kw.arg!r} given twice")
        args[kw.arg] = literal_value(kw.value)
    return Call(name=name, arguments=args)


def parse_calls(text: str, param_order: Mapping[str, Sequence[str]] | None = None) -> list[Call]:
    """`"[f(a=1), g(b='x')]"`, `"f(a=1)"` or `"f(a=1), g()"` → calls.

    `param_order` maps a function name to its parameter names in schema
    order, for binding positional arguments.
    """
    src = text.strip()
    if not src:
        raise PyCallError("empty text")
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as e:
        raise PyCallError(f"not Python syntax: {e.msg} (col {e.offset})") from None
    body = tree.body
    nodes = body.elts if isinstance(body, (ast.List, ast.Tuple)) else [body]
    calls = []
    for n in nodes:
        if not isinstance(n, ast.Call):
            raise PyCallError(f"not a call: {ast.unparse(n)[:60]!r}")
        calls.append(call_from_node(n, param_order))
    return calls
