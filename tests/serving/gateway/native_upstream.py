"""A stand-in provider speaking Chat Completions, Messages and Responses as their providers do, for the
pass-through and live-stream tests: it records every request (path, raw bytes, headers) and answers each API
with its own answer — a Message with a thinking block and its signature and a cited text, a Response with an
encrypted reasoning item — or, streamed, with that API's events: the first token at once, the rest after
`DELAY_S` (what a model's time to first token looks like to the gateway); a request saying BREAK has its stream
dropped after the first token.
"""

from __future__ import annotations

import asyncio
import json

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

DELAY_S = 1.0  # between the first token and the rest of every streamed answer
SIGNATURE = "EqQBCkgIARABGAIiQHsignature0123456789abcdefABCDEF/+=="
THINKING = "The user wants the weather; the forecast says sunny."
CITATION = {"type": "char_location", "cited_text": "sunny", "document_index": 0, "document_title": "Forecast",
            "start_char_index": 0, "end_char_index": 5}
MESSAGES_USAGE = {"input_tokens": 40, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20,
                  "output_tokens": 7}
RESPONSES_USAGE = {"input_tokens": 40, "input_tokens_details": {"cached_tokens": 10}, "output_tokens": 7,
                   "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 47}
CHAT_USAGE = {"prompt_tokens": 40, "completion_tokens": 7, "total_tokens": 47}
FIRST, REST = "It is", " sunny."

MESSAGE = {"id": "msg_01Stand1n", "type": "message", "role": "assistant", "model": "provider-model",
           "content": [{"type": "thinking", "thinking": THINKING, "signature": SIGNATURE},
                       {"type": "text", "text": FIRST + REST, "citations": [CITATION]}],
           "stop_reason": "end_turn", "stop_sequence": None, "usage": MESSAGES_USAGE}
TEXT_ITEM = {"type": "message", "id": "msg_01Stand1n", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": FIRST + REST, "annotations": []}]}
RESPONSE = {"id": "resp_01Stand1n", "object": "response", "created_at": 1760000000, "status": "completed",
            "model": "provider-model", "error": None, "incomplete_details": None, "instructions": None,
            "metadata": {}, "parallel_tool_calls": True, "temperature": 1.0, "tool_choice": "auto", "tools": [],
            "top_p": 1.0, "output": [{"type": "reasoning", "id": "rs_01Stand1n", "summary": [],
                                      "encrypted_content": "gAAAAABo-opaque-reasoning"}, TEXT_ITEM],
            "usage": RESPONSES_USAGE}
CHAT = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "provider-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": FIRST + REST}, "finish_reason": "stop"}],
        "usage": CHAT_USAGE}


def sse(event: str | None, data: dict | str) -> bytes:
    body = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return ((f"event: {event}\n" if event else "") + f"data: {body}\n\n").encode()


def message_events() -> tuple[list[bytes], list[bytes]]:
    """(events sent at once, events sent after DELAY_S) of the streamed MESSAGE."""
    start = {**MESSAGE, "content": [], "stop_reason": None, "usage": {**MESSAGES_USAGE, "output_tokens": 1}}
    first = [("message_start", {"type": "message_start", "message": start}),
             ("content_block_start", {"type": "content_block_start", "index": 0,
                                      "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
             ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                      "delta": {"type": "thinking_delta", "thinking": THINKING}}),
             ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                      "delta": {"type": "signature_delta", "signature": SIGNATURE}}),
             ("content_block_stop", {"type": "content_block_stop", "index": 0}),
             ("content_block_start", {"type": "content_block_start", "index": 1,
                                      "content_block": {"type": "text", "text": ""}}),
             ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                      "delta": {"type": "text_delta", "text": FIRST}})]
    rest = [("content_block_delta", {"type": "content_block_delta", "index": 1,
                                     "delta": {"type": "text_delta", "text": REST}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 1}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                               "usage": {"output_tokens": 7}}),
            ("message_stop", {"type": "message_stop"})]
    return [sse(*e) for e in first], [sse(*e) for e in rest]


def response_events() -> tuple[list[bytes], list[bytes]]:
    """(events sent at once, events sent after DELAY_S) of the streamed RESPONSE (its text item)."""
    started = {**RESPONSE, "status": "in_progress", "output": [], "usage": None}
    ids = {"item_id": TEXT_ITEM["id"], "output_index": 0}
    part = TEXT_ITEM["content"][0]
    first = [("response.created", {"response": started}), ("response.in_progress", {"response": started}),
             ("response.output_item.added", {"output_index": 0, "item": {**TEXT_ITEM, "status": "in_progress",
                                                                          "content": []}}),
             ("response.content_part.added", {**ids, "content_index": 0, "part": {**part, "text": ""}}),
             ("response.output_text.delta", {**ids, "content_index": 0, "delta": FIRST})]
    rest = [("response.output_text.delta", {**ids, "content_index": 0, "delta": REST}),
            ("response.output_text.done", {**ids, "content_index": 0, "text": FIRST + REST}),
            ("response.content_part.done", {**ids, "content_index": 0, "part": part}),
            ("response.output_item.done", {"output_index": 0, "item": TEXT_ITEM}),
            ("response.completed", {"response": {**RESPONSE, "output": [TEXT_ITEM]}})]
    events = [(kind, {"type": kind, "sequence_number": i, **data}) for i, (kind, data) in enumerate(first + rest)]
    return [sse(*e) for e in events[:len(first)]], [sse(*e) for e in events[len(first):]]


def chat_events() -> tuple[list[bytes], list[bytes]]:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "provider-model"}

    def chunk(delta: dict, finish: str | None = None) -> bytes:
        return sse(None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    return [chunk({"role": "assistant", "content": FIRST})], [
        chunk({"content": REST}), chunk({}, "stop"), sse(None, {**base, "choices": [], "usage": CHAT_USAGE}),
        sse(None, "[DONE]")]


def chat_call_events(name: str) -> tuple[list[bytes], list[bytes]]:
    """A chat stream calling `name`: its arguments (a freeform tool's `input`, else a city) in two pieces."""
    base = {"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 0, "model": "provider-model"}
    args = json.dumps({"input": "*** Begin Patch"} if name.endswith("apply_patch") else {"city": "Paris"})

    def chunk(delta: dict, finish: str | None = None) -> bytes:
        return sse(None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    call = {"index": 0, "id": "call_St4nd", "type": "function", "function": {"name": name, "arguments": args[:6]}}
    return [chunk({"role": "assistant", "content": None, "tool_calls": [call]})], [
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[6:]}}]}), chunk({}, "tool_calls"),
        sse(None, {**base, "choices": [], "usage": CHAT_USAGE}), sse(None, "[DONE]")]


def called(body: dict) -> str | None:
    """The tool a chat request's last user message asks the stand-in to call (`CALL <name>`), if any."""
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    text = users[-1].get("content") if users else None
    return text[5:] if isinstance(text, str) and text.startswith("CALL ") else None


EVENTS = {"messages": message_events, "responses": response_events, "chat/completions": chat_events}
ANSWERS = {"messages": MESSAGE, "responses": RESPONSE, "chat/completions": CHAT}


class NativeUpstream:
    """The stand-in: `seen` holds (path, raw body, headers) of every request, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes, dict[str, str]]] = []

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/{path:path}")
        async def upstream(path: str, request: Request):
            raw = await request.body()
            self.seen.append((path, raw, dict(request.headers)))
            body = json.loads(raw)
            if body.get("stream"):
                tool = called(body) if path == "chat/completions" else None
                first, rest = chat_call_events(tool) if tool else EVENTS[path]()

                broken = b"BREAK" in raw  # the connection drops after the first token

                async def events():
                    for e in first:
                        yield e
                    await asyncio.sleep(0.05 if broken else DELAY_S)
                    if broken:
                        raise ConnectionAbortedError("the stand-in drops the stream")
                    for e in rest:
                        yield e

                return StreamingResponse(events(), media_type="text/event-stream")
            return ANSWERS[path]

        return app
