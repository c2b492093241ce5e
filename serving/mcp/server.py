"""The downstream MCP server on the official SDK: Streamable HTTP (`/mcp`, `/mcp/<group>`) and stdio.

    app = http_app(gateway)                          # Starlette: run with uvicorn (switchcraft mcp serve)
    await serve_stdio(gateway, keys_env="SWITCHCRAFT_MCP_KEY")   # one host over stdin/stdout

HTTP: every request needs `Authorization: Bearer <key>` (the chat gateway's
keys, serving/gateway/auth.py) unless `auth.mode: none`; a missing or unknown
key is an HTTP 401 with `WWW-Authenticate: Bearer`, a group the key may not see
(or that does not exist) a 404, before any MCP message is read. The server is
stateless (every POST carries its own identity and endpoint, JSON responses):
the 2026-07-28 protocol's per-request envelope and the older initialize
handshake both work. `GET /healthz` answers each upstream's state.

stdio: the host starts `switchcraft mcp serve --stdio`; the identity is the key
in `$SWITCHCRAFT_MCP_KEY` (or the local caller with `auth.mode: none`), and the
endpoint is `/mcp` (or `--group`).
"""

from __future__ import annotations

import contextlib
import os

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.subscriptions import ListenHandler
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from serving.gateway.auth import Identity
from serving.gateway.errors import GatewayError
from serving.mcp.gateway import McpGateway

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def mcp_server(gw: McpGateway, fixed: tuple[Identity, str | None] | None = None) -> Server:
    """The SDK server answering tools/list and tools/call for the caller and endpoint of each request."""

    def who(ctx) -> tuple[Identity, str | None]:
        if fixed is not None:
            return fixed
        req: Request = ctx.request
        return gw.keys.authenticate(req.headers.get("authorization")), req.path_params.get("group")

    async def on_list_tools(ctx, params) -> types.ListToolsResult:
        ident, group = who(ctx)
        return types.ListToolsResult(tools=gw.list_tools(ident, group))

    async def on_call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        ident, group = who(ctx)
        return await gw.call(ident, group, params.name, params.arguments)

    return Server("switchcraft-mcp", version="1", on_list_tools=on_list_tools, on_call_tool=on_call_tool,
                  on_subscriptions_listen=ListenHandler(gw.bus),
                  instructions="Tools from several MCP servers, filtered by your key. On /mcp: find_tools "
                               "searches every tool you may use, call_tool calls one.")


class Gate:
    """The key and the endpoint checked before the MCP layer: 401 without a valid key, 404 for a group the key
    may not see (a hidden group and one that does not exist answer alike)."""

    def __init__(self, gw: McpGateway, app) -> None:
        self.gw, self.app = gw, app

    async def __call__(self, scope, receive, send) -> None:
        req = Request(scope)
        try:
            ident = self.gw.keys.authenticate(req.headers.get("authorization"))
        except GatewayError as e:
            await JSONResponse(e.body(), status_code=e.status, headers=e.headers)(scope, receive, send)
            return
        group = req.path_params.get("group")
        if group is not None and group not in self.gw.groups_for(ident):
            body = {"error": {"message": f"no group {group!r} for this key; groups: "
                              f"{', '.join(self.gw.groups_for(ident)) or 'none'} (or /mcp)", "code": 404}}
            await JSONResponse(body, status_code=404)(scope, receive, send)
            return
        await cancel_on_disconnect(self.app, scope, receive, send)


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


def http_app(gw: McpGateway, host: str = "127.0.0.1", ready_timeout_s: float | None = None) -> Starlette:
    """The Starlette app; its lifespan runs the upstreams and the SDK's session manager."""
    security = None
    if host in LOOPBACK:  # the SDK's default for loopback: DNS-rebinding protection (Host and Origin checked)
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])
    manager = StreamableHTTPSessionManager(app=mcp_server(gw), json_response=True, stateless=True,
                                           security_settings=security)
    endpoint = Gate(gw, StreamableHTTPASGIApp(manager))

    async def healthz(request: Request) -> JSONResponse:
        status = gw.status()
        ok = all(u["up"] for u in status["upstreams"])
        return JSONResponse(status, status_code=200 if ok else 503)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with gw.running(ready_timeout_s), manager.run():
            yield

    return Starlette(routes=[Route("/mcp", endpoint=endpoint, methods=["GET", "POST", "DELETE"]),
                             Route("/mcp/{group}", endpoint=endpoint, methods=["GET", "POST", "DELETE"]),
                             Route("/healthz", healthz)], lifespan=lifespan)


async def serve_stdio(gw: McpGateway, group: str | None = None, key_env: str = "SWITCHCRAFT_MCP_KEY") -> None:
    """Serve one host over stdin/stdout as the key in `$key_env` (or the local caller, auth.mode none)."""
    from mcp.server.stdio import stdio_server

    key = os.environ.get(key_env, "")
    ident = gw.keys.authenticate(f"Bearer {key}" if key else None)
    server = mcp_server(gw, (ident, group))
    async with gw.running():
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
