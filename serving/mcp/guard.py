"""What the MCP gateway checks before the SDK reads a message, and the shape of every refusal.

    app = JsonRpcErrors(Gate(gw, sdk_app))       # Host/Origin, key, group, body size; refusals as JSON-RPC errors
    ListenCap(ListenHandler(bus, max_subscriptions=cfg.max_listens), cfg.max_listens_per_key, who)

`Gate` answers in this order: a Host or Origin the config does not allow (421 / 403: the MCP SDK's DNS-rebinding
check, `TransportSecurityMiddleware`, on every host), a missing or unknown key (401), a group the key may not see
(404), a body over `max_body_bytes` (413, before any of it is parsed). `JsonRpcErrors` turns every HTTP error
whose body is not JSON (the SDK's plain-text and empty 4xx answers) into a JSON-RPC error object
`{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": …, "data": {"status": …}}}`, so a host reads
every refusal the same way. The header and body deadlines are the chat gateway's own (serving/gateway/server.py
`DeadlineH11Protocol`, serving/core/errors.py `CatchAll`), wired in server.py.
"""

from __future__ import annotations

from collections import Counter
from http import HTTPStatus
from typing import Any

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_REQUEST
from starlette.requests import Request
from starlette.responses import JSONResponse

from serving.core.errors import GatewayError
from serving.mcp.ledger import clip
from serving.mcp.upstream import McpError


def jsonrpc_body(status: int, message: str, reason: str) -> dict[str, Any]:
    """An HTTP-level refusal as a JSON-RPC error object (no request id: the message was never read)."""
    code = INVALID_REQUEST if status < 500 else INTERNAL_ERROR
    return {"jsonrpc": "2.0", "id": None,
            "error": {"code": code, "message": message, "data": {"status": status, "reason": reason}}}


def jsonrpc_error(status: int, message: str, reason: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(jsonrpc_body(status, message, reason), status_code=status, headers=headers)


class JsonRpcShape:
    """CatchAll's `shapes` (serving/core/errors.py) for every path: its 408 and 500 as JSON-RPC errors."""

    @staticmethod
    def get(path: str, default=None):
        return lambda e: jsonrpc_body(e.status, e.message, e.type)


class JsonRpcErrors:
    """ASGI middleware: a 4xx/5xx whose body is not JSON is re-sent as a JSON-RPC error with the same status and
    headers (an `Allow` stays), its text (or the status's phrase) as the message."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        held: dict[str, Any] = {}

        async def shaping(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                ctype = dict(message.get("headers") or []).get(b"content-type", b"")
                if message["status"] >= 400 and not ctype.startswith(b"application/json"):
                    held.update(start=message, body=b"")
                    return
            elif message["type"] == "http.response.body" and held:
                held["body"] += message.get("body", b"")
                if message.get("more_body", False):
                    return
                status = held["start"]["status"]
                text = held["body"].decode("utf-8", "replace").strip()[:500] or HTTPStatus(status).phrase
                keep = {k.decode("latin-1"): v.decode("latin-1") for k, v in held["start"].get("headers") or []
                        if k.lower() not in (b"content-type", b"content-length")}
                await jsonrpc_error(status, text, "http", keep)(scope, _nothing, send)
                return
            await send(message)

        await self.app(scope, receive, shaping)


async def _nothing() -> dict[str, Any]:
    return {"type": "http.disconnect"}


class Gate:
    """Host/Origin, the key and the endpoint checked, and the body bounded, before the MCP layer: a hidden group
    and one that does not exist answer alike (404)."""

    def __init__(self, gw, app, security: TransportSecuritySettings) -> None:
        self.gw, self.app = gw, app
        self.security = TransportSecurityMiddleware(security)

    async def __call__(self, scope, receive, send) -> None:
        req = Request(scope)
        refused = await self.security.validate_request(req, is_post=req.method == "POST")
        if refused is not None:  # the SDK's answer (plain text); JsonRpcErrors shapes it, naming the setting
            hint = {421: " (allowed_hosts)", 403: " (allowed_origins)"}.get(refused.status_code, "")
            text = refused.body.decode("utf-8", "replace") + hint
            await jsonrpc_error(refused.status_code, text, "transport")(scope, receive, send)
            return
        try:
            ident = await self.gw.keys.verify(req.headers.get("authorization"))
        except GatewayError as e:
            await jsonrpc_error(e.status, e.message, e.reason or "auth", e.headers)(scope, receive, send)
            return
        group = req.path_params.get("group")
        if group is not None and group not in self.gw.groups_for(ident):
            groups = ", ".join(self.gw.groups_for(ident)) or "none"
            await jsonrpc_error(404, f"no group {clip(group, self.gw.cfg.clip_chars)!r} for this key; groups: "
                                f"{groups} (or /mcp)", "group")(scope, receive, send)
            return
        first = await self._bounded_body(req, scope, receive, send)
        if first is None:
            return
        await self.app(scope, _replay(first, receive), send)

    async def _bounded_body(self, req: Request, scope, receive, send) -> dict[str, Any] | None:
        """The whole body as one `http.request` message, or None once a 413 was sent (over max_body_bytes)."""
        limit = self.gw.cfg.max_body_bytes
        declared = req.headers.get("content-length", "")
        too_large = jsonrpc_error(413, f"request body is over {limit:,} bytes (max_body_bytes)", "body_too_large",
                                  {"connection": "close"})
        if declared.isdigit() and int(declared) > limit:
            await too_large(scope, receive, send)
            return None
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # gone before the body was complete
                return message
            body += message.get("body", b"")
            if len(body) > limit:
                await too_large(scope, receive, send)
                return None
            if not message.get("more_body", False):
                return {"type": "http.request", "body": bytes(body), "more_body": False}


def _replay(first: dict[str, Any], receive):
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return first
        return await receive()

    return replay


class ListenCap:
    """`subscriptions/listen` with at most `per_key` streams open per key (the SDK's handler bounds all keys)."""

    def __init__(self, handler, per_key: int, key_of) -> None:
        self.handler, self.per_key, self.key_of = handler, per_key, key_of
        self.open: Counter[str] = Counter()

    async def __call__(self, ctx, params):
        key = self.key_of(ctx)
        if self.open[key] >= self.per_key:
            raise McpError(INVALID_REQUEST, f"key {key!r} already holds {self.per_key} subscriptions/listen streams "
                           "(max_listens_per_key); close one before listening again",
                           {"reason": "listen_limit", "limit": self.per_key})
        self.open[key] += 1
        try:
            return await self.handler(ctx, params)
        finally:
            self.open[key] -= 1
            if not self.open[key]:
                del self.open[key]
