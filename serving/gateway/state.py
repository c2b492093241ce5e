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

import asyncio
import sqlite3
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio

from serving.gateway.state_scripts import ADMIT, EXTEND, RESERVE, SETTLE, SWEEP

KINDS = ("answer", "cascade", "abandoned", "estimated", "expired", "explore")
WINDOW_S = 60.0
SWEEP_EVERY_S = 1.0  # expired reservations are looked for at most this often per process
SESSION_PRUNE_EVERY_S = 60.0  # defaults of `state.session_prune_every_s` and `state.session_prune_batch`
SESSION_PRUNE_BATCH = 1_000
THREADS = 8  # worker threads a SQLite store may hold (calls beyond wait for one, within their deadline)


def utc_day(now: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(now))


class StateUnavailable(Exception):
    """The store could not be read or written (the text says which store and why, never a key)."""


class OverBudget(Exception):
    def __init__(self, spent: float, reserved: float) -> None:
        super().__init__(f"spent {spent:.6f}, reserved {reserved:.6f}")
        self.spent, self.reserved = spent, reserved


@dataclass(frozen=True)
class Admission:
    """`admit`'s answer: `reason` is None when the request was admitted (and counted)."""

    reason: str | None  # None | "budget" | "rate_limit"
    wait_s: float = 0.0
    spent: float = 0.0
    reserved: float = 0.0


@dataclass(frozen=True)
class Reservation:
    id: str
    key_id: str
    day: str
    usd: float  # held now: the first step's, plus every extension
    request_id: str = ""
    created: float = 0.0  # when the hold was made (time.time()): how long holds last is learnt from it


@dataclass(frozen=True)
class Charge:
    """One call's cost on the ledger."""

    model: str
    kind: str  # one of KINDS
    usd: float

    @property
    def estimated(self) -> bool:
        """Priced by an estimate, not by the provider's usage: abandoned, estimated and expired charges."""
        return self.kind in ("abandoned", "estimated", "expired")

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"ledger kind {self.kind!r}; known: {', '.join(KINDS)}")


@dataclass(frozen=True)
class LedgerRow:
    ts: float
    day: str
    key_id: str
    model: str
    kind: str
    usd: float
    request_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"ts": self.ts, "day": self.day, "key": self.key_id, "model": self.model, "kind": self.kind,
                "usd": self.usd, "request_id": self.request_id}


class StateStore(ABC):
    """The gateway's shared counts and ledger. Every method raises StateUnavailable when the store fails."""

    name = "state"
    durable = True
    reservation_ttl_s = 3600.0

    @abstractmethod
    async def admit(self, key_id: str, *, rpm: int | None, usd_per_day: float | None, now: float) -> Admission:
        """Refuse when the day's budget is used up (`spent + reserved >= usd_per_day`) or `rpm` requests came in
        the last 60 s; otherwise count this request in the window. Atomic across processes."""

    @abstractmethod
    async def reserve(self, key_id: str, usd: float, *, limit: float | None, request_id: str,
                      now: float) -> Reservation:
        """Hold `usd` against today's budget; OverBudget when `spent + reserved >= limit` already."""

    @abstractmethod
    async def extend(self, res: Reservation, usd: float, *, limit: float | None, now: float) -> Reservation:
        """Hold `usd` more on `res` (one hold, settled once); OverBudget when `spent + reserved >= limit` already.
        A hold already charged as expired is returned as it was (nothing is left to extend)."""

    @abstractmethod
    async def holds(self, key_id: str, day: str, now: float) -> list[tuple[float, float, str]]:
        """(created, usd, reservation id) of every hold of `key_id` on `day` still in flight: when each may clear."""

    @abstractmethod
    async def settle(self, res: Reservation, charges: list[Charge], *, now: float) -> None:
        """Release the reservation and charge what the calls really cost, one ledger row a charge."""

    @abstractmethod
    async def day_total(self, key_id: str, day: str) -> tuple[float, float]:
        """(spent, reserved) of `key_id` on `day`."""

    @abstractmethod
    async def ledger(self, key_id: str | None = None, day: str | None = None) -> list[LedgerRow]:
        """The ledger's rows, oldest first, optionally of one key and one UTC day (YYYY-MM-DD)."""

    @abstractmethod
    async def ping(self) -> None:
        """StateUnavailable when the store cannot be reached."""

    async def aclose(self) -> None:
        return None

    @abstractmethod
    async def session_get(self, sid: str, now: float) -> str | None:
        """A session's state (JSON) unless it expired."""

    @abstractmethod
    async def session_put(self, sid: str, raw: str, *, now: float, ttl_s: float) -> None:
        """Store a session's state (JSON), forgotten `ttl_s` after `now` (and deleted once expired)."""


# --------------------------------------------------------------------------------------------------- SQLite

SCHEMA = """
CREATE TABLE IF NOT EXISTS rate (key_id TEXT NOT NULL, t REAL NOT NULL);
CREATE INDEX IF NOT EXISTS rate_key_t ON rate (key_id, t);
CREATE TABLE IF NOT EXISTS budget (key_id TEXT NOT NULL, day TEXT NOT NULL, spent REAL NOT NULL DEFAULT 0,
                                   reserved REAL NOT NULL DEFAULT 0, PRIMARY KEY (key_id, day));
CREATE TABLE IF NOT EXISTS reservations (id TEXT PRIMARY KEY, key_id TEXT NOT NULL, day TEXT NOT NULL,
                                         usd REAL NOT NULL, request_id TEXT NOT NULL, expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS reservations_expires ON reservations (expires);
CREATE TABLE IF NOT EXISTS ledger (id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, day TEXT NOT NULL,
                                   key_id TEXT NOT NULL, model TEXT NOT NULL, kind TEXT NOT NULL,
                                   usd REAL NOT NULL, request_id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS ledger_key_day ON ledger (key_id, day);
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, state TEXT NOT NULL, expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_expires ON sessions (expires);
"""


class SQLiteState(StateStore):
    """One SQLite file in WAL mode. Calls run in a worker thread (never on the event loop); writes are
    `BEGIN IMMEDIATE` transactions, so processes sharing the file on one machine stay consistent. A committed
    write survives `kill -9` of the process (synchronous=NORMAL: only a power loss may lose the last ones).
    `path` ":memory:" keeps everything in this process (tests; announced by the gateway).

    Every call has one deadline, `busy_timeout_s` from when it is made: the wait for this process's connection
    (calls take turns on it) and SQLite's own wait for a file another process holds locked both count, so a
    locked file turns each call into StateUnavailable after at most that long, however many are queued
    (they would otherwise wait in turn: eight requests in flight took 44 s). The threads are this store's own
    (`THREADS`), never the shared pool's."""

    name = "sqlite"

    def __init__(self, path: str | Path, *, reservation_ttl_s: float = 3600.0, busy_timeout_s: float = 5.0) -> None:
        self.path, self.reservation_ttl_s = str(path), reservation_ttl_s
        self.durable = self.path != ":memory:"
        try:
            if self.durable:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                      timeout=busy_timeout_s)
            self.busy_timeout_s = busy_timeout_s
            if self.durable:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
        except (sqlite3.Error, OSError) as e:
            raise StateUnavailable(f"state store {self.path}: {e}") from None
        self.lock = threading.Lock()
        self.threads = anyio.CapacityLimiter(THREADS)
        self.last_sweep = 0.0
        self.session_prune_every_s, self.session_prune_batch = SESSION_PRUNE_EVERY_S, SESSION_PRUNE_BATCH
        self.pruned_at, self.pruning = 0.0, None

    async def _run(self, fn, *args, write: bool = False):
        """`fn(*args)` in a worker thread, holding this connection, within `busy_timeout_s` of this call (the
        wait for the connection included); `write`: inside one BEGIN IMMEDIATE transaction (committed whole, or
        rolled back whole on any error)."""
        deadline = time.monotonic() + self.busy_timeout_s

        def locked():
            if not self.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise StateUnavailable(f"state store {self.path}: busy: no turn on the connection within "
                                       f"{self.busy_timeout_s:g} s (the file is locked, or the store is overloaded)")
            try:
                left_ms = int((deadline - time.monotonic()) * 1e3)
                if left_ms <= 0:
                    raise StateUnavailable(f"state store {self.path}: busy: no turn within {self.busy_timeout_s:g} s")
                try:
                    self.db.execute(f"PRAGMA busy_timeout = {left_ms}")  # SQLite's wait: what is left of ours
                    if not write:
                        return fn(*args)
                    self.db.execute("BEGIN IMMEDIATE")
                    try:
                        out = fn(*args)
                    except BaseException:
                        self.db.execute("ROLLBACK")
                        raise
                    self.db.execute("COMMIT")
                    return out
                except sqlite3.Error as e:
                    if self.db.in_transaction:
                        self.db.execute("ROLLBACK")
                    raise StateUnavailable(f"state store {self.path}: {e}") from None
            finally:
                self.lock.release()
        return await anyio.to_thread.run_sync(locked, limiter=self.threads)

    def _totals(self, key_id: str, day: str) -> tuple[float, float]:
        row = self.db.execute("SELECT spent, reserved FROM budget WHERE key_id = ? AND day = ?", (key_id, day)).fetchone()
        return (row[0], max(0.0, row[1])) if row else (0.0, 0.0)

    def _sweep(self, now: float) -> None:
        """Charge reservations whose process never settled them (it died) at their reserved amount."""
        if now - self.last_sweep < SWEEP_EVERY_S:
            return
        self.last_sweep = now
        for rid, key_id, day, usd, req in self.db.execute(
                "SELECT id, key_id, day, usd, request_id FROM reservations WHERE expires <= ? LIMIT 64", (now,)).fetchall():
            self._release(Reservation(rid, key_id, day, usd, req), [Charge("*", "expired", usd)], now)

    def _release(self, res: Reservation, charges: list[Charge], now: float) -> None:
        held = self.db.execute("DELETE FROM reservations WHERE id = ?", (res.id,)).rowcount
        total = sum(c.usd for c in charges)
        self.db.execute("INSERT INTO budget (key_id, day, spent, reserved) VALUES (?, ?, ?, 0) "
                        "ON CONFLICT (key_id, day) DO UPDATE SET spent = spent + excluded.spent, "
                        "reserved = MAX(0, reserved - ?)", (res.key_id, res.day, total, res.usd if held else 0.0))
        self.db.executemany("INSERT INTO ledger (ts, day, key_id, model, kind, usd, request_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
                            [(now, res.day, res.key_id, c.model, c.kind, c.usd, res.request_id) for c in charges])

    async def admit(self, key_id: str, *, rpm: int | None, usd_per_day: float | None, now: float) -> Admission:
        def admit() -> Admission:
            self._sweep(now)
            spent, reserved = self._totals(key_id, utc_day(now))
            if usd_per_day is not None and spent + reserved >= usd_per_day:
                return Admission("budget", 86400 - now % 86400, spent, reserved)
            if rpm is not None:
                self.db.execute("DELETE FROM rate WHERE key_id = ? AND t <= ?", (key_id, now - WINDOW_S))
                n, oldest = self.db.execute("SELECT COUNT(*), MIN(t) FROM rate WHERE key_id = ?", (key_id,)).fetchone()
                if n >= rpm:
                    return Admission("rate_limit", WINDOW_S - (now - oldest), spent, reserved)
                self.db.execute("INSERT INTO rate (key_id, t) VALUES (?, ?)", (key_id, now))
            return Admission(None, 0.0, spent, reserved)
        return await self._run(admit, write=True)

    async def reserve(self, key_id: str, usd: float, *, limit: float | None, request_id: str,
                      now: float) -> Reservation:
        res = Reservation(uuid.uuid4().hex, key_id, utc_day(now), float(usd), request_id, now)

        def reserve() -> Reservation | OverBudget:
            spent, reserved = self._totals(key_id, res.day)
            if limit is not None and spent + reserved >= limit:
                return OverBudget(spent, reserved)
            self.db.execute("INSERT INTO budget (key_id, day, spent, reserved) VALUES (?, ?, 0, ?) "
                            "ON CONFLICT (key_id, day) DO UPDATE SET reserved = reserved + excluded.reserved",
                            (key_id, res.day, res.usd))
            self.db.execute("INSERT INTO reservations (id, key_id, day, usd, request_id, expires) "
                            "VALUES (?, ?, ?, ?, ?, ?)",
                            (res.id, key_id, res.day, res.usd, request_id, now + self.reservation_ttl_s))
            return res
        out = await self._run(reserve, write=True)
        if isinstance(out, OverBudget):
            raise out
        return out

    async def extend(self, res: Reservation, usd: float, *, limit: float | None, now: float) -> Reservation:
        def extend() -> Reservation | OverBudget:
            spent, reserved = self._totals(res.key_id, res.day)
            if limit is not None and spent + reserved >= limit:
                return OverBudget(spent, reserved)
            if not self.db.execute("UPDATE reservations SET usd = usd + ? WHERE id = ?", (usd, res.id)).rowcount:
                return res
            self.db.execute("UPDATE budget SET reserved = reserved + ? WHERE key_id = ? AND day = ?",
                            (usd, res.key_id, res.day))
            return replace(res, usd=res.usd + usd)
        out = await self._run(extend, write=True)
        if isinstance(out, OverBudget):
            raise out
        return out

    async def holds(self, key_id: str, day: str, now: float) -> list[tuple[float, float, str]]:
        rows = await self._run(lambda: self.db.execute("SELECT expires, usd, id FROM reservations WHERE key_id = ? "
                                                       "AND day = ?", (key_id, day)).fetchall())
        return [(expires - self.reservation_ttl_s, usd, rid) for expires, usd, rid in rows]

    async def settle(self, res: Reservation, charges: list[Charge], *, now: float) -> None:
        await self._run(self._release, res, charges, now, write=True)

    async def day_total(self, key_id: str, day: str) -> tuple[float, float]:
        return await self._run(self._totals, key_id, day)

    async def ledger(self, key_id: str | None = None, day: str | None = None) -> list[LedgerRow]:
        def read() -> list[LedgerRow]:
            rows = self.db.execute("SELECT ts, day, key_id, model, kind, usd, request_id FROM ledger WHERE "
                                   "(? IS NULL OR key_id = ?) AND (? IS NULL OR day = ?) ORDER BY id",
                                   (key_id, key_id, day, day)).fetchall()
            return [LedgerRow(*r) for r in rows]
        return await self._run(read)

    async def ping(self) -> None:
        await self._run(lambda: self.db.execute("SELECT 1").fetchone())

    async def session_get(self, sid: str, now: float) -> str | None:
        row = await self._run(lambda: self.db.execute("SELECT state FROM sessions WHERE id = ? AND expires > ?",
                                                      (sid, now)).fetchone())
        return row[0] if row else None

    async def session_put(self, sid: str, raw: str, *, now: float, ttl_s: float) -> None:
        await self._run(lambda: self.db.execute("INSERT OR REPLACE INTO sessions (id, state, expires) VALUES (?, ?, ?)",
                                                (sid, raw, now + ttl_s)), write=True)
        self._prune_soon(now)

    def _prune_soon(self, now: float) -> None:
        """`session_prune` in the background when the last one is `session_prune_every_s` old: the write that
        starts it never waits for it, and one runs at a time (a failed one: the next write starts another)."""
        if now - self.pruned_at < self.session_prune_every_s or (self.pruning and not self.pruning.done()):
            return
        self.pruned_at, self.pruning = now, asyncio.ensure_future(self.session_prune(now))
        self.pruning.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def session_prune(self, now: float) -> int:
        """Expired sessions deleted `session_prune_batch` rows a transaction (the connection is free between
        them, so requests interleave), until none is left; the freed pages are reused by later rows."""
        def batch() -> int:
            return self.db.execute("DELETE FROM sessions WHERE id IN (SELECT id FROM sessions WHERE expires <= ? "
                                   "LIMIT ?)", (now, self.session_prune_batch)).rowcount
        total = 0
        while (n := await self._run(batch, write=True)) > 0:
            total += n
            if n < self.session_prune_batch:
                break
        return total

    async def aclose(self) -> None:
        with self.lock:
            self.db.close()


# ---------------------------------------------------------------------------------------------------- Redis

LEDGER_PAGE = 1_000  # ledger entries read from Redis at a time

class RedisState(StateStore):
    """A real Redis server shared by any number of gateway processes. Every check-and-change is one Lua script
    (atomic on the server; serving/gateway/state_scripts.py). Durable as the server is configured: run it with
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
