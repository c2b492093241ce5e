"""The tool router as an MCP gateway: upstream MCP servers in, one filtered and searchable MCP server out.

    switchcraft mcp serve --config configs/mcp.yaml           # Streamable HTTP on /mcp and /mcp/<group>
    switchcraft mcp serve --config configs/mcp.yaml --stdio   # one local host over stdin/stdout

Modules: `config` (configs/mcp.yaml), `upstream` (one upstream server: connect, list, call, down and retried),
`bridge` (upstream tools → namespaced tool cards, groups, the retrieval index), `gateway` (what a caller may
list, find and call; tool-list changes published to subscribed hosts), `meta` (find_tools, call_tool), `ledger`
(rate limit, in the shared state store when configured; call log, rotated), `guard` (Host/Origin, key, group
and body size checked before the SDK reads a message; every refusal a JSON-RPC error; listen streams per key),
`server` (the SDK server: HTTP and stdio; a host's disconnect cancels its call), `catalog` (the upstreams'
tools as the chat gateway's tool router).
docs/mcp.md is the reference.
"""

from serving.mcp.config import McpConfig, load_mcp_config
from serving.mcp.gateway import McpGateway
from serving.mcp.server import http_app, serve_stdio

__all__ = ["McpConfig", "McpGateway", "http_app", "load_mcp_config", "serve_stdio"]
