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

And the API keys (serving/core/state_keys.py, serving/core/managed_keys.py): per key id its entry (the key's
sha256, never the key), created and updated times, revoked or not, seed or managed; and a version that every key
write changes, which each gateway process reads to know when to reload them.

A request is admitted while `spent + reserved < usd_per_day`; a hold is made, or extended, only while that
is true, atomically (a Lua script in Redis, a `BEGIN IMMEDIATE` transaction in SQLite), so concurrent
requests see each other's holds, and a day ends at most one hold (or extension) past its limit.

SQLite is the embedded default: one file, WAL, safe for several processes on one machine. Redis is for
replicas on several machines: every gateway pointed at the same `state.redis_url` shares every count (one
Redis, not Redis Cluster: the scripts touch keys they compute). Any failure to reach the store raises
`StateUnavailable`; serving/core/budget.py decides what that means for a request (fail closed for keys
with limits).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from serving.core.state_base import (KINDS, Admission, Charge, LedgerRow, OverBudget, Reservation, StateStore,
                                        StateUnavailable, StoredKey, utc_day)
from serving.core.state_redis import RedisState
from serving.core.state_sqlite import SQLiteState

__all__ = ["KINDS", "Admission", "Charge", "LedgerRow", "OverBudget", "RedisState", "Reservation", "SQLiteState",
           "StateSettings", "StateStore", "StateUnavailable", "StoredKey", "open_state", "utc_day"]


class StateSettings(BaseModel):
    """`state:` where limits and the spend ledger live (serving/core/state.py; docs/serving.md, "State")."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(default=None, description="Folder of the embedded SQLite store (state.sqlite, WAL): "
                             "spend and counts survive restarts; several processes on one machine may share it. "
                             "null: in memory, forgotten when the process ends (announced at start).")
    redis_url: str | None = Field(default=None, description="redis://host:port/db of a Redis shared by every "
                                  "gateway process (any number, any machines); overrides path.")
    redis_prefix: str = Field(default="switchcraft:", min_length=1, description="Prefix of every Redis key.")
    timeout_s: float = Field(default=1.0, gt=0, le=30, description="Per store operation; beyond it the store is "
                             "unavailable: keys with limits get 503 (fail closed), keys without keep working.")
    unavailable_retry_after_s: float = Field(default=2.0, gt=0, description="Retry-After of that 503.")
    unlimited_wait_s: float = Field(default=0.25, ge=0, le=30, description="How long a request of a key without "
                                    "limits waits for the store (its hold, then its charge) before it goes on; "
                                    "the write finishes in the background (a failed charge is retried as "
                                    "settle_retry_s says). Keys with limits always wait: they are admitted by it.")
    reservation_ttl_s: float = Field(default=3600.0, ge=60, description="A reservation its process never settled "
                                     "(it died) is charged at its reserved amount after this long.")
    settle_retry_s: float = Field(default=600.0, ge=0, description="A charge the store could not take (it was "
                                  "down) is retried in the background for this long, then settled at the real cost; "
                                  "beyond it (or 0) the hold is charged as expired. Below reservation_ttl_s.")
    chars_per_token: float = Field(default=3.0, gt=0, description="Bytes of request per input token when a "
                                   "reservation or an estimate is priced (3 over-counts typical English and JSON).")
    default_output_tokens: int = Field(default=4096, ge=1, description="The output cap sent upstream (and held "
                                       "for) when neither the request (max_tokens / max_completion_tokens / "
                                       "max_output_tokens) nor the pool (max_output_tokens) gives one.")
    hold_clear_s: float = Field(default=60.0, gt=0, le=3600, description="The longest a request's hold is "
                                "expected to last (the pool's default call time-out). A 429 caused by holds in "
                                "flight says to retry when they are expected to clear: each hold's age against "
                                "twice the running mean lifetime of settled holds, at most this.")
    session_ttl_s: float = Field(default=6 * 3600.0, gt=0, description="An agent session idle this long is "
                                 "forgotten (serving/gateway/sessions.py).")
    session_prune_every_s: float = Field(default=60.0, ge=0, description="SQLite: expired sessions are deleted "
                                         "in the background after a session write, at most this often (Redis "
                                         "expires its own).")
    session_prune_batch: int = Field(default=1_000, ge=1, description="SQLite: expired sessions deleted per "
                                     "transaction of a prune (it repeats until none is left; requests use the "
                                     "store between batches).")
    cache_ttl_s: float = Field(default=300.0, ge=0, description="How long a provider keeps a conversation's prompt "
                               "prefix cached after its last use (Anthropic's default 5 minutes): within it a "
                               "session prices keeping its model with the cache.")


def open_state(settings) -> StateStore:
    """The store `settings` (StateSettings) names: Redis when `redis_url` is set, else a
    SQLite file `state.sqlite` under `path` (None: in memory, forgotten when the process ends)."""
    if settings.redis_url:
        return RedisState(settings.redis_url, prefix=settings.redis_prefix, reservation_ttl_s=settings.reservation_ttl_s,
                          timeout_s=settings.timeout_s)
    path = ":memory:" if settings.path is None else Path(settings.path) / "state.sqlite"
    store = SQLiteState(path, reservation_ttl_s=settings.reservation_ttl_s, busy_timeout_s=settings.timeout_s * 5)
    store.session_prune_every_s = settings.session_prune_every_s
    store.session_prune_batch = settings.session_prune_batch
    return store
