"""Java / JavaScript values written as strings, read as their schema's type.

BFCL's Java and JavaScript categories ask models for every argument as a
string of source code (`useShortName='true'`, `params='new HashMap<>(...)'`).
A value that is correct in that language is correct here, whatever spelling
the model chose: `'true'` for a Boolean, `'50L'` for a long, `'[1, 2]'`,
`'Arrays.asList("a", "b")'` or `'new String[]{"a", "b"}'` for an array,
`'{limit: 50}'`, `'{limit=50}'`, `'Map.of("limit", 50)'` or
`'new HashMap<>() {{ put("limit", 50); }}'` for a map.

    from data.verify.encoded import decode_encoded
    decode_encoded("{limit=50, schemaFilter=public}", "object")  # {'limit': 50, 'schemaFilter': 'public'}
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

UNREADABLE = object()

_NUM = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[lLfFdDn]?$")
_CALL_ARGS = re.compile(
    r"^(?:new\s+[\w.<>, ]+\(|(?:Arrays\.asList|List\.of|Set\.of|Map\.of|Array\.of)\()(?P<inner>.*)\)$",
    re.DOTALL,
)
_ARRAY_INIT = re.compile(r"^new\s+[\w.<>]+\s*\[\s*\]\s*\{(?P<inner>.*)\}$", re.DOTALL)
_PUT = re.compile(r"\bput\(\s*(?P<k>\"[^\"]*\"|'[^']*'|[\w.]+)\s*,\s*(?P<v>[^;]*?)\s*\)\s*;")


def decode_encoded(text: str, type_: str | None) -> Any:
    """The value `text` spells for a parameter of JSON Schema type `type_`,
    or UNREADABLE. For a "string" parameter, surrounding quotes are removed."""
    s = text.strip()
    if type_ == "boolean":
        low = s.lower()
        return low == "true" if low in ("true", "false") else UNREADABLE
    if type_ in ("integer", "number"):
        if not _NUM.match(s):
            return UNREADABLE
        n = float(s.rstrip("lLfFdDn"))
        return int(n) if type_ == "integer" and n.is_integer() else (UNREADABLE if type_ == "integer" else n)
    if type_ == "string":
        return unquote(s)
    if type_ == "array":
        v = _array(s)
        return v if isinstance(v, list) else UNREADABLE
    if type_ == "object":
        v = _mapping(s)
        return v if isinstance(v, dict) else UNREADABLE
    return UNREADABLE


def scalar(token: str) -> Any:
    """One literal token of Java/JS source: a quoted string, number, boolean, null, or a bare name."""
    t = token.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"`":
        return t[1:-1]
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "undefined", "none"):
        return None
    if _NUM.match(t):
        n = float(t.rstrip("lLfFdDn"))
        return int(n) if n.is_integer() and not any(c in t for c in ".eE") else n
    return _structured(t) if t[:1] in "[{" or t.startswith("new ") else t


def unquote(s: str) -> str:
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"`":
        return s[1:-1]
    return s


def _literal(s: str) -> Any:
    try:
        return json.loads(s)
    except ValueError:
        pass
    try:
        return ast.literal_eval(s)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        # TypeError: a literal Python cannot build, e.g. a set of dicts `{{'a': 1}}` (unhashable members).
        return UNREADABLE


def _structured(s: str) -> Any:
    if s.startswith("{") or "Map" in s.split("(", 1)[0] or "put(" in s:
        v = _mapping(s)
        if v is not UNREADABLE:
            return v
    return _array(s)


def _array(s: str) -> Any:
    v = _literal(s)
    if isinstance(v, (list, tuple)):
        return list(v)
    m = _CALL_ARGS.match(s) or _ARRAY_INIT.match(s)
    if m:
        inner = m.group("inner").strip()
        # new ArrayList<>(Arrays.asList(a, b)): unwrap one more level.
        if _CALL_ARGS.match(inner):
            return _array(inner)
        return [scalar(x) for x in split_top(inner)] if inner else []
    if s.startswith("[") and s.endswith("]"):
        inner = s[1:-1].strip()
        return [scalar(x) for x in split_top(inner)] if inner else []
    return UNREADABLE


def _mapping(s: str) -> Any:
    v = _literal(s)
    if isinstance(v, dict):
        return {str(k): x for k, x in v.items()}
    puts = _PUT.findall(s)
    if puts:
        return {str(scalar(k)): scalar(v) for k, v in puts}
    m = _CALL_ARGS.match(s)
    if m and s.startswith("Map.of("):
        parts = split_top(m.group("inner"))
        if len(parts) % 2 == 0:
            return {str(scalar(parts[i])): scalar(parts[i + 1]) for i in range(0, len(parts), 2)}
        return UNREADABLE
    if s.startswith("{") and s.endswith("}"):
        out = {}
        for item in split_top(s[1:-1]):
            if not item.strip():
                continue
            k, sep, val = _split_pair(item)
            if not sep:
                return UNREADABLE
            out[str(scalar(k))] = scalar(val)
        return out
    return UNREADABLE


def _top_level(s: str):
    """(index, char) of the characters outside quotes and brackets (backslash escapes honoured in quotes)."""
    depth, quote, escaped = 0, "", False
    for i, ch in enumerate(s):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            yield i, ch


def _split_pair(item: str) -> tuple[str, str, str]:
    """`key: value` or `key=value` at the top level, else (item, "", "")."""
    for i, ch in _top_level(item):
        if ch in ":=":
            return item[:i], ch, item[i + 1 :]
    return item, "", ""


def split_top(s: str) -> list[str]:
    """Split on commas outside quotes and brackets."""
    cuts = [i for i, ch in _top_level(s) if ch == ","]
    return [s[a + 1 : b].strip() for a, b in zip([-1, *cuts], [*cuts, len(s)])]
