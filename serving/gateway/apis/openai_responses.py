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
charged). With `stream`, the Responses events: response.created,
response.in_progress, per item response.output_item.added, its deltas
(response.output_text.delta with the content part events, or
response.function_call_arguments.delta) and their done events,
response.output_item.done, then response.completed (its response carries
`switchcraft`); made as the chat chunks come (`LiveResponse`) when one model
streams, else from the finished answer (a cascade, a prompt-style model).
Errors are OpenAI's error object, naming the caller's field.

Passed through (`PASSTHROUGH`: the plan is one model whose provider speaks
Responses natively): the caller's body goes upstream as it is — reasoning
items, `include`, `store`, `prompt_cache_key`, namespace, custom and hosted
tools and every other field — with `model` the pool's model_id (with tool
routing, `tools` the routed set and no `additional_tools` items),
`max_output_tokens` the cap the hold was priced at (the caller's, when it gave
one), and the caller's `openai-beta` header; the provider's Response or stream
comes back as it sent it, with `switchcraft` (in the body, or in the last
event's response).
Also: POST /v1/responses/input_tokens (tokens.py).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import replace
from typing import Any

from fastapi.responses import JSONResponse, Response

from data.wire.common import sse, usage_numbers
from data.wire.openai_responses import response_body, response_events, responses_usage
from serving.gateway.apis import (Api, Inbound, LiveEvents, PassThrough, Reply, check_keys, copy_fields,
                                  event_stream, kind_of, string, tool_fields, with_tools)
from serving.gateway.apis.registry import register
from serving.gateway.apis.responses_tools import Tools, custom_input
from serving.core.errors import GatewayError, bad

STORED = {"previous_response_id": "responses are not stored here: send the whole conversation in `input`",
          "conversation": "conversations are not stored here: send the whole conversation in `input`",
          "prompt": "stored prompts are not kept here: send `instructions` and `input`"}
ROLES = {"user", "assistant", "system", "developer"}
TEXT_PARTS = {"input_text", "output_text", "text"}
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


class LiveResponse(LiveEvents):
    """The Responses stream of an answer whose chat chunks are still coming: an item per text run and per call
    (under the caller's names: namespace apart, a custom tool's call as custom_tool_call), each delta sent as it
    comes (a custom call's input once whole: it arrives as JSON arguments); response.completed at the end."""

    def __init__(self, reply: Reply) -> None:
        self.reply, self.tools, self.n = reply, Tools.of(reply.request), 0
        self.skeleton = response_body({}, None, usage_numbers(None), reply.model, reply.request)
        self.items: list[dict] = []  # output items, finished or open (the last)
        self.open: dict | None = None
        self.calls: dict[int, dict] = {}  # the chat call's index → its item

    def _event(self, kind: str, **data) -> bytes:
        self.n += 1
        return sse(kind, {"type": kind, "sequence_number": self.n - 1, **data})

    def _start(self) -> list[bytes]:
        if self.n:
            return []
        started = {**self.skeleton, "status": "in_progress", "output": [], "usage": None}
        return [self._event(kind, response=started) for kind in ("response.created", "response.in_progress")]

    def _add(self, item: dict) -> list[bytes]:
        out = self._stop()
        self.items.append(item)
        self.open = item
        shown = {**item, "content": []} if item["type"] == "message" else {**item, "status": "in_progress"}
        return out + [self._event("response.output_item.added", output_index=len(self.items) - 1, item=shown)]

    def _stop(self) -> list[bytes]:
        item, self.open = self.open, None
        if item is None:
            return []
        ids = {"item_id": item["id"], "output_index": self.items.index(item)}
        if item["type"] == "message":
            part = item["content"][0]
            out = [self._event("response.output_text.done", **ids, content_index=0, text=part["text"], logprobs=[]),
                   self._event("response.content_part.done", **ids, content_index=0, part=part)]
        elif item["type"] == "custom_tool_call":
            item["input"] = custom_input(item.pop("arguments"))
            out = [self._event("response.custom_tool_call_input.delta", **ids, delta=item["input"]),
                   self._event("response.custom_tool_call_input.done", **ids, input=item["input"])]
        else:
            out = [self._event("response.function_call_arguments.done", **ids, name=item["name"],
                               arguments=item["arguments"])]
        item["status"] = "completed"
        return out + [self._event("response.output_item.done", output_index=ids["output_index"], item=item)]

    def _text(self, text: str) -> list[bytes]:
        out = []
        if self.open is None or self.open["type"] != "message":
            item = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}", "status": "in_progress", "role": "assistant",
                    "content": [{"type": "output_text", "text": "", "annotations": []}]}
            out += self._add(item)
            out.append(self._event("response.content_part.added", item_id=item["id"], output_index=len(self.items) - 1,
                                   content_index=0, part=item["content"][0]))
        self.open["content"][0]["text"] += text
        return out + [self._event("response.output_text.delta", item_id=self.open["id"],
                                  output_index=len(self.items) - 1, content_index=0, delta=text, logprobs=[])]

    def _call(self, tc: dict) -> list[bytes]:
        k, fn = tc.get("index", 0), tc.get("function") if isinstance(tc.get("function"), dict) else {}
        out = []
        if k not in self.calls:
            ns, name, custom = self.tools.calls.get(fn.get("name"), (None, fn.get("name") or "", False))
            call_id = tc.get("id") or f"call_{uuid.uuid4().hex[:24]}"
            item = ({"type": "custom_tool_call", "id": f"ctc_{uuid.uuid4().hex[:24]}", "call_id": call_id, "name": name,
                     "arguments": "", "status": "in_progress"} if custom else
                    {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:24]}", "call_id": call_id, "name": name,
                     "arguments": "", "status": "in_progress"})
            if ns is not None:
                item["namespace"] = ns
            out += self._add(item)
            self.calls[k] = item
        item, args = self.calls[k], fn.get("arguments")
        if isinstance(args, str) and args:
            item["arguments"] += args
            if item["type"] == "function_call":
                out.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                       output_index=self.items.index(item), delta=args))
        return out

    def close(self, charged: list) -> list[bytes]:
        out = self._start() + self._stop()
        incomplete = self.finish == "length" and not self.calls
        done = {**self.skeleton, "status": "incomplete" if incomplete else "completed", "output": self.items,
                "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
                "usage": responses_usage(usage_numbers(self.usage))}
        trace = replace(self.reply, charged=charged).trace()
        if self.tools.dropped:
            trace["dropped_tools"] = self.tools.dropped
        return out + [self._event(f"response.{done['status']}", response={**done, "switchcraft": trace})]

    def fail(self, message: str) -> list[bytes]:
        return [error_event(message)]


def error_event(message: str) -> bytes:
    """The Responses stream's error event."""
    return sse("error", {"type": "error", "code": "upstream_error", "message": message, "param": None})


def routed(body: dict[str, Any], tools: list[dict]) -> dict[str, Any]:
    """The body offering the tool router's tools: `tools` replaced, `additional_tools` items taken out."""
    out = with_tools(body, tools)
    if isinstance(body.get("input"), list):
        out["input"] = [item for item in body["input"]
                        if not (isinstance(item, dict) and item.get("type") == "additional_tools")]
    return out


def traced(data: dict[str, Any], trace: dict[str, Any]) -> dict[str, Any]:
    """The last event's response with `switchcraft` in it (an event without a response: at its top level)."""
    if isinstance(data.get("response"), dict):
        return {**data, "response": {**data["response"], "switchcraft": trace}}
    return {**data, "switchcraft": trace}


PASSTHROUGH = PassThrough(cap_field="max_output_tokens", headers=("openai-beta",), routed=routed, traced=traced,
                          error_event=error_event)


def count_body(n: int) -> dict[str, Any]:
    """POST /v1/responses/input_tokens's answer (serving/gateway/apis/tokens.py)."""
    return {"object": "response.input_tokens", "input_tokens": n}


API = register(Api(name="openai_responses", path="/v1/responses", endpoint="responses", inbound=to_internal,
                   reply=reply, error_body=error_body, aliased=True, count_path="/v1/responses/input_tokens",
                   count_body=count_body, passthrough=PASSTHROUGH, live=LiveResponse))
