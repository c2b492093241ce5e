"""The durable call store: one SQLite row per (example, model, request hash).

A call's answer is committed (WAL, `synchronous=FULL`, so fsynced) before the
runner counts it, and a call is marked `pending` before it is sent, so after a
kill at any moment the next run knows what is done (never asked again) and
what was in flight (asked again with the same Idempotency-Key). Commits are
grouped: one writer thread commits whatever has queued up in one transaction,
which keeps fsyncs off the request path at high concurrency.

    python -m pytest -q tests/data/pool_runner/test_store.py
"""

from __future__ import annotations

import asyncio
import json
import queue
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data.schema import Usage

SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    example_id   TEXT NOT NULL,
    model        TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('pending', 'done', 'failed')),
    raw          TEXT,
    usage        TEXT,
    cost_usd     REAL,
    latency_s    REAL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    error        TEXT,
    updated      REAL NOT NULL,
    PRIMARY KEY (example_id, model, request_hash)
);
"""

# A done row is final: what we paid for once is never overwritten by a later attempt.
_UPSERT = """
INSERT INTO calls (example_id, model, request_hash, status, raw, usage, cost_usd, latency_s, attempts, error, updated)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (example_id, model, request_hash) DO UPDATE SET
    status=excluded.status, raw=excluded.raw, usage=excluded.usage, cost_usd=excluded.cost_usd,
    latency_s=excluded.latency_s, attempts=calls.attempts + excluded.attempts, error=excluded.error,
    updated=excluded.updated
WHERE calls.status != 'done'
"""


@dataclass(frozen=True)
class StoredCall:
    example_id: str
    model: str
    request_hash: str
    status: str
    raw: Any
    usage: Usage
    cost_usd: float | None
    latency_s: float | None
    attempts: int
    error: str | None


def connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    # FULL: every commit is fsynced before it returns; the whole point of the store.
    conn.execute("PRAGMA synchronous=FULL")
    conn.executescript(SCHEMA)
    return conn


class CallStore:
    """Open (creating if needed) the store at `path`; `close()` flushes and stops the writer."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._read = connect(self.path)
        self._queue: queue.Queue = queue.Queue()
        self.commits = 0  # transactions written (each fsynced); fewer than rows when grouped
        self._writer = threading.Thread(
            target=self._write_loop, name="call-store-writer", daemon=True
        )
        self._writer.start()

    # --- reads (startup and export) ---------------------------------------------------

    def status_of(self, model: str | None = None) -> dict[tuple[str, str, str], str]:
        """(example_id, model, request_hash) -> status, for one model or all."""
        sql = "SELECT example_id, model, request_hash, status FROM calls"
        rows = (
            self._read.execute(sql + " WHERE model = ?", (model,))
            if model
            else self._read.execute(sql)
        )
        return {(e, m, h): s for e, m, h, s in rows}

    def spent_usd(self) -> float:
        (total,) = self._read.execute(
            "SELECT COALESCE(SUM(cost_usd), 0) FROM calls WHERE status='done'"
        ).fetchone()
        return float(total)

    def calls(self, status: str | None = "done") -> Iterator[StoredCall]:
        sql = (
            "SELECT * FROM calls"
            + (" WHERE status = ?" if status else "")
            + " ORDER BY model, example_id"
        )
        cur = self._read.execute(sql, (status,) if status else ())
        for e, m, h, s, raw, usage, cost, lat, att, err, _ in cur:
            yield StoredCall(
                e,
                m,
                h,
                s,
                json.loads(raw) if raw is not None else None,
                Usage.model_validate_json(usage) if usage else Usage(),
                cost,
                lat,
                att,
                err,
            )

    # --- writes (grouped commits on one thread) ---------------------------------------

    def mark_pending(self, example_id: str, model: str, req_hash: str) -> asyncio.Future:
        return self._submit(
            (example_id, model, req_hash, "pending", None, None, None, None, 0, None, time.time())
        )

    def record_done(
        self,
        example_id: str,
        model: str,
        req_hash: str,
        *,
        raw: Any,
        usage: Usage,
        cost_usd: float | None,
        latency_s: float | None,
        attempts: int,
    ) -> asyncio.Future:
        """Resolves once the row is committed and fsynced; only then may the caller count it."""
        # json.dumps escapes to ASCII: lone surrogates in model text survive the round trip.
        return self._submit(
            (
                example_id,
                model,
                req_hash,
                "done",
                json.dumps(raw),
                usage.model_dump_json(),
                cost_usd,
                latency_s,
                attempts,
                None,
                time.time(),
            )
        )

    def record_failed(
        self, example_id: str, model: str, req_hash: str, *, error: str, attempts: int
    ) -> asyncio.Future:
        return self._submit(
            (
                example_id,
                model,
                req_hash,
                "failed",
                None,
                None,
                None,
                None,
                attempts,
                error,
                time.time(),
            )
        )

    def _submit(self, row: tuple) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._queue.put((row, loop, fut))
        return fut

    def _write_loop(self) -> None:
        conn = connect(self.path)
        while True:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < 512:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(item)
            error: Exception | None = None
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(_UPSERT, [row for row, _, _ in batch])
                conn.execute("COMMIT")
                self.commits += 1
            except Exception as e:  # noqa: BLE001 -- the writer must outlive a bad batch; waiters get the error
                error = e
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            for _, loop, fut in batch:
                try:
                    loop.call_soon_threadsafe(_settle, fut, error)
                except RuntimeError:  # that event loop has closed; the row is committed anyway
                    pass
        conn.close()

    def close(self) -> None:
        self._queue.put(None)
        self._writer.join(timeout=30)
        self._read.close()


def _settle(fut: asyncio.Future, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)
