"""The gateway's parts, built once by `create_app` (serving/app.py) and handed to every request handler.

    gw = build_gateway(cfg, client=client, pool=pool)       # serving/app.py: the parts, no server
    response = await chat(gw, request)                       # serving/gateway/chat.py, route.py, admin.py
    gw.finish("chat", 200, started, rid, ident, chosen=…)    # every request's counts and its one JSON log line

Handlers are plain functions of a `Gateway` and the request, so a test can
build the parts and call a step (plan, reserve, run) or a whole handler
without starting a server.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

from data.pool import Pool
from serving.core.auth import Identity, KeyStore
from serving.core.budget import Budgets
from serving.gateway.cascade import Cascade
from serving.gateway.config import ServingConfig
from serving.core.metrics import GatewayMetrics
from serving.core.record import Observer
from serving.gateway.reload import RouterSlot
from serving.core.state import StateStore
from serving.gateway.tools import GatewayTools
from serving.gateway.upstream import Upstreams
from serving.tools.policy import Caller
from training.policy import Strategy

log = logging.getLogger("switchcraft.gateway")


class ToolSelector(Protocol):
    """The hook for tool routing (serving/tools): which tools this caller's request exposes.

    `caller` is the request's identity: its API key's, narrowed by the body."""

    def __call__(self, messages: list, tools: list, caller: Caller) -> list[str]: ...


@dataclass
class Gateway:
    """Everything a request handler uses: configuration, pool, keys, limits, router, upstreams and watchers."""

    cfg: ServingConfig
    pool: Pool
    metrics: GatewayMetrics
    keys: KeyStore
    state: StateStore  # counts, reservations and the ledger (SQLite, Redis or memory)
    budgets: Budgets  # where a key's limits are enforced
    upstreams: Upstreams
    cascade: Cascade  # runs a strategy over the upstreams
    slot: RouterSlot  # the router in service (and its batcher), replaceable by a reload
    tools: GatewayTools | None = None  # tool routing over a catalog, when configured
    tool_selector: ToolSelector | None = None
    forced: Strategy | None = None  # router.cascade: run instead of the decision's strategy
    observers: list[Observer] = field(default_factory=list)  # decision log, exploration, traces

    def finish(self, endpoint: str, status: int, started: float, rid: str, ident: Identity | None,
               **fields) -> None:
        """The request's counts (`switchcraft_requests_total`, per key) and its one JSON log line."""
        self.metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
        if ident is not None:
            self.metrics.key_requests.labels(key=ident.key_id, status=str(status)).inc()
        log.info(json.dumps({"event": endpoint, "request_id": rid, "status": status,
                             "ms": round((time.perf_counter() - started) * 1e3, 2),
                             "key": ident.key_id if ident else None, **fields}, default=str))
