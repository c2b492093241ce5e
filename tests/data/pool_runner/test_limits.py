"""Request pacing, the hard budget, backoff and Retry-After parsing.

.venv/bin/python -m pytest -q tests/data/pool_runner/test_limits.py
"""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest

from data.pool_runner.client import RetryPolicy, redact, retry_after_s
from data.pool_runner.limits import Budget, BudgetExceeded, RequestPacer


def test_pacer_spaces_requests_evenly(monkeypatch):
    """The pacer's schedule, on a fake clock: no wall-time bounds (those belong in benchmarks)."""
    import data.pool_runner.limits as limits

    clock = {"now": 100.0}
    slept: list[float] = []

    async def fake_sleep(seconds):
        slept.append(seconds)
        clock["now"] += seconds

    monkeypatch.setattr(limits.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(limits.asyncio, "sleep", fake_sleep)

    async def go():
        pacer = RequestPacer(rpm=1200)  # one every 50 ms
        starts = []
        for _ in range(5):
            await pacer.wait()
            starts.append(round(clock["now"] - 100.0, 9))
        clock["now"] += 1.0  # idle for a second: the next request starts at once, no burst credit
        await pacer.wait()
        starts.append(round(clock["now"] - 100.0, 9))
        await pacer.wait()
        starts.append(round(clock["now"] - 100.0, 9))
        return starts

    starts = asyncio.run(go())
    assert starts == [0.0, 0.05, 0.1, 0.15, 0.2, 1.2, 1.25]
    assert len(slept) == 5 and all(abs(s - 0.05) < 1e-9 for s in slept)
    assert RequestPacer(None).interval == 0


def test_budget_reserves_waits_and_stops():
    async def go():
        b = Budget(max_usd=1.0, spent_usd=0.2)
        await b.reserve(0.5)
        waiter = asyncio.create_task(
            b.reserve(0.5)
        )  # 0.2 + 0.5 + 0.5 > 1: waits for the call in flight
        await asyncio.sleep(0.01)
        assert not waiter.done()
        b.settle("m", 0.5, 0.1, 10)  # the call cost less than reserved: room now
        await asyncio.wait_for(waiter, 1)
        assert b.spent_usd == pytest.approx(0.3) and b.reserved_usd == pytest.approx(0.5)
        b.settle("m", 0.5, None, None)  # no usage: charged at its reservation
        assert b.spent_usd == pytest.approx(0.8) and b.reserved_usd == 0
        with pytest.raises(BudgetExceeded, match="max-usd 1.0"):
            await b.reserve(0.3)  # nothing in flight could free room
        assert b.stopped

    asyncio.run(go())
    assert Budget(None).output_estimate("m", None) == 512
    with pytest.raises(ValueError, match="max-usd"):
        Budget(-1)


def test_output_estimate_learns_and_respects_max_tokens():
    b = Budget(10)
    b.in_flight = 1
    b.settle("m", 0.0, 0.0, 700)
    assert b.output_estimate("m", None) == 1400 and b.output_estimate("m", 64) == 64


def test_backoff_grows_with_jitter_and_cap():
    p, rng = RetryPolicy(base_s=0.5, max_backoff_s=4), random.Random(0)
    waits = [p.backoff(a, rng) for a in range(6)]
    assert 0.25 <= waits[0] <= 0.5 and 0.5 <= waits[1] <= 1 and all(2 <= w <= 4 for w in waits[3:])


def test_retry_after_forms():
    assert retry_after_s(httpx.Headers({"retry-after": "3"})) == 3
    assert retry_after_s(httpx.Headers({"retry-after": "2", "retry-after-ms": "150"})) == 0.15
    when = httpx.Headers({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})
    assert retry_after_s(when) == 0  # a date in the past: go now
    assert retry_after_s(httpx.Headers({})) is None


def test_redact():
    assert (
        redact("Incorrect API key provided: sk-abcdef123.", ["sk-abcdef123"])
        == "Incorrect API key provided: ***."
    )
    assert redact("abc", ["", "ab"]) == "abc"  # too short to be a key: left alone
