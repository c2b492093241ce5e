"""Every MCP call charged to its key and written down: the key's requests-per-minute limit and the call log.

    ledger = Ledger(path="runs/mcp/calls.jsonl", store=open_state(cfg.state))   # store None: this process only
    await ledger.admit(identity)                # McpError (-32029, "rate limit") once the key's minute is full
    ledger.record(identity, tool="files__read_text_file", upstream="files", outcome="ok", ms=12.3)

The limit is the key's `limits.requests_per_minute` (the chat gateway's keys
file): a sliding 60 s window per key. With `state:` set, the window lives in the
chat gateway's shared store (serving/core/state.py: SQLite for processes on
one machine, Redis for several), so every gateway replica on that store counts
the same calls and they refuse alike; the window is the key's MCP calls, apart
from its chat requests (store id `__mcp__:<key id>`; `__` ids are the
gateway's own). A store that cannot be reached refuses the calls of keys with a
limit (fail closed, -32603 naming the store) and never touches the calls of
keys without one. Without `state:` the window is this process's. The log is one
JSON line per call (time, key id, tool, server, outcome, latency, error code),
appended; a host's arguments and results are never written, and the tool name
(the caller's string) is cut to `clip_chars`. The file is rotated at `max_mb`
(calls.jsonl.1 is the newest older one), `keep` rotated files are kept.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import deque
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

from mcp_types.jsonrpc import INTERNAL_ERROR

from serving.core.auth import Identity
from serving.core.state import StateStore, StateUnavailable
from serving.mcp.upstream import McpError

RATE_LIMITED = -32029  # server-defined JSON-RPC code: the key's requests per minute are used up
STORE_PREFIX = "__mcp__:"  # the store's id of a key's MCP window


def clip(text: str, limit: int) -> str:
    """A caller's string as logs and errors may quote it: at most `limit` characters, and its length when cut."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


class Ledger:
    def __init__(self, path: str | Path | None = None, clock=time.monotonic, store: StateStore | None = None, *,
                 max_mb: float = 64.0, keep: int = 4, clip_chars: int = 200) -> None:
        self.path = Path(path) if path else None
        self.clock, self.store, self.clip_chars = clock, store, clip_chars
        self._windows: dict[str, deque[float]] = {}
        self._lock = threading.Lock()
        self._file: RotatingFileHandler | None = None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = RotatingFileHandler(self.path, maxBytes=max(1, int(max_mb * 2**20)), backupCount=keep,
                                             encoding="utf-8", delay=True)

    async def admit(self, ident: Identity) -> None:
        limit = ident.limits.requests_per_minute
        if limit is None:
            return
        if self.store is not None:
            try:
                got = await self.store.admit(STORE_PREFIX + ident.key_id, rpm=limit, usd_per_day=None, now=time.time())
            except StateUnavailable as e:
                raise McpError(INTERNAL_ERROR, f"rate limit: the shared state store is unavailable ({e}); key "
                               f"{ident.key_id!r} has a limit, so its calls wait for the store (state: in the MCP "
                               "config)", {"reason": "state_unavailable"}) from None
            if got.reason == "rate_limit":
                raise self._limited(ident, limit, got.wait_s)
            return
        now = self.clock()
        with self._lock:
            window = self._windows.setdefault(ident.key_id, deque())
            while window and window[0] <= now - 60.0:
                window.popleft()
            if len(window) >= limit:
                raise self._limited(ident, limit, window[0] + 60.0 - now)
            window.append(now)

    @staticmethod
    def _limited(ident: Identity, limit: int, wait_s: float) -> McpError:
        wait_ms = max(1, math.ceil(wait_s * 1000))
        return McpError(RATE_LIMITED, f"rate limit: key {ident.key_id!r} may make {limit} calls a minute "
                        f"(limits.requests_per_minute); retry after {wait_ms} ms",
                        {"reason": "rate_limited", "retry_after_ms": wait_ms})

    def record(self, ident: Identity, *, tool: str, outcome: str, ms: float, upstream: str = "",
               code: int | None = None, endpoint: str = "/mcp") -> dict[str, Any]:
        row = {"ts": round(time.time(), 3), "key": ident.key_id, "endpoint": endpoint, "tool": clip(tool, self.clip_chars),
               "upstream": upstream, "outcome": outcome, "ms": round(ms, 3)}
        if code is not None:
            row["code"] = code
        if self._file is not None:
            self._file.handle(logging.makeLogRecord({"msg": json.dumps(row), "levelno": logging.INFO}))
        return row

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
