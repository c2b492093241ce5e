"""Decoders of structured outputs: native function-calling lists, OpenAI `tool_calls`,
xLAM's `{"tool_calls": [...]}`, and JSON (or Python-literal) lists of `{name, arguments}`.

    .venv/bin/python -c "from data.decoders import decode; print(decode([{'f': '{\\"a\\": 1}'}]))"

Each works on the recorded value (a list or dict) and, for text, on the text parsed
once as JSON (or, failing that, as a Python literal) and cached on the context.
"""

from __future__ import annotations

from typing import Any

from data.decoders.base import (
    MALFORMED,
    NO_CALL,
    Context,
    DecodeFailure,
    loads_lenient,
    make_call,
    named_object_call,
    openai_item_call,
    single_key_call,
)
from data.schema import Call

_PARSED = "_parsed_structured"


def parsed_text(raw: Any, ctx: Context) -> Any:
    """`raw` as a structured value: as is for lists/dicts, parsed for JSON-looking text."""
    if not isinstance(raw, str):
        return raw
    cache = ctx.__dict__
    if _PARSED not in cache:
        text = ctx.stripped(raw)
        try:
            cache[_PARSED] = ("ok", loads_lenient(text))
        except ValueError as e:
            cache[_PARSED] = ("error", str(e))
    status, value = cache[_PARSED]
    if status == "error":
        raise DecodeFailure(MALFORMED, f"not JSON: {value}")
    return value


def looks_structured_text(raw: Any, ctx: Context) -> bool:
    """Cheap: text whose first non-blank character (inside a fence) opens an object,
    or a list whose first item is an object or a tuple."""
    if not isinstance(raw, str):
        return False
    s = ctx.stripped(raw)
    if s.startswith("{"):
        return True
    if s.startswith("["):
        rest = s[1:].lstrip()
        return rest.startswith("{") or rest.startswith("(")
    return False


# --- native function calling: [{name: "<json args>"}] -----------------------------

def sniff_native_fc(raw: Any, ctx: Context) -> bool:
    if isinstance(raw, list):
        return any(isinstance(x, dict) for x in raw) and not any(
            isinstance(x, dict) and isinstance(x.get("function"), dict) for x in raw
        )
    return isinstance(raw, dict) and len(raw) == 1 and _openai_items(raw) is None and "tool_calls" not in raw


def parse_native_fc(raw: Any, ctx: Context) -> list[Call]:
    items = raw if isinstance(raw, list) else [raw]
    calls: list[Call] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            continue  # text around the calls (Gemini interleaves prose and calls)
        call = single_key_call(item) or named_object_call(item)
        if call is None:
            raise DecodeFailure(MALFORMED, f"item {i} is not {{name: arguments}}: {str(item)[:60]!r}")
        calls.append(call)
    if not calls:
        raise DecodeFailure(NO_CALL, "no call in the list")
    return calls


# --- OpenAI tool_calls --------------------------------------------------------------

def _openai_items(value: Any) -> list[Any] | None:
    if isinstance(value, dict):
        if isinstance(value.get("tool_calls"), list):
            items = value["tool_calls"]
            return items if not items or any(isinstance(x, dict) and "function" in x for x in items) else None
        if isinstance(value.get("function_call"), dict):  # the legacy single-call field
            return [{"type": "function", "function": value["function_call"]}]
        if isinstance(value.get("function"), dict):
            return [value]
        return None
    if isinstance(value, list) and value and all(isinstance(x, dict) and "function" in x for x in value):
        return value
    return None


def sniff_openai(raw: Any, ctx: Context) -> bool:
    if isinstance(raw, str):
        return '"function' in raw and looks_structured_text(raw, ctx)
    return _openai_items(raw) is not None


def parse_openai(raw: Any, ctx: Context) -> list[Call]:
    items = _openai_items(parsed_text(raw, ctx))
    if items is None:
        raise DecodeFailure(MALFORMED, "no tool_calls / function entries")
    if not items:
        raise DecodeFailure(NO_CALL, "empty tool_calls")
    calls = []
    for i, item in enumerate(items):
        call = openai_item_call(item)
        if call is None:
            raise DecodeFailure(MALFORMED, f"tool_calls[{i}] has no function object")
        calls.append(call)
    return calls


# --- xLAM: {"tool_calls": [{"name", "arguments"}]} -----------------------------------

def sniff_xlam(raw: Any, ctx: Context) -> bool:
    if isinstance(raw, str):
        return '"tool_calls"' in raw and looks_structured_text(raw, ctx)
    return isinstance(raw, dict) and isinstance(raw.get("tool_calls"), list)


def parse_xlam(raw: Any, ctx: Context) -> list[Call]:
    value = parsed_text(raw, ctx)
    if not isinstance(value, dict) or not isinstance(value.get("tool_calls"), list):
        raise DecodeFailure(MALFORMED, 'not an object with a "tool_calls" list')
    if not value["tool_calls"]:
        raise DecodeFailure(NO_CALL, "empty tool_calls")
    calls = []
    for i, item in enumerate(value["tool_calls"]):
        call = named_object_call(item) or openai_item_call(item)
        if call is None:
            raise DecodeFailure(MALFORMED, f"tool_calls[{i}] is not {{name, arguments}}")
        calls.append(call)
    return calls


# --- JSON / Python-literal text: [{"name": f, "arguments"|"parameters": {...}}] ------

def sniff_json_calls(raw: Any, ctx: Context) -> bool:
    # {"tool_calls": ...} text belongs to the xlam / openai decoders, which ran first.
    return looks_structured_text(raw, ctx) and '"tool_calls"' not in raw


def parse_json_calls(raw: Any, ctx: Context) -> list[Call]:
    value = parsed_text(raw, ctx)
    items = value if isinstance(value, list) else [value]
    if not items:
        raise DecodeFailure(NO_CALL, "empty list")
    calls = []
    for i, item in enumerate(items):
        call = named_object_call(item) or single_key_call(item) or _pair_call(item)
        if call is None:
            raise DecodeFailure(MALFORMED, f"item {i} is not {{name, arguments}}: {str(item)[:60]!r}")
        calls.append(call)
    return calls


def _pair_call(item: Any) -> Call | None:
    """`("name", {args})` (a form some prompt-based models write)."""
    if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], dict):
        return make_call(item[0], item[1])
    return None
