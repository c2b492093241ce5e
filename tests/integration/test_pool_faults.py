"""Injected 429s (with Retry-After), 500s, timeouts and dropped connections: the run still
completes with every output exactly once and every call generated once; keys never leak.

    .venv/bin/python -m pytest -q tests/integration/test_pool_faults.py
"""

from __future__ import annotations

import itertools
import json
import logging
import sqlite3
from collections import defaultdict

import pytest

from data.pool_runner import run_pool
from data.replay import Faults
from data.replay.serve import ReplayServer, build_state
from data.schema import read_outputs
from tests.integration.conftest import pool_at, sample_examples

pytestmark = pytest.mark.integration
SECRET = "sk-fault-test-5f1e2d3c4b5a69788796a5b4-SECRET"


@pytest.fixture
def keys(monkeypatch, default_pool):
    for m in default_pool.models:
        monkeypatch.setenv(m.api_key_env, SECRET)


def test_faults_every_output_exactly_once(
    tmp_path, keys, bfcl_examples, pool_recordings, default_pool
):
    faults = Faults(
        rate_429=0.15,
        rate_500=0.1,
        rate_slow=0.05,
        rate_drop=0.05,
        retry_after_s=1,
        retry_after_ms=60,
        slow_s=0.8,
        max_faults_per_call=3,
        seed=7,
    )
    state = build_state(
        None,
        bfcl_examples,
        pool=default_pool,
        recordings=pool_recordings,
        faults=faults,
        api_key=SECRET,
    )
    sample = sample_examples(bfcl_examples, state.recordings, per_category=1, pairs=2)
    with ReplayServer(state) as srv:
        # timeout below slow_s: a slow answer is a client timeout, then a retry
        pool = pool_at(default_pool, srv.base_url, timeout_s=0.4, max_retries=5)
        summary = run_pool(
            pool,
            sample,
            tmp_path / "c.sqlite",
            out=tmp_path / "o.parquet",
            backoff_base_s=0.02,
            progress=False,
        )
    assert summary.complete, {m: s.errors for m, s in summary.models.items() if s.errors}
    outcomes = state.stats()["outcomes"]
    for kind in ("429", "500", "drop", "slow"):
        assert outcomes.get(kind, 0) >= 2, outcomes
    # calls re-sent after a timeout or a dropped connection were answered from the server's cache
    assert outcomes.get("idempotent_replay", 0) >= 2, outcomes
    outputs = read_outputs(tmp_path / "o.parquet")
    n = 8 * len(sample)
    assert len(outputs) == n and len({(o.model, o.example_id) for o in outputs}) == n
    for o in outputs:
        assert json.dumps(o.raw) == json.dumps(
            state.recordings[default_pool.get(o.model).recording][o.example_id].raw
        )
    # Retried calls carried the same Idempotency-Key: each answer was generated (billed) once,
    # even the ones whose connection dropped or that the client timed out on.
    assert set(state.completions.values()) == {1} and sum(state.completions.values()) == n
    assert sum(state.requests.values()) > n  # faults did force retries
    # Retry-After honoured: after every 429 the same call came back no sooner than retry-after-ms.
    by_key = defaultdict(list)
    for e in state.events:
        by_key[e["key"]].append(e)
    gaps = []
    for events in by_key.values():
        events = sorted((e for e in events if e["outcome"] != "slow"), key=lambda e: e["attempt"])
        for a, b in itertools.pairwise(events):
            if a["outcome"] == "429" and b["attempt"] == a["attempt"] + 1:
                gaps.append(b["t"] - a["t"])
    assert gaps and min(gaps) >= 0.06 - 0.005, sorted(gaps)[:3]
    # The store agrees: one done row per (example, model), attempts recorded.
    con = sqlite3.connect(tmp_path / "c.sqlite")
    rows = con.execute(
        "SELECT status, COUNT(*), MAX(attempts) FROM calls GROUP BY status"
    ).fetchall()
    assert rows[0][0] == "done" and rows[0][1] == n and rows[0][2] >= 2 and len(rows) == 1


def test_api_key_never_in_store_outputs_or_logs(
    tmp_path, monkeypatch, caplog, capsys, bfcl_examples, pool_recordings, default_pool
):
    """The server rejects the key and quotes it back (as real providers do); nothing we write keeps it."""
    for m in default_pool.models:
        monkeypatch.setenv(m.api_key_env, SECRET)
    caplog.set_level(logging.DEBUG)
    state = build_state(
        None,
        bfcl_examples,
        pool=default_pool,
        recordings=pool_recordings,
        api_key="sk-the-right-key",
    )
    sample = bfcl_examples[:3]
    with ReplayServer(state) as srv:
        summary = run_pool(
            pool_at(default_pool, srv.base_url),
            sample,
            tmp_path / "c.sqlite",
            out=tmp_path / "o.parquet",
            progress=False,
        )
    assert not summary.complete and sum(m.failed for m in summary.models.values()) == 8 * len(
        sample
    )
    errors = [e for m in summary.models.values() for e in m.errors]
    assert errors and all("HTTP 401" in e and "***" in e for e in errors), errors[:2]
    written = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert SECRET.encode() not in written
    assert SECRET not in caplog.text and SECRET not in "".join(capsys.readouterr())
    assert SECRET not in repr(summary)
    # failed calls are recorded (redacted) and retried by the next run, not treated as done
    con = sqlite3.connect(tmp_path / "c.sqlite")
    assert (
        con.execute(
            "SELECT COUNT(*) FROM calls WHERE status='failed' AND error LIKE '%***%'"
        ).fetchone()[0]
        == 24
    )
