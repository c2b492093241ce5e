"""The MCP gateway end to end: the npm filesystem, memory and everything servers over stdio behind it, driven
with the official SDK client over Streamable HTTP: lists per key and endpoint, find_tools, calls through to
each server, a permission-denied tool, an upstream killed mid-call."""

from __future__ import annotations

import json
import os
import signal
import time

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from tests.serving.mcp.conftest import children_running, structured

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def run(fn, *args):
    return anyio.run(fn, *args)


async def names(gw, key, path="/mcp"):
    async with gw.client(key, path) as c:
        return [t.name for t in (await c.list_tools()).tools]


def test_lists_per_key_and_endpoint(mcp_gateway):
    anon = run(names, mcp_gateway, "anon")
    assert anon[:2] == ["find_tools", "call_tool"]
    assert "files__read_text_file" in anon and "everything__echo" in anon
    # the safe default set: read-only tools only, never a write nor a memory tool (anon lacks memory.use)
    assert not [n for n in anon if n.startswith("memory__") or n in ("files__write_file", "files__edit_file")]
    assert run(names, mcp_gateway, "anon") == anon  # deterministic order
    admin_files = run(names, mcp_gateway, "admin", "/mcp/files")
    assert all(n.startswith("files__") for n in admin_files) and "files__write_file" in admin_files
    assert "files__write_file" not in run(names, mcp_gateway, "anon", "/mcp/files")
    memory = run(names, mcp_gateway, "analyst", "/mcp/memory")
    assert "memory__create_entities" in memory and "memory__delete_entities" not in memory  # irreversible
    assert len(run(names, mcp_gateway, "admin", "/mcp/memory")) == 9  # admin's roles allow irreversible tools
    # a group the key may not see, one that does not exist, and no key at all: refused before any MCP message
    for key, path in (("anon", "/mcp/memory"), ("anon", "/mcp/nope"), (None, "/mcp")):
        with pytest.raises(Exception):  # noqa: B017 - the SDK client raises its own wrapper of the HTTP error
            run(names, mcp_gateway, key, path)


def test_legacy_handshake_lists_the_same(mcp_gateway):
    async def legacy():
        async with mcp_gateway.client("anon", mode="legacy") as c:
            return c.protocol_version, [t.name for t in (await c.list_tools()).tools]

    version, listed = run(legacy)
    assert version < "2026" and listed == run(names, mcp_gateway, "anon")


TASKS = [
    ("read the contents of a text file", "files__read_text_file"),
    ("find files whose names match a pattern", "files__search_files"),
    ("add two numbers together", "everything__get-sum"),
    ("echo back the message I give you", "everything__echo"),
    ("remember that Alice works at Acme as a new entity in the knowledge graph", "memory__create_entities"),
    ("search the knowledge graph for nodes about Acme", "memory__search_nodes"),
]


def test_find_tools_top5(mcp_gateway):
    async def find_all():
        async with mcp_gateway.client("admin") as c:
            return [[t["name"] for t in structured(await c.call_tool("find_tools", {"query": q}))["tools"]]
                    for q, _ in TASKS]

    for (query, want), found in zip(TASKS, run(find_all)):
        assert len(found) == 5 and want in found, (query, found)


def test_calls_through_to_each_upstream(mcp_gateway):
    async def calls():
        out = {}
        async with mcp_gateway.client("anon", "/mcp/files") as c:
            path = str(mcp_gateway.root / "notes.txt")
            out["files"] = (await c.call_tool("files__read_text_file", {"path": path})).content[0].text
        async with mcp_gateway.client("analyst") as c:
            entity = {"name": "Alice", "entityType": "person", "observations": ["works at Acme"]}
            inner = {"name": "memory__create_entities", "arguments": {"entities": [entity]}}
            await c.call_tool("call_tool", inner)
            found = await c.call_tool("call_tool", {"name": "memory__search_nodes", "arguments": {"query": "Acme"}})
            out["memory"] = json.dumps(structured(found))
        async with mcp_gateway.client("anon", "/mcp/everything") as c:
            out["everything"] = (await c.call_tool("everything__get-sum", {"a": 2, "b": 40})).content[0].text
        return out

    out = run(calls)
    assert "4242" in out["files"]
    assert "Alice" in out["memory"] and "works at Acme" in out["memory"]
    assert "42" in out["everything"]
    rows = [json.loads(line) for line in mcp_gateway.log.read_text().splitlines()]
    assert {(r["key"], r["tool"], r["upstream"], r["outcome"]) for r in rows} >= {
        ("anon", "files__read_text_file", "files", "ok"), ("analyst", "memory__search_nodes", "memory", "ok"),
        ("anon", "everything__get-sum", "everything", "ok")}


def test_denied_tool_is_invisible_and_refused(mcp_gateway):
    target = mcp_gateway.root / "pwned.txt"

    async def attempts():
        errors = []
        async with mcp_gateway.client("anon") as c:
            found = structured(await c.call_tool("find_tools", {"query": "write a file", "k": 50}))["tools"]
            for args in ({"name": "files__write_file", "arguments": {"path": str(target), "content": "x"}},
                         {"name": "files__no_such_tool", "arguments": {}}):
                with pytest.raises(MCPError) as e:
                    await c.call_tool("call_tool", args)
                errors.append((e.value.code, e.value.message.replace(args["name"], "X")))
            with pytest.raises(MCPError) as e:  # memory needs memory.use: not even through call_tool
                await c.call_tool("call_tool", {"name": "memory__read_graph", "arguments": {}})
            errors.append((e.value.code, e.value.message.replace("memory__read_graph", "X")))
        async with mcp_gateway.client("anon", "/mcp/files", raise_exceptions=True) as c:
            with pytest.raises(MCPError) as e:
                await c.session.call_tool("files__write_file", {"path": str(target), "content": "x"})
            errors.append((e.value.code, e.value.message.replace("files__write_file", "X")))
        return [t["name"] for t in found], errors

    found, errors = run(attempts)
    assert found and not [n for n in found if n in ("files__write_file", "files__edit_file") or "memory" in n]
    assert len(set(errors)) == 1 and errors[0] == (-32602, "Unknown tool: X")  # denied and unknown alike
    assert not target.exists()


def test_upstream_killed_mid_call(mcp_gateway):
    """The everything server dies during a long call: a clear MCP error, the others keep serving, and the
    server comes back (retried) with its tools."""
    gw = mcp_gateway.gateway

    async def scenario():
        async def kill_soon():
            await anyio.sleep(1.0)
            for pid in children_running("server-everything"):
                os.kill(pid, signal.SIGKILL)

        async with mcp_gateway.client("anon") as c:
            t0 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_soon)
                with pytest.raises(MCPError) as e:
                    await c.call_tool("call_tool", {"name": "everything__trigger-long-running-operation",
                                                    "arguments": {"duration": 10, "steps": 10}})
            took = time.perf_counter() - t0
            after = [t.name for t in (await c.list_tools()).tools]
            text = (await c.call_tool("files__read_text_file", {"path": str(mcp_gateway.root / "notes.txt")}))
            return e.value, took, after, text.content[0].text

    err, took, after, text = run(scenario)
    assert "everything" in err.message and "closed the connection" in err.message and took < 8
    assert "4242" in text  # the gateway keeps serving the other servers
    deadline = time.time() + 30
    while not gw.by_name["everything"].up and time.time() < deadline:
        time.sleep(0.1)
    assert gw.by_name["everything"].up, gw.by_name["everything"].error
    assert "everything__echo" in run(names, mcp_gateway, "anon")
    if not [n for n in after if n.startswith("everything__")]:
        return  # listed while it was down: its tools had left the list
    assert gw.by_name["everything"].listings >= 2  # or it was back already, listed again
