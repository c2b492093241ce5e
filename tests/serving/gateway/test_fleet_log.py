"""A fleet's decision log: two gateways ("replicas") over one PostgreSQL log and one shared state store, each serving
replayed traffic (real recorded BFCL v1 answers); one's console, `switchcraft traffic report` and learn's reader
each see every request of both, with the replica that served it.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_fleet_log.py
"""

from __future__ import annotations

import json
import os
import re

import httpx
import pytest
from typer.testing import CliRunner

from data.logged import log_contracts
from switchcraft.cli import app as cli
from tests.routers import REPO
from tests.serving.gateway.helpers import POOL, pool_env, replay_app
from tests.serving.helpers import AUTH, Loopback, log_has, openai_body, post, wait_for

pytestmark = pytest.mark.integration


def test_two_replicas_share_one_log_that_the_console_report_and_learn_read_whole(replay, client, examples, pg_log,
                                                                               tmp_path, monkeypatch):
    good, _ = replay
    good.state.reset()
    pool_env(monkeypatch)
    shared = {"state": {"path": str(tmp_path / "state")}, "log": {"url": pg_log, "requests": True}}
    apps = {name: replay_app(client, good, replica=name, **shared) for name in ("gw-a", "gw-b")}
    sent: dict[str, list[str]] = {"gw-a": [], "gw-b": []}
    with Loopback(apps["gw-a"]) as a, Loopback(apps["gw-b"]) as b:
        for name, url, some in (("gw-a", a, examples[:3]), ("gw-b", b, examples[3:5])):
            for ex in some:
                r = post(url + "/v1/chat/completions", json=openai_body(ex), timeout=60)
                assert r.status_code == 200, r.text
                sent[name].append(r.headers["x-request-id"])
        requests, answers = wait_for(lambda: log_has(pg_log, 5, 5))
        page = httpx.get(a + "/console/requests?range=all", headers=AUTH, timeout=30)
        other = httpx.get(a + f"/console/requests/{sent['gw-b'][0]}", headers=AUTH, timeout=30)
        views = {v: httpx.get(a + f"/console/{v}?range=all", headers=AUTH, timeout=60) for v in
                 ("savings", "quality", "traffic", "router")}
    pid = os.getpid()
    # learn's reader: every request of both, each tagged by the replica that served it
    by = {r["request_id"]: r["replica"] for r in requests}
    assert by == {rid: f"{name}:{pid}" for name, rids in sent.items() for rid in rids}
    examples_, outputs = log_contracts(requests, answers, POOL)
    assert {e.id for e in examples_} == {f"log:{rid}" for rids in sent.values() for rid in rids} and outputs
    # the console of one replica lists both replicas' requests, each with its replica, and traces the other's
    assert page.status_code == 200, page.text
    rows = re.findall(r'<a href="/console/requests/([^"]+)">.*?<td class="l replica">([^<]*)</td>', page.text)
    assert dict(rows) == by
    assert other.status_code == 200 and f'id="replica">gw-b:{pid}<' in other.text
    for v, r in views.items():
        assert r.status_code == 200 and "Traceback" not in r.text, v
    # the traffic report over the same URL counts both
    out = tmp_path / "report"
    r = CliRunner().invoke(cli, ["traffic", "report", "--log", pg_log, "--out", str(out), "--no-png",
                                 "--pool", str(REPO / "configs" / "pool.yaml")])
    assert r.exit_code == 0, r.output
    n = json.loads((out / "traffic.json").read_text())
    assert n["traffic"]["requests"] == 5 and n["savings"]["requests"] == 5
