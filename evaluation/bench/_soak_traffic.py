"""The soak's traffic beyond one-shot chat requests: console logins, an MCP gateway's meta-tools, agent sessions.
Each builder returns a `Req` that soak.py sends and counts by status; a hostile one must get a 4xx or an answer,
never a 5xx.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evaluation.mcp_fleet import rpc_args

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
    """A login with a key that is not one (form-encoded, as the page posts it); now and then a body far past the
    gateway's body limit."""
    form = {"content-type": "application/x-www-form-urlencoded"}
    if rng.randrange(OVERSIZED_EVERY) == 0:
        return Req(gateway_url + "/console/login", content=b"key=" + b"k" * OVERSIZED_BYTES, headers=form,
                   oversized=True)
    key = "sk-sc-" + "".join(rng.choice("abcdef0123456789") for _ in range(32))
    return Req(gateway_url + "/console/login", content=f"key={key}&next=/console/savings".encode(), headers=form)


def mcp_request(rng, mcp, kind: str) -> Req:
    """`mcp_find`: find_tools with a tool description's first words; `mcp_call`: call_tool of a real tool;
    `mcp_hostile`: a tool nobody has, arguments that are not an object, a query far too long, a body that is not
    JSON."""
    tool = mcp.tools[rng.randrange(len(mcp.tools))]
    if kind == "mcp_find":
        query = " ".join((tool.get("description") or tool["name"]).split()[:8])
        return Req(mcp.url, **rpc_args("tools/call", {"name": "find_tools", "arguments": {"query": query}}), rpc=True)
    if kind == "mcp_call":
        args = {k: 1 for k in (tool.get("inputSchema") or {}).get("required") or []}
        return Req(mcp.url, **rpc_args("tools/call", {"name": "call_tool", "arguments": {
            "name": tool["name"], "arguments": args}}), rpc=True)
    variants = [{"name": "call_tool", "arguments": {"name": "s9__no_such_tool", "arguments": {}}},
                {"name": "call_tool", "arguments": {"name": tool["name"], "arguments": "all of them"}},
                {"name": "find_tools", "arguments": {"query": "x" * 200_000}},
                {"name": "no_such_meta_tool", "arguments": {}}]
    pick = rng.randrange(len(variants) + 1)
    if pick == len(variants):
        return Req(mcp.url, content=b'{"jsonrpc": "2.0", "id": 1, "method": ', headers=rpc_args("tools/list")["headers"])
    return Req(mcp.url, **rpc_args("tools/call", variants[pick]))


@dataclass
class Conversation:
    """One worker's agent session: a name, the turns so far, how many are left."""

    name: str = ""
    history: list[dict] = field(default_factory=list)
    left: int = 0
    started: int = 0

    def next_turn(self, rng, body: dict, gateway_url: str, prefix: str) -> Req:
        """`body` (a one-shot chat body) as the next turn of this conversation (a new one when it ended), under its
        session header."""
        if self.left <= 0:
            self.started += 1
            self.name, self.history, self.left = f"{prefix}-{self.started}", [], rng.randint(*SESSION_TURNS)
        self.left -= 1
        messages = [*self.history, *body["messages"]]
        self.history += [{"role": "user", "content": f"Task step {len(self.history) // 2 + 1}."},
                         {"role": "assistant", "content": "Done; what next?"}]
        return Req(gateway_url + "/v1/chat/completions", json={**body, "messages": messages},
                   headers={SESSION: self.name})
