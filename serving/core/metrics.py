"""Prometheus metrics of one gateway app (its own registry: two apps in one process do not collide).

    metrics = GatewayMetrics()
    metrics.decisions.labels(model="gpt-4o-mini-2024-07-18", rule="cheapest_confident").inc()
    metrics.render()            # text exposition for GET /metrics

Several worker processes (`switchcraft serve --workers N`) keep their values in prometheus_client's multiprocess
mode (`PROMETHEUS_MULTIPROC_DIR`, set before the workers start): each writes its own files there and `render`
reads every process's through `MultiProcessCollector`, so one worker's /metrics adds up all of them (counters
and histograms summed; the queue gauge summed over the live workers, breaker and exploration gauges their
maximum).
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)

# Routing is milliseconds; upstream calls are seconds. One bucket set each.
ROUTING_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0)
UPSTREAM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
CALL_BUCKETS = (1, 2, 3, 4, 5, 6, 8)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
COST_BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1)
OVERHEAD_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.035, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class GatewayMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        # The values live in files shared by the workers when prometheus_client was imported in multiprocess mode.
        self.multiprocess = values.ValueClass is not values.MutexValue
        r = self.registry = CollectorRegistry()
        self.requests = Counter("switchcraft_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=r)
        self.decisions = Counter("switchcraft_decisions", "Routing decisions by chosen model and rule", ["model", "rule"], registry=r)
        self.fallbacks = Counter("switchcraft_fallbacks", "Upstream failures that moved to the next model",
                                 ["from_model", "reason"], registry=r)
        self.upstream_errors = Counter("switchcraft_upstream_errors", "Failed upstream attempts", ["model", "reason"], registry=r)
        self.overhead = Histogram("switchcraft_gateway_overhead_seconds", "The gateway's own time per /v1 answer: "
                                  "its wall time less the time spent waiting on upstream calls (routing, tool "
                                  "routing, translation, admission, state store)", ["endpoint"],
                                  buckets=OVERHEAD_BUCKETS, registry=r)
        self.routing_latency = Histogram("switchcraft_routing_latency_seconds", "Packing + router graph + policy",
                                         buckets=ROUTING_BUCKETS, registry=r)
        # The routing micro-batcher (serving/gateway/batcher.py).
        self.router_batch_size = Histogram("switchcraft_router_batch_size", "Routing calls merged into one inference "
                                           "call", buckets=BATCH_BUCKETS, registry=r)
        self.router_queue_wait = Histogram("switchcraft_router_queue_wait_seconds", "From admission (packing "
                                           "included) until the call's batch starts", buckets=ROUTING_BUCKETS, registry=r)
        self.router_queue = Gauge("switchcraft_router_queue", "Routing calls admitted and not yet answered "
                                  "(at most router.max_queue)", registry=r, multiprocess_mode="livesum")
        self.router_busy = Counter("switchcraft_router_busy", "Requests refused with 429 router_busy: "
                                   "router.max_queue calls were already admitted", registry=r)
        self.router_unavailable = Counter("switchcraft_router_unavailable", "Requests answered 503 router_unavailable: "
                                          "the router backend failed or timed out", registry=r)
        self.upstream_latency = Histogram("switchcraft_upstream_latency_seconds", "Upstream call until headers (streams) "
                                          "or the whole body", ["model"], buckets=UPSTREAM_BUCKETS, registry=r)
        # Strategies (serving/gateway/cascade.py): what ran, how the agreement check went, what it cost.
        self.strategies = Counter("switchcraft_strategies", "Strategies run, by kind (single | agree) and source "
                                  "(decision | config | request | model)", ["kind", "source"], registry=r)
        self.agreements = Counter("switchcraft_agreements", "Agreement verdicts of cascades (agree | disagree | tie_broken | resolved)",
                                  ["verdict"], registry=r)
        self.escalations = Counter("switchcraft_escalations", "Cascades answered by escalation, by the model that answered",
                                   ["to_model"], registry=r)
        self.calls_per_request = Histogram("switchcraft_upstream_calls_per_request", "Upstream calls made for one request",
                                           buckets=CALL_BUCKETS, registry=r)
        self.call_cost = Counter("switchcraft_upstream_cost_usd", "Cost of upstream calls (usage × the pool's prices)",
                                 ["model"], registry=r)
        self.request_cost = Histogram("switchcraft_request_cost_usd", "Cost of every call made for one request",
                                      buckets=COST_BUCKETS, registry=r)
        self.decoded = Counter("switchcraft_answers_decoded", "Upstream answers by what they decoded to "
                               "(tool_calls | no_call | malformed)", ["model", "result"], registry=r)

        # Callers (serving/core/auth.py): by key id, never the key.
        self.key_requests = Counter("switchcraft_key_requests", "Requests by API key id and status", ["key", "status"],
                                    registry=r)
        self.key_spend = Counter("switchcraft_key_spend_usd", "Spend by API key id (every call, abandoned ones at "
                                 "their estimate)", ["key"], registry=r)
        self.auth_rejections = Counter("switchcraft_auth_rejections", "Requests refused by authentication or a key's "
                                       "limits (key empty when none was valid)", ["key", "reason"], registry=r)
        # Limits and money (serving/core/budget.py, state.py).
        self.state_errors = Counter("switchcraft_state_errors", "Operations on the limit store that failed (admit, "
                                    "reserve, settle): keys with limits got 503", ["op"], registry=r)
        self.reserved_usd = Counter("switchcraft_reserved_usd", "Worst-case cost reserved before upstream calls",
                                    registry=r)
        self.unrecorded_usd = Counter("switchcraft_unrecorded_usd", "Charges the store could not take (logged; "
                                      "their reservation is charged as expired later)", registry=r)
        self.estimated_usd = Counter("switchcraft_estimated_cost_usd", "Charges estimated from text length: the "
                                     "provider sent no usage", ["model"], registry=r)
        # Learning from traffic (serving/core/decision_log.py, explore.py).
        self.decision_log_records = Counter("switchcraft_decision_log_records", "Records written to the decision log",
                                            registry=r)
        self.decision_log_dropped = Counter("switchcraft_decision_log_dropped", "Decision-log records dropped (queue "
                                            "full or a failed write): the log never blocks a response", registry=r)
        self.explorations = Counter("switchcraft_explorations", "Requests explored after answering, by outcome "
                                    "(explored | skipped_busy | skipped_budget | failed)", ["outcome"], registry=r)
        self.explore_calls = Counter("switchcraft_explore_calls", "Upstream calls made by exploration", ["model"],
                                     registry=r)
        self.explore_cost = Counter("switchcraft_explore_cost_usd", "What exploration cost (the operator's budget, "
                                    "never a caller's)", registry=r)
        self.settle_retries = Counter("switchcraft_settle_retries", "Charges the store could not take when the call "
                                      "ended, retried in the background, by outcome (settled | gave_up)",
                                      ["outcome"], registry=r)
        self.explore_below_target = Gauge("switchcraft_explore_models_below_target", "Explored pool models with "
                                          "fewer logged answers than explore.min_answers", registry=r,
                                          multiprocess_mode="livemax")
        self.router_reloads = Counter("switchcraft_router_reloads", "Router reloads by outcome (ok | failed | refused)",
                                      ["outcome"], registry=r)
        self._resilience(r)

    def _resilience(self, r: CollectorRegistry) -> None:
        # Upstream resilience (serving/gateway/breaker.py, upstream.py).
        self.circuit_state = Gauge("switchcraft_circuit_state", "Circuit breaker per upstream endpoint: "
                                   "0 closed, 1 half-open, 2 open", ["endpoint"], registry=r,
                                   multiprocess_mode="livemax")
        self.circuit_opens = Counter("switchcraft_circuit_opens", "Times an endpoint's breaker opened", ["endpoint"],
                                     registry=r)
        self.circuit_skips = Counter("switchcraft_circuit_skips", "Calls not sent because the endpoint's breaker was "
                                     "open (or it failed earlier in the same request)", ["endpoint", "model"], registry=r)
        self.abandoned = Counter("switchcraft_abandoned_calls", "Calls sent then given up (timeout, dropped, hedge lost): "
                                 "the provider may bill them", ["model", "reason"], registry=r)
        self.abandoned_cost = Counter("switchcraft_abandoned_cost_usd", "Estimated cost of abandoned calls (the "
                                      "router's expected cost of the model for that request)", ["model"], registry=r)
        self.hedges = Counter("switchcraft_hedges", "Hedged calls started (upstream.hedge_after_s), by model",
                              ["model"], registry=r)
        # Slow or vanishing clients, rate-limited upstreams (serving/core/errors.py, server.py, breaker.py).
        self.client_disconnects = Counter("switchcraft_client_disconnects", "Requests whose client disconnected "
                                          "while sending the body (status 499)", ["endpoint"], registry=r)
        self.client_timeouts = Counter("switchcraft_client_timeouts", "Clients too slow: headers not complete "
                                       "within header_timeout_s (connection closed), or body within body_timeout_s "
                                       "(408)", ["phase"], registry=r)
        self.upstream_rate_limited = Counter("switchcraft_upstream_rate_limited", "Upstream 429s: the endpoint gets "
                                             "no calls until its Retry-After has passed", ["endpoint"], registry=r)

    def render(self) -> bytes:
        if not self.multiprocess:
            return generate_latest(self.registry)
        every = CollectorRegistry()  # every worker's values, read from their files
        multiprocess.MultiProcessCollector(every)
        return generate_latest(every)

    def close(self) -> None:
        """This process stops: its live gauges leave the sum (its counters stay: they were counted)."""
        if self.multiprocess:
            multiprocess.mark_process_dead(os.getpid())
