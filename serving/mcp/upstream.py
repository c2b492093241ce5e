"""One upstream MCP server: connect (stdio or Streamable HTTP), list its tools, call them, notice it die.

    up = Upstream(cfg, on_change=gateway.rebuild, refresh_s=300, retry_s=(1, 60))
    tg.start_soon(up.run)                    # holds the connection; re-lists, reconnects with back-off
    result = await up.call("read_text_file", {"path": "README.md"})   # CallToolResult, or McpError

The connection lives in `run`'s task (the SDK's client is a context manager
that must be entered and left by one task); calls come from any task. The
tools are re-listed every `refresh_s`, at once when the server announces a
change (`notifications/tools/list_changed` on a handshake-era session; an event
on a `subscriptions/listen` stream the upstream holds open to a 2026-07-28
server that declares `tools.listChanged`), and after a reconnect. A failed connect or
listing, or a call that finds the connection closed, marks the server down:
`on_change` runs so its tools leave the lists, and `run` retries after
`retry_s[0]` seconds, doubling up to `retry_s[1]`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED, INTERNAL_ERROR, REQUEST_TIMEOUT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from serving.mcp.config import UpstreamConfig

log = logging.getLogger("switchcraft.mcp")
MAX_PAGES = 100  # tools/list pages read from one server at most (a paginator that never ends cannot hang a listing)


class Upstream:
    def __init__(self, cfg: UpstreamConfig, on_change: Callable[[], None] = lambda: None, *,
                 refresh_s: float = 300.0, retry_s: tuple[float, float] = (1.0, 60.0)) -> None:
        self.cfg, self.name = cfg, cfg.name
        self.on_change, self.refresh_s, self.retry_s = on_change, refresh_s, retry_s
        self.tools: list[types.Tool] = []  # the last listing (kept while down: the catalog masks them)
        self.up = False
        self.error = ""  # why it is down
        self.listings = 0  # successful listings, for tests and /healthz
        self._client: Client | None = None
        self._wake = anyio.Event()
        self._lost = ""  # set by a call that found the connection closed

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "up": self.up, "tools": len(self.tools), "error": self.error}

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[Client]:
        """The SDK client of this server, entered (and its HTTP client closed with it)."""
        cfg = self.cfg
        if cfg.command is not None:
            params = StdioServerParameters(command=cfg.command, args=cfg.args, env=cfg.resolved_env(), cwd=cfg.cwd)
            # No response cache: a re-listing must reach the server.
            async with Client(params, cache=None, message_handler=self._on_message) as client:
                yield client
            return
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        timeout = httpx2.Timeout(cfg.connect_timeout_s, read=None)  # a call's own limit is timeout_s
        async with httpx2.AsyncClient(headers=cfg.resolved_headers(), timeout=timeout) as http:
            transport = streamable_http_client(cfg.url, http_client=http)
            async with Client(transport, cache=None, message_handler=self._on_message) as client:
                yield client

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._wake.set()

    def relist_soon(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Hold the connection until cancelled: list, wait for a change or the interval, re-list; reconnect."""
        wait = self.retry_s[0]
        while True:
            try:
                # One scope round the whole connection: its deadline bounds the handshake, then is lifted.
                with anyio.CancelScope(deadline=anyio.current_time() + self.cfg.connect_timeout_s) as scope:
                    async with self._connect() as client, anyio.create_task_group() as tg:
                        scope.deadline = float("inf")
                        self._client, self._lost = client, ""
                        await self._list(client)
                        wait = self.retry_s[0]
                        if _announces(client):
                            tg.start_soon(self._listen, client)
                        while True:
                            with anyio.move_on_after(self.refresh_s):
                                await self._wake.wait()
                            self._wake = anyio.Event()
                            if self._lost:
                                raise ConnectionError(self._lost)
                            await self._list(client)
                if scope.cancelled_caught:
                    raise TimeoutError(f"no handshake within {self.cfg.connect_timeout_s:g} s")
            except Exception as e:  # any failure of this server: down, then retried
                self._mark_down(_describe(e))
            await anyio.sleep(wait)
            wait = min(wait * 2, self.retry_s[1])

    async def _listen(self, client: Client) -> None:
        """A 2026-07-28 server announces changes only on a `subscriptions/listen` stream: hold one open, re-list
        on each event (and once when it opens, for a change between the listing and the subscription)."""
        try:
            async with client.listen(tools_list_changed=True) as sub:
                self._wake.set()
                async for _ in sub:
                    self._wake.set()
        except Exception as e:  # the interval still re-lists
            log.info("mcp upstream %s: its tools/list_changed subscription ended (%s)", self.name, _describe(e))

    async def _list(self, client: Client) -> None:
        tools, cursor = [], None
        with anyio.fail_after(self.cfg.timeout_s):
            for _ in range(MAX_PAGES):
                page = await client.list_tools(cursor=cursor)
                tools += page.tools
                cursor = page.next_cursor
                if not cursor:
                    break
        changed = not self.up or _names(tools) != _names(self.tools) or tools != self.tools
        self.tools, self.up, self.error = tools, True, ""
        self.listings += 1
        if changed:
            log.info("mcp upstream %s: %d tools", self.name, len(tools))
            self.on_change()

    def _mark_down(self, why: str) -> None:
        was_up = self.up
        self.up, self.error, self._client = False, why, None
        log.warning("mcp upstream %s down: %s", self.name, why)
        if was_up:
            self.on_change()

    async def call(self, tool: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """Call `tool` (the server's own name) within `timeout_s`; failures as McpError naming this server."""
        client = self._client
        if client is None or not self.up:
            raise McpError(INTERNAL_ERROR, f"upstream {self.name!r} is down ({self.error or 'not connected yet'}); "
                           "it is retried in the background", {"upstream": self.name, "reason": "down"})
        t0 = time.perf_counter()
        try:
            with anyio.fail_after(self.cfg.timeout_s):
                result = await client.call_tool(tool, arguments or {})
        except TimeoutError:
            raise McpError(REQUEST_TIMEOUT, f"upstream {self.name!r} did not answer {tool} within "
                           f"{self.cfg.timeout_s:g} s (upstreams[{self.name}].timeout_s)",
                           {"upstream": self.name, "reason": "timeout"}) from None
        except MCPError as e:
            if e.code == CONNECTION_CLOSED:
                self._lost = f"connection closed during {tool} after {time.perf_counter() - t0:.1f} s"
                self._mark_down(self._lost)
                self._wake.set()
                raise McpError(INTERNAL_ERROR, f"upstream {self.name!r} closed the connection during {tool}; it is "
                               "marked down and retried in the background",
                               {"upstream": self.name, "reason": "connection_closed"}) from None
            raise McpError(e.code, f"upstream {self.name!r}: {e.message}",
                           {"upstream": self.name, "reason": "upstream_error", "upstream_data": e.data}) from None
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as e:
            self._lost = _describe(e)
            self._mark_down(self._lost)
            self._wake.set()
            raise McpError(INTERNAL_ERROR, f"upstream {self.name!r} failed during {tool}: {self._lost}; it is marked "
                           "down and retried", {"upstream": self.name, "reason": "connection_closed"}) from None
        return result.model_copy(update={"meta": None})


class McpError(MCPError):
    """An error answered to the MCP host (JSON-RPC code, message, data): the SDK sends it as the error."""


def _announces(client: Client) -> bool:
    """The server speaks 2026-07-28 and says it announces tool-list changes (older ones send the notification
    on the session, `_on_message`)."""
    tools = client.server_capabilities.tools
    return client.protocol_version in MODERN_PROTOCOL_VERSIONS and bool(tools and tools.list_changed)


def _names(tools: list[types.Tool]) -> list[str]:
    return [t.name for t in tools]


def _describe(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(_describe(x) for x in e.exceptions)
    if isinstance(e, TimeoutError):
        return str(e) or "timed out"
    text = str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}"[:300]
