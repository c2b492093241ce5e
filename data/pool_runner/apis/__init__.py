"""The provider APIs a pool model may speak (`api:` in the pool file), each to and from the internal chat shape.

    from data.pool_runner import apis
    url = apis.url(model.base_url, model.api)                # …/chat/completions, …/messages or …/responses
    body = apis.native_request(model.api, chat_body)          # the Chat Completions request in that API
    completion = apis.chat_completion(model.api, answer)      # its answer as a chat completion (usage included)
    chunks = apis.StreamDecoder(model.api).feed(event, data)  # its stream events as chat.completion.chunk dicts

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

    python -m pytest -q tests/data/pool_runner/test_apis.py
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from data.pool_runner.apis import anthropic_messages, openai_responses
from data.pool_runner.apis.common import answer_blocks, arguments_object, sse, text_of, usage_numbers
from data.pool_runner.wire import WireError, parse_completion, raw_from_message, usage_from_wire
from data.schema import Usage

__all__ = ["answer_blocks", "arguments_object", "sse", "text_of", "usage_numbers"]
PATHS = {"openai_chat": "/chat/completions", "anthropic_messages": "/messages", "openai_responses": "/responses"}
ANTHROPIC_VERSION = "2023-06-01"


def url(base_url: str, api: str) -> str:
    """Where a model of `api` at `base_url` is asked (base_url ends at the version: `…/v1`)."""
    return base_url.rstrip("/") + PATHS[api]


def auth_headers(api: str, key: str | None) -> dict[str, str]:
    """The key where the API expects it: `x-api-key` (and the version header) for Messages, else Bearer."""
    if api == "anthropic_messages":
        return {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": key} if key else {})}
    return {"authorization": f"Bearer {key}"} if key else {}


def native_request(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """The chat request `body` as `api` takes it (Chat Completions: unchanged)."""
    if api == "anthropic_messages":
        return anthropic_messages.request_from_chat(body)
    if api == "openai_responses":
        return openai_responses.request_from_chat(body)
    return body


def chat_completion(api: str, data: Any) -> dict[str, Any]:
    """`api`'s decoded answer as a chat completion; WireError when it is not an answer of that API."""
    if not isinstance(data, dict):
        raise WireError(f"response is {type(data).__name__}, not an object")
    if api == "anthropic_messages":
        return anthropic_messages.chat_from_message(data)
    if api == "openai_responses":
        return openai_responses.chat_from_response(data)
    if not isinstance(data.get("choices"), list):
        raise WireError("response has no choices")
    return data


def parse_answer(api: str, body: bytes | str) -> tuple[Any, Usage, dict[str, Any]]:
    """(raw, usage, the chat completion) from a response body of `api` (wire.parse_completion for chat)."""
    if api == "openai_chat":
        return parse_completion(body)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise WireError(f"response is not JSON: {e.msg} at {e.pos}") from None
    chat = chat_completion(api, data)
    return raw_from_message(chat["choices"][0]["message"]), usage_from_wire(chat.get("usage")), chat


def match_view(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """What the replay server matches a request of `api` by, in chat terms: metadata, user texts, tool names."""
    if api == "anthropic_messages":
        return anthropic_messages.match_view(body)
    if api == "openai_responses":
        return openai_responses.match_view(body)
    return body


class StreamDecoder:
    """A native stream's events as chat.completion.chunk dicts (the last one carries `usage`, no choices).

    Feed each SSE event (its name and decoded data); `done` turns true at the stream's last event."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.impl = (anthropic_messages.ChunkDecoder() if api == "anthropic_messages"
                     else openai_responses.ChunkDecoder() if api == "openai_responses" else None)
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
