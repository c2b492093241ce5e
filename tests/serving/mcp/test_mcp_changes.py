"""An upstream whose tools change (tests/serving/mcp/toy_server.py, the official SDK over stdio): the gateway re-lists
on the upstream's announcement or on the interval, re-indexes, and sends `notifications/tools/list_changed` to
the hosts holding a `subscriptions/listen` stream; the new tool is listed, found and callable."""

from __future__ import annotations

import json

import anyio
import pytest

from tests.serving.mcp.conftest import gateway_on, sdk_client, structured, toy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
async def change_seen(url: str, change, timeout_s: float = 30.0):
    """Subscribe on /mcp/toy, apply `change()`, wait for the event; the group's names before and after."""
    async with sdk_client(url + "/mcp/toy", None) as c:
        before = [t.name for t in (await c.list_tools()).tools]
        async with c.listen(tools_list_changed=True) as sub:
            assert sub.honored.tools_list_changed
            await change(c)
            with anyio.fail_after(timeout_s):
                event = await sub.__anext__()
        after = [t.name for t in (await c.list_tools()).tools]
        called = await c.call_tool("toy__fresh_tool", {}) if "toy__fresh_tool" in after else None
    return before, event, after, called


def test_announced_change_reaches_subscribed_hosts(tmp_path, encoder):
    from mcp.client.subscriptions import ToolsListChanged

    async def announce(c):
        (tmp_path / "toy_tools.json").write_text(json.dumps(["fresh_tool"]))
        await c.call_tool("toy__announce", {})

    async def found():
        async with sdk_client(url + "/mcp", None) as c:
            return [t["name"] for t in structured(await c.call_tool(
                "find_tools", {"query": "the fresh tool", "k": 3}))["tools"]]

    with gateway_on(tmp_path, encoder, [toy(tmp_path)], refresh_s=300) as (gw, url):
        assert gw.upstreams[0].up and len(gw.snap.catalog) == 3
        rebuilds = gw.rebuilds
        before, event, after, called = anyio.run(change_seen, url, announce)
        assert isinstance(event, ToolsListChanged)
        assert before == ["toy__ping", "toy__sleep", "toy__announce"]
        assert after == before + ["toy__fresh_tool"]
        assert called.content[0].text == "fresh_tool"
        assert gw.rebuilds > rebuilds and gw.announced >= 1 and len(gw.snap.catalog) == 4
        assert anyio.run(found)[0] == "toy__fresh_tool"  # re-indexed: find_tools finds it


def test_interval_relisting_reaches_subscribed_hosts(tmp_path, encoder):
    (tmp_path / "toy_tools.json").write_text(json.dumps(["fresh_tool", "old_tool"]))

    async def quietly(c):  # no announcement: only the interval re-lists
        (tmp_path / "toy_tools.json").write_text(json.dumps(["fresh_tool"]))

    with gateway_on(tmp_path, encoder, [toy(tmp_path)], refresh_s=1) as (gw, url):
        before, _, after, called = anyio.run(change_seen, url, quietly)
        assert "toy__old_tool" in before and "toy__old_tool" not in after and "toy__fresh_tool" in after
        assert called.content[0].text == "fresh_tool"
