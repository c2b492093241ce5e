"""What the API translators share: SSE events, a chat message's blocks in order, usage as plain counts."""

from __future__ import annotations

import json
import time
from typing import Any


def sse(event: str, data: dict[str, Any]) -> bytes:
    """One server-sent event with its name (the Anthropic client skips events without one)."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n".encode()


def answer_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat message's text and calls in order: [{type: text, text} | {type: call, id, name, arguments}].

    Content parts that point at a call (`{"type": "tool_call", "id"}`, data.wire.raw) place it among the
    text; calls no part placed follow the text. Arguments are a JSON string."""
    calls = {}
    for i, tc in enumerate(message.get("tool_calls") or []):
        fn = tc.get("function") if isinstance(tc, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            args = fn.get("arguments")
            key = tc.get("id") if isinstance(tc.get("id"), str) else f"#{i}"
            calls[key] = {"type": "call", "id": tc.get("id") if isinstance(tc.get("id"), str) else None,
                          "name": fn["name"], "arguments": args if isinstance(args, str) else json.dumps(args or {})}
    out, placed = [], set()
    content = message.get("content")
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, str) and part:
            out.append({"type": "text", "text": part})
        elif isinstance(part, dict) and part.get("type") == "tool_call" and part.get("id") in calls:
            out.append(calls[part["id"]])
            placed.add(part["id"])
        elif isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"]:
            out.append({"type": "text", "text": part["text"]})
    return out + [c for k, c in calls.items() if k not in placed]


def arguments_object(arguments: str) -> dict:
    """A call's JSON-string arguments as an object (what Anthropic's `input` must be); {} when they are not one."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def text_of(content: Any) -> str:
    """A chat message's text: a string, or the text parts of a content list."""
    if isinstance(content, list):
        return "\n".join(p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content if isinstance(content, str) else ""


def usage_numbers(usage: Any) -> dict[str, int]:
    """A chat `usage` as plain counts: input (all), output, cached, written (0 where not given)."""
    u = usage if isinstance(usage, dict) else {}
    details = u.get("prompt_tokens_details") if isinstance(u.get("prompt_tokens_details"), dict) else {}

    def num(d: dict, k: str) -> int:
        return d[k] if type(d.get(k)) is int else 0

    return {"input": num(u, "prompt_tokens"), "output": num(u, "completion_tokens"),
            "cached": num(details, "cached_tokens"), "written": num(details, "cache_write_tokens")}


def chat_content(parts: list[dict]) -> Any:
    """Decoded text / call parts as a chat message's content: text alone as a string, calls alone as null; text
    after a call keeps its place as content parts (data.wire.raw reads them back in order)."""
    texts = [p["text"] for p in parts if p["type"] == "text"]
    first_call = next((i for i, p in enumerate(parts) if p["type"] == "tool_call"), len(parts))
    if any(p["type"] == "text" for p in parts[first_call:]):
        return parts
    return "".join(texts) if texts else None


class ChunkMaker:
    """What a native stream's decoder keeps (the answer's id and model, calls by their native index, whether the
    stream ended) and the chat chunks it makes."""

    def __init__(self) -> None:
        self.id, self.model, self.calls, self.done = None, None, {}, False
        self.created = int(time.time())

    @staticmethod
    def position(data: dict, key: str) -> int | None:
        """An event's block / item index (`index`, `output_index`), or None when it is not an integer."""
        value = data.get(key)
        return value if type(value) is int else None

    def chunk(self, delta: dict | None = None, finish: str | None = None, usage: dict | None = None) -> dict:
        """A chat.completion.chunk: one choice's `delta` (none: a usage-only chunk)."""
        out: dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                               "model": self.model,
                               "choices": [] if delta is None else [{"index": 0, "delta": delta,
                                                                     "finish_reason": finish}]}
        if usage is not None:
            out["usage"] = usage
        return out


def chat_answer(data: dict[str, Any], parts: list[dict], calls: list[dict], finish: str,
                usage: dict[str, Any] | None) -> dict[str, Any]:
    """A native answer (`data`: its id, model, created_at) decoded into parts and calls, as a chat completion."""
    message: dict[str, Any] = {"role": "assistant", "content": chat_content(parts)}
    if calls:
        message["tool_calls"] = calls
    out = {"id": data.get("id"), "object": "chat.completion", "created": data.get("created_at") or int(time.time()),
           "model": data.get("model"), "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    if usage is not None:
        out["usage"] = usage
    return out


def obj(value: Any) -> dict:
    """An answer's field that must be an object: itself, or {} (a provider's malformed field is read as absent)."""
    return value if isinstance(value, dict) else {}


def word(value: Any) -> str | None:
    """An answer's field that must be a string: itself, or None."""
    return value if isinstance(value, str) else None
