"""Python call syntax, read with `ast` (never `eval`): what prompt-based models answer.

    .venv/bin/python -c "from data.decoders import decode_with; print(decode_with('python', '[f(a=1)]'))"

Forms: `[f(a=1), g(b='x')]`, `f(a=1), g()`, `f(a=1); g();` (Nexusflow Raven), a list of
call strings `['f(a=1)']` (DBRX, Arctic), a quoted name `"f"(a=1)` (Mistral small),
escaped underscores `calc\\_area(...)` (Mixtral, Mistral medium), `print(default_api.f(...))`.
Around the calls: whitespace, code fences, special tokens, leading or trailing prose.

Where the calls are, when the whole text is not a call: the code fences, then each
`[name(` … `]` list, then each line that is one call, then two repairs of the text.
A piece picked out of prose counts only when its calls all name tools in scope (with
tools given, an empty list included: then no piece of prose is a call): Gemma wraps the real calls in a function of its own, and prose often
carries example code (`print(inches_to_meters(10))`) that is no tool call.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from data.decoders.base import (
    FREE_TEXT,
    MALFORMED,
    NO_CALL,
    Context,
    DecodeFailure,
    balanced_end,
    fenced_blocks,
    strip_special_tokens,
)
from data.decoders.names import tool_name_index
from data.pycall import PyCallError, call_from_node
from data.schema import Call

_LIST_START = re.compile(r"\[\s*[\"']?[A-Za-z_][\w.\\]*[\"']?\s*\(")
_CALL_LINE = re.compile(r"^[ \t]*([A-Za-z_][\w.\\]*)\(.*\)[ \t;.]*$", re.M)
_CALL_HEAD = re.compile(r"^\s*\[?\s*[\"']?[A-Za-z_][\w.\\]*[\"']?\s*\(")


def sniff_python(raw: Any, ctx: Context) -> bool:
    return isinstance(raw, str) and "(" in raw


def parse_python(raw: Any, ctx: Context) -> list[Call]:
    order = ctx.param_order
    # Tools given but none offered ([]): no piece of prose names a tool in scope, so none is a call.
    index = tool_name_index(ctx.tools) if ctx.tools is not None else None
    first_error: PyCallError | None = None
    fallback: list[Call] | None = None
    for i, (cand, whole) in enumerate(call_candidates(raw)):
        try:
            calls = python_calls(cand, order)
        except PyCallError as e:
            if i == 0:
                first_error = e
            continue
        if not calls:
            if i == 0:
                raise DecodeFailure(NO_CALL, "empty list")
            continue
        if index is None or all(index.resolve(c.name) is not None for c in calls):
            return calls
        # Calls naming no tool: kept only if they are the whole answer, and only when no
        # later place names tools (Gemma's wrapper). Picked out of prose, they are example
        # code (`print(inches_to_meters(10))`) in an answer in words.
        if whole and fallback is None:
            fallback = calls
    if fallback is not None:
        return fallback
    if not _CALL_HEAD.match(raw):
        raise DecodeFailure(NO_CALL, FREE_TEXT)
    raise DecodeFailure(MALFORMED, str(first_error) if first_error else "no call found")


def call_candidates(raw: str) -> Iterator[tuple[str, bool]]:
    """Places in `raw` that may hold the calls, most likely first, each with whether it
    is the whole answer (the text, the fence the text starts with, a repair of the
    text) rather than a piece picked out of prose."""
    text = raw.strip()
    if "<|" in text:
        text = strip_special_tokens(text).strip()
    yield text, True
    seen = {text}
    for i, block in enumerate(fenced_blocks(text)):
        if block not in seen:
            seen.add(block)
            yield block, i == 0 and text.startswith("```")
    for m in _LIST_START.finditer(text):
        end = balanced_end(text, m.start())
        if end is not None:
            span = text[m.start() : end]
            if span not in seen:
                seen.add(span)
                yield span, False
    for m in _CALL_LINE.finditer(text):
        line = m.group(0).strip()
        if line not in seen:
            seen.add(line)
            yield line, False
    for repaired in _repairs(text):
        yield repaired, True


_QUOTED_LIST = re.compile(r"\[\s*(['\"])(?=[A-Za-z_][\w.]*\()")


def _repairs(text: str) -> Iterator[str]:
    """Two slips seen in real outputs, tried last: a call list written inside one
    string whose inner quotes break it (`['f(a='x')']`, `['f(a="x"), g()]`), and a
    list never closed (`[f(a=1)`)."""
    m = _QUOTED_LIST.match(text)
    if m:
        body = text[m.end() :].rstrip()
        if body.endswith("]"):
            body = body[:-1].rstrip()
        if body.endswith(m.group(1)):
            body = body[:-1]
        elif body.endswith(m.group(1) + ")"):  # the quote closed inside the call: `['f(a=1')`
            body = body[:-2] + ")"
        yield "[" + body + "]"
    elif text.startswith("[") and not text.endswith("]"):
        yield text + "]"


def _clean(src: str) -> str:
    src = src.strip()
    # A trailing statement separator or sentence end: "f(a=1);" / "[f(a=1)]."
    while src and (src[-1] == ";" or (src[-1] == "." and len(src) > 1 and src[-2] in ")]")):
        src = src[:-1].rstrip()
    return src


def python_calls(text: str, param_order: Mapping[str, Sequence[str]] | None = None, *, _depth: int = 0) -> list[Call]:
    """Calls in one piece of Python text (an expression, or call statements)."""
    src = _clean(text)
    try:
        return _python_calls(src, param_order, _depth)
    except PyCallError:
        if "\\_" not in src:
            raise
    # Markdown-escaped underscores (`calc\\_area(...)`, Mixtral): only as a retry, since
    # inside a string literal the same characters are data.
    return _python_calls(src.replace("\\_", "_"), param_order, _depth)


def _python_calls(src: str, param_order: Mapping[str, Sequence[str]] | None, _depth: int) -> list[Call]:
    if not src:
        raise PyCallError("empty text")
    try:
        with warnings.catch_warnings():  # invalid escapes in model text are data, not our code's problem
            warnings.simplefilter("ignore")
            nodes = [ast.parse(src, mode="eval").body]
    except SyntaxError as e:
        if ";" not in src and "\n" not in src:  # one line, no separators: no statements to try
            raise PyCallError(f"not Python syntax: {e.msg}") from None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = ast.parse(src, mode="exec")
        except (SyntaxError, ValueError):
            raise PyCallError(f"not Python syntax: {e.msg}") from None
        nodes = []
        for st in module.body:
            if not isinstance(st, ast.Expr):
                raise PyCallError(f"not Python syntax: {e.msg}") from None
            nodes.append(st.value)
    except (ValueError, RecursionError, MemoryError) as e:
        raise PyCallError(f"not Python syntax: {e}") from None
    calls: list[Call] = []
    for node in nodes:
        calls.extend(_calls_in(node, param_order, _depth))
    return calls


def _calls_in(node: ast.expr, order: Mapping[str, Sequence[str]] | None, depth: int) -> list[Call]:
    if isinstance(node, (ast.List, ast.Tuple)):
        out: list[Call] = []
        for e in node.elts:
            out.extend(_calls_in(e, order, depth))
        return out
    if isinstance(node, ast.Call):
        # print(default_api.f(...)): Gemini's code answers
        if isinstance(node.func, ast.Name) and node.func.id == "print" and len(node.args) == 1 and isinstance(node.args[0], ast.Call):
            node = node.args[0]
        call = call_from_node(node, order)
        if call.name.startswith("default_api."):
            call.name = call.name.removeprefix("default_api.")
        return [call]
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and depth == 0:
        return python_calls(node.value, order, _depth=1)  # ['f(a=1)']
    raise PyCallError(f"not a call: {ast.unparse(node)[:60]!r}")
