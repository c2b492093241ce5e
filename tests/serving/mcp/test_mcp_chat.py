"""The chat gateway's tool routing over the MCP servers' catalog (`tools: {mcp: <MCP config>}` in the serving
config): a Chat Completions caller gets the npm filesystem and everything servers' tools, under the MCP
gateway's names and groups and its permissions, and an MCP host with the same identity sees the same tools."""

from __future__ import annotations

import anyio
import pytest
import yaml

from data.pool import load_pool
from serving.app import create_app
from serving.gateway.config import ServingConfig
from tests.routers import REPO
from tests.serving.helpers import SECRET, Loopback, bearer, chat, post, use_keys
from tests.serving.mcp.conftest import server_bin

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
KEYS = {"analyst": "sk-sc-test-chat-analyst-0123456789ab", "admin": "sk-sc-test-chat-admin-0123456789abcd"}
CALLERS = {"analyst": {"roles": ["analyst"]}, "admin": {"roles": ["admin"]}}
WRITES = {"files__write_file", "files__edit_file", "files__move_file", "files__create_directory"}


@pytest.fixture(scope="module")
def mcp_yaml(tmp_path_factory):
    root = tmp_path_factory.mktemp("files")
    (root / "notes.txt").write_text("the launch code is 4242\n")
    path = tmp_path_factory.mktemp("mcpcfg") / "mcp.yaml"
    path.write_text(yaml.safe_dump({
        "upstreams": [
            {"name": "files", "command": server_bin("mcp-server-filesystem"), "args": [str(root)],
             "tools": {p.removeprefix("files__"): {"permissions": ["files.write"]} for p in WRITES}},
            {"name": "everything", "command": server_bin("mcp-server-everything"), "args": ["stdio"]}],
        "index_dir": None, "log_path": None,
        "policy": {"role_max_risk": {"admin": "irreversible"}, "role_permissions": {"admin": ["files.write"]}}}))
    return path


@pytest.fixture
def gateway(client, tool_upstream, mcp_yaml, monkeypatch):
    base_url, seen = tool_upstream
    base = load_pool(REPO / "configs" / "pool.yaml")
    for m in base.models:
        monkeypatch.setenv(m.api_key_env, SECRET)
    use_keys(monkeypatch, *({"id": k, "key": v, "caller": CALLERS[k]} for k, v in KEYS.items()))
    pool = base.model_copy(update={"models": [m.model_copy(update={"base_url": base_url}) for m in base.models]})
    app = create_app(ServingConfig(tools={"mcp": str(mcp_yaml), "top_k": 5}), client=client, pool=pool)
    with Loopback(app) as url:
        seen.clear()
        yield url, seen


def routed(url: str, who: str, question: str) -> dict:
    r = post(url + "/v1/chat/completions", json=chat(question), timeout=120, headers=bearer(KEYS[who]))
    assert r.status_code == 200, r.text
    return r.json()["switchcraft"]["tool_routing"]


def mcp_visible(mcp_yaml, encoder, caller: dict) -> tuple[set[str], list[str]]:
    """What an MCP host with this caller may use on the MCP gateway of the same config: tools, groups."""
    from serving.core.auth import Identity, KeyLimits
    from serving.mcp import McpGateway, load_mcp_config
    from serving.tools.policy import Caller

    gw = McpGateway.from_config(load_mcp_config(mcp_yaml), encoder=encoder)
    ident = Identity("host", Caller(**caller), KeyLimits())

    async def seen():
        async with gw.running():
            rows = gw.visible(ident).nonzero()[0]
            return {gw.snap.catalog.cards[i].exposed_name for i in rows}, gw.groups_for(ident)

    return anyio.run(seen)


@pytest.mark.slow
def test_chat_routes_over_the_mcp_catalog(gateway, mcp_yaml, encoder):
    url, seen = gateway
    read = routed(url, "analyst", "read the contents of the text file notes.txt")
    assert "files__read_text_file" in read["exposed"][:3], read["exposed"]
    assert read["groups"][0]["name"] == "files"
    write = routed(url, "analyst", "write a new file hello.txt containing the text hi")
    assert not WRITES & set(write["exposed"])  # the analyst lacks files.write: never exposed
    assert "files__write_file" in routed(url, "admin", "write a new file hello.txt containing the text hi")["exposed"]
    # The same identity on the MCP gateway of the same config: every tool offered to chat is one it may use there.
    tools, groups = mcp_visible(mcp_yaml, encoder, CALLERS["analyst"])
    offered = set(read["exposed"] + write["exposed"]) - {"request_group"}
    assert offered <= tools and not WRITES & tools
    assert {g["name"] for g in read["groups"] + write["groups"]} <= set(groups) == {"files", "everything"}
    assert read["catalog_version"] == write["catalog_version"]
