"""Where the gateway's counts and money live: one interface, two real backends.

    store = open_state(cfg.state)          # SQLite (WAL) under state.path, or Redis at state.redis_url
    seen = await store.admit("acme", rpm=120, usd_per_day=5.0, now=time.time())   # counts the request
    res = await store.reserve("acme", 0.004, limit=5.0, request_id=rid, now=...)  # OverBudget when nothing is left
    res = await store.extend(res, 0.002, limit=5.0, now=...)  # the same hold, larger (a further call): or OverBudget
    holds = await store.holds("acme", utc_day(now), now)      # [(created, usd, id)] of its holds in flight
    await store.settle(res, [Charge("gpt-4o-mini-2024-07-18", "answer", 0.00008)], now=...)
    rows = await store.ledger(key_id="acme", day="2026-12-01")

What is kept, per API key id (never the key):
- the last minute's request times (the `requests_per_minute` sliding window);
- per UTC day, `spent` (settled charges) and `reserved` (the held cost of requests in flight);
- every reservation in flight, with the time after which it is charged as `expired` (its process died), which
  also says when it was made (expiry less `reservation_ttl_s`);
- the ledger: one row per charge (time, day, key, model, kind, USD, request id), kinds
  answer | cascade | abandoned | estimated | expired | explore (docs/serving.md, "State").

A request is admitted while `spent + reserved < usd_per_day`; a hold is made, or extended, only while that
is true, atomically (a Lua script in Redis, a `BEGIN IMMEDIATE` transaction in SQLite), so concurrent
requests see each other's holds, and a day ends at most one hold (or extension) past its limit.

SQLite is the embedded default: one file, WAL, safe for several processes on one machine. Redis is for
replicas on several machines: every gateway pointed at the same `state.redis_url` shares every count (one
Redis, not Redis Cluster: the scripts touch keys they compute). Any failure to reach the store raises
`StateUnavailable`; serving/gateway/budget.py decides what that means for a request (fail closed for keys
with limits).
"""

from __future__ import annotations

from pathlib import Path

from serving.gateway.state_base import (KINDS, Admission, Charge, LedgerRow, OverBudget, Reservation, StateStore,
                                        StateUnavailable, utc_day)
from serving.gateway.state_redis import RedisState
from serving.gateway.state_sqlite import SQLiteState

__all__ = ["KINDS", "Admission", "Charge", "LedgerRow", "OverBudget", "RedisState", "Reservation", "SQLiteState",
           "StateStore", "StateUnavailable", "open_state", "utc_day"]


def open_state(settings) -> StateStore:
    """The store `settings` (serving.gateway.config.StateSettings) names: Redis when `redis_url` is set, else a
    SQLite file `state.sqlite` under `path` (None: in memory, forgotten when the process ends)."""
    if settings.redis_url:
        return RedisState(settings.redis_url, prefix=settings.redis_prefix, reservation_ttl_s=settings.reservation_ttl_s,
                          timeout_s=settings.timeout_s)
    path = ":memory:" if settings.path is None else Path(settings.path) / "state.sqlite"
    store = SQLiteState(path, reservation_ttl_s=settings.reservation_ttl_s, busy_timeout_s=settings.timeout_s * 5)
    store.session_prune_every_s = settings.session_prune_every_s
    store.session_prune_batch = settings.session_prune_batch
    return store
