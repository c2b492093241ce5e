"""MCP for the benches: a fleet of upstream servers, the JSON-RPC envelope, and a fleet with an MCP gateway in front.

    with McpStack(work, defs, servers=10) as mcp:       # two processes on loopback; mcp.url is the gateway's /mcp
        ms, result = Rpc()(mcp.direct("s0"), "tools/list")

Fleet server <name> answers Streamable HTTP (stateless, JSON) at `/<name>/mcp`, lists its tool definitions and
answers every tools/call at once: what a bench measures beyond it is transport and the gateway.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path

import yaml

from evaluation.harness import spawn, stop, wait_until
from evaluation.harness import free_port

PROTOCOL = "2026-07-28"
NAME_OK = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def fleet_app(servers: dict[str, list[dict]]):
    import mcp_types as types
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

    managers = {name: StreamableHTTPSessionManager(app=server_for(name, [types.Tool.model_validate(t) for t in defs]),
                                                   json_response=True, stateless=True)
                for name, defs in servers.items()}

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with contextlib.AsyncExitStack() as stack:
            for m in managers.values():
                await stack.enter_async_context(m.run())
            yield

    return Starlette(lifespan=lifespan, routes=[Route(f"/{name}/mcp", endpoint=StreamableHTTPASGIApp(m),
                                                      methods=["GET", "POST", "DELETE"]) for name, m in managers.items()])


def serve_fleet(tools_file: Path, port: int) -> None:
    """The fleet of `tools_file` ({"<server>": [definitions]}) on 127.0.0.1:port."""
    import uvicorn

    uvicorn.run(fleet_app(json.loads(Path(tools_file).read_text())), host="127.0.0.1", port=port, log_level="warning")


def serve_mcp_gateway(config: Path) -> None:
    """The MCP gateway over HTTP, as `switchcraft mcp serve --config CONFIG` runs it."""
    import uvicorn

    from serving.gateway.server import uvicorn_config
    from serving.mcp import McpGateway, http_app, load_mcp_config

    cfg = load_mcp_config(config)
    uvicorn.Server(uvicorn_config(http_app(McpGateway.from_config(cfg)), cfg)).run()  # the header deadline too


def start_fleet(work: Path, servers: dict[str, list[dict]]) -> tuple:
    """(process, base URL) of a fleet serving `servers`, ready."""
    port = free_port()
    (work / "fleet_tools.json").write_text(json.dumps(servers))
    proc = spawn(serve_fleet, work / "fleet_tools.json", port)
    base, first = f"http://127.0.0.1:{port}", next(iter(servers))
    wait_until(lambda: Rpc()(f"{base}/{first}/mcp", "tools/list"), "the MCP fleet", 120, proc)
    return proc, base


def fleet_tools(n: int, data_root: str | Path) -> list[dict]:
    """n MCP tool definitions: the first distinct BFCL function docs (thousand_tools), synthetic ones past them."""
    from serving.tools.loaders import card_from_entry

    path = Path(data_root) / "bfcl_v4_outputs" / "thousand_tools" / "all_unique_functions.json"
    out, seen = [], set()
    for row in json.loads(path.read_text()) if path.exists() else []:
        fn = row.get("function") or {}
        name = fn.get("name", "")
        if NAME_OK.match(name) and name not in seen and len(out) < n:
            seen.add(name)
            card = card_from_entry({"type": "function", "function": fn})
            out.append({"name": name, "description": fn.get("description", ""), "inputSchema": card.parameters})
    return out + [{"name": f"tool_{i}", "description": f"Synthetic tool {i}: returns its name.",
                   "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}} for i in range(len(out), n)]


def rpc_args(method: str, params: dict | None = None, n: int = 1) -> dict:
    """httpx keyword arguments of one JSON-RPC call over Streamable HTTP (the per-request envelope)."""
    meta = {"io.modelcontextprotocol/protocolVersion": PROTOCOL, "io.modelcontextprotocol/clientCapabilities": {}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": PROTOCOL, "mcp-method": method}
    if params and isinstance(params.get("name"), str):
        headers["mcp-name"] = params["name"]
    return {"json": {"jsonrpc": "2.0", "id": n, "method": method, "params": {**(params or {}), "_meta": meta}},
            "headers": headers}


class Rpc:
    """One POST a JSON-RPC call (stateless servers): (ms, result); RuntimeError on an HTTP or JSON-RPC error."""

    def __init__(self) -> None:
        import httpx2

        self.http, self.n = httpx2.Client(timeout=60.0), 0

    def __call__(self, url: str, method: str, params: dict | None = None) -> tuple[float, dict]:
        self.n += 1
        t0 = time.perf_counter()
        r = self.http.post(url, **rpc_args(method, params, self.n))
        ms = (time.perf_counter() - t0) * 1e3
        answer = r.json()
        if r.status_code != 200 or "error" in answer:
            raise RuntimeError(f"{method} {url}: HTTP {r.status_code} {json.dumps(answer)[:300]}")
        return ms, answer["result"]


class McpStack:
    """`defs` split evenly over `servers` fleet servers s0 … s<N-1>, and an MCP gateway in front of them, each its
    own process; `url` is the gateway's `/mcp`, `tools` the definitions under their exposed names."""

    def __init__(self, work: Path, defs: list[dict], servers: int = 2, log_path: str | None = None,
                 max_default_tools: int | None = None) -> None:
        per = len(defs) // servers
        self.split = {f"s{i}": defs[i * per:(i + 1) * per] for i in range(servers)}
        self.tools = [{**d, "name": f"{s}__{d['name']}"} for s, ds in self.split.items() for d in ds]
        self.work, self.log_path, self.max_default_tools = Path(work), log_path, max_default_tools
        self.procs: list = []

    def __enter__(self) -> McpStack:
        try:
            fleet, self.fleet_url = start_fleet(self.work, self.split)
            self.procs.append(fleet)
            port = free_port()
            cfg = {"port": port, "auth": {"mode": "none"}, "index_dir": str(self.work / "index"),
                   "log_path": self.log_path, "upstreams": [{"name": s, "url": self.direct(s)} for s in self.split]}
            if self.max_default_tools is not None:
                cfg["max_default_tools"] = self.max_default_tools
            (self.work / "mcp.yaml").write_text(yaml.safe_dump(cfg))
            self.procs.append(spawn(serve_mcp_gateway, self.work / "mcp.yaml"))
            self.url, rpc = f"http://127.0.0.1:{port}/mcp", Rpc()
            # ready when every group lists its tools (/healthz names them to an admin key only; this one has none)
            self.ready_s = wait_until(lambda: sum(len(rpc(f"{self.url}/{s}", "tools/list")[1]["tools"])
                                                  for s in self.split) == len(self.tools), "the MCP gateway", 900,
                                      self.procs[1])
        except BaseException:
            self.__exit__()
            raise
        return self

    def direct(self, server: str) -> str:
        return f"{self.fleet_url}/{server}/mcp"

    def __exit__(self, *exc) -> None:
        stop(*self.procs)
        self.procs.clear()
