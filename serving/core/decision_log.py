"""The decision log: every routed request's decision and every model's decoded answer, kept for learning.

    log = open_decision_log(cfg.log, metrics)                # an observer of the gateway (serving/core/record.py)
    log(served)                                              # queued, never blocking; written by a background task
    requests, answers = read_log("runs/gateway/log")         # data/logged.py: every file, oldest first
    requests, answers = read_log("postgresql://gw@db/log")   # or every replica's rows (log.url)

One SQLite file (`decisions.sqlite`) under `log.path` per writing process (several workers: one each,
`decisions-<k>.sqlite`; data/logged.py reads the folder's files as one log), two tables:
- `requests`: time, request id, key id, router version, the decision's chosen model and rule, the strategy,
  its agreement verdict and disagreement kinds, the answering model, cost, latency, status, the caller's
  `metadata.example_id` (a benchmark query with known answers: what truth-scoring needs), the API the caller
  spoke (`api`: chat, messages, responses), its agent session (`session`, serving/gateway/sessions.py), why the
  key's limits refused it (`refused`: budget | budget_held | rate_limit | state_unavailable, `:extension` when
  a further call's hold was refused: then the status says whether an answer in hand still went back; a request
  refused before it was planned is a row with only this, its key, status and time), the gateway's own time
  (`overhead_ms`: latency less the time spent waiting on upstream calls; a passed-through stream's row is
  written when the stream ends, with the whole stream's, while its `latency_ms` is to the first byte), the
  process that served it (`replica`: host:pid, or the `replica` setting's name:pid), and, only with
  `log.requests: true`, the request itself (messages and tools: what retraining the router needs);
- `answers`: one row per model answer of a request: model, role (first, tie_breaker, escalate, fallback,
  explore), outcome, latency, cost, token usage, the decoded calls (JSON), the raw answer, decode error.

Bounded and rotated: once the file passes `log.max_mb` it is renamed `decisions.<unix ms>.sqlite` and a new one
started; `log.keep` rotated files are kept. Never blocking: records wait in a bounded queue (`log.queue`) and a
background task writes them in batches, off the event loop; a full queue drops the record and counts it
(`switchcraft_decision_log_dropped_total`).

With `log.url` (PostgreSQL) every gateway of a fleet writes the same tables of one database instead
(serving/core/decision_log_pg.py, `open_decision_log` picks): rows tagged by `replica`, old rows pruned by time
(`log.keep_days`) instead of files rotated. Each batch's rows and their per-hour summary (serving/core/log_tables.py:
the summary the console reads whole hours from) are written in one transaction, in either. A file that held rows
before the summary existed gets it built when the writer opens it; rotated files written before it have none,
and the console reads their rows instead.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sqlite3
import time
from pathlib import Path

from data.logged import file_name, log_files
from serving.core.log_queue import LogQueue
from serving.core.log_tables import ADDED, SCHEMA, SUMMARY, add_to_summary

log = logging.getLogger("switchcraft.gateway")
def open_decision_log(settings, metrics=None, *, replica: str | None = None, shared: bool = False) -> LogQueue:
    """The writer `log:` names: PostgreSQL's (`log.url`) or the SQLite files' (`log.path`)."""
    if settings.url:
        from serving.core.decision_log_pg import PostgresDecisionLog  # psycopg, only for a PostgreSQL log

        return PostgresDecisionLog.from_settings(settings, metrics, replica=replica)
    return DecisionLog.from_settings(settings, metrics, replica=replica, shared=shared)


class DecisionLog(LogQueue):
    """The SQLite writer: one file under `folder`. `shared`: one of several processes writing this folder
    (workers), so it writes a file of its own, decisions-<k>.sqlite, slot k being the first no live process holds
    (a lock file per slot, released when its process ends)."""

    def __init__(self, folder: str | Path, *, keep_requests: bool = False, max_mb: float = 256.0, keep: int = 4,
                 queue: int = 10_000, metrics=None, replica: str | None = None, shared: bool = False) -> None:
        super().__init__(keep_requests=keep_requests, queue=queue, metrics=metrics, replica=replica)
        self.folder, self.max_bytes, self.keep = Path(folder), int(max_mb * 2**20), keep
        self.folder.mkdir(parents=True, exist_ok=True)
        self.slot, self.lock = claim_slot(self.folder) if shared else (None, None)
        self.path = self.folder / file_name(self.slot)
        self.db = self._open()

    @classmethod
    def from_settings(cls, settings, metrics=None, *, replica: str | None = None, shared: bool = False) -> DecisionLog:
        return cls(settings.path, keep_requests=settings.requests, max_mb=settings.max_mb, keep=settings.keep,
                   queue=settings.queue, metrics=metrics, replica=replica, shared=shared)

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(SCHEMA)
        have = {row[1] for row in db.execute("PRAGMA table_info(requests)")}
        for column, kind in ADDED.items():  # a log written before these columns: add them (rows: null)
            if column not in have:
                db.execute(f"ALTER TABLE requests ADD COLUMN {column} {kind}")
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'summary'").fetchone() is None:
            started = time.monotonic()  # a file from before the summary: built once, from every row it holds
            with db:
                db.execute("BEGIN")
                db.execute(SUMMARY)
                add_to_summary(db)
            rows = db.execute("SELECT COUNT(*) FROM requests").fetchone()[0]
            if rows:
                log.info(json.dumps({"event": "decision_log_summary_built", "file": str(self.path),
                                     "requests": rows, "seconds": round(time.monotonic() - started, 3)}))
        return db

    def write(self, batch: list) -> None:
        """Write records now, in one transaction with their summary (the background task's own path; the
        console bench fills a log with it)."""
        self._rotate_if_full()
        with self.db:
            self.db.execute("BEGIN")
            after = tuple(self.db.execute(f"SELECT COALESCE(MAX(id), 0) FROM {t}").fetchone()[0]
                          for t in ("requests", "answers"))
            for _kind, request, answers in batch:
                if request is not None:
                    cols = ", ".join(request)
                    self.db.execute(f"INSERT INTO requests ({cols}) VALUES ({', '.join('?' * len(request))})",
                                    tuple(request.values()))
                for a in answers:
                    self.db.execute(f"INSERT INTO answers ({', '.join(a)}) VALUES ({', '.join('?' * len(a))})",
                                    tuple(a.values()))
            add_to_summary(self.db, after)
        self.counted(batch)

    def _rotate_if_full(self) -> None:
        path, wal = self.path, self.path.with_name(self.path.name + "-wal")
        size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)  # WAL mode: new rows sit in -wal
        if size < self.max_bytes:
            return
        self.db.close()
        path.rename(self.folder / file_name(self.slot, int(time.time() * 1e3)))
        for extra in ("-wal", "-shm"):
            path.with_name(path.name + extra).unlink(missing_ok=True)
        rotated = sorted(self.folder.glob(self.path.stem + ".*.sqlite"))  # this writer's own
        for old in rotated[: max(0, len(rotated) - self.keep)]:
            old.unlink()
        self.db = self._open()

    def close(self) -> None:
        self.db.close()
        if self.lock is not None:  # the slot is free for the next worker
            os.close(self.lock)
            self.lock = None

    def answer_counts(self) -> dict[str, int]:
        """Logged answers per model, every file (a new model is explored until it has enough)."""
        counts: dict[str, int] = {}
        for path in log_files(self.folder):  # every writer's files: the whole log
            db = self.db if path == self.path else sqlite3.connect(path)
            try:
                for model, n in db.execute("SELECT model, COUNT(*) FROM answers WHERE outcome = 'ok' GROUP BY model"):
                    counts[model] = counts.get(model, 0) + n
            finally:
                if db is not self.db:
                    db.close()
        return counts


def claim_slot(folder: Path) -> tuple[int, int]:
    """(k, the open lock file) of the first worker slot of `folder` that no live process holds: an exclusive flock
    on .decisions-<k>.lock, held while the file stays open (the kernel lets go when the process ends)."""
    for k in range(1024):
        fd = os.open(folder / f".decisions-{k}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return k, fd
    raise OSError(f"{folder}: 1024 decision-log writers hold a slot already")
