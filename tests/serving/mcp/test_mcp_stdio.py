"""`switchcraft mcp serve --stdio`: a host starts the gateway as its stdio server; the identity is the key in
$SWITCHCRAFT_MCP_KEY (from the same keys as HTTP: here $SWITCHCRAFT_GATEWAY_KEYS)."""

from __future__ import annotations

import json
import os
import sys

import anyio
import pytest
import yaml

from tests.serving.mcp.conftest import server_bin

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
KEY = "sk-sc-test-stdio-0123456789abcdefgh"


def test_stdio_host(tmp_path):
    from mcp import Client, StdioServerParameters

    config = tmp_path / "mcp.yaml"
    config.write_text(yaml.safe_dump({
        "upstreams": [{"name": "everything", "command": server_bin("mcp-server-everything"), "args": ["stdio"]}],
        "index_dir": None, "auth": {"mode": "keys"}, "log_path": str(tmp_path / "calls.jsonl")}))
    env = {**{k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}, "SWITCHCRAFT_MCP_KEY": KEY,
           "SWITCHCRAFT_GATEWAY_KEYS": json.dumps([{"id": "host", "key": KEY, "caller": {}}])}
    params = StdioServerParameters(command=sys.executable, args=["-m", "switchcraft.cli", "mcp", "serve", "--stdio",
                                                                 "--config", str(config)], env=env)

    async def session():
        async with Client(params) as c:
            listed = [t.name for t in (await c.list_tools()).tools]
            echoed = await c.call_tool("call_tool", {"name": "everything__echo", "arguments": {"message": "hi"}})
            return listed, echoed.content[0].text

    listed, text = anyio.run(session)
    assert listed[:2] == ["find_tools", "call_tool"] and "everything__echo" in listed
    assert text == "Echo: hi"
    assert json.loads((tmp_path / "calls.jsonl").read_text().splitlines()[0])["key"] == "host"
