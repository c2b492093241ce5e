"""Two MCP gateway replicas on one shared state store (SQLite file, and a real Redis) agree on each key's minute:
the key's calls through either count against one window, the one over it gets a clear -32029 on whichever
replica it reaches, and a key without a limit is never refused."""

from __future__ import annotations

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from tests.serving.mcp.conftest import gateway_on, sdk_client, toy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
LIMITED, FREE = "sk-sc-test-limited-0123456789abcd", "sk-sc-test-free-0123456789abcdefg"


def keys():
    from serving.core.auth import KeyEntry, KeyStore

    return KeyStore([KeyEntry(id="limited", key=LIMITED, caller={}, limits={"requests_per_minute": 3}),
                     KeyEntry(id="free", key=FREE, caller={})])


async def ping(url: str, key: str) -> str:
    async with sdk_client(url + "/mcp/toy", key) as c:
        try:
            return (await c.call_tool("toy__ping", {})).content[0].text
        except MCPError as e:
            return f"{e.code} {e.message}"


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_two_replicas_share_the_minute(tmp_path, encoder, backend, request):
    state = {"path": str(tmp_path / "state")}
    if backend == "redis":
        state = {"redis_url": request.getfixturevalue("redis_server").url, "redis_prefix": f"mcp-{tmp_path.name}:"}
    with (gateway_on(tmp_path, encoder, [toy(tmp_path)], keys=keys(), state=state) as (_, a),
          gateway_on(tmp_path, encoder, [toy(tmp_path)], keys=keys(), state=state) as (_, b)):
        got = [anyio.run(ping, url, LIMITED) for url in (a, b, a, b, a)]
        free = [anyio.run(ping, url, FREE) for url in (a, b) * 3]
    assert got[:3] == ["pong"] * 3, got
    for refused in got[3:]:  # the fourth and fifth, on either replica
        assert refused.startswith("-32029 rate limit: key 'limited' may make 3 calls a minute"), refused
        assert "retry after" in refused
    assert free == ["pong"] * 6


def test_without_state_each_replica_counts_alone(tmp_path, encoder):
    with (gateway_on(tmp_path, encoder, [toy(tmp_path)], keys=keys()) as (_, a),
          gateway_on(tmp_path, encoder, [toy(tmp_path)], keys=keys()) as (_, b)):
        got = [anyio.run(ping, url, LIMITED) for url in (a, b) * 3]
    assert got == ["pong"] * 6  # 3 a minute per process: the reason to set state:
