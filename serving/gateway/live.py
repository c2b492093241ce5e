"""Streams that reach a Messages or Responses caller as the upstream produces them.

    events = relay(result, api, passthrough, on_end, trace)      # the provider's own events (passed through)
    events = translated(sse_passthrough(...), live, charged)     # chat chunks rendered in the caller's API

`relay`: a pool model whose provider speaks the caller's API streams its own
events; each is sent on the moment its blank line arrives, unchanged, except
the last (the wire API's decoder says which: message_stop, response.completed,
…), which gets the `switchcraft` trace and what was charged. Every event is
also fed to the wire API's stream decoder (data/wire/), so the usage the
provider reports is charged when the stream ends (`on_end`, serving/core/budget.py
`StreamCharge`), however it ends.

`translated`: any other single-model stream, read as chat chunks (a chat
upstream's own, or another API's decoded: serving/gateway/upstream.py
`NativeStream`) through serving/gateway/streams.py `sse_passthrough` (money,
the caller's tool names), each chunk rendered in the caller's API by its
`LiveEvents` (serving/gateway/apis/) as it comes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import httpx

from data import wire
from serving.gateway.apis import LiveEvents, PassThrough
from serving.gateway.streams import chunk_output_bytes
from serving.gateway.upstream import UpstreamResult


def parse_event(lines: list[str]) -> tuple[str | None, dict | None]:
    """(event name, decoded data object) of one server-sent event's lines; data None when it is not an object."""
    event, data = None, []
    for line in lines:
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    try:
        value = json.loads("\n".join(data)) if data else None
    except json.JSONDecodeError:
        value = None
    return event, value if isinstance(value, dict) else None


async def relay(result: UpstreamResult, api: str, passthrough: PassThrough,
                on_end: Callable[..., Awaitable[list]], trace: Callable[[list], dict]) -> AsyncIterator[bytes]:
    """The provider's SSE events as they come; the last one with `trace(charged)` in it (`passthrough.traced`).

    `on_end(usage, output_bytes, abandoned=...)` is called once, however the stream ends: at the last event
    (before it is sent), or when the upstream broke or the client left (`abandoned`: closed before the end)."""
    response, decoder = result.response, wire.StreamDecoder(api)
    usage: dict | None = None
    output_bytes, ended, read_all, lines = 0, False, False, []

    async def end(abandoned: bool = False) -> list:
        nonlocal ended
        ended = True
        with anyio.CancelScope(shield=True):
            return await on_end(usage, output_bytes, abandoned=abandoned)

    try:
        async for line in response.aiter_lines():
            lines.append(line)
            if line.strip():
                continue
            event, data = parse_event(lines)
            out, lines = "\n".join(lines) + "\n", []
            if data is not None and not decoder.done:
                for chunk in decoder.feed(event, data):
                    usage = chunk["usage"] if isinstance(chunk.get("usage"), dict) else usage
                    output_bytes += chunk_output_bytes(chunk)
                if decoder.done:  # the provider's last event: what was charged goes in it
                    data = passthrough.traced(data, trace(await end()))
                    out = (f"event: {event}\n" if event else "") + f"data: {json.dumps(data, ensure_ascii=False)}\n\n"
            yield out.encode()
        if lines:
            yield ("\n".join(lines) + "\n").encode()
        read_all = True
    except httpx.TransportError as e:
        read_all = True  # the upstream broke: what it sent is all there is; bytes reached the caller, say so in-band
        yield passthrough.error_event(f"upstream {result.model} stream broke: {type(e).__name__}")
    finally:
        with anyio.CancelScope(shield=True):
            await response.aclose()
        if not ended:
            await end(abandoned=not read_all)


async def translated(events: AsyncIterator[bytes], live: LiveEvents,
                     charged: Callable[[], list]) -> AsyncIterator[bytes]:
    """`events` (serving/gateway/streams.py `sse_passthrough`: chat SSE, the charges settled before `[DONE]`)
    rendered by `live` as each chunk comes; `charged()`: what the stream was charged, once it ended."""
    closed = False
    try:
        async for raw in events:
            line = raw.decode(errors="replace").strip()
            if closed or not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                closed = True
                for event in live.close(charged()):
                    yield event
                continue
            try:
                chunk = json.loads(data)
            except json.JSONDecodeError:
                continue
            if not isinstance(chunk, dict):
                continue
            if isinstance(chunk.get("error"), dict):
                closed = True
                for event in live.fail(str(chunk["error"].get("message") or "upstream stream error")):
                    yield event
                continue
            chunk.pop("switchcraft", None)  # the trace goes in the caller's last event
            for event in live.feed(chunk):
                yield event
        if not closed:  # the upstream ended without finishing its answer
            for event in live.fail("the upstream's stream ended before its answer was complete"):
                yield event
    finally:
        await events.aclose()
