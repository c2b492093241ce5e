"""The embedded state store: one SQLite file in WAL mode (serving/core/state.py says what is kept)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import anyio

from serving.core.state_base import (SESSION_PRUNE_BATCH, SESSION_PRUNE_EVERY_S, SWEEP_EVERY_S, THREADS,
                                        WINDOW_S, Admission, Charge, LedgerRow, OverBudget, Reservation,
                                        StateStore, StateUnavailable, utc_day)
from serving.core.state_keys import SQLITE_SCHEMA as KEYS_SCHEMA, SQLiteKeys


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


class SQLiteState(SQLiteKeys, StateStore):
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
            self.db.executescript(SCHEMA + KEYS_SCHEMA)
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
