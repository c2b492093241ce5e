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
`include`, `reasoning`, `prompt_cache_key`, `client_metadata`, `truncation`,
`service_tier` and other top-level fields are accepted and not forwarded.
A `namespace` tool (Codex sends each MCP server's tools as one) is flattened:
each inner tool is offered as `<namespace>__<name>`, and a call of it comes back
as a function_call with `name` and `namespace` apart, as the Responses API
answers. A `custom` (freeform) tool is offered as a function of one string
argument `input` (its grammar, if any, in the description) and its call comes
back as a `custom_tool_call` with that `input`; `custom_tool_call` and
`custom_tool_call_output` input items are read back the same way. Tools an
`additional_tools` input item declares are offered like `tools`. Hosted tools
(web_search, file_search, local_shell, image_generation, code_interpreter,
computer_use_preview, mcp, …) are not offered (no pool model can run them
through the gateway); the answer's `switchcraft.dropped_tools` names them.

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
Also: POST /v1/responses/input_tokens (tokens.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from fastapi.responses import JSONResponse, Response

from data.wire.common import usage_numbers
from data.wire.openai_responses import response_body, response_events
from serving.gateway.apis import (Api, Inbound, Reply, check_keys, copy_fields, event_stream, kind_of, string,
                                  tool_fields)
from serving.gateway.apis.registry import register
from serving.core.errors import GatewayError, bad

STORED = {"previous_response_id": "responses are not stored here: send the whole conversation in `input`",
          "conversation": "conversations are not stored here: send the whole conversation in `input`",
          "prompt": "stored prompts are not kept here: send `instructions` and `input`"}
ROLES = {"user", "assistant", "system", "developer"}
TEXT_PARTS = {"input_text", "output_text", "text"}
SEPARATOR = "__"  # <namespace>__<name>: the flat name a namespaced tool is offered under
MAX_NAME = 64  # a function name's length at most (Chat Completions and Responses alike)
DROPPED_ITEMS = {"reasoning", "web_search_call", "file_search_call", "image_generation_call", "code_interpreter_call",
                 "local_shell_call", "local_shell_call_output", "mcp_list_tools", "mcp_call", "computer_call",
                 "computer_call_output", "tool_search_call", "tool_search_output"}
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
    tools = Tools.of(body)
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
            _item(item, f"input[{i}]", messages, where, tools)
    else:
        raise bad("is required: a string or a non-empty list of input items", "input")
    out["messages"] = messages
    if tools.offered:
        out["tools"] = tools.offered
    if body.get("tool_choice") is not None:
        out["tool_choice"] = _tool_choice(body["tool_choice"])
    copy_fields(body, out, {"max_output_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p",
                            "parallel_tool_calls": "parallel_tool_calls", "metadata": "metadata", "user": "user",
                            "switchcraft": "switchcraft"})
    if body.get("text") is not None:
        out.update(_text_format(body["text"]))
    fields = tool_fields(tools.paths, {k: k for k in ("name", "description", "parameters")})
    return Inbound(out, stream, where, fields + FIELDS, call_id=".call_id", messages="input")


def _item(item: Any, at: str, messages: list[dict], where: list[str], tools: Tools) -> None:
    """One input item into the chat messages: consecutive function_call items (and the assistant message just
    before them) become one assistant message with tool_calls."""
    check_keys(item, at)
    kind = kind_of(item.get("type", "message"))
    if kind == "message":
        role = kind_of(item.get("role"))
        if role not in ROLES:
            raise bad(f"role {str(role)[:40]!r} is not one of {sorted(ROLES)}", f"{at}.role")
        where.append(at)  # developer instructions as a system message: what every chat upstream reads
        messages.append({"role": "system" if role == "developer" else role,
                         "content": _content(item.get("content"), f"{at}.content")})
    elif kind in ("function_call", "custom_tool_call"):
        name = tools.flat(string(item.get("name"), f"{at}.name"),
                          string(item.get("namespace"), f"{at}.namespace", required=False))
        arguments = (string(item.get("arguments"), f"{at}.arguments") if kind == "function_call"
                     else json.dumps({"input": string(item.get("input"), f"{at}.input")}, ensure_ascii=False))
        call = {"id": string(item.get("call_id"), f"{at}.call_id"), "type": "function",
                "function": {"name": name, "arguments": arguments}}
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            where.append(at)
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind in ("function_call_output", "custom_tool_call_output"):
        where.append(at)
        messages.append({"role": "tool", "tool_call_id": string(item.get("call_id"), f"{at}.call_id"),
                         "content": _content(item.get("output"), f"{at}.output")})
    elif kind in DROPPED_ITEMS or kind == "additional_tools":
        return  # reasoning and hosted tools' own items: no chat field carries them (additional_tools: Tools.of)
    elif kind == "item_reference":
        raise bad("responses are not stored here: send the item itself, not a reference", f"{at}.type")
    else:
        raise bad(f"{str(kind)[:40]!r} items are not translated (message, function_call, function_call_output, "
                  "custom_tool_call, custom_tool_call_output, additional_tools, reasoning are)", f"{at}.type")


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


class Tools:
    """The request's tools as chat function tools: namespaces flattened, custom tools as one-string functions,
    hosted tools dropped (`dropped`); `calls` maps a flat name back to (namespace, name, custom?)."""

    def __init__(self) -> None:
        self.offered: list[dict] = []
        self.paths: list[str] = []  # per offered tool, where the caller declared it
        self.dropped: list[dict[str, str]] = []
        self.calls: dict[str, tuple[str | None, str, bool]] = {}

    @classmethod
    def of(cls, body: dict[str, Any]) -> Tools:
        out = cls()
        tools = body.get("tools")
        if tools is not None:
            if not isinstance(tools, list):
                raise bad("must be a list of tools {type: function, name, parameters}", "tools")
            for i, t in enumerate(tools):
                out.add(t, f"tools[{i}]")
        items = body.get("input")
        for i, item in enumerate(items if isinstance(items, list) else []):
            if isinstance(item, dict) and item.get("type") == "additional_tools":
                extra = item.get("tools")
                if not isinstance(extra, list):
                    raise bad("must be a list of tools", f"input[{i}].tools")
                for j, t in enumerate(extra):
                    out.add(t, f"input[{i}].tools[{j}]")
        return out

    def add(self, t: Any, at: str, namespace: str | None = None) -> None:
        kind = check_keys(t, at).get("type")
        if kind == "namespace" and namespace is None:
            ns = string(t.get("name"), f"{at}.name")
            inner = t.get("tools")
            if not isinstance(inner, list):
                raise bad("must be a list of function or custom tools", f"{at}.tools")
            for j, tool in enumerate(inner):
                self.add(tool, f"{at}.tools[{j}]", ns)
            return
        if kind not in ("function", "custom"):
            self.dropped.append({"tool": str(t.get("name") or kind)[:80], "type": str(kind)[:40],
                                 "why": "a hosted tool; the pool's models are offered function tools only"})
            return
        name = string(t.get("name"), f"{at}.name")
        flat = self.flat(name, namespace)
        self.calls[flat] = (namespace, name, kind == "custom")
        fn = {k: t[k] for k in ("description", "parameters", "strict") if t.get(k) is not None}
        if kind == "custom":
            fn = _custom_function(t)
        self.offered.append({"type": "function", "function": {"name": flat, **fn}})
        self.paths.append(at)

    @staticmethod
    def flat(name: str, namespace: str | None) -> str:
        """`<namespace>__<name>`; past the 64 characters a function name may have, cut and told apart by a
        hash (the answer's calls are mapped back by `calls`, so any unique name will do)."""
        if not namespace:
            return name
        flat = f"{namespace}{SEPARATOR}{name}"
        if len(flat) <= MAX_NAME:
            return flat
        return f"{flat[:MAX_NAME - 9]}_{hashlib.sha256(flat.encode()).hexdigest()[:8]}"

    def output(self, items: list[dict]) -> list[dict]:
        """The answer's function_call items under the caller's names: namespace apart, custom calls as
        custom_tool_call with their `input`."""
        out = []
        for item in items:
            ns, name, custom = self.calls.get(item.get("name"), (None, item.get("name"), False))
            if item.get("type") == "function_call" and custom:
                item = {"type": "custom_tool_call", "id": "ctc" + item["id"][2:], "call_id": item["call_id"],
                        "name": name, "input": _custom_input(item["arguments"]), "status": item["status"]}
            elif item.get("type") == "function_call":
                item = {**item, "name": name}
            if ns is not None:
                item["namespace"] = ns
            out.append(item)
        return out


def _custom_function(t: dict) -> dict:
    """A freeform tool as a function of one string: its format (a grammar) told in the description."""
    description = t.get("description") or ""
    fmt = t.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        description += (f"\n\nThe input follows this {fmt.get('syntax', '')} grammar:\n{fmt.get('definition', '')}")
    return {"description": description, "parameters": {
        "type": "object", "properties": {"input": {"type": "string", "description": "The tool's free-text input."}},
        "required": ["input"], "additionalProperties": False}}


def _custom_input(arguments: str) -> str:
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value["input"] if isinstance(value, dict) and isinstance(value.get("input"), str) else arguments


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
    """The served answer as a Response (data/wire/: the replay server's Responses too)."""
    msg, finish = reply.choice()
    done = response_body(msg, finish, usage_numbers(reply.body.get("usage")), reply.model, reply.request)
    tools = Tools.of(reply.request)
    done["output"] = tools.output(done["output"])
    trace = reply.trace()
    if tools.dropped:
        trace["dropped_tools"] = tools.dropped
    return {**done, "switchcraft": trace}


def events(done: dict[str, Any]):
    """A finished Response as the Responses stream; its last event's response carries `switchcraft`."""
    return response_events(done, hidden=("switchcraft",))


def error_body(e: GatewayError) -> dict[str, Any]:
    return e.body()


def reply(r: Reply) -> Response:
    done = response(r)
    return event_stream(events(done), r.headers) if r.stream else JSONResponse(done, headers=r.headers)


def count_body(n: int) -> dict[str, Any]:
    """POST /v1/responses/input_tokens's answer (serving/gateway/apis/tokens.py)."""
    return {"object": "response.input_tokens", "input_tokens": n}


API = register(Api(name="openai_responses", path="/v1/responses", endpoint="responses", inbound=to_internal,
                   reply=reply, error_body=error_body, aliased=True, count_path="/v1/responses/input_tokens",
                   count_body=count_body))
