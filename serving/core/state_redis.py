"""The shared state store: one Redis server for any number of gateway processes (serving/core/state.py says
what is kept). Each check-and-change of a key's counts and holds runs as one Lua script, atomic on the server,
so every process sharing the Redis sees one order. Keys are computed by the caller (`prefix` + kind + key id
+ day): one Redis, not Redis Cluster."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from serving.core.state_base import (SWEEP_EVERY_S, Admission, Charge, LedgerRow, OverBudget, Reservation,
                                        StateStore, StateUnavailable, utc_day)
from serving.core.state_keys import RedisKeys

ADMIT = """
local now, rpm, lim = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local spent = tonumber(redis.call('HGET', KEYS[2], 'spent') or '0')
local reserved = math.max(0, tonumber(redis.call('HGET', KEYS[2], 'reserved') or '0'))
if lim >= 0 and spent + reserved >= lim then
  return {'budget', '0', tostring(spent), tostring(reserved)}
end
if rpm >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60)
  if redis.call('ZCARD', KEYS[1]) >= rpm then
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {'rate_limit', tostring(60 - (now - tonumber(oldest[2]))), tostring(spent), tostring(reserved)}
  end
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('EXPIRE', KEYS[1], 120)
end
return {'ok', '0', tostring(spent), tostring(reserved)}
"""

RESERVE = """
local lim = tonumber(ARGV[1])
local spent = tonumber(redis.call('HGET', KEYS[1], 'spent') or '0')
local reserved = math.max(0, tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0'))
if lim >= 0 and spent + reserved >= lim then
  return {0, tostring(spent), tostring(reserved)}
end
redis.call('HINCRBYFLOAT', KEYS[1], 'reserved', ARGV[2])
redis.call('EXPIRE', KEYS[1], 3456000)
redis.call('HSET', KEYS[2], 'key', ARGV[5], 'day', ARGV[6], 'usd', ARGV[2], 'rid', ARGV[7])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
return {1, tostring(spent), tostring(reserved)}
"""

# KEYS: budget hash, reservation hash. ARGV: limit, usd more. {0, spent, reserved} over the limit; {2, …} when the
# hold is gone (charged as expired).
EXTEND = """
local lim = tonumber(ARGV[1])
local spent = tonumber(redis.call('HGET', KEYS[1], 'spent') or '0')
local reserved = math.max(0, tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0'))
if lim >= 0 and spent + reserved >= lim then
  return {0, tostring(spent), tostring(reserved)}
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {2, tostring(spent), tostring(reserved)}
end
redis.call('HINCRBYFLOAT', KEYS[2], 'usd', ARGV[2])
redis.call('HINCRBYFLOAT', KEYS[1], 'reserved', ARGV[2])
return {1, tostring(spent), tostring(reserved)}
"""

# KEYS: budget hash, reservation hash, open reservations, ledger stream.
# ARGV: reservation id, reserved usd, now, day, key id, request id, then (model, kind, usd) per charge.
SETTLE = """
local held = redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
if held == 1 then
  redis.call('HINCRBYFLOAT', KEYS[1], 'reserved', -tonumber(ARGV[2]))
end
local total = 0
for i = 7, #ARGV, 3 do
  total = total + tonumber(ARGV[i + 2])
  redis.call('XADD', KEYS[4], '*', 'ts', ARGV[3], 'day', ARGV[4], 'key', ARGV[5], 'model', ARGV[i],
             'kind', ARGV[i + 1], 'usd', ARGV[i + 2], 'rid', ARGV[6])
end
redis.call('HINCRBYFLOAT', KEYS[1], 'spent', total)
redis.call('EXPIRE', KEYS[1], 3456000)
return held
"""

# Reservations whose process never settled them: charged at their reserved amount as `expired`.
# KEYS: open reservations, ledger stream. ARGV: now, key prefix.
SWEEP = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 64)
for _, id in ipairs(ids) do
  local r = redis.call('HMGET', ARGV[2] .. 'res:' .. id, 'key', 'day', 'usd', 'rid')
  redis.call('ZREM', KEYS[1], id)
  if r[1] then
    local budget = ARGV[2] .. 'budget:' .. r[1] .. ':' .. r[2]
    redis.call('HINCRBYFLOAT', budget, 'reserved', -tonumber(r[3]))
    redis.call('HINCRBYFLOAT', budget, 'spent', tonumber(r[3]))
    redis.call('XADD', KEYS[2], '*', 'ts', ARGV[1], 'day', r[2], 'key', r[1], 'model', '*', 'kind', 'expired',
               'usd', r[3], 'rid', r[4])
    redis.call('DEL', ARGV[2] .. 'res:' .. id)
  end
end
return #ids
"""


LEDGER_PAGE = 1_000  # ledger entries read from Redis at a time

class RedisState(RedisKeys, StateStore):
    """A real Redis server shared by any number of gateway processes. Every check-and-change is one Lua script
    (atomic on the server; the scripts above). Durable as the server is configured: run it with
    `appendonly yes` so a Redis restart keeps the ledger (docs/serving.md, "State")."""

    name = "redis"

    def __init__(self, url: str, *, prefix: str = "switchcraft:", reservation_ttl_s: float = 3600.0,
                 timeout_s: float = 1.0) -> None:
        import redis.asyncio as aioredis

        self.url, self.prefix, self.reservation_ttl_s = url, prefix, reservation_ttl_s
        self.redis = aioredis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                             decode_responses=True)
        self._admit = self.redis.register_script(ADMIT)
        self._reserve = self.redis.register_script(RESERVE)
        self._extend = self.redis.register_script(EXTEND)
        self._settle = self.redis.register_script(SETTLE)
        self._sweep = self.redis.register_script(SWEEP)
        self._register_key_scripts()
        self.last_sweep = 0.0

    def _where(self) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        return f"redis://{parts.hostname}:{parts.port or 6379}"  # never the password

    async def _call(self, coro):
        import redis.exceptions as rex

        try:
            return await coro
        except (rex.ConnectionError, rex.TimeoutError, rex.ResponseError, OSError) as e:
            raise StateUnavailable(f"state store {self._where()}: {type(e).__name__}: {e}") from None

    def _k(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    async def admit(self, key_id: str, *, rpm: int | None, usd_per_day: float | None, now: float) -> Admission:
        if now - self.last_sweep >= SWEEP_EVERY_S:
            self.last_sweep = now
            await self._call(self._sweep(keys=[self._k("open"), self._k("ledger")], args=[now, self.prefix]))
        day = utc_day(now)
        reason, wait, spent, reserved = await self._call(self._admit(
            keys=[self._k("rate", key_id), self._k("budget", key_id, day)],
            args=[now, -1 if rpm is None else rpm, -1 if usd_per_day is None else usd_per_day, uuid.uuid4().hex]))
        if reason == "budget":
            wait = 86400 - now % 86400
        return Admission(None if reason == "ok" else reason, float(wait), float(spent), float(reserved))

    async def reserve(self, key_id: str, usd: float, *, limit: float | None, request_id: str,
                      now: float) -> Reservation:
        res = Reservation(uuid.uuid4().hex, key_id, utc_day(now), float(usd), request_id, now)
        ok, spent, reserved = await self._call(self._reserve(
            keys=[self._k("budget", key_id, res.day), self._k("res", res.id), self._k("open")],
            args=[-1 if limit is None else limit, repr(res.usd), now + self.reservation_ttl_s, res.id, key_id,
                  res.day, request_id]))
        if not ok:
            raise OverBudget(float(spent), float(reserved))
        return res

    async def extend(self, res: Reservation, usd: float, *, limit: float | None, now: float) -> Reservation:
        ok, spent, reserved = await self._call(self._extend(
            keys=[self._k("budget", res.key_id, res.day), self._k("res", res.id)],
            args=[-1 if limit is None else limit, repr(float(usd))]))
        if ok == 0:
            raise OverBudget(float(spent), float(reserved))
        return replace(res, usd=res.usd + usd) if ok == 1 else res

    async def holds(self, key_id: str, day: str, now: float) -> list[tuple[float, float, str]]:
        # Every process's holds, scored by expiry, are in one set: read on a refusal only, a few hundred at most.
        ids = await self._call(self.redis.zrange(self._k("open"), 0, -1, withscores=True))
        pipe = self.redis.pipeline(transaction=False)
        for rid, _ in ids:
            pipe.hmget(self._k("res", rid), "key", "day", "usd")
        got = await self._call(pipe.execute()) if ids else []
        return [(expires - self.reservation_ttl_s, float(usd), rid) for (rid, expires), (key, d, usd) in zip(ids, got)
                if key == key_id and d == day and usd is not None]

    async def settle(self, res: Reservation, charges: list[Charge], *, now: float) -> None:
        args: list[Any] = [res.id, repr(res.usd), now, res.day, res.key_id, res.request_id]
        for c in charges:
            args += [c.model, c.kind, repr(float(c.usd))]
        await self._call(self._settle(keys=[self._k("budget", res.key_id, res.day), self._k("res", res.id),
                                            self._k("open"), self._k("ledger")], args=args))

    async def day_total(self, key_id: str, day: str) -> tuple[float, float]:
        got = await self._call(self.redis.hmget(self._k("budget", key_id, day), "spent", "reserved"))
        return float(got[0] or 0.0), max(0.0, float(got[1] or 0.0))

    async def ledger(self, key_id: str | None = None, day: str | None = None) -> list[LedgerRow]:
        # Pages small enough that each read stays well inside the per-operation timeout (state.timeout_s): 10,000
        # entries a page took 0.5 s to read and parse on an idle machine, over 1 s beside a busy gateway: a 503.
        rows, start = [], "-"
        while True:
            batch = await self._call(self.redis.xrange(self._k("ledger"), min=start, max="+", count=LEDGER_PAGE))
            for _id, f in batch:
                if (key_id is None or f["key"] == key_id) and (day is None or f["day"] == day):
                    rows.append(LedgerRow(float(f["ts"]), f["day"], f["key"], f["model"], f["kind"], float(f["usd"]),
                                          f.get("rid", "")))
            if len(batch) < LEDGER_PAGE:
                return rows
            start = "(" + batch[-1][0]

    async def ping(self) -> None:
        await self._call(self.redis.ping())

    async def session_get(self, sid: str, now: float) -> str | None:
        return await self._call(self.redis.get(self._k("session", sid)))  # Redis expires it

    async def session_put(self, sid: str, raw: str, *, now: float, ttl_s: float) -> None:
        await self._call(self.redis.set(self._k("session", sid), raw, ex=max(1, int(ttl_s))))

    async def aclose(self) -> None:
        await self.redis.aclose()
