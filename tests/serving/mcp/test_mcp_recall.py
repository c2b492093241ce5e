"""find_tools through the gateway ranks as the in-process tool router does over the same catalog: the npm servers'
tools (queries about each), and a held-out sample of MetaTool served by an upstream MCP server
(evaluation/jobs/mcp_recall.py, the figure in docs/mcp.md)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.serving.mcp.conftest import structured

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

QUERIES = [
    "read the contents of a text file", "list what is in a directory", "find files whose names match a pattern",
    "write a new file with this text", "move a file to another folder", "show a file's size and modification time",
    "add two numbers together", "echo back the message I give you", "run a long operation and report progress",
    "create entities in the knowledge graph", "search the knowledge graph for nodes about Acme",
    "delete a relation between two people", "open several files at once and read them all",
    "which directories may I access", "get a tiny test image",
]


def test_find_tools_top_k_equals_in_process_router(mcp_gateway, encoder):
    from evaluation.jobs.mcp_recall import ranked, router_over
    from serving.tools.catalog import Catalog

    async def find_all():
        async with mcp_gateway.client("admin") as c:
            return [[t["name"] for t in structured(await c.call_tool("find_tools", {"query": q, "k": 10}))["tools"]]
                    for q in QUERIES]

    found = anyio.run(find_all)
    gw = mcp_gateway.gateway
    snap = gw.snap
    assert len(snap.catalog) > 30
    # admin sees every tool: the in-process router over the whole catalog the gateway built, from scratch
    assert gw.visible(gw.keys.authenticate("Bearer sk-sc-test-admin-0123456789abcdef")).all()
    router = router_over(Catalog(snap.catalog.cards, snap.catalog.groups.values()), encoder, gw.cfg.retrieval)
    names = [c.exposed_name for c in snap.catalog.cards]
    for query, got in zip(QUERIES, found):
        want = [names[i] for i in ranked(router, query, 10)[0]]
        assert got == want, query


def test_metatool_recall_through_mcp_equals_in_process(encoder, tmp_path):
    from evaluation.jobs.mcp_recall import run

    if not (Path("../shared/data") / "tool_retrieval" / "metatool").exists():
        pytest.skip("../shared/data/tool_retrieval/metatool is missing (the tool-retrieval data)")
    r = run("metatool", limit=40, run_dir=str(tmp_path), encoder=encoder)
    assert r["served"] == r["tools"] == 199 and not r["skipped"]
    assert r["same_top10_as_in_process_gateway_catalog"] == 1.0
    assert r["recall"]["find_tools"] == r["recall"]["in_process_gateway_catalog"]
    assert r["recall"]["find_tools"]["recall@10"] > 0.7
    assert (tmp_path / "recall_metatool.json").exists()
