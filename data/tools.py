"""Function docs from any source → `Tool` with normalised JSON Schema.

BFCL writes Python-ish type names (`dict`, `float`, `tuple`, `any`) and, in the
Java/JavaScript categories, that language's names (`String`, `HashMap`,
`Boolean`, …). JSON Schema is what models and validators speak, so the types
are mapped; the source's type name is kept in `x-original-type` wherever it
differs, and the whole original doc is kept on the Tool.
"""

from __future__ import annotations

import copy
from typing import Any

from data.schema import Tool

# Source type name (lower-cased) → JSON Schema type.
TYPE_MAP: dict[str, str] = {
    # Python / BFCL
    "dict": "object",
    "object": "object",
    "float": "number",
    "number": "number",
    "double": "number",
    "int": "integer",
    "integer": "integer",
    "long": "integer",
    "short": "integer",
    "byte": "integer",
    "bool": "boolean",
    "boolean": "boolean",
    "str": "string",
    "string": "string",
    "char": "string",
    "list": "array",
    "array": "array",
    "tuple": "array",
    "arraylist": "array",
    "set": "array",
    "hashmap": "object",
    "map": "object",
    "null": "null",
    "none": "null",
    # "any" (Python) and Java/JS types with no JSON counterpart: no constraint.
    "any": "",
    "bigint": "integer",
}


def json_type(type_name: str) -> str | None:
    """JSON Schema type for a source type name; '' means "any"; None when unknown."""
    return TYPE_MAP.get(type_name.strip().lower())


def normalize_schema(schema: Any) -> Any:
    """Return a normalised deep copy of a (possibly BFCL-flavoured) JSON Schema."""
    if isinstance(schema, list):
        return [normalize_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return copy.deepcopy(schema)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            out.update(_normalize_type(value))
        elif key in ("properties", "patternProperties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {k: normalize_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not", "contains", "if", "then", "else"):
            out[key] = normalize_schema(value)
        elif key in ("anyOf", "oneOf", "allOf", "prefixItems") and isinstance(value, list):
            out[key] = [normalize_schema(v) for v in value]
        else:
            out[key] = copy.deepcopy(value)
    return out


def _normalize_type(value: Any) -> dict[str, Any]:
    names = value if isinstance(value, list) else [value]
    if not all(isinstance(n, str) for n in names):
        return {"type": value}
    # Unknown names (Java `IResultSetController`, JS `HTMLElement`) and "any": no constraint.
    kept = [t for t in (json_type(n) or "" for n in names) if t]
    out: dict[str, Any] = {}
    if kept:
        out["type"] = kept[0] if len(kept) == 1 else kept
    if names != kept:
        out["x-original-type"] = value
    return out


def tool_from_doc(doc: dict[str, Any]) -> Tool:
    """A Tool from a function doc: BFCL/xLAM/Glaive style `{name, description,
    parameters}`, or OpenAI style `{"type": "function", "function": {...}}`.

    xLAM-style parameters (`{p: {type, description, default?}}` with no
    "properties") are wrapped into an object schema.
    """
    original = copy.deepcopy(doc)
    fn = doc["function"] if doc.get("type") == "function" and isinstance(doc.get("function"), dict) else doc
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ValueError("function doc has no 'name'")
    params = fn.get("parameters")
    if params is None:
        params = {"type": "object", "properties": {}}
    elif isinstance(params, dict) and _is_param_map(params):
        params = {"type": "object", "properties": params}
    params = normalize_schema(params)
    if isinstance(params, dict) and "type" not in params:
        params["type"] = "object"
    return Tool(name=fn["name"], description=str(fn.get("description") or ""), parameters=params, original=original)


def _is_param_map(params: dict[str, Any]) -> bool:
    """xLAM style: `{param: {type, description}}` with no "properties". A parameter may
    itself be named "type", so look at the values, not the keys."""
    return "properties" not in params and bool(params) and all(isinstance(v, dict) for v in params.values())


def tools_from_docs(docs: Any) -> list[Tool]:
    """One doc or a list of docs → Tools (BFCL gives a single doc for `simple`)."""
    if docs is None:
        return []
    if isinstance(docs, dict):
        docs = [docs]
    return [tool_from_doc(d) for d in docs]
