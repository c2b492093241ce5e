"""Anthropic Messages (POST /v1/messages) to and from the internal chat shape.

Out (a pool model with `api: anthropic_messages`): system messages become
`system`; an assistant's text and `tool_calls` become `text` and `tool_use`
blocks (arguments parsed into `input`); tool messages become `tool_result`
blocks of a user turn (consecutive turns of one role are merged: Messages
alternates roles); tools become {name, description, input_schema};
tool_choice auto / required / none / a function become auto / any / none /
tool, `parallel_tool_calls: false` becomes `disable_parallel_tool_use`;
`max_tokens` (required by Messages: 4,096 when the chat request gives none),
`stop` as `stop_sequences`, `temperature`, `top_p`, `stream`; `user` (or, with
`send_metadata`, the example id) as `metadata.user_id`, the one metadata field
Messages takes.

Back: `text` and `tool_use` blocks as the message's text and `tool_calls`
(order kept in content parts when text follows a call), `stop_reason` as
finish_reason, usage as chat usage: `prompt_tokens` = input_tokens +
cache_read_input_tokens + cache_creation_input_tokens, with the cache read and
the cache write in `prompt_tokens_details`. A stream's events
(message_start, content_block_*, message_delta, message_stop) become chat
chunks (`ChunkDecoder`).

`message_body` / `message_events` build a Message and its stream from a chat
answer: the replay server's Messages answers and the gateway's POST /v1/messages
replies. The key travels in `x-api-key`, with `anthropic-version`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from data.wire.common import (ChunkMaker, answer_blocks, arguments_object, chat_answer, obj, sse, text_of,
                                          usage_numbers, word)
from data.wire.registry import WireApi, register
from data.wire.raw import WireError

ANTHROPIC_VERSION = "2023-06-01"  # the `anthropic-version` header every request carries
DEFAULT_MAX_TOKENS = 4096
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal", "stop": "end_turn"}
FINISH_REASONS = {"tool_use": "tool_calls", "max_tokens": "length", "refusal": "content_filter",
                  "end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop"}


def request_from_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The Messages request for a chat request."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for m in body.get("messages") or []:
        role = m.get("role")
        if role in ("system", "developer"):
            system.append(text_of(m.get("content")))
            continue
        if role == "tool":
            blocks = [{"type": "tool_result", "tool_use_id": m.get("tool_call_id") or "",
                       "content": text_of(m.get("content"))}]
            role = "user"
        elif role == "assistant":
            text = text_of(m.get("content"))
            blocks = [{"type": "text", "text": text}] if text else []
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function") or {}
                args = fn.get("arguments")
                blocks.append({"type": "tool_use", "id": tc.get("id") or f"toolu_{uuid.uuid4().hex[:24]}",
                               "name": fn.get("name"),
                               "input": arguments_object(args) if isinstance(args, str) else (args or {})})
        else:
            role = "user"
            blocks = [{"type": "text", "text": text_of(m.get("content"))}]
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    out: dict[str, Any] = {"model": body.get("model"),
                           "max_tokens": body.get("max_tokens") or body.get("max_completion_tokens")
                           or DEFAULT_MAX_TOKENS}
    if system:
        out["system"] = "\n\n".join(system)
    out["messages"] = turns
    if body.get("tools"):
        out["tools"] = [{"name": t["function"]["name"], **({"description": t["function"]["description"]}
                                                            if t["function"].get("description") else {}),
                         "input_schema": t["function"].get("parameters") or {"type": "object", "properties": {}}}
                        for t in body["tools"]]
    choice = _tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
    if choice is not None and body.get("tools"):
        out["tool_choice"] = choice
    stop = body.get("stop")
    if stop is not None:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    for k in ("temperature", "top_p", "stream"):
        if body.get(k) is not None:
            out[k] = body[k]
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    user = body.get("user") or meta.get("example_id")
    if user:
        out["metadata"] = {"user_id": str(user)}
    return out


def _tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    if choice is None and parallel is not False:
        return None
    if isinstance(choice, dict):
        out: dict[str, Any] = {"type": "tool", "name": obj(choice.get("function")).get("name")}
    else:
        out = {"type": {"required": "any", "none": "none"}.get(choice, "auto")}
    if parallel is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    return out


def chat_from_message(data: dict[str, Any]) -> dict[str, Any]:
    """A Message as a chat completion; WireError when it is not one."""
    content = data.get("content")
    if data.get("type") != "message" or not isinstance(content, list):
        raise WireError("response is not a Message (type 'message' with a content list)")
    parts, calls = [], []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": word(block.get("text")) or ""})
        elif kind == "tool_use":
            if not isinstance(block.get("name"), str):
                raise WireError(f"tool_use block without a name: {block!r:.120}")
            call_id = word(block.get("id")) or f"toolu_{len(calls)}"
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": block["name"],
                                       "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False)}})
            parts.append({"type": "tool_call", "id": call_id})
    finish = "tool_calls" if calls else FINISH_REASONS.get(word(data.get("stop_reason")), "stop")
    return chat_answer(data, parts, calls, finish, chat_usage(data.get("usage")))


def chat_usage(usage: Any) -> dict[str, Any] | None:
    """Messages usage as chat usage (all input in prompt_tokens; the cache read and write in its details)."""
    if not isinstance(usage, dict) or type(usage.get("input_tokens")) is not int:
        return None
    read, wrote = usage.get("cache_read_input_tokens"), usage.get("cache_creation_input_tokens")
    read, wrote = (v if type(v) is int else None for v in (read, wrote))
    prompt = usage["input_tokens"] + (read or 0) + (wrote or 0)
    output = usage.get("output_tokens") if type(usage.get("output_tokens")) is int else 0
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output}
    details = {k: v for k, v in (("cached_tokens", read), ("cache_write_tokens", wrote)) if v is not None}
    if details:
        out["prompt_tokens_details"] = details
    return out


def messages_usage(usage: dict[str, int]) -> dict[str, int]:
    """Plain counts (common.usage_numbers) as Messages usage: input_tokens is the input not read or written."""
    out = {"input_tokens": max(usage["input"] - usage["cached"] - usage["written"], 0),
           "output_tokens": usage["output"]}
    if usage["cached"] or usage["written"]:
        out |= {"cache_read_input_tokens": usage["cached"], "cache_creation_input_tokens": usage["written"]}
    return out


def match_view(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages request's user texts, tool names and metadata.user_id (as example_id), for the replay index."""
    messages = []
    for m in body.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(m, dict) and m.get("role") == "user":
            texts = [content] if isinstance(content, str) else [
                b.get("text") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
            messages += [{"role": "user", "content": t} for t in texts if isinstance(t, str)]
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    return {"metadata": {"example_id": meta.get("user_id")}, "messages": messages,
            "tools": [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]}


class ChunkDecoder(ChunkMaker):
    """Messages stream events → chat chunks, one message's worth."""

    def __init__(self) -> None:
        super().__init__()
        self.usage: dict[str, Any] = {}

    def feed(self, kind: str | None, data: dict[str, Any]) -> list[dict[str, Any]]:
        if kind == "message_start":
            msg = obj(data.get("message"))
            self.id, self.model = msg.get("id"), msg.get("model")
            self.usage.update(obj(msg.get("usage")))
            return [self.chunk({"role": "assistant", "content": ""})]
        if kind == "content_block_start":
            block = obj(data.get("content_block"))
            if block.get("type") == "tool_use":
                k = self.calls[self.position(data, "index")] = len(self.calls)
                return [self.chunk({"tool_calls": [{"index": k, "id": word(block.get("id")), "type": "function",
                                                    "function": {"name": word(block.get("name")), "arguments": ""}}]})]
            if block.get("type") == "text" and word(block.get("text")):
                return [self.chunk({"content": block["text"]})]
            return []
        if kind == "content_block_delta":
            delta = obj(data.get("delta"))
            if delta.get("type") == "text_delta":
                return [self.chunk({"content": word(delta.get("text")) or ""})]
            if delta.get("type") == "input_json_delta" and self.position(data, "index") in self.calls:
                return [self.chunk({"tool_calls": [{"index": self.calls[self.position(data, "index")],
                                                    "function": {"arguments": word(delta.get("partial_json")) or ""}}]})]
            return []
        if kind == "message_delta":
            self.usage.update({k: v for k, v in obj(data.get("usage")).items() if v is not None})
            stop = obj(data.get("delta")).get("stop_reason")
            finish = "tool_calls" if self.calls else FINISH_REASONS.get(word(stop), "stop")
            return [self.chunk({}, finish)]
        if kind == "message_stop":
            self.done = True
            usage = chat_usage(self.usage)
            return [self.chunk(usage=usage)] if usage is not None else []
        if kind == "error":
            self.done = True
            return [{"error": data.get("error") or {"message": "upstream stream error"}}]
        return []


def message_body(message: dict[str, Any], finish: str | None, usage: dict[str, int], model: str) -> dict[str, Any]:
    """A chat answer's message (text, calls), finish_reason and usage counts as an Anthropic Message."""
    blocks, calls = [], False
    for b in answer_blocks(message):
        if b["type"] == "text":
            blocks.append({"type": "text", "text": b["text"]})
        else:
            calls = True
            blocks.append({"type": "tool_use", "id": b["id"] or f"toolu_{uuid.uuid4().hex[:24]}", "name": b["name"],
                           "input": arguments_object(b["arguments"])})
    stop = "tool_use" if calls else STOP_REASONS.get(finish, "end_turn")
    return {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant", "model": model,
            "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": messages_usage(usage)}


def message_events(msg: dict[str, Any], last: dict[str, Any] | None = None) -> Iterator[bytes]:
    """A finished Message as the Messages stream: each block started, sent in one delta, stopped; `last`: extra
    fields of the message_stop event."""
    start = {**msg, "content": [], "stop_reason": None}
    if "usage" in msg:  # a recording without token counts is replayed without usage
        start["usage"] = {**msg["usage"], "output_tokens": 0}
    yield sse("message_start", {"type": "message_start", "message": start})
    for i, block in enumerate(msg["content"]):
        if block["type"] == "text":
            opened, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            opened = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}
        yield sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": opened})
        yield sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
        yield sse("content_block_stop", {"type": "content_block_stop", "index": i})
    yield sse("message_delta", {"type": "message_delta", **({"usage": msg["usage"]} if "usage" in msg else {}),
                                "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None}})
    yield sse("message_stop", {"type": "message_stop", **(last or {})})


def message_from_chat(chat: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
    """A chat completion (a recorded output, data/replay) as a Message."""
    choice = chat["choices"][0]
    return message_body(choice["message"], choice["finish_reason"], usage_numbers(chat.get("usage")), chat["model"])


WIRE = register(WireApi("anthropic_messages", "/messages", request_from_chat, chat_from_message, message_from_chat,
                        match_view=match_view, stream=ChunkDecoder, events=message_events, key_header="x-api-key",
                        headers={"anthropic-version": ANTHROPIC_VERSION}))
