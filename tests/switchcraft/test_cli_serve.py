"""`switchcraft serve`: --host/--port, a port in use refused before anything says the gateway is up, and --workers 2
as real processes over the replay server (real recorded BFCL v1 answers): both answer, their log rows and /metrics
add up, a reload reaches both; in-memory state with several workers is refused (the tiny router is over the 2024
pool).

    .venv/bin/python -m pytest tests/switchcraft/test_cli_serve.py -q
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from typer.testing import CliRunner

import serving.app
from data.logged import log_files, read_log
from data.replay.serve import ReplayServer, build_state
from switchcraft.cli import app
from tests.routers import bfcl_sample
from tests.serving.helpers import (KEY, SECRET, bearer, openai_body, replay_pool_file, serve_env, start_serve,
                                   wait_ready)

pytestmark = pytest.mark.integration


def _args(exported, tmp_path) -> list[str]:
    return [f"router.dir={exported[0]}", "upstream.pool=configs/pool.yaml", "auth.mode=none", "state.path=null", "state.redis_url=null",
            f"log.path={tmp_path / 'log'}", "explore.rate=0"]


def test_a_port_in_use_fails_before_the_banner(exported, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = CliRunner().invoke(app, ["serve", "--port", str(port), *_args(exported, tmp_path)])
    assert r.exit_code == 1, r.output
    assert f"cannot listen on 127.0.0.1:{port}" in r.output
    assert "switchcraft gateway on" not in r.output


def test_host_and_port_options_set_where_it_listens(exported, tmp_path, monkeypatch):
    served = {}
    monkeypatch.setattr(serving.app, "run_served",
                        lambda cfg, app_, client, sock: served.update(cfg=cfg, at=sock.getsockname()) or sock.close())
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    r = CliRunner().invoke(app, ["serve", "--host", "127.0.0.1", "--port", str(port), *_args(exported, tmp_path)])
    assert r.exit_code == 0, r.output
    assert served["at"] == ("127.0.0.1", port) and served["cfg"].port == port
    assert f"switchcraft gateway on http://127.0.0.1:{port}" in r.output


def test_export_without_benchmark_data_says_what_to_give_and_takes_examples(tiny_router_dir, bfcl_examples, tmp_path):
    from data.schema import write_examples

    args = ["export", str(tiny_router_dir), "--out", str(tmp_path / "onnx"), "--data-root", str(tmp_path / "none"),
            "--validate", "8"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1
    words = " ".join(r.output.split())
    assert "no requests to validate the export on" in words and "--examples FILE" in words and "--path" not in words
    write_examples(tmp_path / "examples.parquet", bfcl_examples[:40])
    r = CliRunner().invoke(app, [*args, "--examples", str(tmp_path / "examples.parquet")])
    assert r.exit_code == 0, r.output
    assert "validating on 8 requests of" in " ".join(r.output.split()) and (tmp_path / "onnx" / "router.onnx").exists()


def test_several_workers_with_state_in_memory_are_refused(exported, tmp_path):
    r = CliRunner().invoke(app, ["serve", "--workers", "2", *_args(exported, tmp_path)])
    assert r.exit_code == 1, r.output
    words = " ".join(r.output.split())
    assert "workers: 2 workers" in words and "set state.path" in words and "state.redis_url" in words
    assert "switchcraft gateway on" not in r.output


@pytest.fixture(scope="module")
def replay(shared_data, default_pool, pool_recordings):
    """(replay server, examples): every pool model's recorded answers to six BFCL v1 questions."""
    examples = bfcl_sample(shared_data, 6)
    with ReplayServer(build_state(None, examples, pool=default_pool, api_key=SECRET,
                                  recordings=pool_recordings)) as server:
        yield server, examples


def _workers(exported, replay, tmp_path, default_pool) -> tuple[subprocess.Popen, str]:
    """`switchcraft serve --workers 2` in a process of its own: every upstream the replay server, state in SQLite."""
    server, _ = replay
    pool = replay_pool_file(default_pool, server.base_url, tmp_path / "pool.yaml")
    args = ["--workers", "2", f"router.dir={exported[0]}", f"upstream.pool={pool}", "auth.keys_file=null",
            f"state.path={tmp_path / 'state'}", "state.redis_url=null", f"log.path={tmp_path / 'log'}", "explore.rate=0"]
    proc, url = start_serve(args, tmp_path / "gateway.log", serve_env(default_pool))
    wait_ready(proc, url, tmp_path / "gateway.log")
    return proc, url


def _answered_by_both(url: str, examples, log, since: float = 0.0) -> dict[str, list[dict]]:
    """Batches of concurrent requests, each on a connection of its own, until rows of two processes logged since
    `since` are in the log: {replica: its rows}. Every answer is a 200."""
    seen: dict[str, list[dict]] = {}
    for _ in range(20):
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda ex: httpx.post(url + "/v1/chat/completions", json=openai_body(ex),
                                                          headers=bearer(KEY), timeout=60), examples + examples[:2]))
        assert [r.status_code for r in answers] == [200] * len(answers), answers[0].text
        time.sleep(0.5)  # the log's writer runs after the answers
        seen = {}
        for row in read_log(log)[0]:
            if row["ts"] >= since:
                seen.setdefault(row["replica"], []).append(row)
        if len(seen) >= 2:
            return seen
    raise AssertionError(f"one process answered everything: {sorted(seen)}")


def test_two_workers_answer_on_one_port_their_logs_and_metrics_add_up_and_a_reload_reaches_both(
        exported, replay, tmp_path, default_pool):
    _, examples = replay
    proc, url = _workers(exported, replay, tmp_path, default_pool)
    try:
        log = tmp_path / "log"
        by = _answered_by_both(url, examples, log)
        pids = {replica.rpartition(":")[2] for replica in by}
        assert len(pids) == 2 and str(proc.pid) not in pids  # the workers answered, not the supervisor
        assert sorted(p.name for p in log_files(log)) == ["decisions-0.sqlite", "decisions-1.sqlite"]  # one each
        served = len(read_log(log)[0])
        metrics = httpx.get(url + "/metrics", headers=bearer(KEY), timeout=10).text  # one worker answers: the sum
        assert f'switchcraft_requests_total{{endpoint="chat",status="200"}} {float(served)}' in metrics
        assert f'switchcraft_gateway_overhead_seconds_count{{endpoint="chat"}} {float(served)}' in metrics

        second = tmp_path / "router_v2"  # the same router, another version (router.json differs)
        shutil.copytree(exported[0], second)
        info = json.loads((second / "router.json").read_text())
        (second / "router.json").write_text(json.dumps({**info, "note": "reloaded"}))
        r = httpx.post(url + "/v1/admin/reload", json={"dir": str(second)}, headers=bearer(KEY), timeout=60)
        assert r.status_code == 200, r.text
        version, reloaded = r.json()["router_version"], time.time()
        assert version != r.json()["previous_version"]
        time.sleep(3.0)  # each worker looks for another's reload once a second
        after = _answered_by_both(url, examples, log, since=reloaded + 3.0)
        assert {row["router_version"] for rows in after.values() for row in rows} == {version}
        assert {replica.rpartition(":")[2] for replica in after} == pids
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert proc.returncode == 0, (tmp_path / "gateway.log").read_text()[-3000:]
