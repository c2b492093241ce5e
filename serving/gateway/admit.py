"""Admitting a request: its id, its API key (and the key's limits), its body.

    rid = request_id(request)                   # a fresh id, unique per request (the caller's is kept beside it)
    ident = await authenticate(gw, request)     # GatewayError 401 / 429 / 503 with `connection: close`
    body = await read_body(gw, request)         # the JSON object: 415 not JSON, 413 over max_body_bytes, 400 a
                                                # field over its bound (tools, enum, schema depth, metadata)

A key is refused before its body is parsed. A body up to max_body_bytes is read and dropped first, so the
connection stays usable and the answer is not lost to a reset (closing a socket with unread bytes resets it,
and the client may never read the refusal); a larger one is not read, and the refusal closes the connection.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import anyio
from fastapi import Request
from starlette.requests import ClientDisconnect

from serving.core.auth import Identity
from serving.core.errors import GatewayError
from serving.gateway.parts import Gateway
from serving.gateway.body import Bounds, check_sizes, parse_body

log = logging.getLogger("switchcraft.gateway")
DRAIN_BYTES = 16 * 2**20  # an oversized body is read and dropped up to this, to answer 413 on a reusable connection
OFF_LOOP_BYTES = 64 * 2**10  # a larger body is decoded and checked in a worker thread: /healthz keeps answering


def request_id(request: Request) -> str:
    """The gateway's own id for this request, unique: the decision log, the ledger and `switchcraft learn` key
    on it. A caller's `x-client-request-id` (or `x-request-id`) is never used as the id — two callers may send
    the same one — but kept beside it (`request.state.client_request_id`, and one log line joining the two)."""
    rid = uuid.uuid4().hex
    given = request.headers.get("x-client-request-id") or request.headers.get("x-request-id") or ""
    client = given if given.isascii() and given.isprintable() and 0 < len(given) <= 128 else None
    request.state.request_id, request.state.client_request_id = rid, client
    if client is not None:
        log.info(json.dumps({"event": "client_request_id", "request_id": rid, "client_request_id": client}))
    return rid


async def authenticate(gw: Gateway, request: Request, authorization: str | None = None) -> Identity:
    """The request's identity (its key's), admitted by the key's limits; GatewayError 401 / 429 / 503 otherwise.
    `authorization`: the key as another header carried it (Anthropic's x-api-key), when there is no Authorization."""
    ident = None
    try:
        ident = await gw.keys.verify(request.headers.get("authorization") or authorization)
        await gw.budgets.admit(ident)
    except GatewayError as e:
        gw.metrics.auth_rejections.labels(key=ident.key_id if ident else "", reason=e.reason or "").inc()
        if not await drained(request, gw.cfg.max_body_bytes):
            e.headers = {**(e.headers or {}), "connection": "close"}
        raise
    return ident


async def drained(request: Request, limit: int) -> bool:
    """Read and drop the body when it is at most `limit` bytes (True: the connection may serve another request);
    False, having read at most `limit + 1` bytes, when it is larger or the client went away."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        return False
    seen = 0
    try:
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > limit:
                return False
    except ClientDisconnect:  # the client went away: nothing left to keep open
        return False
    return True


async def read_body(gw: Gateway, request: Request) -> dict[str, Any]:
    """The body as a JSON object. Too large: a 413 once the rest is read and dropped (up to DRAIN_BYTES), so the
    connection stays usable; beyond that, a 413 with `connection: close` (unread bytes would block it)."""
    check_content_type(request.headers.get("content-type"))
    limit = gw.cfg.max_body_bytes
    declared = request.headers.get("content-length")
    size = int(declared) if declared and declared.isdigit() else None
    if size is not None and size > DRAIN_BYTES:
        raise GatewayError(413, f"request body is {size:,} bytes; the limit is {limit:,} (max_body_bytes)",
                           param="body", headers={"connection": "close"})
    raw, seen = bytearray(), 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > DRAIN_BYTES:
            raise GatewayError(413, f"request body exceeds the limit of {limit:,} bytes (max_body_bytes)",
                               param="body", headers={"connection": "close"})
        if seen <= limit:
            raw += chunk
    if seen > limit:
        raise GatewayError(413, f"request body is {seen:,} bytes; the limit is {limit:,} (max_body_bytes)",
                           param="body")
    cfg = gw.cfg
    bounds = Bounds(cfg.max_tools, cfg.max_enum_values, cfg.max_schema_depth, cfg.max_metadata_bytes)

    def parse() -> dict[str, Any]:
        body = parse_body(bytes(raw), limit, cfg.max_json_depth)
        check_sizes(body, bounds)
        return body

    if len(raw) <= OFF_LOOP_BYTES:
        return parse()
    return await anyio.to_thread.run_sync(parse)  # a large body is decoded and checked beside the event loop


def check_content_type(value: str | None) -> None:
    """JSON, in UTF-8 (RFC 8259 §8.1): `application/json` or `application/*+json`, no other charset; no
    Content-Type at all is read as JSON. 415 otherwise (form and text/plain bodies are what a browser may send
    to another site without asking: never read as a request)."""
    if value is None:
        return
    media, _, params = value.partition(";")
    media = media.strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise GatewayError(415, f"Content-Type {value[:80]!r} is not JSON; send the body as application/json "
                           "(UTF-8)", type="unsupported_media_type", param="content-type",
                           headers={"connection": "close"})
    for param in params.split(";"):
        name, _, charset = param.partition("=")
        charset = charset.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
            raise GatewayError(415, f"charset {charset[:40]!r}: JSON on the wire is UTF-8 (RFC 8259 §8.1); send "
                               "the body as UTF-8 with Content-Type: application/json", type="unsupported_media_type",
                               param="content-type", headers={"connection": "close"})
