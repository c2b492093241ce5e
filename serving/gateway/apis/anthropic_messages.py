"""POST /v1/messages: the Anthropic Messages API, translated to the gateway's chat request and back.

    client = anthropic.Anthropic(base_url="http://127.0.0.1:8080", api_key="sk-sc-…")   # x-api-key, or auth_token
    client.messages.create(model="router", max_tokens=1024, system=[…], messages=[…], tools=[…])

In: `system` (a string or text blocks), `messages` whose content is a string or
blocks (`text`, `tool_use` on assistant turns, `tool_result` on user turns;
`thinking` blocks are dropped; images and documents are refused); a `system`
turn inside `messages` (Claude Code sends them) is folded into the system prompt,
in order. A `tool_result` may hold `tool_reference` blocks (Claude Code's
ToolSearch answer): each becomes the referenced tool's definition as text
(`<function>{…}</function>`) and that tool is offered from then on; a tool with
`defer_loading: true` is offered only once a tool_result references it.
`tools` (client tools: name, description, input_schema; server tools such as
web_search_20250305 are not offered, and the answer's `switchcraft.dropped_tools`
says so), `tool_choice` (auto, any, tool, none; disable_parallel_tool_use),
`max_tokens`, `stop_sequences`, `temperature`, `top_p`, `metadata` (user_id
becomes the chat `user`), `stream`, and the gateway's own `switchcraft` object.
`cache_control`, `top_k`, `thinking`, `context_management`, `output_config` and
other top-level fields are accepted and not translated, as are `?beta=true` and
`anthropic-beta`. Each becomes the chat request the gateway routes
(serving/gateway/chat.py `serve`).

Passed through (`PASSTHROUGH`: the plan is one model whose provider speaks
Messages natively): the caller's body goes upstream as it is — thinking blocks
and their signatures, cache_control, citations, tool_reference, server tools
and every other field — with `model` the pool's model_id (with tool routing,
`tools` the routed set), `max_tokens` the cap the hold was priced at (the
caller's), and the caller's `anthropic-version` and `anthropic-beta` headers;
the provider's Message or stream comes back as it sent it, with `switchcraft`
(in the body, or in message_stop).

Translated out: the served answer as a Message: text as a `text` block, each
call as a `tool_use` block (its arguments as `input`), `stop_reason` (tool_use, end_turn,
max_tokens), `usage` of the answer returned, `model` the pool model that served,
and `switchcraft` (the decision trace and what was charged). With `stream`, the
Messages events: message_start, for each block content_block_start, its deltas
(text_delta or input_json_delta) and content_block_stop, message_delta
(stop_reason, usage), message_stop (which carries `switchcraft`); made as the
chat chunks come (`LiveMessage`) when one model streams, else from the finished
answer (a cascade, a prompt-style model). Errors are Anthropic's error object,
`{"type": "error", "error": {"type": "invalid_request_error", "message": …}}`,
naming the caller's field (the message begins with it).

Also: POST /v1/messages/count_tokens (`{"input_tokens": N}`, tokens.py), and
GET /v1/models in Anthropic's shape for a caller sending `anthropic-version`.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import replace
from typing import Any

from fastapi.responses import JSONResponse, Response

from data.wire.anthropic_messages import STOP_REASONS, message_body, message_events, messages_usage
from data.wire.common import sse, usage_numbers
from serving.gateway.apis import (Api, Inbound, LiveEvents, PassThrough, Reply, check_keys, copy_fields,
                                  event_stream, kind_of, string, tool_fields, with_tools)
from serving.gateway.apis.registry import register
from serving.core.errors import GatewayError, bad

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
               403: "permission_error", 404: "not_found_error", 408: "timeout_error", 413: "request_too_large",
               422: "invalid_request_error", 429: "rate_limit_error", 503: "overloaded_error", 504: "timeout_error"}
EPOCH = "1970-01-01T00:00:00Z"  # GET /v1/models' created_at: the pool file records no release dates
DROPPED_BLOCKS = {"thinking", "redacted_thinking"}  # the model's own reasoning: no chat field carries it
# Tools Anthropic runs on its side: no pool model behind the gateway can run them, so they are not offered.
SERVER_TOOL = re.compile(r"(web_search|web_fetch|code_execution|tool_search_tool_regex|tool_search_tool_bm25)_\d{8}")
FIELDS = [(re.compile(r"tools\[(\d+)\]\.function\.parameters"), r"tools[\1].input_schema"),
          (re.compile(r"tools\[(\d+)\]\.function\.(name|description)"), r"tools[\1].\2"),
          (re.compile(r"stop(?=$|[.\[])"), "stop_sequences"), (re.compile(r"user$"), "metadata.user_id"),
          (re.compile(r"parallel_tool_calls$"), "tool_choice.disable_parallel_tool_use")]


def error_body(e: GatewayError) -> dict[str, Any]:
    """Anthropic's error object; the status decides its type. It has no `param`: the message begins with the
    field it names."""
    kind = ERROR_TYPES.get(e.status, "api_error" if e.status >= 500 else "invalid_request_error")
    named = e.param is None or e.message.startswith(f"{e.param}: ")
    return {"type": "error", "error": {"type": kind, "message": e.message if named else f"{e.param}: {e.message}"}}


def to_internal(body: dict[str, Any]) -> Inbound:
    """The Messages request as the gateway's chat request; GatewayError(400) naming the caller's field."""
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("must be true or false", "stream")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise bad("is required: the most tokens the answer may have (an integer ≥ 1)", "max_tokens")
    temperature = body.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, int | float)
                                    or not 0 <= temperature <= 1):
        raise bad("must be a number within [0, 1]", "temperature")
    chat, where, paths = _conversation(body)
    out: dict[str, Any] = {"model": body.get("model"), **chat, "max_tokens": max_tokens}
    if body.get("tool_choice") is not None:
        out.update(_tool_choice(body["tool_choice"]))
    copy_fields(body, out, {"stop_sequences": "stop", "temperature": "temperature", "top_p": "top_p",
                            "metadata": "metadata", "switchcraft": "switchcraft"})
    metadata = body.get("metadata")
    if metadata is not None:
        check_keys(metadata, "metadata")
        if metadata.get("user_id") is not None:
            out["user"] = string(metadata["user_id"], "metadata.user_id")
    top_k = body.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
        raise bad("must be an integer ≥ 0", "top_k")
    fields = tool_fields(paths, {"parameters": "input_schema", "name": "name", "description": "description"})
    return Inbound(out, stream, where, fields + FIELDS, call_id=".tool_use_id")


def _conversation(body: dict[str, Any]) -> tuple[dict[str, Any], list[str], list[str]]:
    """`messages` (system turns folded into the system prompt) and `tools` (deferred ones once referenced) as
    the chat request's, then per chat message and per tool the caller's path."""
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise bad("is required: a non-empty list of {role, content}", "messages")
    refs = References(_definitions(body.get("tools")))
    system = [] if body.get("system") is None else [_system(body["system"], "system")]
    where: list[str] = []
    messages: list[dict] = []
    for i, m in enumerate(raw):
        if isinstance(m, dict) and m.get("role") == "system":
            system.append(_system(m.get("content"), f"messages[{i}].content"))
        else:
            messages += _message(m, f"messages[{i}]", where, refs)
    if system:
        where.insert(0, "system")
        messages.insert(0, {"role": "system", "content": "\n\n".join(system)})
    if body.get("tools") is None:
        return {"messages": messages}, where, []
    tools, paths = _tools(body["tools"], refs.named)
    return {"messages": messages, "tools": tools}, where, paths


class References:
    """The tools a request defines (by name) and those its tool_reference blocks have loaded so far."""

    def __init__(self, definitions: dict[str, dict]) -> None:
        self.definitions = definitions
        self.named: set[str] = set()

    def render(self, block: dict, at: str) -> str:
        """A tool_reference block as the tool's definition, the way ToolSearch's own description promises."""
        name = string(block.get("tool_name"), f"{at}.tool_name")
        self.named.add(name)
        tool = self.definitions.get(name)
        if tool is None:
            return f"(tool {name!r} is not in this request's tools)"
        return "<function>" + json.dumps({"description": tool.get("description", ""), "name": name,
                                          "parameters": tool.get("input_schema")}, ensure_ascii=False) + "</function>"


def _definitions(tools: Any) -> dict[str, dict]:
    if not isinstance(tools, list):
        return {}
    return {t["name"]: t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)}


def _system(system: Any, at: str) -> str:
    if isinstance(system, list):
        return "\n\n".join(_text_block(b, f"{at}[{i}]") for i, b in enumerate(system))
    if not isinstance(system, str):
        raise bad(f"must be a string or a list of text blocks, not {type(system).__name__}", at)
    return system


def _text_block(block: Any, at: str) -> str:
    check_keys(block, at)
    if block.get("type") != "text":
        raise bad(f"must be a text block ({{\"type\": \"text\", \"text\": …}}), not {str(block.get('type'))[:40]!r}",
                  f"{at}.type")
    return string(block.get("text"), f"{at}.text")


def _message(m: Any, at: str, where: list[str], refs: References) -> list[dict]:
    """One Messages turn as chat messages: an assistant's text and tool_use blocks as one message with
    tool_calls; a user's tool_result blocks as tool messages (first), then its text as a user message."""
    check_keys(m, at)
    role = m.get("role")
    if role not in ("user", "assistant"):
        raise bad(f"role {str(role)[:40]!r} is not 'user', 'assistant' or 'system'", f"{at}.role")
    content = m.get("content")
    if isinstance(content, str):
        where.append(at)
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise bad(f"must be a string or a list of content blocks, not {type(content).__name__}", f"{at}.content")
    texts, calls, results = [], [], []
    for j, block in enumerate(content):
        here = f"{at}.content[{j}]"
        kind = kind_of(check_keys(block, here).get("type"))
        if kind == "text":
            texts.append(_text_block(block, here))
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_use(block, here))
        elif kind == "tool_result" and role == "user":
            where.append(here)
            results.append({"role": "tool", "tool_call_id": string(block.get("tool_use_id"), f"{here}.tool_use_id"),
                            "content": _result_text(block.get("content"), f"{here}.content", refs)})
        elif kind in DROPPED_BLOCKS and role == "assistant":
            continue
        else:
            raise bad(f"a {str(kind)[:40]!r} block is not translated on a {role} turn (text, "
                      f"{'tool_use, thinking' if role == 'assistant' else 'tool_result'} are)", f"{here}.type")
    out = results
    if role == "assistant" and (texts or calls):
        where.append(at)
        out.append({"role": "assistant", "content": "\n".join(texts) if texts else None,
                    **({"tool_calls": calls} if calls else {})})
    elif role == "user" and (texts or not results):
        where.append(at)
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _tool_use(block: dict, at: str) -> dict:
    name = string(block.get("name"), f"{at}.name")
    call_id = string(block.get("id"), f"{at}.id")
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise bad(f"must be an object (the call's arguments), not {type(arguments).__name__}", f"{at}.input")
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def _result_text(content: Any, at: str, refs: References) -> str:
    """A tool_result's content: a string, or text and tool_reference blocks (joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(f"must be a string or a list of text or tool_reference blocks, not {type(content).__name__}", at)
    texts = []
    for i, block in enumerate(content):
        here = f"{at}[{i}]"
        if isinstance(block, dict) and block.get("type") == "tool_reference":
            texts.append(refs.render(block, here))
        elif isinstance(block, dict) and block.get("type") != "text":
            raise bad(f"a {str(block.get('type'))[:40]!r} block is not translated in a tool_result (text and "
                      "tool_reference are)", f"{here}.type")
        else:
            texts.append(_text_block(block, here))
    return "\n".join(texts)


def dropped_tools(body: dict[str, Any]) -> list[dict[str, str]]:
    """The request's server tools, which no pool model is offered: the answer's `switchcraft.dropped_tools`."""
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    return [{"tool": t.get("name") or t["type"], "type": t["type"],
             "why": "a server tool Anthropic runs on its side; the pool's models cannot run it"}
            for t in tools if isinstance(t, dict) and isinstance(t.get("type"), str) and SERVER_TOOL.fullmatch(t["type"])]


def _tools(tools: Any, referenced: set[str]) -> tuple[list[dict], list[str]]:
    """The tools offered, and each one's path in the caller's `tools` (server and unloaded tools are left out)."""
    if not isinstance(tools, list):
        raise bad("must be a list of tools {name, description, input_schema}", "tools")
    out, paths = [], []
    for i, t in enumerate(tools):
        at = f"tools[{i}]"
        check_keys(t, at)
        kind = t.get("type")
        if isinstance(kind, str) and SERVER_TOOL.fullmatch(kind):
            continue  # named in the answer's switchcraft.dropped_tools
        if kind not in (None, "custom"):
            raise bad(f"tool type {str(kind)[:40]!r} is not translated; client tools {{name, description, "
                      "input_schema}} are, and server tools (web_search_*, web_fetch_*, code_execution_*) are "
                      "not offered", f"{at}.type")
        if "input_schema" not in t:
            raise bad("is required: the tool's parameters as a JSON Schema object", f"{at}.input_schema")
        if t.get("defer_loading") is True and t.get("name") not in referenced:
            continue  # loaded by a tool_reference (Claude Code's ToolSearch), as the Messages API does
        fn = {"name": t.get("name"), "parameters": t["input_schema"]}
        if t.get("description") is not None:
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
        paths.append(at)
    return out, paths


def _tool_choice(choice: Any) -> dict[str, Any]:
    check_keys(choice, "tool_choice", {"type", "name", "disable_parallel_tool_use"})
    kind = choice.get("type")
    out: dict[str, Any] = {}
    if kind in ("auto", "none"):
        out["tool_choice"] = kind
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "tool":
        out["tool_choice"] = {"type": "function",
                              "function": {"name": string(choice.get("name"), "tool_choice.name")}}
    else:
        raise bad(f"type {str(kind)[:40]!r} is not one of auto, any, tool, none", "tool_choice.type")
    parallel = choice.get("disable_parallel_tool_use")
    if parallel is not None:
        if not isinstance(parallel, bool):
            raise bad("must be true or false", "tool_choice.disable_parallel_tool_use")
        out["parallel_tool_calls"] = not parallel
    return out


def message(reply: Reply) -> dict[str, Any]:
    """The served answer as an Anthropic Message (data/wire/: the replay server's Messages too)."""
    msg, finish = reply.choice()
    trace = reply.trace()
    if dropped := dropped_tools(reply.request):
        trace["dropped_tools"] = dropped
    return {**message_body(msg, finish, usage_numbers(reply.body.get("usage")), reply.model), "switchcraft": trace}


def events(msg: dict[str, Any]):
    """A finished Message as the Messages stream; message_stop carries `switchcraft`."""
    trace = msg.pop("switchcraft")
    return message_events(msg, {"switchcraft": trace})


def reply(r: Reply) -> Response:
    msg = message(r)
    return event_stream(events(msg), r.headers) if r.stream else JSONResponse(msg, headers=r.headers)


class LiveMessage(LiveEvents):
    """The Messages stream of an answer whose chat chunks are still coming: a block opened per text run and per
    call, each delta sent as it comes; message_delta and message_stop (with `switchcraft`) once it ends."""

    def __init__(self, reply: Reply) -> None:
        self.reply, self.started, self.index, self.open = reply, False, -1, None
        self.calls: dict[int, int] = {}  # the chat call's index → its block's

    def _start(self) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        return [sse("message_start", {"type": "message_start", "message": {
            "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant", "model": self.reply.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0}}})]

    def _block(self, opened: dict, key: Any) -> list[bytes]:
        out = self._stop()
        self.index, self.open = self.index + 1, key
        return out + [sse("content_block_start", {"type": "content_block_start", "index": self.index,
                                                  "content_block": opened})]

    def _stop(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        return [sse("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def _delta(self, index: int, delta: dict) -> bytes:
        return sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})

    def _text(self, text: str) -> list[bytes]:
        out = self._block({"type": "text", "text": ""}, "text") if self.open != "text" else []
        return out + [self._delta(self.index, {"type": "text_delta", "text": text})]

    def _call(self, tc: dict) -> list[bytes]:
        k, fn = tc.get("index", 0), tc.get("function") if isinstance(tc.get("function"), dict) else {}
        out = []
        if k not in self.calls:
            out += self._block({"type": "tool_use", "id": tc.get("id") or f"toolu_{uuid.uuid4().hex[:24]}",
                                "name": fn.get("name") or "", "input": {}}, ("call", k))
            self.calls[k] = self.index
        if isinstance(fn.get("arguments"), str) and fn["arguments"]:
            out.append(self._delta(self.calls[k], {"type": "input_json_delta", "partial_json": fn["arguments"]}))
        return out

    def close(self, charged: list) -> list[bytes]:
        stop = "tool_use" if self.calls else STOP_REASONS.get(self.finish, "end_turn")
        trace = replace(self.reply, charged=charged).trace()
        if dropped := dropped_tools(self.reply.request):
            trace["dropped_tools"] = dropped
        return self._start() + self._stop() + [
            sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                  "usage": messages_usage(usage_numbers(self.usage))}),
            sse("message_stop", {"type": "message_stop", "switchcraft": trace})]

    def fail(self, message: str) -> list[bytes]:
        return [error_event(message)]


def error_event(message: str) -> bytes:
    """Anthropic's in-band stream error (the SDK raises it)."""
    return sse("error", {"type": "error", "error": {"type": "api_error", "message": message}})


PASSTHROUGH = PassThrough(cap_field="max_tokens", headers=("anthropic-version", "anthropic-beta"),
                          routed=with_tools,                          traced=lambda data, trace: {**data, "switchcraft": trace}, error_event=error_event)


def count_body(n: int) -> dict[str, Any]:
    """POST /v1/messages/count_tokens's answer (serving/gateway/apis/tokens.py)."""
    return {"input_tokens": n}


def models_body(names: list[str]) -> dict[str, Any]:
    """GET /v1/models in Anthropic's shape (the pool file records no release dates)."""
    data = [{"type": "model", "id": n, "display_name": n, "created_at": EPOCH} for n in names]
    return {"data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]}


API = register(Api(name="anthropic_messages", path="/v1/messages", endpoint="messages", inbound=to_internal,
                   reply=reply, error_body=error_body, key_header="x-api-key", aliased=True,
                   count_path="/v1/messages/count_tokens", count_body=count_body,
                   models_header="anthropic-version", models_body=models_body, session_user=True,
                   session_cache_key=False, passthrough=PASSTHROUGH, live=LiveMessage))
