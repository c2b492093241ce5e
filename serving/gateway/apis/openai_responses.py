"""POST /v1/responses: the OpenAI Responses API, translated to the gateway's chat request and back.

    client = openai.OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="sk-sc-…")
    client.responses.create(model="router", instructions="…", input=[…], tools=[…])

In: `input` (a string, or items: messages with text parts, `function_call` and
`function_call_output`; `reasoning` items are dropped), `instructions` (the
system message), `tools` (function tools: name, description, parameters,
strict), `tool_choice` (auto, none, required, {type: function, name}),
`parallel_tool_calls`, `max_output_tokens`, `temperature`, `top_p`,
`metadata`, `user`, `text.format` (json_schema / json_object become
`response_format`), `stream`, and the gateway's own `switchcraft` object.
Responses are not stored: `previous_response_id`, `conversation`,
`item_reference` items and `background` are refused with a 400; `store`,
`include`, `reasoning`, `prompt_cache_key`, `truncation` and `service_tier` are
not forwarded. Hosted tools (web_search, file_search, custom, …) are refused.

Out: a Response whose `output` holds the text as a `message` item and each call
as a `function_call` item (call_id, name, arguments), `status` (completed, or
incomplete when the answer hit max_output_tokens), `usage`, `model` the pool
model that served, and `switchcraft` (the decision trace and what was
charged). With `stream`, the finished answer as the Responses events:
response.created, response.in_progress, per item response.output_item.added,
its deltas (response.output_text.delta with the content part events, or
response.function_call_arguments.delta) and their done events,
response.output_item.done, then response.completed (its response carries
`switchcraft`). Errors are OpenAI's error object, naming the caller's field.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi.responses import JSONResponse, Response

from data.pool_runner.apis.common import usage_numbers
from data.pool_runner.apis.openai_responses import response_body, response_events
from serving.gateway.apis import Api, Inbound, Reply, check_keys, copy_fields, event_stream, kind_of, string
from serving.gateway.errors import GatewayError, bad

STORED = {"previous_response_id": "responses are not stored here: send the whole conversation in `input`",
          "conversation": "conversations are not stored here: send the whole conversation in `input`",
          "prompt": "stored prompts are not kept here: send `instructions` and `input`"}
ROLES = {"user", "assistant", "system", "developer"}
TEXT_PARTS = {"input_text", "output_text", "text"}
FIELDS = [(re.compile(r"tools\[(\d+)\]\.function\.(name|description|parameters)"), r"tools[\1].\2"),
          (re.compile(r"max_tokens(?=$)"), "max_output_tokens"), (re.compile(r"tool_choice\.function"), "tool_choice")]


def to_internal(body: dict[str, Any]) -> Inbound:
    """The Responses request as the gateway's chat request; GatewayError(400) naming the caller's field."""
    for key, why in STORED.items():
        if body.get(key) is not None:
            raise bad(why, key)
    if body.get("background") not in (None, False):
        raise bad("background responses are not supported (they are stored to be polled)", "background")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("must be true or false", "stream")
    out: dict[str, Any] = {"model": body.get("model")}
    where: list[str] = []
    messages: list[dict] = []
    instructions = string(body.get("instructions"), "instructions", required=False)
    if instructions:
        where.append("instructions")
        messages.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        where.append("input")
        messages.append({"role": "user", "content": items})
    elif isinstance(items, list) and items:
        for i, item in enumerate(items):
            _item(item, f"input[{i}]", messages, where)
    else:
        raise bad("is required: a string or a non-empty list of input items", "input")
    out["messages"] = messages
    if body.get("tools") is not None:
        out["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        out["tool_choice"] = _tool_choice(body["tool_choice"])
    copy_fields(body, out, {"max_output_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p",
                            "parallel_tool_calls": "parallel_tool_calls", "metadata": "metadata", "user": "user",
                            "switchcraft": "switchcraft"})
    if body.get("text") is not None:
        out.update(_text_format(body["text"]))
    return Inbound(out, stream, where, FIELDS, call_id=".call_id", messages="input")


def _item(item: Any, at: str, messages: list[dict], where: list[str]) -> None:
    """One input item into the chat messages: consecutive function_call items (and the assistant message just
    before them) become one assistant message with tool_calls."""
    check_keys(item, at)
    kind = item.get("type", "message")
    if kind == "message":
        role = kind_of(item.get("role"))
        if role not in ROLES:
            raise bad(f"role {str(role)[:40]!r} is not one of {sorted(ROLES)}", f"{at}.role")
        where.append(at)  # developer instructions as a system message: what every chat upstream reads
        messages.append({"role": "system" if role == "developer" else role,
                         "content": _content(item.get("content"), f"{at}.content")})
    elif kind == "function_call":
        call = {"id": string(item.get("call_id"), f"{at}.call_id"), "type": "function",
                "function": {"name": string(item.get("name"), f"{at}.name"),
                             "arguments": string(item.get("arguments"), f"{at}.arguments")}}
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            where.append(at)
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        where.append(at)
        messages.append({"role": "tool", "tool_call_id": string(item.get("call_id"), f"{at}.call_id"),
                         "content": _content(item.get("output"), f"{at}.output")})
    elif kind == "reasoning":
        return  # the model's own reasoning (often encrypted): no chat field carries it
    elif kind == "item_reference":
        raise bad("responses are not stored here: send the item itself, not a reference", f"{at}.type")
    else:
        raise bad(f"{str(kind)[:40]!r} items are not translated (message, function_call, function_call_output, "
                  "reasoning are)", f"{at}.type")


def _content(content: Any, at: str) -> str:
    """A message's (or a call output's) content: a string, or text parts (joined); images and files refused."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(f"must be a string or a list of content parts, not {type(content).__name__}", at)
    texts = []
    for j, part in enumerate(content):
        here = f"{at}[{j}]"
        kind = kind_of(check_keys(part, here).get("type"))
        if kind == "refusal":
            texts.append(string(part.get("refusal"), f"{here}.refusal"))
        elif kind in TEXT_PARTS:
            texts.append(string(part.get("text"), f"{here}.text"))
        else:
            raise bad(f"{str(kind)[:40]!r} parts are not translated (input_text, output_text are)", f"{here}.type")
    return "\n".join(texts)


def _tools(tools: Any) -> list[dict]:
    if not isinstance(tools, list):
        raise bad("must be a list of function tools {type: function, name, parameters}", "tools")
    out = []
    for i, t in enumerate(tools):
        at = f"tools[{i}]"
        if check_keys(t, at).get("type") != "function":
            raise bad(f"{str(t.get('type'))[:40]!r} tools are not translated; only function tools are", f"{at}.type")
        out.append({"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters", "strict")
                                                     if t.get(k) is not None}})
    return out


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": string(choice.get("name"), "tool_choice.name")}}
    raise bad("must be 'auto', 'none', 'required' or {\"type\": \"function\", \"name\": …}", "tool_choice")


def _text_format(text: Any) -> dict[str, Any]:
    fmt = check_keys(text, "text").get("format")
    if fmt is None:
        return {}
    kind = check_keys(fmt, "text.format").get("type")
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"response_format": {"type": "json_object"}}
    if kind == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"response_format": {"type": "json_schema", "json_schema": schema}}
    raise bad(f"type {str(kind)[:40]!r} is not one of text, json_object, json_schema", "text.format.type")


def response(reply: Reply) -> dict[str, Any]:
    """The served answer as a Response (data/pool_runner/apis: the replay server's Responses too)."""
    msg, finish = reply.choice()
    return {**response_body(msg, finish, usage_numbers(reply.body.get("usage")), reply.model, reply.request),
            "switchcraft": reply.trace()}


def events(done: dict[str, Any]):
    """A finished Response as the Responses stream; its last event's response carries `switchcraft`."""
    return response_events(done, hidden=("switchcraft",))


def error_body(e: GatewayError) -> dict[str, Any]:
    return e.body()


def reply(r: Reply) -> Response:
    done = response(r)
    return event_stream(events(done), r.headers) if r.stream else JSONResponse(done, headers=r.headers)


API = Api("/v1/responses", "responses", inbound=to_internal, reply=reply, error_body=error_body)
