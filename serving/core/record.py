"""One served request, as everything that learns from or watches the gateway reads it.

    served = Served(request_id=rid, key_id="acme", ...)     # built by serving/gateway/chat.py once a chat request ends
    for observe in observers:                              # the decision log, exploration, traces
        observe(served)                                    # must not block: queue or schedule the work
    notify_ended(observers, served, log)                   # a passed-through stream's end (served.open_stream)

Observers get the request as the gateway parsed it (`messages`, `tools`), the
caller's body (`body`, after tool routing), the decision and strategy trace
(`meta`, the `switchcraft` field of the answer), the strategy's run (every
upstream call: model, outcome, latency, usage, cost, decoded calls, agreement
checks), and what the key was charged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from data.schema import Message, Tool


@dataclass
class Served:
    request_id: str
    key_id: str | None
    started_at: float  # wall-clock seconds (time.time()) when the request arrived
    duration_ms: float
    status: int
    router_version: str
    stream: bool = False
    body: dict[str, Any] = field(default_factory=dict)  # the caller's body (tools replaced by tool routing)
    messages: list[Message] = field(default_factory=list)
    tools: list[Tool] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # the `switchcraft` trace: decision, strategy, calls, verdict
    run: Any = None  # serving.gateway.cascade.Run, or None when no upstream was called
    charges: list = field(default_factory=list)  # serving.core.state.Charge
    error: str | None = None
    # The pool models the key and the request allow (None: every one). Whatever observes the request and calls
    # more models (exploration) calls only these: a key restricted to some providers is a data policy.
    allowed_models: frozenset[str] | None = None
    # The gateway's own time: duration_ms less the time spent waiting on upstream calls (a stream's: its whole
    # relay once it has ended). None where it was not measured.
    overhead_ms: float | None = None
    # A passed-through stream still running when observed: observers with an `ended(served)` method see it
    # again, completed, when the stream ends (`notify_ended`).
    open_stream: bool = False

    @property
    def example_id(self) -> str | None:
        """The caller's `metadata.example_id`, when it sent one (a benchmark query with known answers)."""
        meta = self.body.get("metadata")
        value = meta.get("example_id") if isinstance(meta, dict) else None
        return value if isinstance(value, str) else None

    @property
    def cost_usd(self) -> float:
        return sum(c.usd for c in self.charges)


Observer = Callable[[Served], None]  # and optionally `ended(served)`: a passed-through stream, once it has ended


def notify(observers: list[Observer], served: Served, log) -> None:
    """Every observer sees the request; one that fails is logged and never fails the request."""
    import json

    for observe in observers:
        try:
            observe(served)
        except Exception as e:  # noqa: BLE001 - an observer must never break serving
            log.error(json.dumps({"event": "observer_failed", "observer": type(observe).__name__,
                                  "request_id": served.request_id, "error": type(e).__name__}))


def notify_ended(observers: list[Observer], served: Served, log) -> None:
    """The observers that wait for a passed-through stream's end (an `ended` method) see it, completed."""
    notify([o.ended for o in observers if hasattr(o, "ended")], served, log)
