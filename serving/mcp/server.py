"""The downstream MCP server on the official SDK: Streamable HTTP (`/mcp`, `/mcp/<group>`) and stdio.

    app = http_app(gateway)                          # Starlette: run with uvicorn (switchcraft mcp serve)
    await serve_stdio(gateway, keys_env="SWITCHCRAFT_MCP_KEY")   # one host over stdin/stdout

HTTP: every request needs `Authorization: Bearer <key>` (the chat gateway's
keys, serving/core/auth.py) unless `auth.mode: none`; guard.py checks Host
and Origin, the key (401), the group (404) and the body size (413) before any
MCP message is read, and every refusal is a JSON-RPC error object. The
server is stateless (every POST carries its own identity and endpoint, JSON
responses): the 2026-07-28 protocol's per-request envelope and the older
initialize handshake both work. `GET /healthz` answers an overall status, and
each upstream's state to an admin key. `uvicorn_config(app, cfg)` (the chat
gateway's) adds the header deadline; `CatchAll` the body deadline.

stdio: the host starts `switchcraft mcp serve --stdio`; the identity is the key
in `$SWITCHCRAFT_MCP_KEY` (or the local caller with `auth.mode: none`), and the
endpoint is `/mcp` (or `--group`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.subscriptions import ListenHandler
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from serving.core.auth import Identity
from serving.core.errors import CatchAll, GatewayError
from serving.core.metrics import GatewayMetrics
from serving.mcp.gateway import McpGateway
from serving.mcp.guard import Gate, JsonRpcErrors, JsonRpcShape, ListenCap, jsonrpc_error

log = logging.getLogger("switchcraft.mcp")


def mcp_server(gw: McpGateway, fixed: tuple[str | None, str | None] | None = None) -> Server:
    """The SDK server answering tools/list and tools/call for the caller and endpoint of each request; `fixed`:
    one host's (Authorization, group) for the whole session (stdio), its key checked again on each request."""

    def who(ctx) -> tuple[Identity, str | None]:
        if fixed is not None:
            return gw.keys.authenticate(fixed[0]), fixed[1]
        req: Request = ctx.request
        return gw.keys.authenticate(req.headers.get("authorization")), req.path_params.get("group")

    async def on_list_tools(ctx, params) -> types.ListToolsResult:
        await gw.keys.refresh()  # HTTP: Gate did; stdio: a key revoked meanwhile is refused
        ident, group = who(ctx)
        return types.ListToolsResult(tools=gw.list_tools(ident, group))

    async def on_call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        await gw.keys.refresh()
        ident, group = who(ctx)
        return await gw.call(ident, group, params.name, params.arguments)

    listen = ListenCap(ListenHandler(gw.bus, max_subscriptions=gw.cfg.max_listens), gw.cfg.max_listens_per_key,
                       lambda ctx: who(ctx)[0].key_id)
    return Server("switchcraft-mcp", version="1", on_list_tools=on_list_tools, on_call_tool=on_call_tool,
                  on_subscriptions_listen=listen,
                  instructions="Tools from several MCP servers, filtered by your key. On /mcp: find_tools "
                               "searches every tool you may use, call_tool calls one.")


async def cancel_on_disconnect(app, scope, receive, send) -> None:
    """Run `app` for one request and cancel it when the client goes away after sending its body.

    A 2026-07-28 host cancels a call by closing its request (the SDK client does on cancellation); the SDK's
    JSON-response path does not watch for that, so without this a cancelled call would run on to its end or its
    upstream's `timeout_s`. Cancelling the handler cancels the upstream call, and the SDK's client sends the
    upstream its cancellation (stdio: `notifications/cancelled`; HTTP: the request closed)."""
    body_done, gone = anyio.Event(), anyio.Event()

    async def receive_body():
        if body_done.is_set():  # the app waits for the disconnect itself (an SSE stream): the watcher's
            await gone.wait()
            return {"type": "http.disconnect"}
        message = await receive()
        if message["type"] == "http.request" and not message.get("more_body", False):
            body_done.set()
        return message

    async with anyio.create_task_group() as tg:
        async def watch() -> None:
            await body_done.wait()
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        await app(scope, receive_body, send)
        tg.cancel_scope.cancel()


def http_app(gw: McpGateway, ready_timeout_s: float | None = None) -> Starlette:
    """The Starlette app; its lifespan runs the upstreams and the SDK's session manager. Serve it with
    `serving.gateway.server.uvicorn_config(app, gw.cfg)` for the header deadline."""
    cfg = gw.cfg
    hosts, origins = cfg.transport_hosts()
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                         allowed_origins=origins)
    manager = StreamableHTTPSessionManager(app=mcp_server(gw), json_response=True, stateless=True,
                                           security_settings=security, max_request_body_size=cfg.max_body_bytes)
    sdk = StreamableHTTPASGIApp(manager)
    endpoint = Gate(gw, functools.partial(cancel_on_disconnect, sdk), security)

    async def healthz(request: Request) -> JSONResponse:
        status = gw.status()
        ok = all(u["up"] for u in status["upstreams"])
        try:  # the groups and servers are the operator's: an admin key reads them, anyone the overall state
            admin = (await gw.keys.verify(request.headers.get("authorization"))).admin
        except GatewayError:
            admin = False
        body = {"status": "ok" if ok else "degraded", **(status if admin else {})}
        return JSONResponse(body, status_code=200 if ok else 503)

    async def no_route(request: Request, exc: HTTPException) -> JSONResponse:
        """404 and 405 after the key check, in JSON-RPC shape; never a redirect built from the caller's Host."""
        try:
            await gw.keys.verify(request.headers.get("authorization"))
        except GatewayError as e:
            return jsonrpc_error(e.status, e.message, e.reason or "auth", e.headers)
        path = request.url.path
        if exc.status_code == 405:
            return jsonrpc_error(405, f"{path} does not take {request.method}", "method", dict(exc.headers or {}))
        hint = f"; without the trailing slash: {path.rstrip('/')}" if path.endswith("/") and len(path) > 1 else ""
        return jsonrpc_error(404, f"no such endpoint: {request.method} {path[:200]}{hint} (endpoints: /mcp, "
                             "/mcp/<group>, /healthz)", "not_found")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with gw.running(ready_timeout_s), manager.run():
            yield

    app = Starlette(routes=[Route("/mcp", endpoint=endpoint, methods=["GET", "POST", "DELETE"]),
                            Route("/mcp/{group}", endpoint=endpoint, methods=["GET", "POST", "DELETE"]),
                            Route("/healthz", healthz)],
                    exception_handlers={HTTPException: no_route}, lifespan=lifespan)
    app.router.redirect_slashes = False
    metrics = app.state.metrics = GatewayMetrics()  # CatchAll's counters (client timeouts, 499s, 500s)
    app.add_middleware(CatchAll, metrics=metrics, log=log, body_timeout_s=cfg.body_timeout_s, shapes=JsonRpcShape())
    app.add_middleware(JsonRpcErrors)
    return app


async def serve_stdio(gw: McpGateway, group: str | None = None, key_env: str = "SWITCHCRAFT_MCP_KEY") -> None:
    """Serve one host over stdin/stdout as the key in `$key_env` (or the local caller, auth.mode none)."""
    from mcp.server.stdio import stdio_server

    key = os.environ.get(key_env, "")
    authorization = f"Bearer {key}" if key else None
    async with gw.running():  # the keys loaded (the state store's, when the config names one)
        gw.keys.authenticate(authorization)  # a missing or invalid key: refused before any host is served
        server = mcp_server(gw, (authorization, group))
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
