"""Request validation for the gateway: OpenAI chat bodies → the schema the router packs, with precise 4xx errors.

    body = parse_body(raw_bytes, max_bytes=2_000_000)
    messages, tools = to_schema(body.get("messages"), body.get("tools"))    # GatewayError(400, "messages[2].role: …")
    mode = model_mode(body["model"], pool_names)                             # ("route", τ) | ("pass", name)

The forwarded body is never rebuilt from these objects: the upstream gets the
caller's own messages and tools, intact; these are only what the router reads.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from data.schema import Call, Message, Tool
from serving.policy import Constraints
from serving.strategy import Strategy

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool",
         "function": "tool"}
SCHEMA_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}
ROUTER_MODEL = re.compile(r"^router(?:-(?P<tau>[0-9.]+))?$")


@dataclass
class GatewayError(Exception):
    """An error the caller made (or an upstream failure), as an OpenAI-style error body."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.status}}


def bad(message: str, param: str | None = None) -> GatewayError:
    return GatewayError(400, f"{param}: {message}" if param else message, param=param)


def parse_body(raw: bytes, max_bytes: int) -> dict[str, Any]:
    if len(raw) > max_bytes:
        raise GatewayError(413, f"request body is {len(raw):,} bytes; the limit is {max_bytes:,}")
    if not raw.strip():
        raise bad("request body is empty; send a JSON object")
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as e:
        raise bad(f"request body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except UnicodeDecodeError:
        raise bad("request body is not UTF-8") from None
    if not isinstance(body, dict):
        raise bad(f"request body must be a JSON object, not {type(body).__name__}")
    return body


def _text(content: Any, where: str) -> str | None:
    """OpenAI content: a string, null, or a list of parts whose text parts are read."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise bad("each content part must be an object with a 'type'", f"{where}[{i}]")
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    raise bad("a text part needs a string 'text'", f"{where}[{i}].text")
                parts.append(part["text"])
        return "\n".join(parts)
    raise bad(f"must be a string, null or a list of content parts, not {type(content).__name__}", where)


def _calls(tool_calls: Any, where: str) -> list[Call]:
    if tool_calls is None:
        return []
    if not isinstance(tool_calls, list):
        raise bad("must be a list", where)
    calls = []
    for i, tc in enumerate(tool_calls):
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad("each tool call needs function.name", f"{where}[{i}]")
        args = fn.get("arguments", "{}")
        try:
            parsed = json.loads(args) if isinstance(args, str) else args
        except json.JSONDecodeError:
            parsed = {}  # a model's malformed arguments are history, not the caller's error
        calls.append(Call(name=fn["name"], arguments=parsed if isinstance(parsed, dict) else {}))
    return calls


def to_messages(messages: Any, max_messages: int = 512) -> list[Message]:
    if not isinstance(messages, list):
        raise bad("is required and must be a list of messages", "messages")
    if not messages:
        raise bad("must contain at least one message", "messages")
    if len(messages) > max_messages:
        raise bad(f"has {len(messages)} messages; the limit is {max_messages}", "messages")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad("must be an object", where)
        role = m.get("role")
        if role not in ROLES:
            raise bad(f"role {role!r} is not one of {sorted(ROLES)}", f"{where}.role")
        role = ROLES[role]
        name = m.get("name")
        out.append(Message(role=role, content=_text(m.get("content"), f"{where}.content"),
                           tool_calls=_calls(m.get("tool_calls"), f"{where}.tool_calls") if role == "assistant" else [],
                           name=name if isinstance(name, str) and role == "tool" else None))
    if not any(m.role == "user" for m in out):
        raise bad("needs at least one user message", "messages")
    return out


def _check_schema(schema: Any, where: str, depth: int = 0) -> None:
    """Enough JSON Schema to pack and forward: types known, properties objects, required names."""
    if depth > 32:
        raise bad("is nested deeper than 32 levels", where)
    if not isinstance(schema, dict):
        raise bad(f"must be a JSON Schema object, not {type(schema).__name__}", where)
    t = schema.get("type")
    types = t if isinstance(t, list) else [t] if t is not None else []
    for x in types:
        if x not in SCHEMA_TYPES:
            raise bad(f"type {x!r} is not a JSON Schema type ({', '.join(sorted(SCHEMA_TYPES))})", f"{where}.type")
    props = schema.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            raise bad("must be an object mapping names to schemas", f"{where}.properties")
        for k, v in props.items():
            _check_schema(v, f"{where}.properties.{k}", depth + 1)
    req = schema.get("required")
    if req is not None and (not isinstance(req, list) or not all(isinstance(r, str) for r in req)):
        raise bad("must be a list of property names", f"{where}.required")
    if "items" in schema and isinstance(schema["items"], dict):
        _check_schema(schema["items"], f"{where}.items", depth + 1)
    if "enum" in schema and not isinstance(schema["enum"], list):
        raise bad("must be a list", f"{where}.enum")


def to_tools(tools: Any, max_tools: int = 512) -> list[Tool]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise bad("must be a list of tools", "tools")
    if len(tools) > max_tools:
        raise bad(f"has {len(tools)} tools; the limit is {max_tools}", "tools")
    out, seen = [], set()
    for i, t in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(t.get("function"), dict):
            raise bad("must be {\"type\": \"function\", \"function\": {...}}", where)
        fn = t["function"]
        name = fn.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", name):
            raise bad("must be 1-64 letters, digits, '_', '.' or '-'", f"{where}.function.name")
        if name in seen:
            raise bad(f"tool {name!r} is listed twice", f"{where}.function.name")
        seen.add(name)
        desc = fn.get("description", "")
        if not isinstance(desc, str):
            raise bad("must be a string", f"{where}.function.description")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        _check_schema(params, f"{where}.function.parameters")
        if params.get("type", "object") != "object":
            raise bad("a function's parameters must be an object schema", f"{where}.function.parameters.type")
        out.append(Tool(name=name, description=desc, parameters=params, original=fn))
    return out


def to_schema(messages: Any, tools: Any, max_messages: int = 512, max_tools: int = 512):
    return to_messages(messages, max_messages), to_tools(tools, max_tools)


def model_mode(model: Any, pool_names: list[str]) -> tuple[str, float | str | None]:
    """("route", τ or None) for `router` / `router-<τ>`; ("pass", name) for a pool model."""
    if not isinstance(model, str) or not model:
        raise bad("is required: 'router', 'router-<threshold>' or a pool model name", "model")
    m = ROUTER_MODEL.match(model)
    if m:
        if m.group("tau") is None:
            return "route", None
        try:
            tau = float(m.group("tau"))
        except ValueError:
            tau = -1.0
        if not 0 <= tau <= 1:
            raise bad(f"threshold in {model!r} must be a number within [0, 1], like router-0.7", "model")
        return "route", tau
    if model not in pool_names:
        raise GatewayError(404, f"model {model!r} is not in the pool; use 'router' or one of: {', '.join(pool_names)}",
                           param="model", type="model_not_found")
    return "pass", model


def constraints_from(extra: Any, pool_names: list[str]) -> tuple[Constraints | None, str | dict | None]:
    """The optional `switchcraft` object: allowed_models, max_cost_usd, min_probability, caller."""
    if extra is None:
        return None, None
    if not isinstance(extra, dict):
        raise bad("must be an object", "switchcraft")
    unknown = set(extra) - {"allowed_models", "max_cost_usd", "min_probability", "caller", "strategy"}
    if unknown:
        raise bad(f"unknown field(s) {sorted(unknown)}; known: allowed_models, max_cost_usd, min_probability, caller, "
                  "strategy", "switchcraft")
    allowed = extra.get("allowed_models")
    if allowed is not None:
        if not isinstance(allowed, list) or not all(isinstance(a, str) for a in allowed):
            raise bad("must be a list of model names", "switchcraft.allowed_models")
        missing = [a for a in allowed if a not in pool_names]
        if missing:
            raise bad(f"not in the pool: {missing}", "switchcraft.allowed_models")
    numbers = {}
    for key in ("max_cost_usd", "min_probability"):
        v = extra.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise bad("must be a number", f"switchcraft.{key}")
        numbers[key] = v
    caller = extra.get("caller")
    if caller is not None and not isinstance(caller, str | dict):
        raise bad("must be a string (tenant) or an object {tenant, roles, permissions, environment}: the caller "
                  "identity, for tool permissions", "switchcraft.caller")
    try:
        c = Constraints(frozenset(allowed) if allowed is not None else None, numbers["max_cost_usd"],
                        numbers["min_probability"])
    except ValueError as e:
        raise bad(str(e), "switchcraft") from None
    return c, caller


def check_strategy(strategy: Strategy, pool_names: list[str], where: str) -> Strategy:
    """`strategy` when every model it names is in the pool; else ValueError naming the field."""
    named = [("first", i, m) for i, m in enumerate(strategy.first)] + [("escalate", i, m) for i, m in enumerate(strategy.escalate)]
    if strategy.tie_breaker is not None:
        named.append(("tie_breaker", None, strategy.tie_breaker))
    for key, i, m in named:
        if m not in pool_names:
            field = f"{where}.{key}" + (f"[{i}]" if i is not None else "")
            raise ValueError(f"{field}: {m!r} is not in the pool; pool: {', '.join(pool_names)}")
    return strategy


def strategy_from(value: Any, pool_names: list[str], where: str) -> Strategy | None:
    """A strategy a request asks for: `{first: [a, b], tie_breaker?: c, escalate: [d, …]}` (or `{first: [a]}`)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad("must be an object {first: [a, b], tie_breaker: c, escalate: [d]}", where)
    unknown = set(value) - {"first", "tie_breaker", "escalate"}
    if unknown:
        raise bad(f"unknown field(s) {sorted(unknown)}; known: first, tie_breaker, escalate", where)
    for key in ("first", "escalate"):
        v = value.get(key)
        if (v is None and key == "first") or (v is not None and (not isinstance(v, list)
                                                                 or not all(isinstance(m, str) for m in v))):
            raise bad("must be a list of pool model names", f"{where}.{key}")
    tie = value.get("tie_breaker")
    if tie is not None and not isinstance(tie, str):
        raise bad("must be a pool model name", f"{where}.tie_breaker")
    try:
        strategy = Strategy(tuple(value["first"]), tie, tuple(value.get("escalate") or ()))
    except ValueError as e:
        raise bad(str(e), where) from None
    try:
        return check_strategy(strategy, pool_names, where)
    except ValueError as e:
        field, _, message = str(e).partition(": ")
        raise bad(message, field) from None
