"""`read_explored` (what `switchcraft learn` reads) against `read_log` (the whole log in memory): the same requests,
answers and labels on a slice, and memory that does not grow with the requests nobody explored.

    .venv/bin/python -m pytest -q tests/data/test_logged_stream.py
"""

from __future__ import annotations

import json
import random
import tracemalloc
from pathlib import Path

import pytest

from data.consensus import consensus_of_outputs
from data.errors import DataError
from data.logged import complete_rows, explored_contracts, log_contracts, read_explored, read_log
from data.pool import load_pool
from evaluation.bench.learn import request_text, write_learn_log
from serving.core.decision_log import DecisionLog
from tests.routers import REPO

POOL = load_pool(REPO / "configs" / "pool.yaml")


def whole(folder: Path):
    """Today's path: every row in memory, then the complete requests and their outputs."""
    examples, outputs = log_contracts(*read_log(folder), POOL)
    complete = complete_rows(examples, outputs, POOL)
    ids = {e.id for e in complete}
    return examples, complete, [o for o in outputs if o.example_id in ids]


def streamed(folder: Path):
    part = read_explored(folder, POOL.names)
    examples, outputs = explored_contracts(part, POOL)
    complete = complete_rows(examples, outputs, POOL)
    ids = {e.id for e in complete}
    return part, complete, [o for o in outputs if o.example_id in ids]


def explored_across_a_rotation(folder: Path) -> str:
    """A request written to one file and its exploration answers to the next (the log rotated in between), plus a
    second row of the same request id (the first is the one kept), and a failed request whose rows cover the pool."""
    rng, rid, failed = random.Random(7), "split-0001", "failed-0001"
    answer = {"model": POOL.names[0], "role": "first", "outcome": "ok", "latency_ms": 300.0, "cost_usd": 1e-4,
              "input_tokens": 900, "output_tokens": 20, "calls": json.dumps([{"name": "get_weather",
                                                                              "arguments": {"city": "Oslo"}}]),
              "raw": None, "decoder": "json", "decode_error": None}
    row = {"ts": 1.9e9, "request_id": rid, "key_id": "k", "router_version": "v", "kind": "served", "status": 200,
           "answered_by": POOL.names[0], "cost_usd": 1e-4, "request": request_text(rng, [answer])}
    log = DecisionLog(folder, keep_requests=True)
    log.write([("request", row, [{**answer, "request_id": rid}]),
               ("request", {**row, "request_id": failed, "status": 502},
                [{**answer, "request_id": failed, "model": m} for m in POOL.names])])
    log.db.close()
    (folder / "decisions.sqlite").rename(folder / "decisions.2000000000000.sqlite")
    log = DecisionLog(folder, keep_requests=True)
    log.write([("answers", None, [{**answer, "request_id": rid, "model": m, "role": "explore"}
                                  for m in POOL.names[1:]]),
               ("request", {**row, "ts": 1.95e9, "cost_usd": 9.0}, [])])
    log.db.close()
    return f"log:{rid}"


def test_streamed_equals_in_memory_on_a_slice(tmp_path):
    write_learn_log(tmp_path / "log", POOL, 1500, explore=0.1, seed=3, max_mb=0.4, now=2.1e9)
    split = explored_across_a_rotation(tmp_path / "log")
    examples, complete, outputs = whole(tmp_path / "log")
    part, complete_s, outputs_s = streamed(tmp_path / "log")
    assert len(list((tmp_path / "log").glob("decisions*.sqlite"))) >= 3
    assert split in {e.id for e in complete} and len(complete) > 100
    # The same requests (order, text, meta: the first row of a repeated id), the same answers.
    assert complete_s == complete and outputs_s == outputs
    assert next(e for e in complete_s if e.id == split).meta["cost_usd"] == pytest.approx(1e-4)
    # The counts of the rest: every logged request with text; only the explored ones' rows were kept.
    assert part.logged == len(examples) and part.rows == 1500 + 3
    assert len(part.requests) < 0.2 * part.rows
    # The same consensus labels.
    by_id = {e.id: e for e in complete}
    a = consensus_of_outputs(outputs, by_id, POOL).frame
    b = consensus_of_outputs(outputs_s, {e.id: e for e in complete_s}, POOL).frame
    assert a.equals(b) and len(a) == 8 * len(complete)


def test_the_window_keeps_the_newest_explored_requests_and_counts_them_all(tmp_path):
    write_learn_log(tmp_path / "log", POOL, 1200, explore=0.1, seed=5, max_mb=0.4, now=2.1e9)
    _, complete, outputs = whole(tmp_path / "log")
    newest = sorted(complete, key=lambda e: (e.meta["ts"], e.id))[-50:]
    part = read_explored(tmp_path / "log", POOL.names, max_explored=50)
    examples, outs = explored_contracts(part, POOL)
    kept = complete_rows(examples, outs, POOL)
    assert part.explored == len(complete) > 50 and len(kept) == len(examples) == 50
    assert {e.id for e in kept} == {e.id for e in newest}
    ids = {e.id for e in kept}
    assert outs == [o for o in outputs if o.example_id in ids]  # their answers, in the log's order
    assert read_explored(tmp_path / "log", POOL.names).explored == part.explored
    assert len(read_explored(tmp_path / "log", POOL.names, max_explored=10**6).requests) >= len(complete)
    with pytest.raises(DataError, match="max_explored 0"):
        read_explored(tmp_path / "log", POOL.names, max_explored=0)


def test_a_log_without_request_text_is_a_clear_error(tmp_path):
    log = DecisionLog(tmp_path)
    log.write([("request", {"ts": 1.0, "request_id": "r", "kind": "served", "status": 200}, [])])
    log.db.close()
    with pytest.raises(DataError, match="holds no request text"):
        explored_contracts(read_explored(tmp_path, POOL.names), POOL)
    with pytest.raises(FileNotFoundError, match="no decision log"):
        read_explored(tmp_path / "nowhere", POOL.names)


def peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_requests_nobody_explored(tmp_path):
    # About 150 explored requests in each; the second log has ~14x more requests nobody explored.
    write_learn_log(tmp_path / "small", POOL, 300, explore=0.5, seed=1, now=2.1e9)
    write_learn_log(tmp_path / "large", POOL, 3000, explore=0.05, seed=1, now=2.1e9)
    small, large = (read_explored(tmp_path / n, POOL.names) for n in ("small", "large"))
    assert large.rows - len(large.requests) > 10 * (small.rows - len(small.requests))
    explored = len(large.requests) / len(small.requests)
    assert 0.6 < explored < 1.6, explored
    streamed = [peak_bytes(lambda n=n: read_explored(tmp_path / n, POOL.names)) for n in ("small", "large")]
    in_memory = [peak_bytes(lambda n=n: read_log(tmp_path / n)) for n in ("small", "large")]
    assert in_memory[1] > 4 * in_memory[0]  # the whole read grows with the log ...
    assert streamed[1] < 1.5 * explored * streamed[0] + 2**20, streamed  # ... the streamed one with the explored


def test_a_file_that_is_not_a_log_is_named(tmp_path):
    (tmp_path / "decisions.sqlite").write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(DataError, match="not a readable decision log file") as e:
        read_explored(tmp_path, POOL.names)
    assert "decisions.sqlite" in str(e.value)
