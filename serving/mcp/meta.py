"""The two meta-tools `/mcp` serves: `find_tools(query, k)` and `call_tool(name, arguments)`.

A host that lists `/mcp` sees a small safe set plus these; the model finds what
else it needs with `find_tools` (the hybrid retriever over the tools the
caller may use: names, descriptions, input schemas) and uses it through
`call_tool`, so hosts that never re-list (no `list_changed`) still reach every
tool they are allowed.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

FIND_TOOLS = "find_tools"
CALL_TOOL = "call_tool"


def meta_tools(groups: list[str], k: int) -> list[types.Tool]:
    """The meta-tools' definitions; find_tools names the groups the caller may see (and only those)."""
    listing = ", ".join(groups) or "none"
    find = types.Tool(
        name=FIND_TOOLS,
        title="Find tools",
        description=("Search the tools you may use by what you want to do; returns the best matches with their "
                     f"names, descriptions and input schemas. Call one with {CALL_TOOL}. Groups: {listing}."),
        input_schema={"type": "object", "properties": {
            "query": {"type": "string", "description": "the task in a few words, e.g. 'read a text file'"},
            "k": {"type": "integer", "minimum": 1, "maximum": 50, "default": k,
                  "description": "how many tools to return"}},
            "required": ["query"]},
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    call = types.Tool(
        name=CALL_TOOL,
        title="Call a tool",
        description=f"Call a tool {FIND_TOOLS} returned, by its name, with arguments matching its input schema.",
        input_schema={"type": "object", "properties": {
            "name": {"type": "string", "description": f"a tool name from {FIND_TOOLS}"},
            "arguments": {"type": "object", "description": "the tool's arguments"}},
            "required": ["name"]},
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=True),
    )
    return [find, call]


def find_tools_result(found: list[dict[str, Any]]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps({"tools": found}))],
                                structured_content={"tools": found})
