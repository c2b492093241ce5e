"""BFCL's Java and JavaScript answers: `[Cls.method(arg=value, ...)]`, values in that language.

    .venv/bin/python -c "from data.decoders import decode_with; print(decode_with('java', 'f(n=10L, s=\\"x\\", b=true)'))"

Values become JSON where the language's literal says what they are: string and char
literals → strings (escapes read), `true`/`false` → booleans, `null` (and JS
`undefined`) → None, numbers (`10L`, `2.5f`) → numbers, `[a, b]` and `{a, b}` → lists,
`{k: v}` → objects. Anything else (an identifier such as `mapController`,
`new Path("/x")`, `XyzmMode.XYZ`, an arrow function) is kept as its source text,
as BFCL does: the verifier converts it against the parameter's declared type.
A string value with broken inner quoting (`'status = 'active''`) is read as
everything between its outer quotes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from data.decoders.base import (
    FREE_TEXT,
    MALFORMED,
    NO_CALL,
    Context,
    DecodeFailure,
    _string_end,
    balanced_end,
    strip_fence,
)
from data.decoders.python import call_candidates
from data.pycall import POSITIONAL_PREFIX
from data.schema import Call

_CALL_START = re.compile(r"\s*([A-Za-z_$][\w.$]*)\s*\(")
_KEYWORD = re.compile(r"\s*([A-Za-z_$][\w$]*)\s*=(?![=>])\s*")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?([lLfFdD]?)")
_OBJ_KEY = re.compile(r"\s*(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|[A-Za-z_$][\w$]*)\s*:\s*")
_WORDS = {"true": True, "false": False, "null": None}
_JS_WORDS = {**_WORDS, "undefined": None}


def split_top(text: str, seps: str = ",") -> list[str]:
    """Split at separators outside strings and brackets."""
    parts: list[str] = []
    depth, start, i, n = 0, 0, 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'`":
            end = _string_end(text, i)
            i = n if end < 0 else end
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c in seps and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


MAX_DEPTH = 32  # deeper literals stay source text (and recursion stays bounded)


def convert_value(src: str, lang: str, _depth: int = 0) -> Any:
    s = src.strip()
    if not s:
        return ""
    words = _JS_WORDS if lang == "javascript" else _WORDS
    if s in words:
        return words[s]
    q = s[0]
    if q in "\"'`" and len(s) >= 2 and s[-1] == q:
        return _unquote(s) if _string_end(s, 0) == len(s) else s[1:-1]
    m = _NUMBER.fullmatch(s)
    if m:
        body = s[: len(s) - len(m.group(1))] if m.group(1) else s
        is_float = any(ch in body for ch in ".eE") or m.group(1) in ("f", "F", "d", "D")
        return float(body) if is_float else int(body)
    if s[0] in "[{" and _depth < MAX_DEPTH and balanced_end(s, 0) == len(s):
        inner = s[1:-1]
        items = [p for p in split_top(inner) if p.strip()]
        if s[0] == "{" and items and all(_OBJ_KEY.match(p) for p in items):
            out = {}
            for p in items:
                k = _OBJ_KEY.match(p)
                key = k.group(1)
                out[_unquote(key) if key[0] in "\"'" else key] = convert_value(p[k.end() :], lang, _depth + 1)
            return out
        if s[0] == "{" and not items and lang == "javascript":
            return {}
        return [convert_value(p, lang, _depth + 1) for p in items]
    return s


def _unquote(s: str) -> str:
    if s[0] == '"':
        try:
            return json.loads(s)
        except json.JSONDecodeError:
            pass
    body = s[1:-1]
    if "\\" not in body:
        return body
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "r": "\r"}.get(m.group(1), m.group(1)), body)


def clike_calls(
    text: str, lang: str, param_order: dict[str, list[str]] | None = None, *, _depth: int = 0
) -> list[Call]:
    s = strip_fence(text).rstrip()
    while s and (s[-1] == ";" or (s[-1] == "." and len(s) > 1 and s[-2] in ")]")):
        s = s[:-1].rstrip()
    if s.startswith("[") and balanced_end(s, 0) == len(s):
        s = s[1:-1]
    calls: list[Call] = []
    for part in split_top(s, ",;"):
        if not part.strip():
            continue
        stripped = part.strip()
        if stripped[0] in "\"'" and _depth == 0 and _string_end(stripped, 0) == len(stripped):
            calls.extend(clike_calls(_unquote(stripped), lang, param_order, _depth=1))  # ['f(a=1)']
            continue
        m = _CALL_START.match(part)
        if m is None:
            if not calls:
                raise DecodeFailure(NO_CALL, FREE_TEXT)
            raise DecodeFailure(MALFORMED, f"not a call: {part.strip()[:40]!r}")
        end = balanced_end(part, m.end() - 1)
        if end is None or part[end:].strip():
            raise DecodeFailure(MALFORMED, f"unbalanced or trailing text in call to {m.group(1)!r}")
        name = m.group(1)
        names = (param_order or {}).get(name, [])
        args: dict[str, Any] = {}
        for i, arg in enumerate(a for a in split_top(part[m.end() : end - 1]) if a.strip()):
            k = _KEYWORD.match(arg)
            key = k.group(1) if k else (names[i] if i < len(names) else f"{POSITIONAL_PREFIX}{i}")
            if key in args:
                raise DecodeFailure(MALFORMED, f"{name}: argument {key!r} given twice")
            args[key] = convert_value(arg[k.end() :] if k else arg, lang)
        calls.append(Call(name=name, arguments=args))
    if not calls:
        raise DecodeFailure(NO_CALL, "empty list")
    return calls


def sniff_clike(raw: Any, ctx: Context) -> bool:
    return isinstance(raw, str) and "(" in raw


def _parse(raw: str, ctx: Context, lang: str) -> list[Call]:
    # The same places as for Python answers: the whole text, fences, `[f(` lists, call lines.
    first: DecodeFailure | None = None
    for cand, _ in call_candidates(raw):
        try:
            return clike_calls(cand, lang, ctx.param_order)
        except DecodeFailure as f:
            first = first or f
    raise first or DecodeFailure(NO_CALL, FREE_TEXT)


def parse_java(raw: Any, ctx: Context) -> list[Call]:
    return _parse(raw, ctx, "java")


def parse_javascript(raw: Any, ctx: Context) -> list[Call]:
    return _parse(raw, ctx, "javascript")
