"""What only the running gateway knows (its Prometheus counters and breakers), for the console's live panels.

    live_traffic(gw)   # routing latency P50/P99 (histogram buckets), refusals by reason, breaker per upstream
    live_router(gw)    # the router in service and its reload counts

These counts start at zero with the process (the decision log holds the history); the pages say so.
"""

from __future__ import annotations

import math
from typing import Any


def samples(metric, suffix: str = "_total") -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for mf in metric.collect() for s in mf.samples if s.name.endswith(suffix)]


def histogram_quantile(metric, q: float) -> float | None:
    """The upper bound of the bucket holding the q-quantile (Prometheus' buckets; None before any observation)."""
    buckets = sorted(((float(labels["le"]), v) for labels, v in samples(metric, "_bucket")), key=lambda b: b[0])
    total = buckets[-1][1] if buckets else 0
    if not total:
        return None
    for le, count in buckets:
        if count >= q * total:
            return le if math.isfinite(le) else None
    return None


def live_traffic(gw) -> dict[str, Any]:
    m = gw.metrics
    refusals = [{"key": labels.get("key") or "(no valid key)", "reason": labels.get("reason") or "", "requests": v}
                for labels, v in samples(m.auth_rejections) if v]
    p50, p99 = histogram_quantile(m.routing_latency, 0.5), histogram_quantile(m.routing_latency, 0.99)
    return {"routing_p50_ms": None if p50 is None else p50 * 1e3,
            "routing_p99_ms": None if p99 is None else p99 * 1e3,
            "refusals": sorted(refusals, key=lambda r: -r["requests"]),
            "router_busy": sum(v for _, v in samples(m.router_busy)),
            "router_unavailable": sum(v for _, v in samples(m.router_unavailable)),
            "upstream_rate_limited": [{"endpoint": lb["endpoint"], "times": v}
                                      for lb, v in samples(m.upstream_rate_limited) if v],
            "breakers": [{"endpoint": ep, "state": st} for ep, st in sorted(gw.upstreams.breakers.states().items())]}


def live_router(gw) -> dict[str, Any]:
    client = gw.slot.client
    reloads = {labels["outcome"]: v for labels, v in samples(gw.metrics.router_reloads)}
    return {"version": client.version, "backend": client.backend.name, "dir": gw.slot.loaded_from,
            "models": list(client.models), "reloads_ok": reloads.get("ok", 0.0),
            "reloads_failed": reloads.get("failed", 0.0), "previous_dir": (gw.slot.history or [None])[-1]}
