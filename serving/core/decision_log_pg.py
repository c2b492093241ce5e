"""The decision log in PostgreSQL (`log.url`): every gateway of a fleet writes the same two tables and summary.

    log = PostgresDecisionLog("postgresql://gw@db:5432/switchcraft", replica="gw-1:4242", keep_days=30)
    log(served)                 # queued, never blocking; written in batches by a background task, off the event loop

The tables are SQLite's (serving/core/log_tables.py: the same columns in the same order), created when absent by
whichever replica starts first. A batch is one transaction: its request rows, its answer rows, and the summary's
hours updated from exactly those rows (their ids, as the inserts returned them: other replicas write the same
tables at the same time). Replicas' summary updates are serialised by a transaction-scoped advisory lock, held only
from the summary's update to the commit, so two replicas updating the same hours wait rather than deadlock.

Pruned by time, not rotated: about once an hour a writer deletes the requests (and their answers) older than
`log.keep_days` and the summary's hours before the same whole hour, so the summary and the rows agree. A lost
connection fails that batch (dropped and counted, as any failed write) and the next batch connects again.
"""

from __future__ import annotations

import json
import logging
import math
import time

from serving.core.log_queue import LogQueue
from serving.core.log_sql import PgConnection, connect, redact_url
from serving.core.log_tables import add_to_summary, postgres_schema

log = logging.getLogger("switchcraft.gateway")
SCHEMA_LOCK, SUMMARY_LOCK = 0x5C_106_0001, 0x5C_106_0002  # pg_advisory_xact_lock keys of the log's writers
PRUNE_EVERY_S = 3600.0


class PostgresDecisionLog(LogQueue):
    """A writer of the fleet's log in PostgreSQL at `url`; `keep_days` (None: keep every row)."""

    def __init__(self, url: str, *, keep_requests: bool = False, keep_days: float | None = 30.0,
                 queue: int = 10_000, metrics=None, replica: str | None = None) -> None:
        super().__init__(keep_requests=keep_requests, queue=queue, metrics=metrics, replica=replica)
        self.url, self.where, self.keep_days = url, redact_url(url), keep_days
        self.db: PgConnection = self._open()
        self.pruned_at = 0.0

    @classmethod
    def from_settings(cls, settings, metrics=None, *, replica: str | None = None) -> PostgresDecisionLog:
        return cls(settings.url, keep_requests=settings.requests, keep_days=settings.keep_days,
                   queue=settings.queue, metrics=metrics, replica=replica)

    def _open(self) -> PgConnection:
        import psycopg

        db = connect(self.url, autocommit=True)
        try:
            with db.transaction():  # replicas starting together: one creates the tables, the others find them
                db.execute("SELECT pg_advisory_xact_lock(?)", (SCHEMA_LOCK,))
                found = db.execute("SELECT to_regclass('requests'), to_regclass('answers'), "
                                   "to_regclass('summary')").fetchone()
                if None in tuple(found):  # made once, by a user who may; the writers then need no more than DML
                    for statement in postgres_schema():
                        db.execute(statement)
        except psycopg.Error as e:  # e.g. a user without the right to create them
            db.close()
            raise ConnectionError(f"the decision log at {self.where}: its tables cannot be created: "
                                  f"{str(e).strip()}") from None
        return db

    def write(self, batch: list) -> None:
        """Write records now: their rows and their summary in one transaction (the background task's own path)."""
        if self.db.broken:  # the server went away since the last batch: connect again
            self.db = self._open()
        requests = [request for _kind, request, _answers in batch if request is not None]
        answers = [a for _kind, _request, rows in batch for a in rows]
        with self.db.transaction():
            ids = (self._insert("requests", requests), self._insert("answers", answers))
            self.db.execute("SELECT pg_advisory_xact_lock(?)", (SUMMARY_LOCK,))
            add_to_summary(self.db, ids)
        self.counted(batch)
        if time.time() - self.pruned_at >= PRUNE_EVERY_S:
            self.prune()

    def _insert(self, table: str, rows: list[dict]) -> list[int]:
        """Insert rows (grouped by their columns: one statement each), returning their ids."""
        by_columns: dict[tuple, list[tuple]] = {}
        for row in rows:
            by_columns.setdefault(tuple(row), []).append(tuple(row.values()))
        ids: list[int] = []
        for columns, values in by_columns.items():
            ids += self.db.executemany_returning(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) RETURNING id",
                values)
        return ids

    def prune(self, now: float | None = None) -> int:
        """Delete the requests older than keep_days (from a whole hour on), their answers and the summary's hours
        before it; the number of requests deleted."""
        now = time.time() if now is None else now
        self.pruned_at = now
        if self.keep_days is None:
            return 0
        hour = math.floor((now - self.keep_days * 86400) / 3600)
        with self.db.transaction():
            self.db.execute("DELETE FROM answers WHERE request_id IN (SELECT request_id FROM requests WHERE ts < ?)",
                            (hour * 3600.0,))
            n = self.db.execute("DELETE FROM requests WHERE ts < ?", (hour * 3600.0,)).rowcount
            self.db.execute("DELETE FROM summary WHERE hour < ?", (hour,))
        if n:
            log.info(json.dumps({"event": "decision_log_pruned", "log": self.where, "requests": n,
                                 "before": hour * 3600}))
        return n

    def answer_counts(self) -> dict[str, int]:
        """Logged answers per model, every replica's (a new model is explored until it has enough)."""
        rows = self.db.execute("SELECT model, COUNT(*) FROM answers WHERE outcome = 'ok' GROUP BY model")
        return {model: n for model, n in rows}

    def close(self) -> None:
        self.db.close()
