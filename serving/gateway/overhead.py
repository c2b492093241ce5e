"""What the gateway adds to a request: its wall time less the time it spent waiting on upstream calls.

    app.add_middleware(Overhead, metrics=metrics)     # serving/app.py: a clock per request, the header on /v1/*
    with waiting():                                   # serving/gateway/upstream.py: around each upstream wait
        response = await http.send(request)
    clock.overhead_ms()                               # routing, tool routing, translation, admission, state store

Every /v1 answer carries `x-switchcraft-overhead-ms` (like LiteLLM's `x-litellm-overhead-duration-ms`): the
milliseconds from the request's arrival to the answer's first byte that were not spent waiting on an upstream.
Concurrent upstream calls (an agreement cascade, a hedge) count once: the time at least one was in flight. A
stream's header says the time up to its first byte; the decision log keeps the whole stream's figure (the
time between upstream chunks is upstream time, the rest is relaying and settling), and
`switchcraft_gateway_overhead_seconds` observes each answer's figure when its last byte is sent.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from serving.core.errors import ROUTE_ENDPOINTS

HEADER = "x-switchcraft-overhead-ms"


class Clock:
    """One request's clock: when it arrived and how long at least one upstream call was in flight."""

    __slots__ = ("started", "waited", "inflight", "since")

    def __init__(self, started: float | None = None) -> None:
        self.started = time.perf_counter() if started is None else started
        self.waited, self.inflight, self.since = 0.0, 0, 0.0

    def enter(self) -> None:
        if self.inflight == 0:
            self.since = time.perf_counter()
        self.inflight += 1

    def leave(self) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self.waited += time.perf_counter() - self.since

    def upstream_s(self, now: float) -> float:
        return self.waited + (now - self.since if self.inflight else 0.0)

    def overhead_ms(self, now: float | None = None) -> float:
        """The gateway's own milliseconds so far (`now`: a time.perf_counter() reading)."""
        now = time.perf_counter() if now is None else now
        return max(0.0, now - self.started - self.upstream_s(now)) * 1e3


# The clock of the request this task serves (set by `Overhead`; tasks the request starts inherit it).
CLOCK: ContextVar[Clock | None] = ContextVar("switchcraft_clock", default=None)


@contextmanager
def waiting(clock: Clock | None = None) -> Iterator[None]:
    """The time inside is upstream time on `clock` (default: this request's, if any)."""
    clock = clock if clock is not None else CLOCK.get()
    if clock is None:
        yield
        return
    clock.enter()
    try:
        yield
    finally:
        clock.leave()


async def timed(lines: AsyncIterator, clock: Clock | None) -> AsyncIterator:
    """An upstream's stream, the wait for each of its items counted as upstream time."""
    it = aiter(lines)
    while True:
        with waiting(clock):
            try:
                item = await anext(it)
            except StopAsyncIteration:
                return
        yield item


class Overhead:
    """ASGI middleware: a clock for every request; on a /v1 answer, the overhead header when the response starts
    and the histogram when its last byte goes out."""

    def __init__(self, app, metrics, endpoints: dict[str, str] | None = None) -> None:
        self.app, self.metrics = app, metrics
        self.endpoints = endpoints or dict(ROUTE_ENDPOINTS)  # path -> its `endpoint` metric label

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith("/v1/"):
            return await self.app(scope, receive, send)
        clock = Clock()
        token = CLOCK.set(clock)
        endpoint = self.endpoints.get(scope["path"], "other")

        async def timing(message) -> None:
            if message["type"] == "http.response.start":
                header = (HEADER.encode(), f"{clock.overhead_ms():.3f}".encode())
                message = {**message, "headers": [*(message.get("headers") or []), header]}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                self.metrics.overhead.labels(endpoint=endpoint).observe(clock.overhead_ms() / 1e3)
            await send(message)

        try:
            await self.app(scope, receive, timing)
        finally:
            CLOCK.reset(token)
