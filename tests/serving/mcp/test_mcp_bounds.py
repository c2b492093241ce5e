"""What one caller may cost the MCP gateway: find_tools' query, caller strings in errors and the call log, the
call log's size, listen streams per key; and what an open-world tool needs (the npm everything server's
`gzip-file-as-resource` fetches any URL). Real gateways on loopback driven with the official SDK client.

    .venv/bin/python -m pytest -q tests/serving/mcp/test_mcp_bounds.py
"""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from serving.core.auth import Identity, KeyEntry, KeyLimits, KeyStore
from serving.mcp.ledger import Ledger
from serving.tools.policy import Caller
from tests.serving.mcp.conftest import gateway_on, sdk_client, server_bin, structured

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
PLAIN, OPENER = "sk-sc-test-plain-0123456789abcdefg", "sk-sc-test-opener-0123456789abcdef"
HEAD = "read the contents of a text file. " * 60  # 2,040 characters: past find_query_chars (2,000)
TAIL = "add two numbers together and return the sum. " * 1200  # 55 KB about another tool


def keys() -> KeyStore:
    return KeyStore([KeyEntry(id="plain", key=PLAIN, caller={}),
                     KeyEntry(id="opener", key=OPENER, caller={"roles": ["opener"]})])


def npm_upstreams(root) -> list[dict]:
    return [{"name": "files", "command": server_bin("mcp-server-filesystem"), "args": [str(root)]},
            {"name": "everything", "command": server_bin("mcp-server-everything"), "args": ["stdio"]}]


@pytest.fixture(scope="module")
def npm_gateway(encoder, tmp_path_factory):
    root = tmp_path_factory.mktemp("files")
    (root / "notes.txt").write_text("nothing private\n")
    policy = {"role_permissions": {"opener": ["open_world"]}}
    with gateway_on(tmp_path_factory.mktemp("mcp"), encoder, npm_upstreams(root), keys=keys(), policy=policy,
                    max_listens_per_key=2) as (gw, url):
        yield gw, url


async def find(url: str, query: str, key: str = PLAIN, k: int = 5) -> list[str] | str:
    async with sdk_client(url + "/mcp", key) as c:
        try:
            return [t["name"] for t in structured(await c.call_tool("find_tools", {"query": query, "k": k}))["tools"]]
        except MCPError as e:
            return f"{e.code} {e.message}"


def test_find_tools_reads_a_bounded_query(npm_gateway):
    gw, url = npm_gateway
    cut = anyio.run(find, url, HEAD + TAIL)  # searched as its first find_query_chars characters
    assert cut == anyio.run(find, url, HEAD[: gw.cfg.find_query_chars]), cut
    assert cut[0].startswith("files__read_"), cut
    refused = anyio.run(find, url, "read a file " * 8000)  # 96 KB: over max_find_query_bytes (64 KiB)
    assert refused == ("-32602 find_tools: query is 96,000 characters; the limit is 65,536 bytes "
                       "(max_find_query_bytes): describe the task in a few words")
    # A 3.5 MB query never reaches find_tools: its body is over max_body_bytes, refused before it is parsed.
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "find_tools", "arguments": {"query": "x" * 3_500_000}}}
    r = httpx.post(url + "/mcp", json=body, headers={"authorization": f"Bearer {PLAIN}",
                                                     "accept": "application/json, text/event-stream"}, timeout=60)
    assert r.status_code == 413 and r.headers["connection"] == "close"
    assert r.json() == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": "request body is over 1,000,000 bytes (max_body_bytes)",
        "data": {"status": 413, "reason": "body_too_large"}}}


def test_a_long_tool_name_is_clipped_in_errors_and_in_the_log(npm_gateway):
    gw, url = npm_gateway
    name = "files__" + "x" * 300_000
    before = gw.ledger.path.stat().st_size if gw.ledger.path.exists() else 0

    async def calls():
        out = []
        async with sdk_client(url + "/mcp", PLAIN) as c:
            for _ in range(5):
                with pytest.raises(MCPError) as e:
                    await c.call_tool("call_tool", {"name": name, "arguments": {}})
                out.append(e.value.message)
        async with sdk_client(url + "/mcp/files", PLAIN, raise_exceptions=True) as c:
            with pytest.raises(MCPError) as e:  # the 2026-07-28 client repeats a direct call's name in a header:
                await c.session.call_tool(name[:8_000], {})  # uvicorn takes 16 KB of headers, so 8,000 here
            out.append(e.value.message)
        return out

    messages = anyio.run(calls)
    assert messages == [f"Unknown tool: {name[:200]}… (300,007 characters)"] * 5 + [
        f"Unknown tool: {name[:200]}… (8,000 characters)"]
    rows = [json.loads(line) for line in gw.ledger.path.read_text().splitlines()[-6:]]
    assert [r["tool"] for r in rows] == [name[:200] + "… (300,007 characters)"] * 5 + [
        name[:200] + "… (8,000 characters)"]
    assert gw.ledger.path.stat().st_size - before < 6 * 600


def test_the_call_log_is_rotated_and_bounded(tmp_path):
    ledger = Ledger(tmp_path / "calls.jsonl", max_mb=2_000 / 2**20, keep=2)
    ident = Identity("k", Caller(), KeyLimits())
    for i in range(200):
        ledger.record(ident, tool=f"files__read_{i}", outcome="ok", ms=1.0)
    ledger.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["calls.jsonl", "calls.jsonl.1", "calls.jsonl.2"]
    assert all((tmp_path / f).stat().st_size <= 2_000 for f in files)
    assert json.loads((tmp_path / "calls.jsonl").read_text().splitlines()[-1])["tool"] == "files__read_199"


def test_listen_streams_per_key_are_capped(npm_gateway):
    _, url = npm_gateway

    async def listen_three():
        async with (sdk_client(url + "/mcp", PLAIN) as a, sdk_client(url + "/mcp", PLAIN) as b,
                    sdk_client(url + "/mcp", PLAIN) as c, sdk_client(url + "/mcp", OPENER) as other):
            async with a.listen(tools_list_changed=True), b.listen(tools_list_changed=True):
                with pytest.raises(MCPError) as e:
                    async with c.listen(tools_list_changed=True):
                        pass
                async with other.listen(tools_list_changed=True) as sub:  # another key has its own share
                    assert sub.honored.tools_list_changed
            again = False
            for _ in range(100):  # the first two closed: room again once the server has seen them go
                try:
                    async with c.listen(tools_list_changed=True) as sub:
                        again = sub.honored.tools_list_changed
                    break
                except MCPError:
                    await anyio.sleep(0.05)
        return e.value, again

    err, again = anyio.run(listen_three)
    assert again
    assert err.code == -32600
    assert err.message == ("key 'plain' already holds 2 subscriptions/listen streams (max_listens_per_key); close "
                           "one before listening again")


def test_an_open_world_tool_needs_its_permission(npm_gateway, tmp_path, encoder):
    gw, url = npm_gateway
    tool = "everything__gzip-file-as-resource"
    fetch = {"name": tool, "arguments": {"name": "x.gz", "data": "http://127.0.0.1:9/secret"}}

    async def attempt(key: str):
        async with sdk_client(url + "/mcp", key) as c:
            found = [t["name"] for t in structured(await c.call_tool("find_tools", {"query": "gzip a file from a URL",
                                                                                   "k": 50}))["tools"]]
            try:
                await c.call_tool("call_tool", fetch)
                called = "called"
            except MCPError as e:
                called = f"{e.code} {e.message}"
            return tool in found, called

    assert anyio.run(attempt, PLAIN) == (False, f"-32602 Unknown tool: {tool}")
    seen, called = anyio.run(attempt, OPENER)
    assert seen and not called.startswith("-32602"), called  # the role granted open_world may use it
    # The card: its risk stays write (annotations), its permissions gain open_world.
    card = gw.snap.catalog.cards[gw.snap.entries[tool].row]
    assert (card.risk, card.permissions) == ("write", ["open_world"])
    assert gw.snap.catalog.cards[gw.snap.entries["everything__echo"].row].permissions == []


def test_open_world_permission_adds_to_the_configured_ones():
    from mcp_types import Tool, ToolAnnotations

    from serving.mcp.bridge import tool_card
    from serving.mcp.config import UpstreamConfig

    up = UpstreamConfig(name="web", command="x", tools={"fetch": {"permissions": ["web.use"]}})
    fetch = Tool(name="fetch", input_schema={"type": "object"},
                 annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True))
    assert tool_card(up, fetch, "__", [], "open_world").permissions == ["web.use", "open_world"]
    assert tool_card(up, fetch, "__", [], None).permissions == ["web.use"]
