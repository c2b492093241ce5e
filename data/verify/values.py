"""Is one argument value equal in meaning to one acceptable value? Recursively.

`mismatch(value, expected, schema, encoded)` returns None when they match,
else the reason (from `reasons.REASONS`). Rules:
- the schema's type decides the kind: an integer/number parameter takes only
  numbers (`1 == 1.0`; a string "ten" or a bool is a type error), a boolean
  only booleans, a string only strings, an array only lists, an object only dicts;
- strings compare by `canon.canon_string` (case, whitespace, punctuation,
  ISO instants, US states);
- arrays compare as multisets: any order, duplicates count, elements
  recursively; except where positions carry meaning: tuples, and arrays
  marked `x-ordered` by `mark_positional` (coordinates, `[x, y]`, pairs);
- objects compare key by key, recursively; an expected object may be in BFCL's
  nested form, where each value is again a list of acceptable values (`""`
  among them: the key may be omitted);
- `encoded=True` (Java/JavaScript categories): a string is first read as the
  value it spells in that language for the schema's type (see `encoded`), and
  untyped scalars compare loosely ("50" = 50).

    from data.verify.values import mismatch
    mismatch([1, 3], [1.0, 3.0], {"type": "array", "items": {"type": "number"}}, False)  # None
"""

from __future__ import annotations

import math
import re
from typing import Any

from data.verify.canon import arithmetic_value, canon_string, expressions_equal
from data.verify.encoded import UNREADABLE, decode_encoded, scalar, unquote
from data.verify.matching import has_perfect_matching

_NUMERIC = (int, float)


def is_number(v: Any) -> bool:
    return isinstance(v, _NUMERIC) and not isinstance(v, bool)


def numbers_equal(a: float, b: float) -> bool:
    # Exact for integers; a relative 1e-9 only absorbs float round-trips (0.1+0.2).
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def schema_type(schema: dict | None) -> str | None:
    if not schema:
        return None
    t = schema.get("type")
    if isinstance(t, list):  # ["string", "null"]: the first non-null kind decides
        t = next((x for x in t if x != "null"), None)
    return t


def conforms(expected: Any, t: str | None) -> bool:
    """Whether an acceptable value is itself of the schema's type. When it is not
    (a nested table under `items: integer`, `data['sales']` for an array), the
    answer is what the author meant: compare by the values' own kinds."""
    if t in ("integer", "number"):
        return is_number(expected)
    if t == "boolean":
        return isinstance(expected, bool)
    if t == "string":
        return isinstance(expected, str)
    if t == "array":
        return isinstance(expected, list)
    if t == "object":
        return isinstance(expected, dict)
    return False


_SCALARS = (str, int, float, bool)


def mismatch(value: Any, expected: Any, schema: dict | None, encoded: bool = False) -> str | None:
    vt = type(value)
    if vt is type(expected) and vt in _SCALARS and value == expected and (vt is str or not encoded):
        # Identical scalars match under every rule below (the common case: exact answers).
        t = schema_type(schema)
        if vt is str or t is None or conforms(value, t):
            return None
    t = schema_type(schema)
    if not conforms(expected, t):
        return untyped_mismatch(value, expected, encoded)
    if encoded and isinstance(value, str) and t != "string":
        decoded = decode_encoded(value, t)
        if decoded is UNREADABLE:
            return "type_error:encoded"
        value = decoded
    elif encoded and isinstance(value, str):
        value = unquote(value.strip())
    if t == "integer" or t == "number":
        # 1 == 1.0; an answer of 0.85 under an "integer" schema still compares as a number.
        if isinstance(value, str):
            # `rate=3 / 100` in call syntax is decoded as its source text; it means 0.03.
            n = arithmetic_value(value)
            value = n if n is not None else value
        if not is_number(value):
            return f"type_error:{t}"
        return None if numbers_equal(value, expected) else "value_error:number"
    if t == "boolean":
        if not isinstance(value, bool):
            return "type_error:boolean"
        return None if value is expected else "value_error:boolean"
    if t == "string":
        if not isinstance(value, str):
            return "type_error:string"
        return None if strings_equal(value, expected) else "value_error:string"
    if t == "array":
        if not isinstance(value, list):
            return "type_error:array"
        items = schema.get("items") if isinstance(schema.get("items"), dict) else None
        ordered = schema.get("x-ordered") or schema.get("x-original-type") == "tuple"
        return None if arrays_equal(value, expected, items, encoded, ordered) else "value_error:array"
    # t == "object"
    if not isinstance(value, dict):
        return "type_error:object"
    return None if objects_equal(value, expected, schema, encoded) else "value_error:object"


def untyped_mismatch(value: Any, expected: Any, encoded: bool) -> str | None:
    """No usable schema type (`any`, unknown Java classes, or an answer that
    contradicts its schema): compare by the values' own kinds."""
    if encoded and isinstance(value, str) and not isinstance(expected, str):
        value = scalar(value)  # Java `any` given as source text: "50", "true", "[1, 2]"
    if isinstance(value, str) and isinstance(expected, str):
        if encoded:
            value = unquote(value.strip())
        return None if strings_equal(value, expected) else "value_error:string"
    if is_number(value) and is_number(expected):
        return None if numbers_equal(value, expected) else "value_error:number"
    if isinstance(value, bool) and isinstance(expected, bool):
        return None if value is expected else "value_error:boolean"
    if isinstance(value, list) and isinstance(expected, list):
        return None if arrays_equal(value, expected, None, encoded, False) else "value_error:array"
    if isinstance(value, dict) and isinstance(expected, dict):
        return None if objects_equal(value, expected, None, encoded) else "value_error:object"
    if is_number(value) and isinstance(expected, str):
        # Ground truth kept as source text ("500 * 500"): its arithmetic value counts.
        n = arithmetic_value(expected)
        if n is not None:
            return None if numbers_equal(value, n) else "value_error:number"
    if encoded and isinstance(expected, str) and (is_number(value) or isinstance(value, bool)):
        # A typed value where the answer keeps source text ("50"): compare as text.
        text = str(value).lower() if isinstance(value, bool) else str(value)
        return None if strings_equal(text, expected) else "value_error:string"
    if value is None and (expected is None or encoded and expected in ("null", "undefined")):
        return None  # JavaScript's null written as source text in the answer
    return "value_error:other"


def strings_equal(a: str, b: str) -> bool:
    return a == b or canon_string(a) == canon_string(b) or expressions_equal(a, b)


def _key(v: Any, encoded: bool) -> Any:
    """A hashable key for scalars that compare by equality of keys, or None."""
    if isinstance(v, bool):
        return ("b", v)
    if is_number(v):
        return ("n", float(v))
    if isinstance(v, str):
        if encoded:
            return None  # "50" may equal 50: needs the pairwise rule
        return ("s", canon_string(v))
    return None


def arrays_equal(value: list, expected: list, items: dict | None, encoded: bool, ordered: bool) -> bool:
    if len(value) != len(expected):
        return False
    if ordered:
        return all(mismatch(v, e, items, encoded) is None for v, e in zip(value, expected))
    if items is None or items.get("type") in ("string", "number", "integer", "boolean", None):
        # Fast path: scalars whose equality is equality of keys -> compare multisets of keys.
        kv = [_key(v, encoded) for v in value]
        ke = [_key(e, encoded) for e in expected]
        if None not in kv and None not in ke and (items is None or _scalars_fit(value, items)):
            if sorted(kv) == sorted(ke):
                return True
            if not any(k[0] == "s" for k in kv):
                return False  # numbers and booleans: key equality is the whole rule
    return has_perfect_matching([[mismatch(v, e, items, encoded) is None for e in expected] for v in value])


def _scalars_fit(values: list, items: dict) -> bool:
    t = items.get("type")
    if t == "string":
        return all(isinstance(v, str) for v in values)
    if t == "boolean":
        return all(isinstance(v, bool) for v in values)
    if t == "integer":
        return all(is_number(v) and float(v).is_integer() for v in values)
    if t == "number":
        return all(is_number(v) for v in values)
    return True


def objects_equal(value: dict, expected: dict, schema: dict | None, encoded: bool) -> bool:
    props = (schema or {}).get("properties") or {}
    # BFCL writes nested objects as {key: [acceptable values]}; a literal object
    # may also hold lists. Either reading may be the right one: accept both.
    nested = expected and all(isinstance(x, list) for x in expected.values())
    if nested and _nested_form_equal(value, expected, props, encoded):
        return True
    if value.keys() != expected.keys():
        return False
    return all(mismatch(value[k], expected[k], props.get(k), encoded) is None for k in expected)


def _nested_form_equal(value: dict, expected: dict, props: dict, encoded: bool) -> bool:
    for k, v in value.items():
        if k not in expected:
            return False
        if "" in expected[k] and (v is None or (isinstance(v, (str, list, dict)) and not v)):
            continue  # an empty value where the key may be omitted: the same as leaving it out
        options = [x for x in expected[k] if x != ""]
        if not any(mismatch(v, o, props.get(k), encoded) is None for o in options):
            return False
    return all(k in value or "" in opts for k, opts in expected.items())


_POSITIONAL = re.compile(
    r"\[\s*x\s*,\s*y|\(\s*x\s*,\s*y|\bx and y\b|\blatitude\b.{0,4}\blongitude\b|\bcoordinates?\b|\btuple\b|\bpair\b",
    re.IGNORECASE,
)


def mark_positional(schema: Any) -> Any:
    """A copy of a parameter schema where arrays whose description documents a
    positional format ("[x, y]", "coordinates", "a tuple", "[Latitude, Longitude]")
    are marked `x-ordered`: `[0.3, 0.6]` is not the point `[0.6, 0.3]`."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if out.get("type") == "array":
        if _POSITIONAL.search(str(out.get("description") or "")):
            out["x-ordered"] = True
        if isinstance(out.get("items"), dict):
            out["items"] = mark_positional(out["items"])
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: mark_positional(v) for k, v in out["properties"].items()}
    return out
