"""A tiny stdio MCP server on the official SDK, for the gateway's tests: tools that change, calls that are slow.

    python tests/serving/mcp/toy_server.py        # env: TOY_TOOLS (a JSON list of extra tool names), TOY_LOG

Tools: `ping` ("pong"), `sleep(seconds)` (answers after that long; its start, end or cancellation are appended
to $TOY_LOG as JSON lines, so a test sees a cancellation reach this server), `announce` (tells subscribers that
the tool list changed: `subscriptions/listen` streams, and `notifications/tools/list_changed` on a handshake-era
session), and one tool per name in the $TOY_TOOLS file, read at every tools/list (each answers its own name).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

BUS = InMemorySubscriptionBus()
OBJ = {"type": "object"}


def log(**row) -> None:
    path = os.environ.get("TOY_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"t": time.time(), **row}) + "\n")


def extra() -> list[str]:
    path = os.environ.get("TOY_TOOLS")
    return json.loads(Path(path).read_text()) if path and Path(path).exists() else []


async def on_list_tools(ctx, params) -> types.ListToolsResult:
    tools = [types.Tool(name="ping", description="Answer pong.", input_schema=OBJ),
             types.Tool(name="sleep", description="Wait a number of seconds, then answer.",
                        input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}}),
             types.Tool(name="announce", description="Announce that the tool list changed.", input_schema=OBJ)]
    tools += [types.Tool(name=n, description=f"The {n.replace('_', ' ')} tool: answers its name.", input_schema=OBJ)
              for n in extra()]
    return types.ListToolsResult(tools=tools)


def text(s: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=s)])


async def on_call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    if params.name == "ping":
        return text("pong")
    if params.name == "sleep":
        log(event="start", seconds=args.get("seconds", 0))
        try:
            await anyio.sleep(float(args.get("seconds", 0)))
        except anyio.get_cancelled_exc_class():
            log(event="cancelled")
            raise
        log(event="done")
        return text("slept")
    if params.name == "announce":
        await BUS.publish(ToolsListChanged())
        if ctx.protocol_version < "2026":
            await ctx.session.send_tool_list_changed()
        return text("announced")
    if params.name in extra():
        return text(params.name)
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"no tool {params.name}")], is_error=True)


async def main() -> None:
    server = Server("toy", on_list_tools=on_list_tools, on_call_tool=on_call_tool,
                    on_subscriptions_listen=ListenHandler(BUS))
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
