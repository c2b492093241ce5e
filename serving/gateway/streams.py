"""Streamed answers: an upstream's SSE passed through, or an answer read whole sent as one SSE chunk.

    events = sse_passthrough(result, meta, tools)        # a native model streaming: chunks as they come
    events = json_as_sse(answer.body, model, meta)       # a prompt-style model (read whole, decoded) or a JSON upstream

A stream takes the single-model path (serving/gateway/chat.py): no agreement
check can run on calls that have not finished arriving. The first chunk
carries the `switchcraft` trace.

A native upstream is always asked for usage (`stream_options.include_usage`,
serving/gateway/answers.py), so a streamed answer is charged what it cost: when
the stream ends, `on_end(usage, output_bytes)` charges it (an estimate from the
bytes that came when the provider sent no usage), and a last chunk with no
choices says what was charged (`switchcraft.cost_usd`, `cost_estimated_usd`).
The usage chunk reaches the client only when it asked for it, and then the last
chunk carries the usage too (SDKs keep the last chunk's).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio

import httpx

from data.schema import Tool
from serving.gateway.answers import caller_name
from serving.gateway.overhead import Clock, timed
from serving.gateway.upstream import UpstreamResult


def wants_usage(body: dict[str, Any]) -> bool:
    """Did the caller ask for the usage chunk of a stream (OpenAI `stream_options.include_usage`)?"""
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


async def sse_passthrough(result: UpstreamResult, meta: dict, tools: list[Tool], *,
                          on_end: Callable[..., Awaitable[list]] | None = None,
                          keep_usage: bool = True, clock: Clock | None = None) -> AsyncIterator[bytes]:
    """The upstream's SSE events as they come, each chunk's `model` set to the answering model and
    tool names mapped back to the caller's (a native model was offered OpenAI-legal names).

    `on_end(usage, output_bytes, abandoned=...)`: called once when the stream ends, however it ends (completed,
    broken, or the client gone: `abandoned`, the upstream closed at once), with the upstream's usage (None if it
    sent none) and the bytes of content and call arguments it sent; what it returns (the charges) is announced in
    a last chunk before `[DONE]` when the stream completed.
    `keep_usage`: pass the upstream's usage to the client (else it is taken out: the client did not ask for it).
    `clock`: the request's (serving/gateway/overhead.py): the wait for each upstream line is upstream time."""
    response, first = result.response, True
    usage: dict | None = None
    output_bytes, ended, read_all = 0, False, False

    async def end(abandoned: bool = False) -> list:
        nonlocal ended
        ended = True
        with anyio.CancelScope(shield=True):
            return await on_end(usage, output_bytes, abandoned=abandoned) if on_end is not None else []

    try:
        async for line in timed(response.aiter_lines(), clock):
            if line.startswith("data:"):
                data = line[5:].strip()
                if data == "[DONE]" and on_end is not None:
                    charged = await end()
                    yield _cost_chunk(result.model, charged, usage if keep_usage else None)
                elif data:
                    try:
                        chunk = json.loads(data)
                    except json.JSONDecodeError:
                        chunk = None
                    if isinstance(chunk, dict):
                        if isinstance(chunk.get("usage"), dict):
                            usage = chunk["usage"]
                        output_bytes += chunk_output_bytes(chunk)
                        if not keep_usage and "usage" in chunk:
                            chunk.pop("usage")
                            if not chunk.get("choices"):
                                continue  # the usage-only chunk the client did not ask for
                        chunk["model"] = result.model
                        caller_names_in_chunk(chunk, tools)
                        if first:
                            chunk["switchcraft"], first = meta, False
                        line = "data: " + json.dumps(chunk, separators=(",", ":"))
            yield (line + "\n").encode()
        read_all = True
    except httpx.TransportError as e:
        read_all = True  # the upstream broke: what it sent is all there is
        # Bytes already reached the caller: no fallback now, but say so in-band.
        error = {"error": {"message": f"upstream {result.model} stream broke: {type(e).__name__}", "type": "upstream_error"}}
        yield f"data: {json.dumps(error)}\n\n".encode()
    finally:
        with anyio.CancelScope(shield=True):
            await response.aclose()
        if not ended:  # no [DONE]: the upstream ended or broke without it, or the client left (closed above)
            await end(abandoned=not read_all)


def chunk_output_bytes(chunk: dict) -> int:
    """Bytes of text and call arguments in a streamed chunk (what an estimate of its output tokens counts)."""
    n = 0
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            continue
        if isinstance(delta.get("content"), str):
            n += len(delta["content"].encode())
        for tc in delta.get("tool_calls") or [] if isinstance(delta.get("tool_calls"), list) else []:
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict):
                n += sum(len(v.encode()) for v in (fn.get("name"), fn.get("arguments")) if isinstance(v, str))
    return n


def _cost_chunk(model: str, charged: list, usage: dict | None) -> bytes:
    """The last chunk: what was charged, and the upstream's usage again when the client asked for it (the openai
    SDK's stream helper keeps the last chunk's `usage`: a chunk without it would leave the final usage None)."""
    chunk = {"object": "chat.completion.chunk", "model": model, "choices": [],
             "switchcraft": {"cost_usd": round(sum(c.usd for c in charged), 10),
                             "cost_estimated_usd": round(sum(c.usd for c in charged
                                                             if c.estimated), 10),
                             "charges": [{"model": c.model, "kind": c.kind, "usd": c.usd} for c in charged]}}
    if usage is not None:
        chunk["usage"] = usage
    return f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()


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
