"""A charge caught in a store outage is settled at its real cost once the store is back, not as a worst case.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_budget_outage.py

A real redis-server (append-only: a restart keeps the hold) is stopped between a request's reservation and its
settlement; the settlement is retried in the background and lands when the server is back.
"""

from __future__ import annotations

import asyncio

import pytest

from serving.core.auth import Identity, KeyLimits
from serving.core.budget import Budgets
from serving.core.state import StateSettings
from serving.core.metrics import GatewayMetrics
from evaluation.harness import LocalRedis
from serving.core.state import Charge, open_state, utc_day
from serving.tools.policy import Caller

pytestmark = pytest.mark.integration


def test_a_hold_caught_in_an_outage_is_charged_its_real_cost_when_the_store_returns(tmp_path):
    redis = LocalRedis(tmp_path / "redis")
    redis.start()
    ident = Identity("acme", Caller(), KeyLimits(usd_per_day=1.0))
    metrics = GatewayMetrics()

    async def scenario() -> tuple[float, float, list]:
        store = open_state(StateSettings(redis_url=redis.url, timeout_s=0.5))
        budgets = Budgets(store, metrics, settle_retry_s=60)
        try:
            res = await budgets.reserve(ident, 0.66, "r1")  # the worst case: two thirds of the day
            redis.stop()
            await budgets.settle(ident, res, [Charge("m", "answer", 0.002)], "r1")  # the store is down
            assert budgets.retrying
            await asyncio.sleep(1.0)
            redis.start()
            await asyncio.wait_for(asyncio.gather(*budgets.retrying), timeout=30)
            spent, reserved = await store.day_total("acme", utc_day(budgets.clock()))
            return spent, reserved, await store.ledger("acme")
        finally:
            await store.aclose()

    try:
        spent, reserved, rows = asyncio.run(scenario())
    finally:
        redis.stop()
    assert spent == pytest.approx(0.002) and reserved == pytest.approx(0.0)  # not 0.66, and the key is free again
    assert [(r.kind, r.usd) for r in rows] == [("answer", pytest.approx(0.002))]
    assert 'switchcraft_settle_retries_total{outcome="settled"} 1.0' in metrics.render().decode()
