"""Request validation for the gateway: OpenAI chat bodies → the schema the router packs, with precise 4xx errors.

    messages, tools = to_schema(body.get("messages"), body.get("tools"))    # GatewayError(400, "messages[2].role: …")
    mode = model_mode(body["model"], pool_names)                             # ("route", τ) | ("pass", name)

The forwarded body is never rebuilt from these objects: the upstream gets the
caller's own messages and tools, intact; these are only what the router reads.
The body itself was read first (serving/gateway/body.py); `tool_choice` is read
and enforced in serving/gateway/tool_choice.py.
"""

from __future__ import annotations

import re
from typing import Any

from data.schema import Call, Message, Tool
from serving.gateway.body import read_arguments
from serving.core.errors import GatewayError, bad
from serving.gateway.tool_choice import check_tool_choice
from serving.policy import Constraints
from training.policy import Strategy
from training.policy.kinds import names as strategy_kinds

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool",
         "function": "tool"}
SCHEMA_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}
ROUTER_MODEL = re.compile(r"router(?:-(?P<tau>[0-9.]+))?")  # re.fullmatch: `$` would let "router-0.5\n" through
MAX_SCHEMA_DEPTH = 64  # subschemas below a tool's parameters, at most (serving config max_schema_depth: 32)


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
        parsed = read_arguments(fn.get("arguments", "{}"), f"{where}[{i}].function.arguments")
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
    open_calls: set[str] | None = None  # ids of the last assistant turn's calls that a tool message may answer
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad("must be an object", where)
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise bad(f"role {str(role)[:40]!r} is not one of {sorted(ROLES)}", f"{where}.role")
        name = m.get("name")
        if name is not None and not isinstance(name, str):
            raise bad("must be a string", f"{where}.name")
        calls = _calls(m.get("tool_calls"), f"{where}.tool_calls") if ROLES[role] == "assistant" else []
        if ROLES[role] == "tool":
            _check_answers_a_call(m, role, open_calls, where)
        elif ROLES[role] == "assistant":
            ids = {tc.get("id") for tc in m.get("tool_calls") or [] if isinstance(tc.get("id"), str)}
            open_calls = ids if calls or m.get("function_call") else None
        else:
            open_calls = None
        role = ROLES[role]
        out.append(Message(role=role, content=_text(m.get("content"), f"{where}.content"), tool_calls=calls,
                           name=name if role == "tool" else None))
    if not any(m.role == "user" for m in out):
        raise bad("needs at least one user message", "messages")
    return out


def _check_answers_a_call(m: dict, role: str, open_calls: set[str] | None, where: str) -> None:
    """A tool (or legacy function) message answers a call of the assistant turn before it, as OpenAI requires."""
    if open_calls is None:
        raise bad(f"a {role!r} message must follow an assistant message with tool_calls (it answers one of them)",
                  f"{where}.role")
    call_id = m.get("tool_call_id")
    if call_id is not None and not isinstance(call_id, str):
        raise bad("must be a string: the id of the call this message answers", f"{where}.tool_call_id")
    if role == "tool" and open_calls and call_id not in open_calls:
        raise bad(f"{str(call_id)[:64]!r} is not the id of a call in the assistant message before it "
                  f"(ids: {', '.join(sorted(open_calls))})", f"{where}.tool_call_id")


def _check_schema(schema: Any, where: str, depth: int = 0) -> None:
    """Enough JSON Schema to pack and forward: types known, properties objects, required names."""
    if depth > MAX_SCHEMA_DEPTH:  # the gateway's own bound (max_schema_depth, at most this) is checked first
        raise bad(f"is nested deeper than {MAX_SCHEMA_DEPTH} levels", where)
    if not isinstance(schema, dict):
        raise bad(f"must be a JSON Schema object, not {type(schema).__name__}", where)
    t = schema.get("type")
    types = t if isinstance(t, list) else [t] if t is not None else []
    for x in types:
        if not isinstance(x, str) or x not in SCHEMA_TYPES:
            raise bad(f"type {str(x)[:40]!r} is not a JSON Schema type ({', '.join(sorted(SCHEMA_TYPES))})",
                      f"{where}.type")
    props = schema.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            raise bad("must be an object mapping names to schemas", f"{where}.properties")
        for k, v in props.items():
            _check_schema(v, f"{where}.properties.{k}", depth + 1)
    req = schema.get("required")
    if req is not None and (not isinstance(req, list) or not all(isinstance(r, str) for r in req)):
        raise bad("must be a list of property names", f"{where}.required")
    items = schema.get("items")
    if isinstance(items, dict):
        _check_schema(items, f"{where}.items", depth + 1)
    elif isinstance(items, list):  # the tuple form: one schema per position
        for i, item in enumerate(items):
            _check_schema(item, f"{where}.items[{i}]", depth + 1)
    elif items is not None and not isinstance(items, bool):
        raise bad(f"must be a schema or a list of schemas, not {type(items).__name__}", f"{where}.items")
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            if not isinstance(schema[key], list):
                raise bad("must be a list of schemas", f"{where}.{key}")
            for i, sub in enumerate(schema[key]):
                _check_schema(sub, f"{where}.{key}[{i}]", depth + 1)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        _check_schema(extra, f"{where}.additionalProperties", depth + 1)
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


def _clip(name: str, keep: int = 80) -> str:
    """A caller's string as an error quotes it: its first `keep` characters and its length, never all of it."""
    return repr(name) if len(name) <= keep else f"{name[:keep]!r}… ({len(name):,} characters)"


def model_mode(model: Any, pool_names: list[str]) -> tuple[str, float | str | None]:
    """("route", τ or None) for `router` / `router-<τ>`; ("pass", name) for a pool model."""
    if not isinstance(model, str) or not model:
        raise bad("is required: 'router', 'router-<threshold>' or a pool model name", "model")
    m = ROUTER_MODEL.fullmatch(model)
    if m:
        if m.group("tau") is None:
            return "route", None
        try:
            tau = float(m.group("tau"))
        except ValueError:
            tau = -1.0
        if not 0 <= tau <= 1:
            raise bad(f"threshold in {_clip(model)} must be a number within [0, 1], like router-0.7", "model")
        return "route", tau
    if model not in pool_names and model.startswith("router"):
        raise bad(f"{_clip(model)} is neither 'router' nor 'router-<threshold>' (like router-0.7) nor a pool model",
                  "model")
    if model not in pool_names:
        raise GatewayError(404, f"model {_clip(model)} is not in the pool; use 'router' or one of: "
                           f"{', '.join(pool_names)}", param="model", type="model_not_found")
    return "pass", model


def constraints_from(extra: Any, pool_names: list[str],
                     where: str = "switchcraft") -> tuple[Constraints | None, str | dict | None]:
    """The optional `switchcraft` object (`constraints` on /v1/route): allowed_models, max_cost_usd,
    min_probability, caller, strategy."""
    if extra is None:
        return None, None
    if not isinstance(extra, dict):
        raise bad("must be an object", where)
    unknown = set(extra) - {"allowed_models", "max_cost_usd", "min_probability", "caller", "strategy"}
    if unknown:
        raise bad(f"unknown field(s) {sorted(unknown)[:10]}; known: allowed_models, max_cost_usd, min_probability, "
                  "caller, strategy", where)
    allowed = extra.get("allowed_models")
    if allowed is not None:
        if not isinstance(allowed, list) or not all(isinstance(a, str) for a in allowed):
            raise bad("must be a list of model names", f"{where}.allowed_models")
        missing = [a for a in allowed if a not in pool_names]
        if missing:
            raise bad(f"not in the pool: {missing[:10]}", f"{where}.allowed_models")
    numbers = {}
    for key in ("max_cost_usd", "min_probability"):
        v = extra.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise bad("must be a number", f"{where}.{key}")
        numbers[key] = v
    caller = extra.get("caller")
    if caller is not None and not isinstance(caller, str | dict):
        raise bad("must be a string (tenant) or an object {tenant, roles, permissions, environment}: the caller "
                  "identity, for tool permissions", f"{where}.caller")
    try:
        c = Constraints(frozenset(allowed) if allowed is not None else None, numbers["max_cost_usd"],
                        numbers["min_probability"])
    except ValueError as e:
        field = next((k for k in ("max_cost_usd", "min_probability") if k in str(e)), None)
        raise bad(str(e), f"{where}.{field}" if field else where) from None
    return c, caller


def _number(body: dict, key: str, lo: float, hi: float, integer: bool = False) -> None:
    v = body.get(key)
    if v is None:
        return
    kind = "an integer" if integer else "a number"
    if isinstance(v, bool) or not isinstance(v, int if integer else int | float) or not lo <= v <= hi:
        raise bad(f"must be {kind} within [{lo:g}, {hi:g}]", key)


def check_chat_fields(body: dict) -> None:
    """The OpenAI fields the gateway forwards, checked before any model is paid to refuse them."""
    if not isinstance(body.get("stream", False), bool):
        raise bad("must be true or false", "stream")
    _number(body, "temperature", 0, 2)
    _number(body, "top_p", 0, 1)
    _number(body, "presence_penalty", -2, 2)
    _number(body, "frequency_penalty", -2, 2)
    for key in ("max_tokens", "max_completion_tokens"):
        _number(body, key, 1, 2**31 - 1, integer=True)
    _number(body, "n", 1, 128, integer=True)
    _number(body, "seed", -(2**63), 2**63 - 1, integer=True)
    stop = body.get("stop")
    if stop is not None and not (isinstance(stop, str) or (isinstance(stop, list) and len(stop) <= 4
                                                           and all(isinstance(x, str) for x in stop))):
        raise bad("must be a string or a list of at most 4 strings", "stop")
    for key in ("user",):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise bad("must be a string", key)
    if body.get("logprobs") is not None and not isinstance(body["logprobs"], bool):
        raise bad("must be true or false", "logprobs")
    for key in ("metadata", "stream_options", "response_format", "logit_bias"):
        if body.get(key) is not None and not isinstance(body[key], dict):
            raise bad("must be an object", key)
    check_tool_choice(body)


def check_route_fields(body: dict) -> None:
    threshold = body.get("threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int | float)
                                  or not 0 <= threshold <= 1):
        raise bad("must be a number within [0, 1]", "threshold")


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
    """A strategy a request asks for: `{first: [a, b], tie_breaker?: c, escalate: [d, …], resolve?: {kind: action}}`
    (or `{first: [a]}`), with `kind` naming a registered strategy kind (default: single for one first model, agree
    for two)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad("must be an object {first: [a, b], tie_breaker: c, escalate: [d]}", where)
    unknown = set(value) - {"kind", "first", "tie_breaker", "escalate", "resolve"}
    if unknown:
        raise bad(f"unknown field(s) {sorted(unknown)}; known: kind, first, tie_breaker, escalate, resolve", where)
    kind = value.get("kind")
    if kind is not None and (not isinstance(kind, str) or kind not in strategy_kinds()):
        raise bad(f"must be a strategy kind: {', '.join(strategy_kinds())}", f"{where}.kind")
    for key in ("first", "escalate"):
        v = value.get(key)
        if (v is None and key == "first") or (v is not None and (not isinstance(v, list)
                                                                 or not all(isinstance(m, str) for m in v))):
            raise bad("must be a list of pool model names", f"{where}.{key}")
    tie = value.get("tie_breaker")
    if tie is not None and not isinstance(tie, str):
        raise bad("must be a pool model name", f"{where}.tie_breaker")
    resolve = value.get("resolve") or {}
    if not isinstance(resolve, dict) or not all(isinstance(k, str) and isinstance(a, str) for k, a in resolve.items()):
        raise bad("must be an object {disagreement kind: first | second | escalate}", f"{where}.resolve")
    try:
        strategy = Strategy(tuple(value["first"]), tie, tuple(value.get("escalate") or ()), tuple(resolve.items()),
                            kind)
    except ValueError as e:
        raise bad(str(e), where) from None
    try:
        return check_strategy(strategy, pool_names, where)
    except ValueError as e:
        field, _, message = str(e).partition(": ")
        raise bad(message, field) from None
