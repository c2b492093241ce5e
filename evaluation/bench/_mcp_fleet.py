"""A fleet of upstream MCP servers, a process `switchcraft bench mcp` starts: N servers on one loopback port, T tools each.

    python -m evaluation.bench._mcp_fleet --tools tools.json --servers 10 --port 8300   (the bench starts it)

Server i answers Streamable HTTP (stateless, JSON responses) at `/s<i>/mcp`, lists its slice of the tool file
(MCP tool definitions: name, description, inputSchema; a JSON object instead of a list names the servers:
`{"<server>": [definitions]}` is served at `/<server>/mcp`) and answers every tools/call at once with one short
text block, so what the bench measures beyond it is transport and the gateway. Its own process: its CPU is not
the gateway's nor the client's.
"""

from __future__ import annotations

import argparse
import contextlib
import json

import mcp_types as types
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.routing import Route


def server_for(name: str, tools: list[types.Tool]) -> Server:
    async def on_list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"ok {name}.{params.name}")])

    return Server(name, on_list_tools=on_list_tools, on_call_tool=on_call_tool)


def fleet_app(tool_defs: list[dict] | dict[str, list[dict]], servers: int) -> Starlette:
    if isinstance(tool_defs, list):  # an even split over s0..s<N-1>
        per = len(tool_defs) // servers
        tool_defs = {f"s{i}": tool_defs[i * per:(i + 1) * per] for i in range(servers)}
    managers, routes = [], []
    for name, defs in tool_defs.items():
        tools = [types.Tool.model_validate(t) for t in defs]
        manager = StreamableHTTPSessionManager(app=server_for(name, tools), json_response=True, stateless=True)
        managers.append(manager)
        routes.append(Route(f"/{name}/mcp", endpoint=StreamableHTTPASGIApp(manager), methods=["GET", "POST", "DELETE"]))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with contextlib.AsyncExitStack() as stack:
            for m in managers:
                await stack.enter_async_context(m.run())
            yield

    return Starlette(routes=routes, lifespan=lifespan)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", required=True, help="JSON list of MCP tool definitions")
    ap.add_argument("--servers", type=int, default=10)
    ap.add_argument("--port", type=int, required=True)
    a = ap.parse_args()
    with open(a.tools) as f:
        app = fleet_app(json.load(f), a.servers)
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
