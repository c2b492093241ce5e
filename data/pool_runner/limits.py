"""Per-model request pacing and the run's hard spending limit.

python -m pytest -q tests/data/pool_runner/test_limits.py
"""

from __future__ import annotations

import asyncio
import time


class RequestPacer:
    """At most `rpm` request starts per minute, evenly spaced.

    Even spacing (a token bucket of depth one) rather than bursts: providers
    meter per-minute limits over shorter windows, and a burst of a minute's
    requests at start-up is what trips them. Retries count as requests.
    """

    def __init__(self, rpm: int | None) -> None:
        self.interval = 60.0 / rpm if rpm else 0.0
        self._next = 0.0
        self._lock = asyncio.Lock()

    async def wait(self) -> None:
        if not self.interval:
            return
        async with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self.interval
        if start > now:
            await asyncio.sleep(start - now)


class BudgetExceeded(Exception):
    """No further call may start: spend + what is in flight would pass --max-usd."""


class Budget:
    """A hard USD limit over everything the store has paid for.

    Before a call starts it reserves a pessimistic estimate of its cost; the
    call starts only if spent + reserved stays within the limit (waiting for
    calls in flight to settle when they might free room). When the call
    ends the reservation is replaced by the real cost. With `max_output_tokens`
    set in the pool the estimate is an upper bound and the limit is strict;
    without it the output estimate is twice the largest output seen so far for
    that model (at least `min_output_tokens`).
    """

    def __init__(
        self, max_usd: float | None, spent_usd: float = 0.0, *, min_output_tokens: int = 512
    ) -> None:
        if max_usd is not None and max_usd < 0:
            raise ValueError(f"--max-usd must be >= 0, got {max_usd}")
        self.max_usd = max_usd
        self.spent_usd = spent_usd
        self.reserved_usd = 0.0
        self.min_output_tokens = min_output_tokens
        self._largest_output: dict[str, int] = {}
        self.stopped = False
        self.in_flight = (
            0  # counted, not inferred from reserved_usd: float sums never quite return to 0
        )
        self._changed = asyncio.Event()

    def output_estimate(self, model: str, max_output_tokens: int | None) -> int:
        if max_output_tokens is not None:
            return max_output_tokens
        return max(self.min_output_tokens, 2 * self._largest_output.get(model, 0))

    async def reserve(self, amount_usd: float) -> None:
        """Wait while calls in flight may free room; raise BudgetExceeded once none can."""
        while (
            self.max_usd is not None
            and self.spent_usd + self.reserved_usd + amount_usd > self.max_usd
        ):
            if self.stopped or self.in_flight == 0:
                self.stopped = True
                raise BudgetExceeded(
                    f"budget: ${self.spent_usd:.4f} spent + ${amount_usd:.4f} for the next call "
                    f"> --max-usd {self.max_usd}"
                )
            changed = self._changed
            await changed.wait()
        self.reserved_usd += amount_usd
        self.in_flight += 1

    def settle(
        self, model: str, reserved_usd: float, cost_usd: float | None, output_tokens: int | None
    ) -> None:
        self.in_flight -= 1
        self.reserved_usd = max(0.0, self.reserved_usd - reserved_usd) if self.in_flight else 0.0
        # An answer without usage is charged at its reservation: unknown cost is not zero cost.
        self.spent_usd += cost_usd if cost_usd is not None else reserved_usd
        if output_tokens is not None:
            self._largest_output[model] = max(self._largest_output.get(model, 0), output_tokens)
        # wake every call waiting for room; each re-checks against the new totals
        self._changed.set()
        self._changed = asyncio.Event()
