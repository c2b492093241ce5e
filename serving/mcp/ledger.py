"""Every MCP call charged to its key and written down: the key's requests-per-minute limit and the call log.

    ledger = Ledger(path="runs/mcp/calls.jsonl")
    ledger.admit(identity)                      # McpError (-32000, "rate limit") once the key's minute is full
    ledger.record(identity, tool="files__read_text_file", upstream="files", outcome="ok", ms=12.3)

The limit is the key's `limits.requests_per_minute` (the chat gateway's keys
file): a sliding 60 s window per key, in this process. The log is one JSON
line per call (time, key id, tool, server, outcome, latency, error code),
appended; a host's arguments and results are never written.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from serving.gateway.auth import Identity
from serving.mcp.upstream import McpError

RATE_LIMITED = -32029  # server-defined JSON-RPC code: the key's requests per minute are used up


class Ledger:
    def __init__(self, path: str | Path | None = None, clock=time.monotonic) -> None:
        self.path = Path(path) if path else None
        self.clock = clock
        self._windows: dict[str, deque[float]] = {}
        self._lock = threading.Lock()
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def admit(self, ident: Identity) -> None:
        limit = ident.limits.requests_per_minute
        if limit is None:
            return
        now = self.clock()
        with self._lock:
            window = self._windows.setdefault(ident.key_id, deque())
            while window and window[0] <= now - 60.0:
                window.popleft()
            if len(window) >= limit:
                wait_ms = math.ceil((window[0] + 60.0 - now) * 1000)
                raise McpError(RATE_LIMITED, f"rate limit: key {ident.key_id!r} may make {limit} calls a minute "
                               f"(limits.requests_per_minute); retry after {wait_ms} ms",
                               {"reason": "rate_limited", "retry_after_ms": wait_ms})
            window.append(now)

    def record(self, ident: Identity, *, tool: str, outcome: str, ms: float, upstream: str = "",
               code: int | None = None, endpoint: str = "/mcp") -> dict[str, Any]:
        row = {"ts": round(time.time(), 3), "key": ident.key_id, "endpoint": endpoint, "tool": tool,
               "upstream": upstream, "outcome": outcome, "ms": round(ms, 3)}
        if code is not None:
            row["code"] = code
        if self.path:
            line = json.dumps(row) + "\n"
            with self._lock, self.path.open("a") as f:
                f.write(line)
        return row
