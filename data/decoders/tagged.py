"""Decoders of calls wrapped in text markers, one JSON object per call.

    .venv/bin/python -c "from data.decoders import decode; print(decode('<tool_call>{\\"name\\": \\"f\\", \\"arguments\\": {}}</tool_call>'))"

- hermes:  `<tool_call>{"name": f, "arguments": {...}}</tool_call>` (NousResearch Hermes 2;
           some emit single-quoted pseudo-JSON, read as a Python literal; some drop the
           closing tag)
- chatml:  `<|im_start|>\n{"arguments": ..., "name": f}\n<|im_start|>…` (Hermes-2-Theta-70B,
           which writes its special token where the tag belongs, sometimes after prose)
- granite: `<function_call> {"name": f, "arguments": {...}}` (IBM granite-20b-functioncalling)
- glaive:  `<functioncall> {"name": f, "arguments": '{...}'}` (Glaive v2: the arguments are a
           single-quoted JSON string)
- glm:     `f\n{"a": 1}` (THUDM glm-4-9b-chat: the name on one line, its JSON arguments after)
"""

from __future__ import annotations

import re
from typing import Any

from data.decoders.base import (
    MALFORMED,
    NO_CALL,
    Context,
    DecodeFailure,
    make_call,
    named_object_call,
    raw_decode_lenient,
)
from data.schema import Call


def calls_after_markers(text: str, marker: str, *, skip_non_objects: bool = False) -> list[Call]:
    """Read one `{name, arguments}` object (or a list of them) after each `marker`."""
    calls: list[Call] = []
    pos = text.find(marker)
    while pos >= 0:
        start = pos + len(marker)
        while start < len(text) and text[start].isspace():
            start += 1
        if start < len(text) and text[start] in "{[":
            try:
                value, start = raw_decode_lenient(text, start)  # search on after the body: it may quote the marker
            except ValueError as e:
                raise DecodeFailure(MALFORMED, f"{marker} body is not JSON: {e}") from None
            for item in value if isinstance(value, list) else [value]:
                call = named_object_call(item)
                if call is None:
                    raise DecodeFailure(MALFORMED, f"{marker} body is not {{name, arguments}}: {str(item)[:60]!r}")
                calls.append(call)
        elif not skip_non_objects and not text.startswith("<", start) and start < len(text):
            # (a marker followed by another tag, e.g. a doubled "<tool_call>", is skipped)
            raise DecodeFailure(MALFORMED, f"{marker} is not followed by a JSON object")
        pos = text.find(marker, start)
    if not calls:
        raise DecodeFailure(NO_CALL, f"no JSON object after {marker}")
    return calls


def sniff_hermes(raw: Any, ctx: Context) -> bool:
    return isinstance(raw, str) and "<tool_call>" in raw


def parse_hermes(raw: Any, ctx: Context) -> list[Call]:
    return calls_after_markers(raw, "<tool_call>")


def sniff_chatml(raw: Any, ctx: Context) -> bool:
    # Also after prose: "I'll call f:\n<|im_start|>\n{...}".
    return isinstance(raw, str) and "<|im_start|>" in raw and '"name"' in raw


def parse_chatml(raw: Any, ctx: Context) -> list[Call]:
    # Later <|im_start|> segments hold prose ("assistant …"), not calls.
    return calls_after_markers(raw, "<|im_start|>", skip_non_objects=True)


def sniff_granite(raw: Any, ctx: Context) -> bool:
    return isinstance(raw, str) and "<function_call>" in raw


def parse_granite(raw: Any, ctx: Context) -> list[Call]:
    calls = [c for c in calls_after_markers(raw, "<function_call>") if c.name != "no_function"]
    if not calls:  # granite's own way of saying "no function fits"
        raise DecodeFailure(NO_CALL, "granite answered no_function")
    return calls


def sniff_glaive(raw: Any, ctx: Context) -> bool:
    return isinstance(raw, str) and "<functioncall>" in raw


def parse_glaive(raw: Any, ctx: Context) -> list[Call]:
    return calls_after_markers(raw, "<functioncall>")


_GLM_HEAD = re.compile(r"\s*([A-Za-z_][\w.\-]*)[ \t]*\n\s*(?=\{)")


def sniff_glm(raw: Any, ctx: Context) -> bool:
    return isinstance(raw, str) and _GLM_HEAD.match(raw) is not None


def parse_glm(raw: Any, ctx: Context) -> list[Call]:
    calls: list[Call] = []
    pos = 0
    text = raw.rstrip()
    while pos < len(text):
        m = _GLM_HEAD.match(text, pos)
        if m is None:
            break  # prose after the last call
        try:
            args, pos = raw_decode_lenient(text, m.end())
        except ValueError as e:
            raise DecodeFailure(MALFORMED, f"arguments of {m.group(1)!r} are not JSON: {e}") from None
        calls.append(make_call(m.group(1), args))
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return calls
