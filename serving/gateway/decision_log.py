"""The decision log: every routed request's decision and every model's decoded answer, kept for learning.

    log = DecisionLog.from_settings(cfg.log, metrics)        # an observer of the gateway (serving/gateway/record.py)
    log(served)                                              # queued, never blocking; written by a background task
    requests, answers = read_log("runs/gateway/log")         # data/logged.py: every file, oldest first

One SQLite file (`decisions.sqlite`) under `log.path`, two tables:
- `requests`: time, request id, key id, router version, the decision's chosen model and rule, the strategy,
  its agreement verdict and disagreement kinds, the answering model, cost, latency, status, the caller's
  `metadata.example_id` (a benchmark query with known answers: what truth-scoring needs), the API the caller
  spoke (`api`: chat, messages, responses), its agent session (`session`, serving/gateway/sessions.py), and, only with
  `log.requests: true`, the request itself (messages and tools: what retraining the router needs);
- `answers`: one row per model answer of a request: model, role (first, tie_breaker, escalate, fallback,
  explore), outcome, latency, cost, token usage, the decoded calls (JSON), the raw answer, decode error.

Bounded and rotated: once the file passes `log.max_mb` it is renamed `decisions.<unix ms>.sqlite` and a new one
started; `log.keep` rotated files are kept. Never blocking: records wait in a bounded queue (`log.queue`) and a
background task writes them in batches, off the event loop; a full queue drops the record and counts it
(`switchcraft_decision_log_dropped_total`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

from data.logged import FILE, log_files

import anyio

from serving.gateway.record import Served

log = logging.getLogger("switchcraft.gateway")
SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
  id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, request_id TEXT NOT NULL, key_id TEXT,
  router_version TEXT, kind TEXT NOT NULL, status INTEGER, example_id TEXT, routed INTEGER, chosen TEXT,
  rule TEXT, strategy TEXT, verdict TEXT, kinds TEXT, answered_by TEXT, cost_usd REAL, latency_ms REAL,
  stream INTEGER, request TEXT, api TEXT, session TEXT);
CREATE INDEX IF NOT EXISTS requests_rid ON requests (request_id);
CREATE TABLE IF NOT EXISTS answers (
  id INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL, model TEXT NOT NULL, role TEXT NOT NULL,
  outcome TEXT, latency_ms REAL, cost_usd REAL, input_tokens INTEGER, output_tokens INTEGER, calls TEXT, raw TEXT,
  decoder TEXT, decode_error TEXT);
CREATE INDEX IF NOT EXISTS answers_rid ON answers (request_id);
"""


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
            "request": request, "api": meta.get("api", "chat"), "session": (meta.get("session") or {}).get("id")}


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
    to a logged request (exploration)."""

    def __init__(self, folder: str | Path, *, keep_requests: bool = False, max_mb: float = 256.0, keep: int = 4,
                 queue: int = 10_000, metrics=None) -> None:
        self.folder, self.keep_requests = Path(folder), keep_requests
        self.max_bytes, self.keep, self.metrics = int(max_mb * 2**20), keep, metrics
        self.folder.mkdir(parents=True, exist_ok=True)
        self.db = self._open()
        self.queue: asyncio.Queue | None = None
        self.queue_size = queue
        self.writer: asyncio.Task | None = None
        self.written = 0

    @classmethod
    def from_settings(cls, settings, metrics=None) -> DecisionLog:
        return cls(settings.path, keep_requests=settings.requests, max_mb=settings.max_mb, keep=settings.keep,
                   queue=settings.queue, metrics=metrics)

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.folder / FILE, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(SCHEMA)
        have = {row[1] for row in db.execute("PRAGMA table_info(requests)")}
        for column in ("api", "session"):  # a log written before these columns: add them (older rows: null)
            if column not in have:
                db.execute(f"ALTER TABLE requests ADD COLUMN {column} TEXT")
        return db

    def __call__(self, served: Served) -> None:
        record = ("request", request_row(served, self.keep_requests),
                  answer_rows(served.request_id, served.run.calls if served.run is not None else []))
        self._put(record)

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
                await anyio.to_thread.run_sync(self._write, batch)
            except Exception as e:  # noqa: BLE001 - a failed write loses these records, never the gateway
                log.error(json.dumps({"event": "decision_log_failed", "error": f"{type(e).__name__}: {e}",
                                      "records": len(batch)}))
                if self.metrics is not None:
                    self.metrics.decision_log_dropped.inc(len(batch))
            for _ in batch:
                self.queue.task_done()

    def _write(self, batch: list) -> None:
        self._rotate_if_full()
        with self.db:
            for _kind, request, answers in batch:
                if request is not None:
                    cols = ", ".join(request)
                    self.db.execute(f"INSERT INTO requests ({cols}) VALUES ({', '.join('?' * len(request))})",
                                    tuple(request.values()))
                for a in answers:
                    self.db.execute(f"INSERT INTO answers ({', '.join(a)}) VALUES ({', '.join('?' * len(a))})",
                                    tuple(a.values()))
        self.written += len(batch)
        if self.metrics is not None:
            self.metrics.decision_log_records.inc(len(batch))

    def _rotate_if_full(self) -> None:
        path, wal = self.folder / FILE, self.folder / (FILE + "-wal")
        size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)  # WAL mode: new rows sit in -wal
        if size < self.max_bytes:
            return
        self.db.close()
        path.rename(self.folder / f"decisions.{int(time.time() * 1e3)}.sqlite")
        for extra in ("-wal", "-shm"):
            (self.folder / (FILE + extra)).unlink(missing_ok=True)
        rotated = sorted(self.folder.glob("decisions.*.sqlite"))
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

    def answer_counts(self) -> dict[str, int]:
        """Logged answers per model, every file (a new model is explored until it has enough)."""
        counts: dict[str, int] = {}
        for path in log_files(self.folder):
            db = self.db if path.name == FILE else sqlite3.connect(path)
            for model, n in db.execute("SELECT model, COUNT(*) FROM answers WHERE outcome = 'ok' GROUP BY model"):
                counts[model] = counts.get(model, 0) + n
        return counts
