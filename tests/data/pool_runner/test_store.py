"""The durable call store: commits before counting, done rows are final, grouped commits.

.venv/bin/python -m pytest -q tests/data/pool_runner/test_store.py
"""

from __future__ import annotations

import asyncio
import sqlite3

from data.pool_runner.store import CallStore
from data.schema import Usage

U = Usage(input_tokens=100, output_tokens=20)


def test_done_is_committed_before_the_future_resolves(tmp_path):
    path = tmp_path / "s.sqlite"

    async def go(store):
        store.mark_pending("e1", "m", "h")
        await store.record_done(
            "e1", "m", "h", raw=[{"f": "{}"}], usage=U, cost_usd=0.5, latency_s=0.1, attempts=2
        )
        # another connection (another process, after a kill) sees it at once
        con = sqlite3.connect(path)
        assert con.execute("SELECT status, raw, attempts FROM calls").fetchall() == [
            ("done", '[{"f": "{}"}]', 2)
        ]
        con.close()

    store = CallStore(path)
    asyncio.run(go(store))
    store.close()
    again = CallStore(path)
    assert again.status_of() == {("e1", "m", "h"): "done"}
    (call,) = list(again.calls())
    assert call.raw == [{"f": "{}"}] and call.usage == U and call.cost_usd == 0.5
    assert again.spent_usd() == 0.5
    again.close()


def test_done_rows_are_final_and_failures_are_retryable(tmp_path):
    async def go(store):
        await store.record_failed("e", "m", "h", error="HTTP 500", attempts=3)
        assert store.status_of("m") == {("e", "m", "h"): "failed"}
        await store.record_done(
            "e", "m", "h", raw="first", usage=U, cost_usd=1.0, latency_s=None, attempts=1
        )
        # a later write for the same call never replaces what was paid for
        await store.record_done(
            "e", "m", "h", raw="second", usage=U, cost_usd=9.0, latency_s=None, attempts=1
        )
        await store.record_failed("e", "m", "h", error="x", attempts=1)
        store.mark_pending("e", "m", "h")
        await store.record_done(
            "e2", "m", "h", raw="other", usage=Usage(), cost_usd=None, latency_s=None, attempts=1
        )

    store = CallStore(tmp_path / "s.sqlite")
    asyncio.run(go(store))
    calls = {c.example_id: c for c in store.calls()}
    assert calls["e"].raw == "first" and calls["e"].cost_usd == 1.0 and calls["e"].attempts == 4
    assert calls["e2"].usage == Usage() and store.spent_usd() == 1.0
    store.close()


def test_many_concurrent_writes_group_into_few_commits(tmp_path):
    async def go(store):
        await asyncio.gather(
            *(
                store.record_done(
                    f"e{i}", "m", "h", raw=i, usage=U, cost_usd=0.001, latency_s=None, attempts=1
                )
                for i in range(2000)
            )
        )

    store = CallStore(tmp_path / "s.sqlite")
    asyncio.run(go(store))
    assert len(store.status_of()) == 2000 and abs(store.spent_usd() - 2.0) < 1e-9
    assert store.commits <= 200, store.commits  # grouped, not one fsync per row
    mode = store._read.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    store.close()
