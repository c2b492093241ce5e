"""The decision log: every routed request's decision and every model's decoded answer, kept for learning.

    log = DecisionLog.from_settings(cfg.log, metrics)        # an observer of the gateway (serving/core/record.py)
    log(served)                                              # queued, never blocking; written by a background task
    requests, answers = read_log("runs/gateway/log")         # data/logged.py: every file, oldest first

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

A per-hour summary (`summary`, one row per facet, hour and the facet's dimensions: counts, sums, first and last
time) is written in the same transaction as the rows it counts, so a reader sees both or neither; the console
reads whole hours from it and only the partial hours at a range's edges from the rows (serving/console/logdb.py).
`FACETS` defines each facet once as SQL over the rows: the writer runs it over each batch's new rows, a reader
over a time window of rows, so the two agree exactly. An answer counts at its request's hour (the first request
row with its id, in the same file). A file that held rows before the summary existed gets it built when the
writer opens it; rotated files written before it have none, and the console reads their rows instead.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from data.logged import file_name, log_files

import anyio

from serving.core.record import Served

log = logging.getLogger("switchcraft.gateway")
SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
  id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, request_id TEXT NOT NULL, key_id TEXT,
  router_version TEXT, kind TEXT NOT NULL, status INTEGER, example_id TEXT, routed INTEGER, chosen TEXT,
  rule TEXT, strategy TEXT, verdict TEXT, kinds TEXT, answered_by TEXT, cost_usd REAL, latency_ms REAL,
  stream INTEGER, request TEXT, api TEXT, session TEXT, refused TEXT, overhead_ms REAL, replica TEXT);
CREATE INDEX IF NOT EXISTS requests_rid ON requests (request_id);
CREATE TABLE IF NOT EXISTS answers (
  id INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL, model TEXT NOT NULL, role TEXT NOT NULL,
  outcome TEXT, latency_ms REAL, cost_usd REAL, input_tokens INTEGER, output_tokens INTEGER, calls TEXT, raw TEXT,
  decoder TEXT, decode_error TEXT);
CREATE INDEX IF NOT EXISTS answers_rid ON answers (request_id);
"""

# The summary: untyped measure columns keep integer sums integers. Dimensions are never NULL ('' stands for it),
# so each (facet, d1, d2, d3, hour) is one row; that key order lets a facet's rows be grouped in index order.
SUMMARY = """
CREATE TABLE summary (
  facet TEXT NOT NULL, d1 NOT NULL, d2 NOT NULL, d3 NOT NULL, hour INTEGER NOT NULL,
  n INTEGER NOT NULL, s1, s2, s3, s4, s5, lo REAL, hi REAL, PRIMARY KEY (facet, d1, d2, d3, hour)) WITHOUT ROWID;
"""
MEASURES = ("n", "s1", "s2", "s3", "s4", "s5", "lo", "hi")
LATENCY_BUCKETS_PER_E = 40  # latency histograms: buckets of ln(1 + ms) x 40, about 2.5% wide
_BUCKET = f"CAST(ln(1 + MAX({{}}, 0)) * {LATENCY_BUCKETS_PER_E} AS INTEGER)"
_TOKENS = ("(SELECT MAX(x.input_tokens) FROM {s}.answers x WHERE x.request_id = r.request_id "
           "AND x.role != 'explore')")
_ESCALATED = "EXISTS (SELECT 1 FROM {s}.answers x WHERE x.request_id = r.request_id AND x.role = 'escalate')"


def _c(expr: str) -> str:
    return f"COALESCE({expr}, '')"


# name -> (rows: "r" a served request | "a" an answer of one, extra FROM, condition, dimensions, measures s1..s5,
# lo, hi). What each view reads: key (savings, requests over time), mix (strategy, model, status), version
# (router versions), verdict and kind (cascades), rlat / alat / olat (request / upstream latency / the gateway's overhead histograms), answer
# (per model, role and outcome: spend, output tokens, latency; exploration; failed calls).
FACETS: dict[str, tuple] = {
    "key": ("r", "", "1", (_c("r.key_id"), _c("r.status"), "''"),
            ("COALESCE(SUM(r.cost_usd), 0)", f"COALESCE(SUM({_TOKENS}), 0)", f"COUNT({_TOKENS})", "0", "0"),
            "0", "0"),
    "mix": ("r", "", "1", (_c("r.strategy"), _c("r.answered_by"), _c("r.status")), ("0",) * 5, "0", "0"),
    "version": ("r", "", "1", (_c("r.router_version"), "''", "''"), ("0",) * 5, "MIN(r.ts)", "MAX(r.ts)"),
    "verdict": ("r", "", "r.verdict IS NOT NULL", ("r.verdict", "''", "''"),
                (f"SUM({_ESCALATED})", "0", "0", "0", "0"), "0", "0"),
    "kind": ("r", ", json_each(CASE WHEN json_valid(r.kinds) THEN r.kinds ELSE '[]' END) j",
             "r.verdict IS NOT NULL", (_c("j.value"), "''", "''"), ("0",) * 5, "0", "0"),
    "rlat": ("r", "", "r.status = 200 AND r.latency_ms IS NOT NULL", (_BUCKET.format("r.latency_ms"), "''", "''"),
             ("0",) * 5, "0", "0"),
    "answer": ("a", "", "1", ("a.model", "a.role", _c("a.outcome")),
               ("COALESCE(SUM(a.cost_usd), 0)", "COALESCE(SUM(a.output_tokens), 0)", "COUNT(a.output_tokens)",
                "COALESCE(SUM(a.latency_ms), 0)", "COUNT(a.latency_ms)"), "0", "0"),
    "alat": ("a", "", "a.outcome = 'ok' AND a.role != 'explore' AND a.latency_ms IS NOT NULL",
             ("a.model", _BUCKET.format("a.latency_ms"), "''"), ("0",) * 5, "0", "0"),
    "olat": ("r", "", "r.status = 200 AND r.overhead_ms IS NOT NULL", (_BUCKET.format("r.overhead_ms"), "''", "''"),
             ("0",) * 5, "0", "0"),
}
# Columns added to `requests` after its first version, with their types: an older file gets them when the writer
# opens it (its rows: null), and a reader of a file without one reads null (a facet over one is skipped there).
ADDED = {"api": "TEXT", "session": "TEXT", "refused": "TEXT", "overhead_ms": "REAL", "replica": "TEXT"}
NEEDS = {"olat": "overhead_ms"}  # facet -> the added column it reads
FIRST_ROW = "r.id = (SELECT MIN(q.id) FROM {s}.requests q WHERE q.request_id = r.request_id)"


def facet_sql(name: str, schema: str = "main", *,
              window: tuple[int, int, float, float | None] | None = None) -> str:
    """The summary rows (facet, d1, d2, d3, hour, n, s1..s5, lo, hi) of one facet over some of a file's rows:
    without `window`, the rows written after the ids `:req` (requests) and `:ans` (answers), parameters (the
    writer's batch); `window=(first id, end id, from ts, to ts or None)`: the served requests with ids in
    [first, end) and ts in [from, to) and their answers (a reader's partial hour)."""
    rows, extra, cond, dims, sums, lo, hi = FACETS[name]
    if window is not None:
        id0, id1, t0, t1 = window
        where = f"r.id >= {int(id0)} AND r.id < {int(id1)} AND r.ts >= {float(t0)!r}"
        where += f" AND r.ts < {float(t1)!r}" if t1 is not None else ""
        # CROSS JOIN: SQLite joins in the order written (the bounded side first, the other by its index)
        source = (f"{{s}}.requests r CROSS JOIN {{s}}.answers a ON a.request_id = r.request_id WHERE {where} "
                  f"AND {FIRST_ROW}") if rows == "a" else f"{{s}}.requests r{extra} WHERE {where}"
    else:
        # the ids as parameters (:req, :ans): the same text every batch, so SQLite's statement cache keeps it
        source = (f"{{s}}.answers a CROSS JOIN {{s}}.requests r ON r.request_id = a.request_id WHERE a.id > :ans "
                  f"AND {FIRST_ROW}") if rows == "a" else f"{{s}}.requests r{extra} WHERE r.id > :req"
    named = zip((f"'{name}'", *dims, "CAST(r.ts / 3600 AS INTEGER)", "COUNT(*)", *sums, lo, hi),
                ("facet", "d1", "d2", "d3", "hour", *MEASURES))
    select = ", ".join(f"{expr} AS {col}" for expr, col in named)
    return (f"SELECT {select} FROM {source} AND r.kind = 'served' AND {cond} GROUP BY 2, 3, 4, 5"
            ).replace("{s}", schema)


def add_to_summary(db: sqlite3.Connection, after: tuple[int, int] = (0, 0)) -> None:
    """Add the rows written after `after` (request id, answer id) to the file's summary (inside the caller's
    transaction)."""
    update = ", ".join(f"{m} = {m} + excluded.{m}" for m in MEASURES[:6])
    for name in FACETS:
        db.execute(f"INSERT INTO summary SELECT * FROM ({facet_sql(name)}) WHERE 1 "
                   f"ON CONFLICT (facet, d1, d2, d3, hour) DO UPDATE SET {update}, lo = MIN(lo, excluded.lo), "
                   "hi = MAX(hi, excluded.hi)", {"req": after[0], "ans": after[1]})


def request_row(served: Served, keep_request: bool, kind: str = "served") -> dict[str, Any]:
    meta, run = served.meta, served.run
    decision = meta.get("decision") or {}
    checks = (meta.get("agreement") or {}).get("checks") or []
    request = None
    if keep_request:
        request = json.dumps({"messages": [m.model_dump(mode="json") for m in served.messages],
                              "tools": [t.model_dump(mode="json") for t in served.tools]}, default=str)
    return {"ts": served.started_at, "request_id": served.request_id, "key_id": served.key_id,
            "router_version": served.router_version, "kind": kind, "status": served.status,
            "example_id": served.example_id, "routed": int(bool(meta.get("routed"))), "chosen": meta.get("chosen"),
            "rule": decision.get("rule"), "strategy": (meta.get("strategy") or {}).get("name"),
            "verdict": run.verdict if run is not None else None,
            "kinds": json.dumps([c.get("kind") for c in checks if c.get("kind")]),
            "answered_by": run.returned.model if run is not None and run.returned is not None else None,
            "cost_usd": served.cost_usd, "latency_ms": served.duration_ms, "stream": int(served.stream),
            "request": request, "api": meta.get("api", "chat"), "session": (meta.get("session") or {}).get("id"),
            "refused": _refused(meta.get("refused")), "overhead_ms": served.overhead_ms}


def _refused(refused: dict | None) -> str | None:
    """The `refused` column: the reason, `:extension` when the hold of a further call was refused."""
    if not refused:
        return None
    return refused["reason"] + (":extension" if refused.get("extension") else "")


def answer_rows(request_id: str, calls: list) -> list[dict[str, Any]]:
    """One row per call that was sent (serving.gateway.cascade.CallRecord)."""
    out = []
    for c in calls:
        if not c.sent:
            continue
        a = c.answer
        out.append({"request_id": request_id, "model": c.model, "role": c.role, "outcome": c.outcome,
                    "latency_ms": c.attempt.latency_ms if c.attempt else None, "cost_usd": c.cost_usd,
                    "input_tokens": a.usage.input_tokens if a is not None else None,
                    "output_tokens": a.usage.output_tokens if a is not None else None,
                    "calls": json.dumps(a.calls_json(), default=str) if a is not None else None,
                    "raw": json.dumps(a.raw, default=str) if a is not None else None,
                    "decoder": a.decoder if a is not None else None,
                    "decode_error": a.decode_error if a is not None else None})
    return out


class DecisionLog:
    """An observer that appends each served request to the log; `answers(request_id, calls)` adds more answers
    to a logged request (exploration). `replica` tags every row it writes (who served it: host:pid); `shared`:
    one of several processes writing this folder (workers), so it writes a file of its own, decisions-<k>.sqlite,
    slot k being the first no live process holds (a lock file per slot, released when its process ends)."""

    def __init__(self, folder: str | Path, *, keep_requests: bool = False, max_mb: float = 256.0, keep: int = 4,
                 queue: int = 10_000, metrics=None, replica: str | None = None, shared: bool = False) -> None:
        self.folder, self.keep_requests = Path(folder), keep_requests
        self.max_bytes, self.keep, self.metrics, self.replica = int(max_mb * 2**20), keep, metrics, replica
        self.folder.mkdir(parents=True, exist_ok=True)
        self.slot, self.lock = claim_slot(self.folder) if shared else (None, None)
        self.path = self.folder / file_name(self.slot)
        self.db = self._open()
        self.queue: asyncio.Queue | None = None
        self.queue_size = queue
        self.writer: asyncio.Task | None = None
        self.written = 0

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

    def __call__(self, served: Served) -> None:
        if served.open_stream:  # a passed-through stream is written when it ends (`ended`): its whole overhead
            return
        row = request_row(served, self.keep_requests)
        row["replica"] = self.replica
        self._put(("request", row, answer_rows(served.request_id, served.run.calls if served.run is not None else [])))

    def ended(self, served: Served) -> None:
        """A passed-through stream, now ended (serving/core/record.py notify_ended)."""
        self(served)

    def answers(self, request_id: str, calls: list) -> None:
        self._put(("answers", None, answer_rows(request_id, calls)))

    def _put(self, record) -> None:
        if self.queue is None:  # first use, inside the event loop: the writer starts with it
            self.queue = asyncio.Queue(maxsize=self.queue_size)
            self.writer = asyncio.get_running_loop().create_task(self._write_forever())
        try:
            self.queue.put_nowait(record)
        except asyncio.QueueFull:
            if self.metrics is not None:
                self.metrics.decision_log_dropped.inc()

    async def _write_forever(self) -> None:
        while True:
            batch = [await self.queue.get()]
            while not self.queue.empty() and len(batch) < 256:
                batch.append(self.queue.get_nowait())
            try:
                await anyio.to_thread.run_sync(self.write, batch)
            except Exception as e:  # noqa: BLE001 - a failed write loses these records, never the gateway
                log.error(json.dumps({"event": "decision_log_failed", "error": f"{type(e).__name__}: {e}",
                                      "records": len(batch)}))
                if self.metrics is not None:
                    self.metrics.decision_log_dropped.inc(len(batch))
            for _ in batch:
                self.queue.task_done()

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
        self.written += len(batch)
        if self.metrics is not None:
            self.metrics.decision_log_records.inc(len(batch))

    _write = write

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

    async def flush(self) -> None:
        """Wait until every queued record is written (tests, shutdown)."""
        if self.queue is not None:
            await self.queue.join()

    async def aclose(self) -> None:
        await self.flush()
        if self.writer is not None:
            self.writer.cancel()
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
