"""A circuit breaker per upstream endpoint, so a dead endpoint is skipped at once instead of hammered.

    breakers = Breakers(pool, BreakerSettings(failures=5, open_s=5.0, probes=1), metrics)
    breaker = breakers.of(model)          # models sharing a base_url share one breaker
    if breaker.allow(): ... breaker.record(failed=False)   # or failed=True; breaker.release() when neither
    breakers.retry_after_s(models)        # the earliest moment one of them takes a probe again

closed → `failures` consecutive failures (connection refused or dropped,
timeout, 5xx, unreadable body) → open: calls are not sent for `open_s`, then
half-open: `probes` calls at a time go through; one that gets any HTTP answer
closes it (a 4xx means the endpoint is up), one that fails opens it again.
State is in /metrics (`switchcraft_circuit_state{endpoint}`) and /readyz.

A 429 is no failure (the endpoint is up) but an instruction: the breaker
learns its `Retry-After` (`rate_limited(wait_s)`; 1 s when the provider sent
none, at most 5 minutes) and lets no call through until then, whatever its
state; `retry_after_s` is then the later of the two waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from data.pool import Pool
from serving.core.metrics import GatewayMetrics

STATES = {"closed": 0, "half_open": 1, "open": 2}
RETRY_AFTER_DEFAULT_S = 1.0  # a 429 without Retry-After
RETRY_AFTER_MAX_S = 300.0  # a Retry-After beyond this is read as this (one bad header must not shut an endpoint for a day)


def endpoint_of(base_url: str) -> str:
    return base_url.rstrip("/")


@dataclass
class Breaker:
    endpoint: str
    failures_to_open: int
    open_s: float
    probes: int
    metrics: GatewayMetrics | None = None
    clock: Callable[[], float] = time.monotonic
    state: str = "closed"
    failures: int = 0
    opened_at: float = 0.0
    in_flight: int = 0  # half-open probes not yet answered
    opens: int = field(default=0)
    limited_until: float = 0.0  # clock time before which the provider asked (429 Retry-After) not to be called

    def _set(self, state: str) -> None:
        if state == "open":
            self.opened_at, self.opens = self.clock(), self.opens + 1
            if self.metrics is not None:
                self.metrics.circuit_opens.labels(endpoint=self.endpoint).inc()
        self.state = state
        if self.metrics is not None:
            self.metrics.circuit_state.labels(endpoint=self.endpoint).set(STATES[state])

    def current(self) -> str:
        if self.state == "open" and self.clock() - self.opened_at >= self.open_s:
            self._set("half_open")
            self.in_flight = 0
        return self.state

    def rate_limited(self, wait_s: float | None) -> float:
        """The endpoint answered 429: no calls for `wait_s` (its Retry-After). Returns the wait it will keep."""
        wait = RETRY_AFTER_DEFAULT_S if wait_s is None else min(max(0.0, wait_s), RETRY_AFTER_MAX_S)
        self.limited_until = max(self.limited_until, self.clock() + wait)
        return wait

    def limited_s(self) -> float:
        """0 when the provider takes calls now; else the time left of its last Retry-After."""
        return max(0.0, self.limited_until - self.clock())

    def allow(self) -> bool:
        """Whether a call may be sent now (a half-open breaker counts it as a probe)."""
        if self.limited_s() > 0:
            return False
        state = self.current()
        if state == "closed":
            return True
        if state == "half_open" and self.in_flight < self.probes:
            self.in_flight += 1
            return True
        return False

    def record(self, failed: bool) -> None:
        """The outcome of a call `allow` let through."""
        probing = self.state == "half_open"
        if probing:
            self.in_flight = max(0, self.in_flight - 1)
        if not failed:
            self.failures = 0
            if self.state != "closed":
                self._set("closed")
            return
        self.failures += 1
        if probing or (self.state == "closed" and self.failures >= self.failures_to_open):
            self._set("open")

    def release(self) -> None:
        """A call let through that ended with no verdict on the endpoint (cancelled)."""
        if self.state == "half_open":
            self.in_flight = max(0, self.in_flight - 1)

    def retry_after_s(self) -> float:
        """0 when calls go through now; else the time until the breaker takes a call (a probe) again."""
        opened = max(0.0, self.opened_at + self.open_s - self.clock()) if self.current() == "open" else 0.0
        return max(opened, self.limited_s())


class Breakers:
    def __init__(self, pool: Pool, settings, metrics: GatewayMetrics | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.by_endpoint: dict[str, Breaker] = {}
        self.by_model: dict[str, Breaker] = {}
        for m in pool.models:
            ep = endpoint_of(m.base_url)
            if ep not in self.by_endpoint:
                self.by_endpoint[ep] = Breaker(ep, settings.failures, settings.open_s, settings.probes, metrics, clock)
                if metrics is not None:
                    metrics.circuit_state.labels(endpoint=ep).set(0)
            self.by_model[m.name] = self.by_endpoint[ep]

    def of(self, model: str) -> Breaker:
        return self.by_model[model]

    def states(self) -> dict[str, str]:
        return {ep: b.current() for ep, b in self.by_endpoint.items()}

    def all_open(self) -> bool:
        """No endpoint takes a call now (none closed, none due for a probe): no request can be answered."""
        return all(b.current() == "open" for b in self.by_endpoint.values())

    def retry_after_s(self, models: Iterable[str]) -> float | None:
        """The earliest time one of `models`' endpoints takes calls again; None when none is open or rate-limited."""
        waits = [self.of(m).retry_after_s() for m in models if m in self.by_model]
        open_ = [w for w in waits if w > 0]
        return min(open_) if open_ else None

    def limited_s(self, models: Iterable[str]) -> float | None:
        """The soonest end of a 429's Retry-After among `models`' endpoints; None when none is rate-limited."""
        waits = [w for w in (self.of(m).limited_s() for m in models if m in self.by_model) if w > 0]
        return min(waits) if waits else None
