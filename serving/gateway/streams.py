"""Streamed answers: an upstream's SSE passed through, or an answer read whole sent as one SSE chunk.

    events = sse_passthrough(result, meta, tools)        # a native model streaming: chunks as they come
    events = json_as_sse(answer.body, model, meta)       # a prompt-style model (read whole, decoded) or a JSON upstream

A stream takes the single-model path (serving/gateway/app.py): no agreement
check can run on calls that have not finished arriving. The first chunk
carries the `switchcraft` trace.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx

from data.schema import Tool
from serving.gateway.answers import caller_name
from serving.gateway.upstream import UpstreamResult


async def sse_passthrough(result: UpstreamResult, meta: dict, tools: list[Tool]) -> AsyncIterator[bytes]:
    """The upstream's SSE events as they come, each chunk's `model` set to the answering model and
    tool names mapped back to the caller's (a native model was offered OpenAI-legal names)."""
    response, first = result.response, True
    try:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data = line[5:].strip()
                if data and data != "[DONE]":
                    try:
                        chunk = json.loads(data)
                    except json.JSONDecodeError:
                        chunk = None
                    if isinstance(chunk, dict):
                        chunk["model"] = result.model
                        caller_names_in_chunk(chunk, tools)
                        if first:
                            chunk["switchcraft"], first = meta, False
                        line = "data: " + json.dumps(chunk, separators=(",", ":"))
            yield (line + "\n").encode()
    except httpx.TransportError as e:
        # Bytes already reached the caller: no fallback now, but say so in-band.
        error = {"error": {"message": f"upstream {result.model} stream broke: {type(e).__name__}", "type": "upstream_error"}}
        yield f"data: {json.dumps(error)}\n\n".encode()
    finally:
        await response.aclose()


def caller_names_in_chunk(chunk: dict, tools: list[Tool]) -> None:
    """A streamed chunk's tool-call names (OpenAI-legal, as offered) renamed in place to the caller's."""
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        calls = delta.get("tool_calls") if isinstance(delta, dict) else None
        for tc in calls if isinstance(calls, list) else []:
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                fn["name"] = caller_name(fn["name"], tools)


async def json_as_sse(body: dict, model: str, meta: dict) -> AsyncIterator[bytes]:
    """An answer read whole (a prompt-style model, or an upstream that ignores stream=true) as one SSE chunk."""
    choices = []
    for i, choice in enumerate(body.get("choices") or []):
        message = dict(choice.get("message") or {})
        if message.get("tool_calls"):
            message["tool_calls"] = [{**tc, "index": k} for k, tc in enumerate(message["tool_calls"])]
        choices.append({"index": choice.get("index", i), "delta": message, "finish_reason": choice.get("finish_reason")})
    chunk = {"id": body.get("id"), "object": "chat.completion.chunk", "created": body.get("created"),
             "model": model, "choices": choices, "switchcraft": meta}
    if body.get("usage") is not None:
        chunk["usage"] = body["usage"]
    yield f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()
    yield b"data: [DONE]\n\n"
