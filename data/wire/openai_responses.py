"""OpenAI Responses (POST /v1/responses) to and from the internal chat shape.

Out (a pool model with `api: openai_responses`): the leading system messages
become `instructions`, later ones system `message` items; user and assistant
text become `message` items, an assistant's `tool_calls` `function_call` items
(call_id, name, arguments), tool messages `function_call_output` items; tools
become flat function tools {type, name, description, parameters[, strict]};
tool_choice keeps auto / none / required and names a function as
{type: function, name}; `max_tokens` becomes `max_output_tokens`;
`parallel_tool_calls`, `temperature`, `top_p`, `user`, `metadata`, `stream`
are kept, `response_format` becomes `text.format`; `store: false` (nothing is
kept at the provider).

Back: `message` items' output_text and `function_call` items as the message's
text and `tool_calls` (the call_id as the id; order kept in content parts when
text follows a call), status incomplete for max_output_tokens as finish_reason
`length`, usage as chat usage (input_tokens_details.cached_tokens as
prompt_tokens_details.cached_tokens, reasoning tokens kept). A stream's events
(response.output_item.added, response.output_text.delta,
response.function_call_arguments.delta, response.completed) become chat chunks
(`ChunkDecoder`).

`response_body` / `response_events` build a Response and its stream from a chat
answer: the replay server's Responses answers and the gateway's POST
/v1/responses replies.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from data.wire.common import ChunkMaker, answer_blocks, chat_answer, obj, sse, text_of, usage_numbers, word
from data.wire.registry import WireApi, register
from data.wire.raw import WireError

KEPT = ("parallel_tool_calls", "temperature", "top_p", "user", "metadata", "stream")


def request_from_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The Responses request for a chat request."""
    messages = list(body.get("messages") or [])
    leading = []
    while messages and messages[0].get("role") in ("system", "developer"):
        leading.append(text_of(messages.pop(0).get("content")))
    items: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id") or "",
                          "output": text_of(m.get("content"))})
            continue
        text = text_of(m.get("content"))
        if role == "assistant":
            if text:
                items.append({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": text}]})
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function") or {}
                args = fn.get("arguments")
                items.append({"type": "function_call", "call_id": tc.get("id") or f"call_{uuid.uuid4().hex[:24]}",
                              "name": fn.get("name"), "arguments": args if isinstance(args, str) else "{}"})
        else:
            items.append({"type": "message", "role": role if role in ("system", "developer") else "user",
                          "content": text})
    out: dict[str, Any] = {"model": body.get("model")}
    if leading:
        out["instructions"] = "\n\n".join(leading)
    out["input"] = items
    if body.get("tools"):
        out["tools"] = [{"type": "function", **{k: t["function"][k] for k in ("name", "description", "parameters",
                                                                               "strict") if k in t["function"]}}
                        for t in body["tools"]]
    choice = body.get("tool_choice")
    if choice is not None and body.get("tools"):
        out["tool_choice"] = ({"type": "function", "name": obj(choice.get("function")).get("name")}
                              if isinstance(choice, dict) else choice)
    tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    if tokens is not None:
        out["max_output_tokens"] = tokens
    for k in KEPT:
        if body.get(k) is not None:
            out[k] = body[k]
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        out["text"] = {"format": {"type": "json_object"}}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        out["text"] = {"format": {"type": "json_schema", **obj(fmt.get("json_schema"))}}
    out["store"] = False
    return out


def chat_from_response(data: dict[str, Any]) -> dict[str, Any]:
    """A Response as a chat completion; WireError when it is not one."""
    output = data.get("output")
    if data.get("object") != "response" or not isinstance(output, list):
        raise WireError("response is not a Response (object 'response' with an output list)")
    if data.get("status") == "failed":
        raise WireError(f"the response failed: {str(data.get('error'))[:200]}")
    parts, calls = [], []
    for item in output:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    parts.append({"type": "text", "text": word(part.get("text")) or ""})
        elif kind == "function_call":
            if not isinstance(item.get("name"), str):
                raise WireError(f"function_call item without a name: {item!r:.120}")
            call_id = word(item.get("call_id")) or f"call_{len(calls)}"
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": item["name"], "arguments": word(item.get("arguments")) or ""}})
            parts.append({"type": "tool_call", "id": call_id})
    reason = obj(data.get("incomplete_details")).get("reason")
    finish = "tool_calls" if calls else "length" if reason == "max_output_tokens" else "stop"
    return chat_answer(data, parts, calls, finish, chat_usage(data.get("usage")))


def chat_usage(usage: Any) -> dict[str, Any] | None:
    """Responses usage as chat usage."""
    if not isinstance(usage, dict) or type(usage.get("input_tokens")) is not int:
        return None
    output = usage.get("output_tokens") if type(usage.get("output_tokens")) is int else 0
    out: dict[str, Any] = {"prompt_tokens": usage["input_tokens"], "completion_tokens": output,
                           "total_tokens": usage["input_tokens"] + output}
    cached = obj(usage.get("input_tokens_details")).get("cached_tokens")
    if type(cached) is int:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    reasoning = obj(usage.get("output_tokens_details")).get("reasoning_tokens")
    if type(reasoning) is int and reasoning:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


def responses_usage(usage: dict[str, int]) -> dict[str, Any]:
    """Plain counts (common.usage_numbers) as Responses usage."""
    return {"input_tokens": usage["input"], "input_tokens_details": {"cached_tokens": usage["cached"]},
            "output_tokens": usage["output"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["input"] + usage["output"]}


def match_view(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request's user texts, tool names and metadata, for the replay index."""
    items = body.get("input")
    messages = []
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items or []:
        if isinstance(item, dict) and item.get("role") == "user" and item.get("type", "message") == "message":
            content = item.get("content")
            texts = [content] if isinstance(content, str) else [
                p.get("text") for p in content or [] if isinstance(p, dict) and p.get("type") == "input_text"]
            messages += [{"role": "user", "content": t} for t in texts if isinstance(t, str)]
    return {"metadata": body.get("metadata"), "messages": messages,
            "tools": [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]}


class ChunkDecoder(ChunkMaker):
    """Responses stream events → chat chunks."""

    def feed(self, kind: str | None, data: dict[str, Any]) -> list[dict[str, Any]]:
        if kind == "response.created":
            r = obj(data.get("response"))
            self.id, self.model = r.get("id"), r.get("model")
            return [self.chunk({"role": "assistant", "content": ""})]
        if kind == "response.output_item.added":
            item = obj(data.get("item"))
            if item.get("type") != "function_call":
                return []
            k = self.calls[self.position(data, "output_index")] = len(self.calls)
            return [self.chunk({"tool_calls": [{"index": k, "id": word(item.get("call_id")), "type": "function",
                                                "function": {"name": word(item.get("name")), "arguments": ""}}]})]
        if kind == "response.output_text.delta":
            return [self.chunk({"content": word(data.get("delta")) or ""})]
        if kind == "response.function_call_arguments.delta" and self.position(data, "output_index") in self.calls:
            return [self.chunk({"tool_calls": [{"index": self.calls[self.position(data, "output_index")],
                                                "function": {"arguments": word(data.get("delta")) or ""}}]})]
        if kind in ("response.completed", "response.incomplete"):
            self.done = True
            r = obj(data.get("response"))
            reason = obj(r.get("incomplete_details")).get("reason")
            finish = "tool_calls" if self.calls else "length" if reason == "max_output_tokens" else "stop"
            out = [self.chunk({}, finish)]
            usage = chat_usage(r.get("usage"))
            return out + ([self.chunk(usage=usage)] if usage is not None else [])
        if kind in ("response.failed", "error"):
            self.done = True
            err = obj(data.get("response")).get("error") if kind == "response.failed" else data
            return [{"error": err or {"message": "upstream stream error"}}]
        return []


def response_body(message: dict[str, Any], finish: str | None, usage: dict[str, int], model: str,
                  asked: dict[str, Any]) -> dict[str, Any]:
    """A chat answer's message, finish_reason and usage counts as a Response; `asked`: the request's echoed fields."""
    output: list[dict[str, Any]] = []
    calls = False
    for b in answer_blocks(message):
        if b["type"] == "text":
            output.append({"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}", "status": "completed",
                           "role": "assistant",
                           "content": [{"type": "output_text", "text": b["text"], "annotations": []}]})
        else:
            calls = True
            output.append({"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:24]}",
                           "call_id": b["id"] or f"call_{uuid.uuid4().hex[:24]}", "name": b["name"],
                           "arguments": b["arguments"], "status": "completed"})
    incomplete = finish == "length" and not calls
    return {"id": f"resp_{uuid.uuid4().hex}", "object": "response", "created_at": int(time.time()),
            "status": "incomplete" if incomplete else "completed", "model": model, "output": output,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None, "error": None,
            "instructions": asked.get("instructions"), "metadata": asked.get("metadata"),
            "tools": asked.get("tools") or [], "tool_choice": asked.get("tool_choice", "auto"),
            "parallel_tool_calls": asked.get("parallel_tool_calls", True), "temperature": asked.get("temperature"),
            "top_p": asked.get("top_p"), "max_output_tokens": asked.get("max_output_tokens"),
            "previous_response_id": None, "store": False, "usage": responses_usage(usage)}


def response_events(done: dict[str, Any], hidden: tuple[str, ...] = ()) -> Iterator[bytes]:
    """A finished Response as the Responses stream: created, each item added, its deltas, done, completed.
    `hidden`: fields of `done` left out of the created / in_progress events."""
    n = 0

    def event(kind: str, **data) -> bytes:
        nonlocal n
        n += 1
        return sse(kind, {"type": kind, "sequence_number": n - 1, **data})

    started = {k: v for k, v in done.items() if k not in (*hidden, "usage")}
    started.update(status="in_progress", output=[], usage=None, incomplete_details=None)
    yield event("response.created", response=started)
    yield event("response.in_progress", response=started)
    for i, item in enumerate(done["output"]):
        ids = {"item_id": item["id"], "output_index": i}
        if item["type"] == "message":
            yield event("response.output_item.added", output_index=i, item={**item, "status": "in_progress",
                                                                            "content": []})
            part = item["content"][0]
            yield event("response.content_part.added", **ids, content_index=0, part={**part, "text": ""})
            yield event("response.output_text.delta", **ids, content_index=0, delta=part["text"], logprobs=[])
            yield event("response.output_text.done", **ids, content_index=0, text=part["text"], logprobs=[])
            yield event("response.content_part.done", **ids, content_index=0, part=part)
        elif item["type"] == "custom_tool_call":  # a freeform tool's call (the gateway's POST /v1/responses)
            yield event("response.output_item.added", output_index=i, item={**item, "status": "in_progress",
                                                                            "input": ""})
            yield event("response.custom_tool_call_input.delta", **ids, delta=item["input"])
            yield event("response.custom_tool_call_input.done", **ids, input=item["input"])
        else:
            yield event("response.output_item.added", output_index=i, item={**item, "status": "in_progress",
                                                                            "arguments": ""})
            yield event("response.function_call_arguments.delta", **ids, delta=item["arguments"])
            yield event("response.function_call_arguments.done", **ids, name=item["name"],
                        arguments=item["arguments"])
        yield event("response.output_item.done", output_index=i, item=item)
    yield event(f"response.{done['status']}", response=done)


def response_from_chat(chat: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
    """A chat completion (a recorded output, data/replay) as a Response; `asked`: the request (echoed fields)."""
    choice = chat["choices"][0]
    return response_body(choice["message"], choice["finish_reason"], usage_numbers(chat.get("usage")), chat["model"],
                         asked)


WIRE = register(WireApi("openai_responses", "/responses", request_from_chat, chat_from_response, response_from_chat,
                        match_view=match_view, stream=ChunkDecoder, events=response_events))
