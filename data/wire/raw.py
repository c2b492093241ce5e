"""The chat-completions wire format <-> `Output.raw`, both directions, in one place.

The runner turns a response message into `raw`; the replay server turns a
recorded `raw` back into a response message. Keeping both here, and testing
that `raw_from_message(message_from_raw(raw)) == raw` over every recording,
is what makes "the replayed run equals the recordings byte for byte" hold.

Recorded BFCL results come in four shapes, each mapped to what a real
OpenAI-compatible endpoint sends:

- a string                              -> `content` (text), no tool calls
- `[{name: "<JSON arguments>"}, ...]`   -> `tool_calls` (native function calling)
- `[{name: {...}}]` (Cohere)            -> `tool_calls` whose `arguments` is an object
- a list mixing text and calls (Gemini) -> `content` as a list of typed parts,
  text parts `{"type": "text", "text": ...}` and call parts
  `{"type": "tool_call", "id": ...}` pointing into `tool_calls`, so the
  order of text and calls survives (Gemini's native response keeps it).

    python -m pytest -q tests/data/wire/test_raw.py
"""

from __future__ import annotations

import json
from typing import Any

from data.schema import Usage

JSON = Any


class WireError(ValueError):
    """A response that is not a chat completion we can read."""


def message_from_raw(raw: JSON, *, call_id_prefix: str = "call") -> dict[str, Any]:
    """The assistant `message` of a chat completion that carries exactly `raw`."""
    if isinstance(raw, str):
        return {"role": "assistant", "content": raw}
    if not isinstance(raw, list):
        # Any other JSON value is sent as its JSON text; the runner reads back a string.
        raise WireError(f"cannot send a raw output of type {type(raw).__name__}")
    calls, parts, only_calls = [], [], True
    for item in raw:
        if isinstance(item, dict) and len(item) == 1:
            ((name, arguments),) = item.items()
            call_id = f"{call_id_prefix}_{len(calls)}"
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
            parts.append({"type": "tool_call", "id": call_id})
        elif isinstance(item, str):
            only_calls = False
            parts.append({"type": "text", "text": item})
        else:
            raise WireError(
                f"cannot send a raw list item {item!r:.80}: neither text nor one {{name: arguments}} call"
            )
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if not only_calls or not raw:
        message["content"] = parts
    if calls:
        message["tool_calls"] = calls
    return message


def raw_from_message(message: dict[str, Any]) -> JSON:
    """What the model said, as `Output.raw`: text, a list of calls, or text and calls in order."""
    if not isinstance(message, dict):
        raise WireError(f"choices[0].message is {type(message).__name__}, not an object")
    content = message.get("content")
    calls = message.get("tool_calls") or []
    by_id, as_raw = {}, []
    for c in calls:
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise WireError(f"tool call without function.name: {c!r:.120}")
        # arguments stay exactly as sent (a JSON string normally; some servers send an object)
        entry = {fn["name"]: fn.get("arguments", "")}
        as_raw.append(entry)
        if c.get("id") is not None:
            by_id[c["id"]] = entry
    if isinstance(content, list):
        out, used = [], set()
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                out.append(part.get("text", ""))
            elif kind == "tool_call" and part.get("id") in by_id:
                out.append(by_id[part["id"]])
                used.add(part["id"])
            else:
                raise WireError(f"unknown content part {part!r:.120}")
        # calls the parts did not place go after the text, in their order
        out.extend(e for c, e in zip(calls, as_raw) if c.get("id") not in used)
        return out
    if as_raw:
        # text next to calls (rare with OpenAI) is kept in front, as Gemini orders it
        return ([content] if content else []) + as_raw
    if content is None:
        return ""
    if not isinstance(content, str):
        raise WireError(
            f"message content is {type(content).__name__}, expected text, parts or null"
        )
    return content


def usage_to_wire(usage: Usage) -> dict[str, Any] | None:
    """OpenAI's `usage` object; absent counts stay absent (never sent as zero)."""
    if not usage.known:
        return None
    out: dict[str, Any] = {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }
    if usage.reasoning_tokens is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    cache = {k: v for k, v in (("cached_tokens", usage.cached_input_tokens),
                               ("cache_write_tokens", usage.cache_write_tokens)) if v is not None}
    if cache:
        out["prompt_tokens_details"] = cache
    return out


def usage_from_wire(usage: dict[str, Any] | None) -> Usage:
    """Input, output and reasoning tokens, and of the input those read from (`prompt_tokens_details.cached_tokens`)
    and written to (`cache_write_tokens`, from a Messages upstream) the prompt cache; each stays None when the
    server did not say."""
    if not isinstance(usage, dict) or not usage:
        return Usage()
    details = usage.get("completion_tokens_details") or {}
    prompt = usage.get("prompt_tokens_details") or {}
    details, prompt = (d if isinstance(d, dict) else {} for d in (details, prompt))
    return Usage(
        input_tokens=_count(usage.get("prompt_tokens")),
        output_tokens=_count(usage.get("completion_tokens")),
        reasoning_tokens=_count(details.get("reasoning_tokens")),
        cached_input_tokens=_count(prompt.get("cached_tokens")),
        cache_write_tokens=_count(prompt.get("cache_write_tokens")),
    )


def _count(v: Any) -> int | None:
    """A token count as the server gave it; anything but a whole number ≥ 0 (a negative, a string, a bool) is a
    count the server did not really give: None, so the cost falls back to the estimate."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def parse_completion(body: bytes | str) -> tuple[JSON, Usage, dict[str, Any]]:
    """(raw, usage, the decoded response) from a chat-completion response body."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise WireError(f"response is not JSON: {e.msg} at {e.pos}") from None
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices or not isinstance(choices, list):
        raise WireError("response has no choices")
    return raw_from_message(choices[0].get("message")), usage_from_wire(data.get("usage")), data
