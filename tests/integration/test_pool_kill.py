"""SIGKILL the runner process mid-run, twice, and restart it: nothing lost, nothing duplicated,
no stored call asked again, every answer generated once (counted at the server).

    .venv/bin/python -m pytest -q tests/integration/test_pool_kill.py
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import yaml

from data.replay import Faults
from data.replay.serve import ReplayServer, build_state
from data.schema import read_outputs, write_examples
from tests.integration.conftest import REPO, sample_examples

pytestmark = pytest.mark.integration
SECRET = "sk-kill-test-0f9e8d7c6b5a"


def _done(store) -> set[tuple[str, str]]:
    if not store.exists():
        return set()
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5)
    try:
        return set(con.execute("SELECT model, example_id FROM calls WHERE status='done'"))
    except sqlite3.OperationalError:  # table not created yet
        return set()
    finally:
        con.close()


def test_sigkill_and_restart(tmp_path, bfcl_examples, pool_recordings, default_pool):
    # a little latency per answer so the run lasts long enough to be killed in the middle
    state = build_state(
        None,
        bfcl_examples,
        pool=default_pool,
        recordings=pool_recordings,
        api_key=SECRET,
        faults=Faults(latency_s=0.03, rate_429=0.05, retry_after_s=1, retry_after_ms=20, seed=3),
    )
    sample = sample_examples(bfcl_examples, state.recordings)
    n = 8 * len(sample)
    write_examples(tmp_path / "examples.parquet", sample)
    pool_yaml = tmp_path / "pool.yaml"
    pool_yaml.write_text(
        yaml.safe_dump(
            {
                "models": [
                    {**m.model_dump(exclude_none=True), "requests_per_minute": None}
                    for m in default_pool.models
                ]
            }
        )
    )
    store, out = tmp_path / "calls.sqlite", tmp_path / "outputs.parquet"
    env = {**os.environ, **{m.api_key_env: SECRET for m in default_pool.models}}
    with ReplayServer(state) as srv:
        cmd = [
            sys.executable,
            "-m",
            "switchcraft.cli",
            "pool",
            "run",
            "--pool",
            str(pool_yaml),
            "--examples",
            str(tmp_path / "examples.parquet"),
            "--store",
            str(store),
            "--out",
            str(out),
            "--base-url",
            srv.base_url,
            "--no-progress",
            "--backoff-base-s",
            "0.02",
        ]
        done_at_kill = []
        for fraction in (0.25, 0.6):
            proc = subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            deadline = time.monotonic() + 60
            while len(_done(store)) < fraction * n:
                assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
                assert time.monotonic() < deadline, "runner made no progress"
                time.sleep(0.02)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            assert proc.returncode == -signal.SIGKILL
            time.sleep(0.2)  # let the server finish what the dead client had in flight
            done_at_kill.append((_done(store), state.counts()[0]))
            assert len(done_at_kill[-1][0]) < n, "the run finished before the kill"
        final = subprocess.run(
            cmd, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=120
        )
        assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    assert SECRET not in final.stdout + final.stderr

    outputs = read_outputs(out)
    assert len(outputs) == n and len({(o.model, o.example_id) for o in outputs}) == n
    for o in outputs:
        assert json.dumps(o.raw) == json.dumps(state.recordings[o.model][o.example_id].raw)
        assert o.usage == state.recordings[o.model][o.example_id].usage
    # every answer generated exactly once, across three processes and two kills
    assert len(state.completions) == n and set(state.completions.values()) == {1}
    # a call stored before a kill was never requested again afterwards
    for done, requests_then in done_at_kill:
        assert 0 < len(done) < n
        asked_again = [k for k in done if state.requests[k] != requests_then[k]]
        assert asked_again == []
    # calls in flight at a kill were re-sent with the same key and answered from the server's cache
    assert state.stats()["outcomes"].get("idempotent_replay", 0) >= 1
