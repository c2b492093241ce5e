"""Tool definitions compressed to one-line signatures, and their relevance to a request.

    >>> tool_signature(Tool(name="area", parameters={"type": "object",
    ...     "properties": {"base": {"type": "integer"}, "unit": {"type": "string", "default": "cm"}},
    ...     "required": ["base"]}))
    'area(base: int, unit?: str = "cm")'

A JSON tool schema costs hundreds of tokens; the signature keeps what decides
whether a call can be right (names, types, what is required, allowed values)
in a few dozen. Used by training/packing.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

from data.schema import Tool

_TYPE_NAMES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "object": "dict", "null": "None"}
_WORD = re.compile(r"[a-z0-9]+")
# Words that say nothing about which tool a request wants.
_STOP = frozenset(
    ["the", "a", "an", "of", "to", "in", "for", "on", "and", "or", "is", "are", "be", "by", "with", "from", "at", "as", "it", "this", "that", "what", "which", "how", "can", "you", "me", "my", "i", "we", "our", "your", "please", "give", "get", "find", "tell", "show", "use", "using", "want", "would", "like"]
)


def type_name(schema: Any) -> str:
    """`{"type": "array", "items": {"type": "string"}}` → `list[str]`."""
    if not isinstance(schema, dict):
        return "any"
    t = schema.get("type")
    if isinstance(t, list):  # JSON Schema allows a union of types
        return "|".join(_TYPE_NAMES.get(x, str(x)) for x in t)
    if t == "array":
        items = schema.get("items")
        return f"list[{type_name(items)}]" if items else "list"
    if t is None:
        return "any"
    return _TYPE_NAMES.get(t, str(t))


def _short(value: Any, limit: int = 24) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def param_signature(name: str, schema: Any, required: bool, enum_values: int) -> str:
    mark = "" if required else "?"
    schema = schema if isinstance(schema, dict) else {}
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        shown = "|".join(_short(v) for v in enum[:enum_values])
        kind = shown + ("|…" if len(enum) > enum_values else "")
    else:
        kind = type_name(schema)
    text = f"{name}{mark}: {kind}"
    if "default" in schema:
        text += f" = {_short(schema['default'])}"
    return text


def tool_signature(tool: Tool, *, description_words: int = 8, enum_values: int = 3) -> str:
    """`name(param: type, param?: type = default) -> ret - first words of the description`."""
    params = tool.parameters if isinstance(tool.parameters, dict) else {}
    props = params.get("properties") or {}
    required = set(params.get("required") or [])
    # Required parameters first: they are what a model most often gets wrong (a stable sort: each part keeps the
    # schema's order).
    ordered = sorted(props, key=lambda p: p not in required)
    args = ", ".join(param_signature(p, props[p], p in required, enum_values) for p in ordered)
    text = f"{tool.name}({args})"
    returns = tool.original.get("returns") or tool.original.get("response") if tool.original else None
    if isinstance(returns, dict) and returns.get("type"):
        text += f" -> {type_name(returns)}"
    words = tool.description.split()
    if description_words and words:
        text += " - " + " ".join(words[:description_words]) + (" …" if len(words) > description_words else "")
    return text


def words(text: str) -> set[str]:
    """Content words, lower-cased; tool names split on `.`, `_` and camelCase."""
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower()
    return {w for w in _WORD.findall(text) if len(w) > 2 and w not in _STOP}


def relevance(tool: Tool, request_words: set[str]) -> int:
    """How many content words the tool's name, description and parameters share with the request."""
    props = (tool.parameters or {}).get("properties") or {}
    tool_words = words(tool.name) | words(tool.description) | words(" ".join(props))
    return len(tool_words & request_words)
