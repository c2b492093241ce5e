"""The soak's traffic beyond one-shot chat requests: console logins, an MCP gateway's meta-tools, agent sessions.

    with McpStack(work, data_root, tools=40) as mcp:          # the upstream fleet and `switchcraft mcp serve`
        req = mcp_request(rng, mcp, "mcp_find")               # a Req: where, what, how
        req = console_login(rng, gateway_url)
        req = conversation.next_turn(rng, example, gateway_url)

Each builder returns a `Req` that evaluation/bench/soak.py sends and counts by status. What is hostile here
(wrong console keys, a login body past the gateway's body limit, a call to a tool nobody has, arguments that are
not an object, a body that is not JSON) must get a 4xx or an answer, never a 5xx. The MCP gateway runs as
`switchcraft bench mcp` runs it: its own process, keys off, in front of a fleet of Streamable HTTP servers
(evaluation/bench/_mcp_fleet.py) serving the first BFCL function docs as tools.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from evaluation.bench.mcp import PROTOCOL, fleet_tools, wait_for
from evaluation.harness import free_port
from evaluation.bench._support import Spawned, serve_mcp_gateway, spawn

OVERSIZED_BYTES = 3_000_000  # past the gateway's default max_body_bytes (2 MB)
OVERSIZED_EVERY = 20  # one console login in this many sends that
SESSION_TURNS = (2, 6)  # a conversation's turns, drawn in this range
SESSION = "x-switchcraft-session"


@dataclass
class Req:
    url: str
    json: object = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    rpc: bool = False  # a JSON-RPC call: an `error` in a 200 answer is counted too
    oversized: bool = False  # past a body bound: the server may answer 413 and close before the body is sent


def console_login(rng, gateway_url: str) -> Req:
    """A login attempt with a key that is not one (form-encoded, as the page posts it); now and then a body far
    past the gateway's body limit."""
    form = {"content-type": "application/x-www-form-urlencoded"}
    if rng.randrange(OVERSIZED_EVERY) == 0:
        return Req(gateway_url + "/console/login", content=b"key=" + b"k" * OVERSIZED_BYTES, headers=form,
                   oversized=True)
    key = "sk-sc-" + "".join(rng.choice("abcdef0123456789") for _ in range(32))
    return Req(gateway_url + "/console/login", content=f"key={key}&next=/console/savings".encode(), headers=form)


class McpStack:
    """The upstream fleet (`servers` servers sharing `tools` tools) and an MCP gateway in front of them, each its
    own process on loopback; `url` is the gateway's `/mcp`."""

    def __init__(self, data_root: Path, *, tools: int = 40, servers: int = 2, ready_timeout_s: float = 600.0) -> None:
        self.data_root, self.n_tools, self.servers, self.ready_timeout_s = data_root, tools, servers, ready_timeout_s
        self.work = tempfile.TemporaryDirectory(prefix="soak-mcp-")
        self.procs: list[subprocess.Popen | Spawned] = []
        self.tools: list[dict] = []
        self.url = ""

    def __enter__(self) -> McpStack:
        work = Path(self.work.name)
        defs = fleet_tools(self.n_tools, str(self.data_root))
        (work / "tools.json").write_text(json.dumps(defs))
        per = len(defs) // self.servers
        self.tools = [{**d, "name": f"s{i // per}__{d['name']}"} for i, d in enumerate(defs[:per * self.servers])]
        fleet_port, port = free_port(), free_port()
        cfg = {"port": port, "auth": {"mode": "none"}, "index_dir": str(work / "index"), "log_path": None,
               "upstreams": [{"name": f"s{i}", "url": f"http://127.0.0.1:{fleet_port}/s{i}/mcp"}
                             for i in range(self.servers)]}
        (work / "mcp.yaml").write_text(yaml.safe_dump(cfg))
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            self.procs.append(subprocess.Popen([sys.executable, "-m", "evaluation.bench._mcp_fleet", "--tools",
                                                str(work / "tools.json"), "--servers", str(self.servers), "--port",
                                                str(fleet_port)], env=env, stderr=subprocess.DEVNULL))
            wait_for(lambda: httpx.post(f"http://127.0.0.1:{fleet_port}/s0/mcp", timeout=2,
                                        **rpc_args("tools/list")).status_code == 200, "the MCP fleet", 60,
                     self.procs[0])
            self.procs.append(spawn(serve_mcp_gateway, work / "mcp.yaml", env=env))
            wait_for(lambda: self.listed(port) == len(self.tools), "the MCP gateway", self.ready_timeout_s,
                     self.procs[1])
        except BaseException:
            self.__exit__()
            raise
        self.url = f"http://127.0.0.1:{port}/mcp"
        return self

    def listed(self, port: int) -> int:
        """Tools the gateway lists over all its groups (/healthz names them to an admin key only)."""
        return sum(len(httpx.post(f"http://127.0.0.1:{port}/mcp/s{i}", timeout=5, **rpc_args("tools/list"))
                       .json()["result"]["tools"]) for i in range(self.servers))

    def __exit__(self, *exc) -> None:
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs.clear()
        self.work.cleanup()


def rpc_args(method: str, params: dict | None = None, n: int = 1) -> dict:
    """httpx keyword arguments of one JSON-RPC call over Streamable HTTP (the per-request envelope)."""
    meta = {"io.modelcontextprotocol/protocolVersion": PROTOCOL, "io.modelcontextprotocol/clientCapabilities": {}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": PROTOCOL,
               "mcp-method": method}
    if params and isinstance(params.get("name"), str):
        headers["mcp-name"] = params["name"]
    return {"json": {"jsonrpc": "2.0", "id": n, "method": method, "params": {**(params or {}), "_meta": meta}},
            "headers": headers}


def mcp_request(rng, mcp: McpStack, kind: str) -> Req:
    """`mcp_find`: find_tools with a tool description's first words; `mcp_call`: call_tool of a real tool;
    `mcp_hostile`: a tool nobody has, arguments that are not an object, a query far too long, a body that is
    not JSON."""
    tool = mcp.tools[rng.randrange(len(mcp.tools))]
    if kind == "mcp_find":
        query = " ".join((tool.get("description") or tool["name"]).split()[:8])
        return Req(mcp.url, **rpc_args("tools/call", {"name": "find_tools", "arguments": {"query": query}}),
                   rpc=True)
    if kind == "mcp_call":
        args = {k: 1 for k in (tool.get("inputSchema") or {}).get("required") or []}
        return Req(mcp.url, **rpc_args("tools/call", {"name": "call_tool", "arguments": {
            "name": tool["name"], "arguments": args}}), rpc=True)
    variants = [
        lambda: rpc_args("tools/call", {"name": "call_tool", "arguments": {"name": "s9__no_such_tool",
                                                                           "arguments": {}}}),
        lambda: rpc_args("tools/call", {"name": "call_tool", "arguments": {"name": tool["name"],
                                                                           "arguments": "all of them"}}),
        lambda: rpc_args("tools/call", {"name": "find_tools", "arguments": {"query": "x" * 200_000}}),
        lambda: rpc_args("tools/call", {"name": "no_such_meta_tool", "arguments": {}}),
    ]
    pick = rng.randrange(len(variants) + 1)
    if pick == len(variants):
        return Req(mcp.url, content=b'{"jsonrpc": "2.0", "id": 1, "method": ', headers=rpc_args("tools/list")["headers"])
    return Req(mcp.url, **variants[pick]())


@dataclass
class Conversation:
    """One worker's agent session: a name, the turns so far, how many are left."""

    name: str = ""
    history: list[dict] = field(default_factory=list)
    left: int = 0
    started: int = 0

    def next_turn(self, rng, body: dict, gateway_url: str, prefix: str) -> Req:
        """`body` (a one-shot chat body) as the next turn of this conversation (a new one when it ended), under
        its session header."""
        if self.left <= 0:
            self.started += 1
            self.name, self.history, self.left = f"{prefix}-{self.started}", [], rng.randint(*SESSION_TURNS)
        self.left -= 1
        messages = [*self.history, *body["messages"]]
        self.history += [{"role": "user", "content": f"Task step {len(self.history) // 2 + 1}."},
                         {"role": "assistant", "content": "Done; what next?"}]
        return Req(gateway_url + "/v1/chat/completions", json={**body, "messages": messages},
                   headers={SESSION: self.name})
