"""The MCP gateway's logic, apart from any transport: what a caller may list, find and call, and the calling.

    gw = McpGateway.from_config(cfg)                  # upstreams, bridge, keys, ledger
    async with gw.running():                          # upstreams connected (or down), first snapshot built
        tools = gw.list_tools(ident, group=None)      # /mcp: find_tools, call_tool, the safe default set
        result = await gw.call(ident, None, "find_tools", {"query": "read a file"})

Identity first: every answer starts from the caller's visible tools (the
permission filter of serving/tools/policy.py over the catalog, for the key's
caller, and only servers that are up). A tool outside them is never listed,
never found, and a call to it gets the same "Unknown tool" as a name that does
not exist. `/mcp/<group>` lists one group's visible tools; `/mcp` lists the
meta-tools and the safe default set (`default_tools`, else the caller's
read-only tools, at most `max_default_tools`), in catalog order (config order of
the servers, then each server's own order), so a listing is deterministic.

When an upstream's listing changes (its announcement or the interval) or a
server goes down or comes back, the catalog is rebuilt in the background and,
if any list changed, a `ToolsListChanged` event goes on `bus`: every host
holding a `subscriptions/listen` stream for tool-list changes gets
`notifications/tools/list_changed` and re-lists.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import time
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import numpy as np
from mcp.server.subscriptions import InMemorySubscriptionBus, ToolsListChanged
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS

from serving.core.auth import Identity, KeyStore
from serving.core.managed_keys import store_keys
from serving.mcp.bridge import Bridge, Snapshot
from serving.mcp.config import McpConfig
from serving.mcp.ledger import Ledger, clip
from serving.mcp.meta import CALL_TOOL, FIND_TOOLS, find_tools_result, meta_tools
from serving.mcp.upstream import McpError, Upstream

log = logging.getLogger("switchcraft.mcp")


def unknown_tool(name: str, clip_chars: int = 200) -> McpError:
    # One answer for a hidden tool, a tool of another endpoint and a name that does not exist.
    return McpError(INVALID_PARAMS, f"Unknown tool: {clip(name, clip_chars)}")


def ledger_of(cfg: McpConfig) -> Ledger:
    """The call ledger `cfg` names: its file, and the chat gateway's state store when `state:` is set."""
    from serving.core.state import open_state

    return Ledger(cfg.log_path, store=open_state(cfg.state) if cfg.state is not None else None,
                  max_mb=cfg.log_max_mb, keep=cfg.log_keep, clip_chars=cfg.clip_chars)


class McpGateway:
    def __init__(self, cfg: McpConfig, keys: KeyStore, bridge: Bridge, ledger: Ledger | None = None) -> None:
        self.cfg, self.keys, self.bridge = cfg, keys, bridge
        self.ledger = ledger or ledger_of(cfg)
        self.upstreams = [Upstream(u, self._changed, refresh_s=cfg.refresh_s, retry_s=cfg.retry_s)
                          for u in cfg.upstreams]
        self.by_name = {u.name: u for u in self.upstreams}
        self.snap: Snapshot = bridge.snapshot([])
        self._dirty = anyio.Event()
        self.rebuilds = 0
        # Hosts' `subscriptions/listen` streams (server.py) hang on this bus; a changed listing is published on it.
        self.bus = InMemorySubscriptionBus()
        self.announced = 0  # tools/list_changed events published

    @classmethod
    def from_config(cls, cfg: McpConfig, encoder=None, keys: KeyStore | None = None) -> McpGateway:
        """`encoder`: one already loaded (tests pass the session's); else the configured one, ONNX int8 queries."""
        query_encoder = None
        if encoder is None:
            from serving.tools.index import checked_model_dir
            from serving.tools.onnx_encoder import OnnxQueryEncoder, load_encoder

            enc_dir = f"{cfg.index_dir}/encoder" if cfg.index_dir else None
            encoder = load_encoder(enc_dir, checked_model_dir(cfg.encoder, "encoder"))
            if isinstance(encoder, OnnxQueryEncoder) and cfg.retrieval.query_precision == "int8":
                query_encoder = OnnxQueryEncoder.create(encoder.base, enc_dir, threads=cfg.retrieval.query_threads,
                                                        int8=True)
        ledger = ledger_of(cfg)  # its state store also holds the keys: the chat gateway's, seeded from cfg.auth
        if keys is None:
            keys = store_keys(cfg.auth, None, ledger.store) if ledger.store else KeyStore.from_settings(cfg.auth)
        return cls(cfg, keys, Bridge(cfg, encoder, query_encoder), ledger)

    # -- upstreams and the catalog ---------------------------------------------

    def _changed(self) -> None:
        self._dirty.set()

    def rebuild(self) -> None:
        """A new snapshot from the upstreams' current listings (embeds only tools not seen before)."""
        t0 = time.perf_counter()
        self.snap = self.bridge.snapshot(self.upstreams)
        self.rebuilds += 1
        log.info("mcp catalog %s: %d tools in %d groups (%.0f ms)", self.snap.catalog.version,
                 len(self.snap.catalog), len(self.snap.catalog.groups), (time.perf_counter() - t0) * 1e3)

    def listing_key(self) -> tuple:
        """What every list depends on besides the caller: the catalog and which servers are up."""
        return self.snap.catalog.version, tuple(u.up for u in self.upstreams)

    async def _rebuilder(self) -> None:
        """Rebuild after each change; when the lists changed, tell the hosts listening for tool-list changes."""
        published = self.listing_key()
        while True:
            await self._dirty.wait()
            self._dirty = anyio.Event()
            await anyio.to_thread.run_sync(self.rebuild)
            if self.listing_key() != published:
                published = self.listing_key()
                self.announced += 1
                await self.bus.publish(ToolsListChanged())

    @asynccontextmanager
    async def running(self, ready_timeout_s: float | None = None):
        """Connect every upstream (each runs until the block ends), wait for each to list or fail once,
        build the first snapshot; the rebuilds after a change run in the background."""
        await self.keys.start()
        async with anyio.create_task_group() as tg:
            for up in self.upstreams:
                tg.start_soon(up.run)
            limit = ready_timeout_s or max([u.cfg.connect_timeout_s for u in self.upstreams] + [1.0]) + 5
            with anyio.move_on_after(limit):
                while not all(u.up or u.error for u in self.upstreams):
                    await anyio.sleep(0.02)
            self._dirty = anyio.Event()
            await anyio.to_thread.run_sync(self.rebuild)
            tg.start_soon(self._rebuilder)
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()
                if self.ledger.store is not None:
                    await self.ledger.store.aclose()

    def status(self) -> dict[str, Any]:
        return {"catalog_version": self.snap.catalog.version, "tools": len(self.snap.catalog),
                "groups": self.snap.catalog.group_names(), "upstreams": [u.status() for u in self.upstreams]}

    # -- what a caller may see ---------------------------------------------------

    def visible(self, ident: Identity, snap: Snapshot | None = None) -> np.ndarray:
        """Per card of the snapshot: the caller may see it and its server is up."""
        snap = snap or self.snap
        if not len(snap.catalog):
            return np.zeros(0, dtype=bool)
        up = {u.name: u.up for u in self.upstreams}
        return snap.router.visible(ident.caller).visible & snap.live(up)

    def groups_for(self, ident: Identity) -> list[str]:
        """The groups holding a tool the caller may see (whether or not their server is up now)."""
        snap = self.snap
        if not len(snap.catalog):
            return []
        seen = snap.router.visible(ident.caller).visible
        return sorted({snap.catalog.cards[i].group_name for i in np.flatnonzero(seen)})

    def _rows(self, ident: Identity, group: str | None, snap: Snapshot) -> np.ndarray:
        """The rows an endpoint serves the caller: a group's visible tools, or /mcp's safe default set."""
        vis = self.visible(ident, snap)
        if group is not None:
            rows = snap.group_rows.get(group, np.zeros(0, dtype=np.int64))
            return rows[vis[rows]]
        if self.cfg.default_tools is not None:
            cards, pats = snap.catalog.cards, self.cfg.default_tools
            return np.array([i for i in np.flatnonzero(vis)
                             if any(fnmatch.fnmatchcase(cards[i].exposed_name, p) for p in pats)], dtype=np.int64)
        rows = snap.read_rows[vis[snap.read_rows]] if len(snap.read_rows) else snap.read_rows
        return rows[: self.cfg.max_default_tools]

    def list_tools(self, ident: Identity, group: str | None) -> list[types.Tool]:
        snap = self.snap
        listed = [snap.by_row[i].listed for i in self._rows(ident, group, snap)]
        if group is None:
            return meta_tools(self.groups_for(ident), self.cfg.find_k) + listed
        return listed

    def find(self, ident: Identity, query: str, k: int) -> list[dict[str, Any]]:
        """The hybrid retriever's top k among the caller's visible tools: name, description, group, schema."""
        snap = self.snap
        vis = self.visible(ident, snap)
        if not query.strip() or not vis.any():
            return []
        router = snap.router
        texts = router.intents(query)
        Q = router._vectors(texts, None)
        fused, _ = router.fuse(texts, Q, vis)
        out = []
        for i in router.top(fused, min(k, int(vis.sum()))):
            e, card = snap.by_row[int(i)], snap.catalog.cards[int(i)]
            out.append({"name": e.name, "description": e.tool.description or "", "group": card.group_name,
                        "inputSchema": e.tool.input_schema})
        return out

    # -- calling -----------------------------------------------------------------

    async def call(self, ident: Identity, group: str | None, name: str, arguments: dict[str, Any] | None,
                   ) -> types.CallToolResult:
        """A tools/call on an endpoint (`group` None: /mcp), charged to the key and logged with its outcome."""
        endpoint = "/mcp" if group is None else f"/mcp/{group}"
        t0 = time.perf_counter()
        target, upstream, outcome, code = name, "", "ok", None
        try:
            await self.ledger.admit(ident)
            if group is None and name == FIND_TOOLS:
                args = arguments or {}
                query, k = args.get("query"), args.get("k", self.cfg.find_k)
                if not isinstance(query, str) or not isinstance(k, int) or not 1 <= k <= 50:
                    raise McpError(INVALID_PARAMS, "find_tools takes {query: string, k?: integer 1..50}")
                query = self._bounded_query(query)
                # Embedding the query takes milliseconds of CPU: off the event loop.
                return find_tools_result(await anyio.to_thread.run_sync(self.find, ident, query, k))
            if group is None and name == CALL_TOOL:
                args = arguments or {}
                target, inner = args.get("name"), args.get("arguments") or {}
                if not isinstance(target, str) or not isinstance(inner, dict):
                    raise McpError(INVALID_PARAMS, "call_tool takes {name: string, arguments?: object}")
                entry = self._permitted(ident, target)
            else:
                entry = self._served(ident, group, name)
                inner = arguments
            upstream = entry.upstream
            result = await self.by_name[entry.upstream].call(entry.tool.name, inner)
            outcome = "tool_error" if result.is_error else "ok"
            return result
        except McpError as e:
            outcome, code = (e.data or {}).get("reason", "error") if isinstance(e.data, dict) else "error", e.code
            raise
        except anyio.get_cancelled_exc_class():
            outcome = "cancelled"
            raise
        finally:
            self.ledger.record(ident, tool=str(target), upstream=upstream, outcome=outcome, code=code,
                               ms=(time.perf_counter() - t0) * 1e3, endpoint=endpoint)

    def _bounded_query(self, query: str) -> str:
        """The query find_tools searches with: cut to find_query_chars (the retriever reads 128 word pieces, so the
        rest would only cost tokenising and BM25 time); over max_find_query_bytes, refused."""
        limit = self.cfg.max_find_query_bytes
        if len(query) > limit or len(query.encode("utf-8", "surrogatepass")) > limit:
            raise McpError(INVALID_PARAMS, f"find_tools: query is {len(query):,} characters; the limit is {limit:,} "
                           "bytes (max_find_query_bytes): describe the task in a few words",
                           {"reason": "query_too_long"})
        return query[: self.cfg.find_query_chars]

    def _served(self, ident: Identity, group: str | None, name: str):
        """The entry `name` names on this endpoint, if the caller may call it there."""
        snap = self.snap
        entry = snap.entries.get(name)
        if entry is None or entry.row not in self._rows(ident, group, snap):
            raise self._refusal(ident, name, snap)
        return entry

    def _permitted(self, ident: Identity, name: str):
        """call_tool: any tool the caller may see, on any server that is up."""
        snap = self.snap
        entry = snap.entries.get(name)
        if entry is None or not self.visible(ident, snap)[entry.row]:
            raise self._refusal(ident, name, snap)
        return entry

    def _refusal(self, ident: Identity, name: str, snap: Snapshot) -> McpError:
        """Unknown tool, unless the caller may see it and only its server is down (then: say so)."""
        entry = snap.entries.get(name)
        if entry is not None and snap.router.visible(ident.caller).visible[entry.row]:
            up = self.by_name[entry.upstream]
            if not up.up:
                return McpError(INTERNAL_ERROR, f"upstream {up.name!r} is down ({up.error}); "
                                f"{clip(name, self.cfg.clip_chars)} is back once it is",
                                {"upstream": up.name, "reason": "down"})
        return unknown_tool(name, self.cfg.clip_chars)


def result_text(result: types.CallToolResult) -> str:
    """The text blocks of a result, joined (tests and the bench read answers with it)."""
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent)) or json.dumps(
        result.structured_content)
