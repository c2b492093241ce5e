"""The MCP gateway's parts without servers: the config's checks, upstream tools as cards, the rate limit."""

from __future__ import annotations

import anyio
import mcp_types as types
import pytest

from serving.core.auth import Identity, KeyLimits
from serving.mcp.bridge import tool_card
from serving.mcp.config import GroupDecl, McpConfig, UpstreamConfig
from serving.mcp.ledger import RATE_LIMITED, Ledger
from serving.mcp.upstream import McpError
from serving.tools.policy import Caller


def test_config_names_the_bad_field():
    with pytest.raises(ValueError, match="exactly one of command"):
        UpstreamConfig(name="x")
    with pytest.raises(ValueError, match="exactly one of command"):
        UpstreamConfig(name="x", command="a", url="http://b")
    with pytest.raises(ValueError, match="repeated: \\['a'\\]"):
        McpConfig(upstreams=[UpstreamConfig(name="a", command="c"), UpstreamConfig(name="a", command="d")])
    with pytest.raises(ValueError, match="bearer_env: environment variable NOPE_TOKEN is not set"):
        UpstreamConfig(name="t", url="http://h/mcp", bearer_env="NOPE_TOKEN").resolved_headers()


def tool(name, **ann):
    return types.Tool(name=name, description=f"{name} things", input_schema={"type": "object"},
                      annotations=types.ToolAnnotations(**ann) if ann else None)


def test_cards_namespaced_with_risk_permissions_and_groups():
    up = UpstreamConfig(name="files", command="x", defaults={"tenants": ["acme"]},
                        tools={"write_*": {"permissions": ["files.write"]}, "write_log": {"group": "logs"}})
    groups = [GroupDecl(name="search", tools=["*__search*"])]
    read = tool_card(up, tool("read_file", read_only_hint=True), "__", groups)
    write = tool_card(up, tool("write_file", read_only_hint=False, destructive_hint=False), "__", groups)
    delete = tool_card(up, tool("delete_file", read_only_hint=False), "__", groups)
    plain = tool_card(up, tool("math.factorial"), "__", groups)
    assert (read.exposed_name, read.risk, read.group_name, read.tenants) == ("files__read_file", "read", "files", ["acme"])
    assert (write.risk, write.permissions) == ("write", ["files.write"])
    assert delete.risk == "irreversible" and plain.risk == "write" and plain.key == "files.math.factorial"
    assert tool_card(up, tool("search_files"), "__", groups).group_name == "search"
    assert tool_card(up, tool("write_log"), "__", groups).group_name == "logs"


def test_rate_limit_per_key_and_minute():
    now = [0.0]
    ledger = Ledger(clock=lambda: now[0])
    ident = Identity("k", Caller(), KeyLimits(requests_per_minute=2))
    admit = lambda i: anyio.run(ledger.admit, i)  # noqa: E731
    admit(ident)
    admit(ident)
    with pytest.raises(McpError) as e:
        admit(ident)
    assert e.value.code == RATE_LIMITED and "retry after 60000 ms" in e.value.message
    admit(Identity("other", Caller(), KeyLimits(requests_per_minute=2)))  # its own minute
    now[0] = 60.5
    admit(ident)


def test_rate_limit_in_a_store_that_is_down_fails_closed(tmp_path):
    from serving.core.state import StateUnavailable, SQLiteState

    class Down(SQLiteState):
        async def admit(self, *a, **kw):
            raise StateUnavailable("state store x: unreachable")

    ledger = Ledger(store=Down(tmp_path / "s.sqlite"))
    with pytest.raises(McpError, match="shared state store is unavailable"):
        anyio.run(ledger.admit, Identity("k", Caller(), KeyLimits(requests_per_minute=5)))
    anyio.run(ledger.admit, Identity("free", Caller(), KeyLimits()))  # no limit: the store is not asked
