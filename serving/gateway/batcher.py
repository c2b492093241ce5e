"""The gateway's micro-batcher: concurrent routing calls share one inference call; a full queue answers 429.

    batcher = RoutingBatcher(client, metrics, max_batch_size=32, delay_s=0.002, max_queue=64, length_ratio=1.25)
    routed = await batcher.route(messages, tools, constraints, threshold=None)                # a RoutedDecision
    await batcher.aclose()

Why: one `RouterClient.route` per request, each in its own thread, makes N
concurrent requests N backend calls racing for two cores (with Triton: N tiny
requests its Python backend runs nearly one at a time), and the router's
timeout fires for the unlucky ones (503 `router_unavailable`). Here each
request packs its own tokens (in a worker thread, so a packing error stays its
own), joins a queue, and one runner takes up to `max_batch_size` queued calls
and runs them through `RouterClient.infer_encoded`, one backend call per group
of similar length: sorted by packed length, a group ends where the next request
is more than `length_ratio` times the group's shortest. Padding decides the
cost on a CPU: one padded call for 64 mixed-length BFCL requests took 2.6x the
time of 64 calls alone with the MiniLM router (docs/serving.md). Each request's decision is then made alone, with its own constraints
and threshold (`RouterClient.decide`), exactly as `RouterClient.route` makes it.
While a batch runs the next one gathers, so batches grow with the load by
themselves; `delay_s` is how long the oldest queued call may wait for company
before its batch starts (0: take what is queued now).

Backpressure: at most `max_queue` calls are admitted (packing, queued, or in the
running batch). One more is refused at once with 429 `router_busy`,
`Retry-After` (whole seconds) and `retry-after-ms` (the batches ahead of it ×
the recent batch time), counted in `switchcraft_router_busy_total`: never a
wait that ends in a timeout. A backend failure fails that batch's calls with
the backend's error (the gateway's 503 `router_unavailable`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import anyio
import numpy as np

from serving.client import RoutedDecision, RouterClient
from serving.core.metrics import GatewayMetrics
from serving.core.errors import GatewayError, retry_after_headers, retry_after_ms
from serving.policy import Constraints

EWMA = 0.2  # weight of the newest batch in the batch-time estimate behind Retry-After


@dataclass
class _Call:
    encoded: tuple[list[int], np.ndarray]
    constraints: Constraints | None
    threshold: float | None
    started: float  # perf_counter when admitted: the decision's latency_ms counts packing and queueing too
    queued: float  # loop time when it joined the queue
    future: asyncio.Future = field(repr=False)


class RoutingBatcher:
    """Merges concurrent routing calls into batched inference; bounded, with 429 + Retry-After past `max_queue`."""

    def __init__(self, client: RouterClient, metrics: GatewayMetrics, *, max_batch_size: int = 32,
                 delay_s: float = 0.002, max_queue: int = 64, length_ratio: float | None = 1.25,
                 executor: Executor | None = None) -> None:
        if max_batch_size < 1 or max_queue < 1 or delay_s < 0 or (length_ratio is not None and length_ratio < 1):
            raise ValueError(f"max_batch_size ({max_batch_size}) and max_queue ({max_queue}) must be ≥ 1, "
                             f"delay_s ({delay_s}) ≥ 0, length_ratio ({length_ratio}) ≥ 1 or None")
        self.client, self.metrics = client, metrics
        self.max_batch_size, self.delay_s, self.max_queue = max_batch_size, delay_s, max_queue
        self.length_ratio = length_ratio  # None: one call for the whole batch, however mixed its lengths
        self.executor = executor  # where inference runs (one thread of the gateway's, RouterSlot); None: anyio's
        self.admitted = 0  # calls between admission and their answer
        self.batch_s = 0.05  # recent batch wall time (EWMA), for Retry-After; a first guess until measured
        self._queue: deque[_Call] = deque()
        self._arrived: asyncio.Event | None = None
        self._runner: asyncio.Task | None = None

    # --- the caller's side -------------------------------------------------------------------------
    async def route(self, messages: list[Any], tools: list[Any] | None, constraints: Constraints | None = None, *,
                    threshold: float | None = None) -> RoutedDecision:
        """The decision `client.route` would give, from a shared inference call. GatewayError 429 when full."""
        if self.admitted >= self.max_queue:
            self.metrics.router_busy.inc()
            raise self.busy()
        self.admitted += 1
        self.metrics.router_queue.set(self.admitted)
        try:
            started = time.perf_counter()
            encoded = await anyio.to_thread.run_sync(self.client.encoder.encode, messages, tools)
            loop = asyncio.get_running_loop()
            call = _Call(encoded, constraints, threshold, started, loop.time(), loop.create_future())
            self._queue.append(call)
            self._wake(loop)
            return await call.future
        finally:
            self.admitted -= 1
            self.metrics.router_queue.set(self.admitted)

    @property
    def queued(self) -> int:
        """Calls packed and waiting for a batch (not counting the running batch)."""
        return len(self._queue)

    def busy(self) -> GatewayError:
        """429 router_busy; the wait is the batches ahead of a new call × the recent batch time."""
        ahead = math.ceil(self.admitted / self.max_batch_size)
        ms = retry_after_ms(ahead * self.batch_s)
        return GatewayError(429, f"the router has {self.admitted} routing calls queued or running (router.max_queue "
                            f"{self.max_queue}); retry after {ms} ms", type="router_busy",
                            headers=retry_after_headers(ms))

    def _wake(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._arrived is None:
            self._arrived = asyncio.Event()
        if self._runner is None or self._runner.done():
            self._runner = loop.create_task(self._run(), name="switchcraft-routing-batcher")
        self._arrived.set()

    # --- the runner --------------------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._queue:
                self._arrived.clear()
                await self._arrived.wait()
            # The oldest call waits at most delay_s for company; one that already waited (a batch was
            # running) starts at once.
            deadline = self._queue[0].queued + self.delay_s
            while len(self._queue) < self.max_batch_size and (left := deadline - loop.time()) > 0:
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), left)
                except TimeoutError:
                    break
            batch = [self._queue.popleft() for _ in range(min(len(self._queue), self.max_batch_size))]
            batch = [c for c in batch if not c.future.done()]  # a caller that went away is not computed
            if batch:
                await self._run_batch(batch)

    async def _run_batch(self, batch: list[_Call]) -> None:
        t0 = time.perf_counter()
        self.metrics.router_batch_size.observe(len(batch))
        for c in batch:
            self.metrics.router_queue_wait.observe(t0 - c.started)
        try:
            if self.executor is None:
                results = await anyio.to_thread.run_sync(self._decide, batch)
            else:
                results = await asyncio.get_running_loop().run_in_executor(self.executor, self._decide, batch)
        except asyncio.CancelledError:  # shutting down: nobody waits forever
            for c in batch:
                c.future.cancel()
            raise
        except Exception as e:  # noqa: BLE001 - the batch's callers get the error (BackendError → 503), the runner lives on
            results = [e] * len(batch)
        done = time.perf_counter()
        self.batch_s += EWMA * ((done - t0) - self.batch_s)
        for c, r in zip(batch, results):
            if c.future.done():
                continue
            if isinstance(r, BaseException):
                c.future.set_exception(r)
            else:
                c.future.set_result(RoutedDecision(r, self.client.version, (done - c.started) * 1e3,
                                                   self.client.backend.name, len(c.encoded[0])))

    def _decide(self, batch: list[_Call]) -> list:
        """One inference call per group of similar length, then each request's own decision (or its own error)."""
        probs = np.zeros((len(batch), len(self.client.models)), dtype=np.float32)
        for group in self.length_groups([len(c.encoded[0]) for c in batch]):
            probs[group] = self.client.infer_encoded([batch[i].encoded for i in group])
        out: list = []
        for c, p in zip(batch, probs):
            try:
                out.append(self.client.decide(p, c.constraints, threshold=c.threshold,
                                              novelty=self.client.novelty_of(c.encoded)))
            except Exception as e:  # noqa: BLE001 - NoEligibleModel (422) and the like belong to that request alone
                out.append(e)
        return out

    def length_groups(self, lengths: list[int]) -> list[list[int]]:
        """Indices sorted by length, cut where a length exceeds length_ratio × its group's shortest."""
        order = sorted(range(len(lengths)), key=lengths.__getitem__)
        groups: list[list[int]] = []
        for i in order:
            if not groups or (self.length_ratio is not None and lengths[i] > self.length_ratio * lengths[groups[-1][0]]):
                groups.append([])
            groups[-1].append(i)
        return groups

    async def aclose(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            try:
                await self._runner
            except (asyncio.CancelledError, Exception):  # noqa: BLE001, S110 - shutting down
                pass
            self._runner = None
        while self._queue:
            call = self._queue.popleft()
            if not call.future.done():
                call.future.cancel()
