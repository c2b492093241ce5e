"""Prometheus metrics of one gateway app (its own registry: two apps in one process do not collide).

    metrics = GatewayMetrics()
    metrics.decisions.labels(model="gpt-4o-mini-2024-07-18", rule="cheapest_confident").inc()
    metrics.render()            # text exposition for GET /metrics
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

# Routing is milliseconds; upstream calls are seconds. One bucket set each.
ROUTING_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0)
UPSTREAM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class GatewayMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("switchcraft_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=r)
        self.decisions = Counter("switchcraft_decisions", "Routing decisions by chosen model and rule", ["model", "rule"], registry=r)
        self.fallbacks = Counter("switchcraft_fallbacks", "Upstream failures that moved to the next model",
                                 ["from_model", "reason"], registry=r)
        self.upstream_errors = Counter("switchcraft_upstream_errors", "Failed upstream attempts", ["model", "reason"], registry=r)
        self.routing_latency = Histogram("switchcraft_routing_latency_seconds", "Packing + router graph + policy",
                                         buckets=ROUTING_BUCKETS, registry=r)
        self.upstream_latency = Histogram("switchcraft_upstream_latency_seconds", "Upstream call until headers (streams) "
                                          "or the whole body", ["model"], buckets=UPSTREAM_BUCKETS, registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
