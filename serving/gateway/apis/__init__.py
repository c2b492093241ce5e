"""The APIs the gateway speaks besides Chat Completions: each a translator in front of the one chat path.

    API = Api("/v1/messages", "messages", inbound=to_internal, reply=reply, error_body=error_body)  # one per module
    inbound = api.inbound(body)             # the caller's body as the internal Chat Completions request
    e = inbound.caller_error(e)             # an error found in the internal request, named in the caller's fields
    response = api.reply(Reply(...))        # the chat answer, in the caller's API (JSON or its SSE events)

serving/gateway/chat.py `serve` runs every API the same way (admit → plan →
reserve → run → settle → respond): only the body going in, the answer going
out and the error's shape differ. `Api()` with no arguments is Chat
Completions itself. When the plan is one model (its fallbacks after it) and
that model's provider speaks the caller's API natively, the caller's own body
goes upstream as it is (`PassThrough`, serving/gateway/passthrough.py) and the
provider's answer or stream comes back as it was sent. Otherwise a streamed
request on one model is rendered in the caller's API as the chat chunks come
(`live`); a cascade runs whole and its finished answer is sent as that API's
event sequence.

Each API is one module that registers its `Api` under the name of its wire
API (registry.py; the outbound half is data/wire/): openai_chat.py
(POST /v1/chat/completions), anthropic_messages.py (POST /v1/messages),
openai_responses.py (POST /v1/responses). serving/app.py gives every
registered API its route, its token count (tokens.py: POST
/v1/messages/count_tokens, /v1/responses/input_tokens) and its error shape;
models.py serves GET /v1/models (in the shape of the API whose header the
caller sends) and the model aliases the agent clients' APIs resolve.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import Response, StreamingResponse

from data.wire.common import sse  # noqa: F401  (the translators' SSE event, one copy)
from serving.core.errors import GatewayError, bad

MESSAGE_PATH = re.compile(r"messages\[(\d+)\](.*)")


@dataclass
class Inbound:
    """A caller's body as the internal request, and how to name the internal request's fields in the caller's."""

    body: dict[str, Any]  # a Chat Completions body: messages (with tool_calls / tool results), OpenAI tools
    stream: bool  # the caller wants its answer as events
    where: list[str] = field(default_factory=list)  # per internal message: the caller's path it came from
    fields: list[tuple[re.Pattern, str]] = field(default_factory=list)  # internal path → the caller's (re.sub)
    call_id: str = ".tool_call_id"  # the caller's name for the id a tool result answers
    messages: str = "messages"  # the caller's name for the internal `messages`

    def caller_path(self, path: str) -> str:
        m = MESSAGE_PATH.fullmatch(path)
        if m and int(m[1]) < len(self.where):
            return self.where[int(m[1])] + (self.call_id if m[2].startswith(".tool_call_id") else "")
        if path == "messages":
            return self.messages
        for pattern, caller in self.fields:
            if m := pattern.match(path):
                return m.expand(caller) + path[m.end():]
        return path

    def caller_error(self, e: GatewayError) -> GatewayError:
        """`e` with its field (and the message's leading field) named as the caller wrote it."""
        if e.param is None:
            return e
        param = self.caller_path(e.param)
        if param != e.param:
            message = e.message[len(e.param) + 2:] if e.message.startswith(e.param + ": ") else e.message
            e.param, e.message = param, f"{param}: {message}"
        return e


def chat_inbound(body: dict[str, Any]) -> Inbound:
    """Chat Completions: the body is the internal request (`stream` is checked with the other chat fields)."""
    return Inbound(body, body.get("stream", False) is True)


@dataclass
class Reply:
    """What a translated API answers from: the chat answer of the model that served, and the decision's trace."""

    body: dict[str, Any]  # the chat completion (OpenAI tool_calls, caller's tool names)
    model: str  # the pool model that served
    meta: dict[str, Any]  # the `switchcraft` trace: decision, strategy, calls, cost
    charged: list  # serving.core.state.Charge: what the key was charged
    headers: dict[str, str]  # the x-switchcraft-* headers and x-request-id
    stream: bool
    request: dict[str, Any]  # the caller's own body (echoed fields: tools, tool_choice, instructions, …)
    rid: str

    def trace(self) -> dict[str, Any]:
        """The `switchcraft` field: the trace, with what the key was charged (all calls, estimates included)."""
        return {**self.meta, "charged_usd": round(sum(c.usd for c in self.charged), 10),
                "charged_estimated_usd": round(sum(c.usd for c in self.charged if c.estimated), 10)}

    def choice(self) -> tuple[dict[str, Any], str | None]:
        """(message, finish_reason) of the first choice ({} and None when there is none)."""
        choice = next(iter(self.body.get("choices") or []), None)
        message = (choice.get("message") if isinstance(choice, dict) else None) or {}
        return message, choice.get("finish_reason") if isinstance(choice, dict) else None


class LiveEvents:
    """An API's stream made while the chat chunks of the answer come (serving/gateway/live.py drives it): `feed`
    reads each chat.completion.chunk (the caller's tool names) once, here; an API says how it opens its stream
    (`_start`), a text run's delta (`_text`) and a call's (`_call`), and how the stream ends (`close`, `fail`)."""

    finish: str | None = None  # the chat finish_reason, once one came
    usage: dict | None = None  # the chat usage, once it came

    def feed(self, chunk: dict[str, Any]) -> list[bytes]:
        out = self._start()
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                out += self._text(delta["content"])
            for tc in delta.get("tool_calls") or []:
                out += self._call(tc if isinstance(tc, dict) else {})
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return out

    def _start(self) -> list[bytes]:  # the stream's first events, once
        raise NotImplementedError

    def _text(self, text: str) -> list[bytes]:  # a piece of the answer's text
        raise NotImplementedError

    def _call(self, tc: dict) -> list[bytes]:  # a piece of a chat tool call (index, id, name, arguments)
        raise NotImplementedError

    def close(self, charged: list) -> list[bytes]:  # the last events; `charged`: what the key was charged
        raise NotImplementedError

    def fail(self, message: str) -> list[bytes]:  # the stream broke after bytes reached the caller
        raise NotImplementedError


@dataclass(frozen=True)
class PassThrough:
    """How a caller's body of this API goes, as it is, to a provider that speaks the API natively."""

    cap_field: str  # the body's output cap: set to the cap the request's hold was priced at
    headers: tuple[str, ...]  # the caller's request headers sent on with it (the API's version, its betas)
    routed: Callable[[dict, list[dict]], dict]  # the body with the tool router's tools (in its form) as its tools
    traced: Callable[[dict, dict], dict]  # the data of the stream's last event with the `switchcraft` trace in it
    error_event: Callable[[str], bytes]  # the API's in-band error event, for a stream that broke half-way


def with_tools(body: dict[str, Any], tools: list[dict]) -> dict[str, Any]:
    """`body` offering exactly `tools` (none: no `tools`, no `tool_choice`)."""
    if tools:
        return {**body, "tools": tools}
    return {k: v for k, v in body.items() if k not in ("tools", "tool_choice")}


def openai_models(names: list[str]) -> dict[str, Any]:
    """GET /v1/models in OpenAI's shape."""
    return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "switchcraft"}
                                       for n in names]}


@dataclass(frozen=True)
class Api:
    """One API the gateway speaks, registered (registry.py) under its wire API's name. The defaults are Chat
    Completions: the body as it is, a stream passed through from the upstream, OpenAI's error object."""

    name: str = "openai_chat"  # the wire API (data/wire/registry.py) whose inbound half this is
    path: str = "/v1/chat/completions"
    endpoint: str = "chat"  # the `endpoint` label of switchcraft_requests_total, the `event` of the log line
    inbound: Callable[[dict], Inbound] = chat_inbound
    reply: Callable[[Reply], Response] | None = None  # None: chat's own answer (JSON, JSON as SSE, passed through)
    error_body: Callable[[GatewayError], dict] = GatewayError.body
    key_header: str | None = None  # a header that may carry the API key instead of `Authorization: Bearer`
    aliased: bool = False  # its callers are agent clients naming their own models: `aliases:` resolves them
    count_path: str | None = None  # where a request's input tokens are counted (tokens.py), if anywhere
    count_body: Callable[[int], dict] | None = None  # that count's answer for n tokens
    models_header: str | None = None  # a request header by which GET /v1/models knows a caller of this API
    models_body: Callable[[list[str]], dict] = openai_models  # GET /v1/models for such a caller
    session_user: bool = False  # its `user` (Messages: metadata.user_id) names an agent session (sessions.py)
    session_cache_key: bool = True  # its `prompt_cache_key` names an agent session
    passthrough: PassThrough | None = None  # its body passed through to a provider of the same API
    live: Callable[[Reply], LiveEvents] | None = None  # its stream, rendered from chat chunks as they come


def event_stream(chunks: Iterable[bytes], headers: dict[str, str]) -> StreamingResponse:
    """Events already made (a finished answer), sent as an SSE response."""

    async def each() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return StreamingResponse(each(), media_type="text/event-stream", headers=headers)


def check_keys(value: Any, where: str, known: set[str] | None = None) -> dict:
    """`value` must be an object (with only `known` keys, when given)."""
    if not isinstance(value, dict):
        raise bad(f"must be an object, not {type(value).__name__}", where)
    if known is not None and (unknown := sorted(set(value) - known)):
        raise bad(f"unknown field(s) {unknown[:10]}; known: {', '.join(sorted(known))}", where)
    return value


def kind_of(value: Any) -> str | None:
    """A `type` or `role` field as a string, else None (an unhashable one must not reach a set lookup)."""
    return value if isinstance(value, str) else None


def string(value: Any, where: str, *, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise bad(f"must be a string, not {type(value).__name__}", where)
    return value


def copy_fields(body: dict, out: dict, names: dict[str, str]) -> None:
    """Fields forwarded as they are, under the internal name (checked there, errors renamed back)."""
    for caller, internal in names.items():
        if body.get(caller) is not None:
            out[internal] = body[caller]


def tool_fields(paths: list[str], names: dict[str, str]) -> list[tuple[re.Pattern, str]]:
    """Where each offered (internal) tool came from in the caller's body, when tools were left out or flattened:
    `tools[i].function.<internal>` → `<paths[i]>.<names[internal]>`."""
    return [(re.compile(rf"tools\[{i}\]\.function\.{internal}(?=$|[.\[])"), f"{path}.{caller}")
            for i, path in enumerate(paths) for internal, caller in names.items()]
