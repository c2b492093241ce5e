"""The request body as JSON, read strictly, and the caller-sized parts of it within bounds, before any of it is used.

    body = parse_body(raw_bytes, max_bytes=2_000_000)      # GatewayError(400/413) naming what is wrong, and where
    check_sizes(body, Bounds(tools=512))                    # tools, schema depth, enums, metadata: each a named 400
    args = read_arguments(call["function"]["arguments"], "messages[1].tool_calls[0].function.arguments")

RFC 8259 JSON only: no NaN or Infinity, numbers within a double, integers of a sane length, UTF-8, nesting
within `max_json_depth`; lone surrogates replaced. Every API's body (Chat Completions, Messages, Responses) is
read here first (serving/gateway/admit.py).
"""

from __future__ import annotations

import codecs
import json
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from serving.core.errors import GatewayError, bad

MAX_INT_DIGITS = 64
MAX_ARGUMENT_DEPTH = 100  # an earlier turn's tool-call arguments (a JSON string inside the body): as max_json_depth
STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
# Tokens the strict reader marks: NaN, Infinity, exponents (1e999) and long digit runs.
BAD_TOKENS = re.compile(rb"NaN|Infinity|[eE][+-]?[0-9]{3}|[0-9]{%d}" % (MAX_INT_DIGITS + 1))
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
SURROGATE = re.compile("[\ud800-\udfff]")


class _Bad:
    """A JSON token Python would accept but JSON (RFC 8259) or a forwarded request cannot carry: NaN, ±Infinity,
    a number out of float range, an integer of absurd length. Kept as a marker until its field is known."""

    def __init__(self, token: str) -> None:
        self.token = token


def _bad_constant(token: str) -> _Bad:
    return _Bad(token)


def _float(token: str) -> float | _Bad:
    value = float(token)
    return value if math.isfinite(value) else _Bad(token)


def _int(token: str) -> int | _Bad:
    return int(token) if len(token) <= MAX_INT_DIGITS else _Bad(token)


def _json_depth(raw: bytes) -> int:
    """How deeply containers nest in `raw` (strings skipped), without parsing: vectorised over the positions of
    quotes, backslashes and brackets only (a regex over the strings of a 2 MB body took ~0.7 s)."""
    b = np.frombuffer(raw, dtype=np.uint8)
    brackets = np.flatnonzero((b == ord("[")) | (b == ord("{")) | (b == ord("]")) | (b == ord("}")))
    if not brackets.size:
        return 0
    quotes = np.flatnonzero(b == ord('"'))
    slashes = np.flatnonzero(b == ord("\\"))
    if quotes.size and slashes.size:  # a quote is escaped when an odd run of backslashes precedes it
        starts = np.ones(slashes.size, dtype=bool)
        starts[1:] = np.diff(slashes) != 1
        run_start = slashes[np.maximum.accumulate(np.where(starts, np.arange(slashes.size), 0))]
        prev = quotes - 1
        k = np.minimum(np.searchsorted(slashes, prev), slashes.size - 1)
        escaped = (slashes[k] == prev) & ((prev - run_start[k] + 1) % 2 == 1)
        quotes = quotes[~escaped]
    outside = np.searchsorted(quotes, brackets) % 2 == 0  # an even count of real quotes before it
    kept = b[brackets[outside]]
    if not kept.size:
        return 0
    steps = np.where((kept == ord("[")) | (kept == ord("{")), 1, -1)
    return int(np.cumsum(steps).max(initial=0))


def _suspicious(raw: bytes) -> bool:
    """Whether `raw` may hold a token the strict reader marks (BAD_TOKENS: NaN, Infinity, a 3-digit exponent, a
    run of more than MAX_INT_DIGITS digits); false alarms only cost a walk. Vectorised: the regex took ~130 ms
    on a 2 MB body."""
    if b"NaN" in raw or b"Infinity" in raw:
        return True
    b = np.frombuffer(raw, dtype=np.uint8)
    digit = np.zeros(b.size + 4, dtype=bool)
    digit[: b.size] = (b >= ord("0")) & (b <= ord("9"))
    if not digit.any():
        return False
    sign = np.zeros(b.size + 4, dtype=bool)
    sign[: b.size] = (b == ord("+")) | (b == ord("-"))
    e = np.flatnonzero((b == ord("e")) | (b == ord("E")))
    d1, d2, d3 = digit[e + 1], digit[e + 2], digit[e + 3]
    if ((d1 & d2 & d3) | (sign[e + 1] & d2 & d3 & digit[e + 4])).any():
        return True
    edges = np.flatnonzero(np.diff(digit[: b.size + 1].astype(np.int8), prepend=np.int8(0)))
    return bool(edges.size and (edges[1::2] - edges[::2]).max(initial=0) > MAX_INT_DIGITS)


def _walk(value: Any, path: str = "") -> Any:
    """Depth-first (path, value) over a parsed body, iteratively: bodies here may be deeper than Python's stack."""
    stack = [(path, value)]
    while stack:
        where, v = stack.pop()
        yield where, v
        if isinstance(v, dict):
            stack.extend((f"{where}.{k}" if where else str(k), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((f"{where}[{i}]", x) for i, x in reversed(list(enumerate(v))))


def _deepest(value: Any, limit: int) -> str:
    """The path of the first value nested deeper than `limit` containers."""
    stack = [("", value, 1)]
    while stack:
        where, v, depth = stack.pop()
        if isinstance(v, dict | list) and depth > limit:
            return where or "body"
        children = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in children:
            stack.append((f"{where}.{k}" if isinstance(v, dict) and where else str(k) if isinstance(v, dict)
                          else f"{where}[{k}]", x, depth + 1))
    return "body"


def _clean_surrogates(value: Any) -> Any:
    """Lone UTF-16 surrogates (`"\\ud800"`) replaced by U+FFFD, in keys and values: the tokenizer and the
    forwarded request cannot carry them; a valid pair was already joined into one character by the parser."""
    if isinstance(value, str):
        return SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_clean_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_clean_surrogates(k): _clean_surrogates(v) for k, v in value.items()}
    return value


def _why(token: str) -> str:
    if token.lstrip("-").isdigit():
        return f"has more than {MAX_INT_DIGITS} digits"
    if token.lstrip("-") in ("NaN", "Infinity"):
        return "is not a JSON number (JSON has no NaN or Infinity)"
    return "is beyond the range of a double"


def _short(path: str, keep: int = 6) -> str:
    """A path cut after `keep` steps (`a[0][0][0]…`): a nesting error names where it starts."""
    steps = re.findall(r"\[\d+\]|\.?[^.\[]+", path)
    return path if len(steps) <= keep else "".join(steps[:keep]) + "…"


def _utf8(raw: bytes) -> bytes:
    """`raw` without a UTF-8 byte order mark (RFC 8259 lets a parser ignore one); a 400 for UTF-16 or UTF-32,
    which JSON exchanged between systems may not be (RFC 8259 §8.1), told apart by their BOM or the zero bytes
    around the first ASCII character."""
    if raw.startswith(codecs.BOM_UTF8):
        return raw[len(codecs.BOM_UTF8):]
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or b"\0" in raw.lstrip(b" \t\r\n")[:4]:
        raise bad("request body is UTF-16 or UTF-32; JSON on the wire is UTF-8 (RFC 8259 §8.1): send it as UTF-8",
                  "body")
    return raw


def parse_body(raw: bytes, max_bytes: int, max_depth: int = 100) -> dict[str, Any]:
    """The request body as a JSON object; GatewayError(400/413) naming what is wrong (and where, when known)."""
    if len(raw) > max_bytes:
        raise GatewayError(413, f"request body is {len(raw):,} bytes; the limit is {max_bytes:,}", param="body")
    if not raw.strip():
        raise bad("request body is empty; send a JSON object", "body")
    raw = _utf8(raw)
    depth = _json_depth(raw)
    if depth > max_depth:
        where = "body"
        try:  # the parser's own recursion limit is ~1,000 levels: within it the path can be named
            where = _deepest(json.loads(raw), max_depth)
        except (ValueError, RecursionError):
            pass
        raise bad(f"JSON nested {depth} levels deep; the limit is {max_depth}", _short(where))
    try:
        text = raw.decode("utf-8")  # json.loads(bytes) would also read UTF-16 and UTF-32
    except UnicodeDecodeError as e:
        raise bad(f"request body is not UTF-8 (byte {e.start:,}); JSON on the wire is UTF-8 (RFC 8259 §8.1)",
                  "body") from None
    try:
        body = json.loads(text, parse_constant=_bad_constant, parse_float=_float, parse_int=_int)
    except json.JSONDecodeError as e:
        raise bad(f"request body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}", "body") from None
    except (ValueError, RecursionError) as e:
        raise bad(f"request body cannot be read as JSON ({type(e).__name__})", "body") from None
    if not isinstance(body, dict):
        raise bad(f"request body must be a JSON object, not {type(body).__name__}", "body")
    if _suspicious(raw):  # only then is a walk worth its time
        for where, v in _walk(body):
            if isinstance(v, _Bad):
                raise bad(f"{v.token[:20]}{'…' if len(v.token) > 20 else ''} {_why(v.token)}; send a finite number "
                          "or null", where)
    if SURROGATE_ESCAPE.search(raw):
        body = _clean_surrogates(body)
    return body


@dataclass(frozen=True)
class Bounds:
    """What a caller may make large, from the serving config (`max_tools`, `max_enum_values`, `max_schema_depth`,
    `max_metadata_bytes`): each is refused with a 400 naming the field and the limit before any of it is read."""

    tools: int = 512
    enum_values: int = 1_000
    schema_depth: int = 32
    metadata_bytes: int = 16_384


# Where a tool's JSON Schema sits in each API's body: Chat Completions, Anthropic Messages, OpenAI Responses.
TOOL_SCHEMAS = (("function", "parameters"), ("input_schema",), ("parameters",))
SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SUBSCHEMAS = ("additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
              "unevaluatedProperties", "unevaluatedItems")


def _subschemas(schema: dict, where: str):
    """(path, subschema) one level below `schema`, as JSON Schema nests them."""
    for key in SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            yield from ((f"{where}.{key}.{k}", v) for k, v in schema[key].items())
    for key in SUBSCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            yield from ((f"{where}.{key}[{i}]", v) for i, v in enumerate(schema[key]))
    items = schema.get("items")
    if isinstance(items, list):
        yield from ((f"{where}.items[{i}]", v) for i, v in enumerate(items))
    elif items is not None:
        yield f"{where}.items", items
    for key in SUBSCHEMAS:
        if key in schema:
            yield f"{where}.{key}", schema[key]


def _check_schema_size(schema: Any, where: str, bounds: Bounds) -> None:
    """Depth (subschemas below the root) and every enum's length, iteratively (a schema may be deeper than
    Python's stack)."""
    stack = [(where, schema, 0)]
    while stack:
        at, node, depth = stack.pop()
        if not isinstance(node, dict):
            continue
        if depth > bounds.schema_depth:
            raise bad(f"JSON Schema nested more than {bounds.schema_depth} levels deep; the limit is "
                      f"{bounds.schema_depth} (max_schema_depth)", _short(at, 8))
        enum = node.get("enum")
        if isinstance(enum, list) and len(enum) > bounds.enum_values:
            raise bad(f"has {len(enum):,} values; the limit is {bounds.enum_values:,} (max_enum_values)",
                      f"{_short(at, 8)}.enum")
        stack.extend((p, v, depth + 1) for p, v in _subschemas(node, at))


def check_sizes(body: dict[str, Any], bounds: Bounds) -> None:
    """The caller-sized parts of any API's body within `bounds`: the number of tools, each tool schema's depth
    and enums (also in a response format's schema), the metadata's size. GatewayError(400) naming the field in
    the caller's own body and the limit."""
    tools = body.get("tools")
    if isinstance(tools, list):
        if len(tools) > bounds.tools:
            raise bad(f"has {len(tools):,} tools; the limit is {bounds.tools:,} (max_tools)", "tools")
        for i, tool in enumerate(tools):
            for steps in TOOL_SCHEMAS:
                node: Any = tool
                for step in steps:
                    node = node.get(step) if isinstance(node, dict) else None
                if node is not None:
                    _check_schema_size(node, f"tools[{i}]." + ".".join(steps), bounds)
    fmt = body.get("response_format")  # Chat Completions {type: json_schema, json_schema: {schema}}
    if isinstance(fmt, dict) and isinstance(fmt.get("json_schema"), dict):
        _check_schema_size(fmt["json_schema"].get("schema"), "response_format.json_schema.schema", bounds)
    text = body.get("text")  # Responses {format: {type: json_schema, schema}}
    if isinstance(text, dict) and isinstance(text.get("format"), dict):
        _check_schema_size(text["format"].get("schema"), "text.format.schema", bounds)
    if "metadata" in body and body["metadata"] is not None:
        size = len(json.dumps(body["metadata"], ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if size > bounds.metadata_bytes:
            raise bad(f"is {size:,} bytes as JSON; the limit is {bounds.metadata_bytes:,} (max_metadata_bytes)",
                      "metadata")


def read_arguments(args: Any, where: str) -> Any:
    """A tool call's arguments: a JSON string read with the body's strict rules (depth, NaN, number size), since
    the router packs them. Malformed JSON is a model's history, not the caller's error: read as no arguments."""
    if not isinstance(args, str):
        return args
    raw = args.encode("utf-8", "surrogatepass")
    depth = _json_depth(raw)
    if depth > MAX_ARGUMENT_DEPTH:
        raise bad(f"JSON nested {depth} levels deep; the limit is {MAX_ARGUMENT_DEPTH}", where)
    try:
        parsed = json.loads(args, parse_constant=_bad_constant, parse_float=_float, parse_int=_int)
    except json.JSONDecodeError:
        return {}
    except (ValueError, RecursionError) as e:
        raise bad(f"cannot be read as JSON ({type(e).__name__})", where) from None
    parsed = _clean_surrogates(parsed)  # "\\ud800" escaped inside the arguments string: the tokenizer refuses it
    if BAD_TOKENS.search(raw):
        for inner, v in _walk(parsed):
            if isinstance(v, _Bad):
                raise bad(f"{v.token[:20]}{'…' if len(v.token) > 20 else ''} {_why(v.token)}"
                          f"{' (at ' + inner + ')' if inner else ''}; send a finite number or null", where)
    return parsed
