"""The MCP servers' tools as a tool router for the chat gateway: `tools: {mcp: configs/mcp.yaml}` in the serving config.

    router = mcp_tool_router("configs/mcp.yaml", groups=tools_cfg.groups, top_k=5)   # a serving.tools ToolRouter

Connects every upstream of the MCP config once (as `switchcraft mcp serve`
would, on its own event loop in a worker thread, so it works whether or not the
caller runs one), takes the catalog the MCP gateway builds of their listings
(the same namespaced cards, groups, risks and permissions, from the same
`upstreams:` and `groups:`), and returns a router over it with the MCP config's
`policy` and `retrieval`: a Chat Completions caller and an MCP host with the
same key see the same tools in the same groups, under the same names
(`files__read_text_file`), and the host can run what the model asked for
through the MCP gateway's `call_tool`. The listing is taken once, at start
(and at each router reload that rebuilds the tools); a server that is down then
contributes nothing, and is named in the log.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio

from serving.tools.config import GroupConfig
from serving.tools.router import ToolRouter

log = logging.getLogger("switchcraft.mcp")


def mcp_tool_router(path: str | Path, groups: GroupConfig | None = None, top_k: int | None = None,
                    encoder=None) -> ToolRouter:
    """A ToolRouter over the tools the MCP config's upstreams list now. ValueError (naming the config and each
    server's state) when none lists a tool."""
    from serving.mcp.config import load_mcp_config
    from serving.mcp.gateway import McpGateway

    cfg = load_mcp_config(path).model_copy(update={"log_path": None, "state": None})  # only the listing is used
    gw = McpGateway.from_config(cfg, encoder=encoder)

    async def listed():
        async with gw.running():
            return gw.snap

    with ThreadPoolExecutor(1, thread_name_prefix="mcp-catalog") as pool:
        snap = pool.submit(anyio.run, listed).result()
    down = [f"{u.name} ({u.error or 'no answer'})" for u in gw.upstreams if not u.up]
    if snap.router is None:
        raise ValueError(f"tools.mcp: {path}: no upstream MCP server listed a tool; down: {', '.join(down) or 'none'}")
    if down:
        log.warning("tools.mcp: %s: servers down at start, their tools are not routed: %s", path, ", ".join(down))
    retrieval = cfg.retrieval if top_k is None else cfg.retrieval.model_copy(update={"top_k": top_k})
    return ToolRouter(snap.router.index, cfg.policy, retrieval, groups)
