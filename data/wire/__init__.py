"""The provider APIs a pool model may speak (`api:` in the pool file), each to and from the internal chat shape.

    from data import wire
    url = wire.url(model.base_url, model.api)                # …/chat/completions, …/messages or …/responses
    body = wire.native_request(model.api, chat_body)          # the Chat Completions request in that API
    completion = wire.chat_completion(model.api, answer)      # its answer as a chat completion (usage included)
    chunks = wire.StreamDecoder(model.api).feed(event, data)  # its stream events as chat.completion.chunk dicts
    wire.names()                                              # the registered APIs (registry.py)

Each API is one module of this package that registers a `WireApi`
(registry.py): openai_chat.py, anthropic_messages.py, openai_responses.py.
The functions here look the API up by name, so no caller branches on one.

The internal shape is OpenAI Chat Completions: system / user / assistant (with
`tool_calls`) / tool messages, function `tools`, `tool_choice`, `max_tokens`,
`stream`; usage as `prompt_tokens` (all input, cached included),
`completion_tokens`, `prompt_tokens_details.cached_tokens` and (from a Messages
provider) `prompt_tokens_details.cache_write_tokens`. The pool runner and the
gateway's upstream client send each model's request through here, so a model
is asked the same way by both; the replay server and the gateway's own
Messages / Responses endpoints build their answers with the same functions
(`anthropic_messages.message_body`, `openai_responses.response_body`), so each
mapping exists once.

    python -m pytest -q tests/data/wire/test_apis.py
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from data.wire.common import answer_blocks, arguments_object, sse, text_of, usage_numbers
from data.wire.registry import WireApi, get, names, register
from data.wire.raw import WireError, raw_from_message, usage_from_wire
from data.schema import Usage

__all__ = ["WireApi", "answer_blocks", "arguments_object", "get", "names", "register", "sse", "text_of",
           "usage_numbers"]


def url(base_url: str, api: str) -> str:
    """Where a model of `api` at `base_url` is asked (base_url ends at the version: `…/v1`)."""
    return base_url.rstrip("/") + get(api).path


def auth_headers(api: str, key: str | None) -> dict[str, str]:
    """The key where the API expects it (Messages: `x-api-key` and the version header; else Bearer)."""
    return get(api).auth_headers(key)


def native_request(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """The chat request `body` as `api` takes it (Chat Completions: unchanged)."""
    return get(api).request(body)


def chat_completion(api: str, data: Any) -> dict[str, Any]:
    """`api`'s decoded answer as a chat completion; WireError when it is not an answer of that API."""
    if not isinstance(data, dict):
        raise WireError(f"response is {type(data).__name__}, not an object")
    return get(api).answer(data)


def parse_answer(api: str, body: bytes | str) -> tuple[Any, Usage, dict[str, Any]]:
    """(raw, usage, the chat completion) from a response body of `api`."""
    wire = get(api)
    if wire.parse is not None:
        return wire.parse(body)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise WireError(f"response is not JSON: {e.msg} at {e.pos}") from None
    chat = chat_completion(api, data)
    return raw_from_message(chat["choices"][0]["message"]), usage_from_wire(chat.get("usage")), chat


def match_view(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """What the replay server matches a request of `api` by, in chat terms: metadata, user texts, tool names."""
    return get(api).match_view(body)


class StreamDecoder:
    """A native stream's events as chat.completion.chunk dicts (the last one carries `usage`, no choices).

    Feed each SSE event (its name and decoded data); `done` turns true at the stream's last event. An API whose
    stream is chat chunks already (no decoder) decodes to nothing."""

    def __init__(self, api: str) -> None:
        self.api = api
        make = get(api).stream
        self.impl = make() if make is not None else None
        self.done = False

    def feed(self, event: str | None, data: Any) -> list[dict[str, Any]]:
        if self.impl is None or not isinstance(data, dict):
            return []
        out = self.impl.feed(event or data.get("type"), data)
        self.done = self.impl.done
        return out


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str | None, Any]]:
    """(event name, decoded data) per server-sent event of `lines` (undecodable data is skipped)."""
    event, data = None, []
    for line in lines:
        if not line.strip():
            if data:
                try:
                    yield event, json.loads("\n".join(data))
                except json.JSONDecodeError:
                    pass
            event, data = None, []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    if data:
        try:
            yield event, json.loads("\n".join(data))
        except json.JSONDecodeError:
            pass
