"""What both decision-log writers share (serving/core/decision_log.py: SQLite files; decision_log_pg.py: PostgreSQL):
a served request as its rows, and the queue a background task drains into the writer's `write`, off the event loop.

    class MyLog(LogQueue):
        def write(self, batch): ...          # [("request", request row, answer rows) | ("answers", None, rows)]
    log = MyLog(keep_requests=True, replica="gw-1:4242")
    log(served)                               # queued, never blocking
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import anyio

from serving.core.record import Served

log = logging.getLogger("switchcraft.gateway")


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


class LogQueue:
    """What both writers share: an observer that queues each served request's rows (never blocking) for a
    background task writing them in batches, off the event loop; `answers(request_id, calls)` adds more answers to
    a logged request (exploration). `replica` tags every row it writes (who served it: host:pid). A writer
    implements `write(batch)` (one transaction), `answer_counts()` and `close()`."""

    def __init__(self, *, keep_requests: bool = False, queue: int = 10_000, metrics=None,
                 replica: str | None = None) -> None:
        self.keep_requests, self.metrics, self.replica = keep_requests, metrics, replica
        self.queue: asyncio.Queue | None = None
        self.queue_size = queue
        self.writer: asyncio.Task | None = None
        self.written = 0

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

    def counted(self, batch: list) -> None:
        """A batch is written (the writers call this after their commit)."""
        self.written += len(batch)
        if self.metrics is not None:
            self.metrics.decision_log_records.inc(len(batch))

    def write(self, batch: list) -> None:
        raise NotImplementedError

    def answer_counts(self) -> dict[str, int]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    async def flush(self) -> None:
        """Wait until every queued record is written (tests, shutdown)."""
        if self.queue is not None:
            await self.queue.join()

    async def aclose(self) -> None:
        await self.flush()
        if self.writer is not None:
            self.writer.cancel()
        self.close()
