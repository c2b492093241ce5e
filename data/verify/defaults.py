"""The default a parameter's schema documents: a `default` field, or a phrase
such as "Default is 'metric'" / "defaults to false" / "default: 10" in its
description. Only unambiguous defaults count: a quoted string, a number,
true/false/none, "empty array/list/string", or one bare word ending the
sentence ("Default is English."); "Default is the current year" is no value.

    from data.verify.defaults import documented_default, NO_DEFAULT
    documented_default({"type": "string", "description": "Unit. Default is 'metric'."})  # 'metric'
"""

from __future__ import annotations

import re
from typing import Any

NO_DEFAULT = object()

_PHRASE = re.compile(
    r"\bdefault(?:s| value)?(?:\s+(?:is|to|of|value is|set to|=))?\s*[:=]?\s*"
    r"(?P<value>'[^']*'|\"[^\"]*\"|`[^`]*`|empty (?:array|list|string|dict|object)|[^\s,;()]+)"
    r"(?P<rest>.{0,4})",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_EMPTY = {"array": [], "list": [], "string": "", "dict": {}, "object": {}}


def documented_default(schema: dict[str, Any] | None) -> Any:
    """The documented default (coerced to the schema's type), or NO_DEFAULT."""
    if not isinstance(schema, dict):
        return NO_DEFAULT
    if "default" in schema:
        return coerce(schema["default"], schema.get("type"))
    desc = schema.get("description")
    if not isinstance(desc, str) or "default" not in desc.lower():
        return NO_DEFAULT
    m = _PHRASE.search(desc)
    if not m:
        return NO_DEFAULT
    raw, rest = m.group("value"), m.group("rest")
    if raw[0] in "'\"`":
        return coerce(raw[1:-1], schema.get("type"))
    low = raw.lower().rstrip(".")
    if low.startswith("empty "):
        return _EMPTY[low.split()[1]]
    # A bare word is a value only when the sentence ends right after it
    # ("Default is English.", "Default is all if not specified", but not
    # "Default is the current year").
    if not (rest[:1] in ("", ".", ",", ";", ")") or rest.lower().startswith((" if ", " whe", " unl"))):
        return NO_DEFAULT
    return coerce(raw.rstrip("."), schema.get("type"))


def coerce(value: Any, type_: Any) -> Any:
    """A documented default written as text, read as the schema's type ("false" -> False)."""
    if not isinstance(value, str):
        return value
    low = value.strip().lower()
    if low in ("none", "null"):
        return None
    if type_ == "boolean" and low in ("true", "false"):
        return low == "true"
    if type_ in ("integer", "number") and _NUMBER.match(low):
        n = float(low)
        return int(n) if type_ == "integer" and n.is_integer() else n
    if type_ is None and low in ("true", "false"):
        return low == "true"
    if type_ is None and _NUMBER.match(low):
        n = float(low)
        return int(n) if n.is_integer() else n
    return value
