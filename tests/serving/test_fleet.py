"""A fleet, every part a real process: one PostgreSQL decision log, one Redis, two gateway replicas (`switchcraft
serve --replica gw-a`, `--replica gw-b`) and a third gateway with two workers (`--workers 2 --replica gw-w`), all
started from one config file in front of the replay server (real recorded BFCL v1 answers), with request text
logged and every pool model explored. Known numbers of routed and named requests go to each gateway; then every
reader sees the whole fleet, each request with the replica that served it — the console of each gateway (one
login, its cookie used at all three), `switchcraft traffic report --log URL` and `switchcraft learn --from-log
URL` — and money, limits and console logouts are shared through Redis.

    .venv/bin/python -m pytest -q tests/serving/test_fleet.py
"""

from __future__ import annotations

import json
import re
import signal
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from data.logged import read_log
from data.schema import read_examples
from serving.console.session import COOKIE, SECRET_ENV
from switchcraft.cli import app as cli
from tests.routers import REPO
from tests.serving.helpers import (AUTH, KEY, bearer, log_has, openai_body, replay_pool_file, serve_env, start_serve,
                                   wait_for, wait_ready)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CALLER = "sk-sc-test-fleet-caller-0123456789abcdef"  # every request of the traffic: no limits
METERED = "sk-sc-test-fleet-metered-0123456789abcdef"  # 3 requests a minute, wherever they are sent
# Requests sent to each gateway: routed (model "router") and named (a pool model by name).
TRAFFIC = {"gw-a": (12, 4), "gw-b": (10, 4), "gw-w": (14, 6)}
SENT = {name: routed + named for name, (routed, named) in TRAFFIC.items()}
FAST_TRAIN = ["frozen.epochs=20", "lexical.enabled=false"]


@dataclass
class Fleet:
    urls: dict[str, str]  # gateway → its base URL
    pids: dict[str, set[int]]  # gateway → the pids that may serve (its process; the workers' for gw-w)
    log: str  # the PostgreSQL URL every gateway writes
    pool: Path
    answers: dict[str, list[httpx.Response]] = field(default_factory=dict)  # gateway → its answers


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (Linux's /proc)."""
    out = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if re.search(rf"^PPid:\s+{pid}$", status.read_text(), re.M):
                out.add(int(status.parent.name))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def send(url: str, bodies: list[dict]) -> list[httpx.Response]:
    """Every body at once from 8 threads, each on a connection of its own (so a --workers gateway spreads them)."""
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda b: httpx.post(url + "/v1/chat/completions", json=b, headers=bearer(CALLER),
                                                  timeout=60), bodies))


@pytest.fixture(scope="module")
def fleet(replay, examples, exported, postgres, redis_server, default_pool, tmp_path_factory):
    good, _ = replay
    good.state.reset()
    work = tmp_path_factory.mktemp("fleet")
    log = postgres.create_database("fleet")
    pool = replay_pool_file(default_pool, good.base_url, work / "pool.yaml")
    config = work / "fleet.yaml"  # what every gateway of the fleet is started with
    config.write_text(yaml.safe_dump({
        "router": {"dir": str(exported[0])}, "upstream": {"pool": str(pool)},
        "state": {"path": None, "redis_url": redis_server.url},
        "log": {"url": log, "requests": True, "keep_days": 30},
        "explore": {"rate": 1.0, "usd_per_day": 100.0, "concurrency": 64}}))
    env = {**serve_env(default_pool, {"id": "fleet", "key": CALLER},
                       {"id": "metered", "key": METERED, "limits": {"requests_per_minute": 3}}),
           SECRET_ENV: "one-console-secret-for-the-whole-fleet"}  # a cookie of one gateway is good at every one
    started = {name: start_serve(["--config", str(config), "--replica", name, *extra], work / f"{name}.log", env)
               for name, extra in (("gw-a", []), ("gw-b", []), ("gw-w", ["--workers", "2"]))}
    try:
        for name, (proc, url) in started.items():
            wait_ready(proc, url, work / f"{name}.log")
        pids = {name: {proc.pid} for name, (proc, _) in started.items()}
        out = Fleet({name: url for name, (_, url) in started.items()}, pids, log, pool)
        named = default_pool.names[-1]
        with ThreadPoolExecutor(3) as gateways:  # the three gateways take their traffic at the same time
            bodies = {name: [openai_body(examples[i % len(examples)]) for i in range(routed)] +
                      [openai_body(examples[i % len(examples)], model=named) for i in range(n_named)]
                      for name, (routed, n_named) in TRAFFIC.items()}
            out.answers = dict(zip(bodies, gateways.map(lambda n: send(out.urls[n], bodies[n]), bodies)))
        for name, answers in out.answers.items():
            assert [r.status_code for r in answers] == [200] * len(answers), (name, answers[0].text)
        n = sum(SENT.values())  # exploration asks every pool model the strategy did not call
        wait_for(lambda: log_has(log, n, n * len(default_pool.names)), timeout_s=90)
        pids["gw-w"] = children(started["gw-w"][0].pid)  # its workers serve (each has by now), never the supervisor
        yield out
    finally:
        for proc, _ in started.values():
            proc.terminate()
        for proc, _ in started.values():
            proc.wait(timeout=60)
    for name, (proc, _) in started.items():  # a lone process exits by the SIGTERM it got (uvicorn raises it again
        output = (work / f"{name}.log").read_text()  # once it has shut down), the workers' supervisor with 0
        assert proc.returncode in (0, -signal.SIGTERM) and "Traceback" not in output, output[-3000:]


def served_by(fleet: Fleet) -> dict[str, str]:
    """request id → the gateway it was sent to."""
    return {r.headers["x-request-id"]: name for name, answers in fleet.answers.items() for r in answers}


def replica_of(replica: str, fleet: Fleet) -> str:
    """The gateway a log row's `replica` (name:pid) names, checked against the pids that may serve it."""
    name, _, pid = replica.rpartition(":")
    assert int(pid) in fleet.pids[name], (replica, fleet.pids)
    return name


def console_rows(url: str, cookies: dict) -> list[tuple[str, str]]:
    """(request id, replica) of every row of the console's Requests view, page after page."""
    rows, page = [], 0
    while True:
        r = httpx.get(url + f"/console/requests?range=all&page={page}", cookies=cookies, timeout=30)
        assert r.status_code == 200, r.text
        rows += re.findall(r'<a href="/console/requests/([^"]+)">.*?<td class="l replica">([^<]*)</td>', r.text)
        if 'id="next"' not in r.text:
            return rows
        page += 1


def test_the_log_holds_every_request_of_every_gateway_with_the_replica_that_served_it(fleet, default_pool):
    requests, answers = read_log(fleet.log)
    sent = served_by(fleet)
    assert len(requests) == len(sent)
    assert {r["request_id"]: replica_of(r["replica"], fleet) for r in requests} == sent  # tagged by who served it
    workers = {r["replica"] for r in requests if r["replica"].startswith("gw-w:")}
    assert 1 <= len(workers) <= 2  # each worker of gw-w tags its own rows (name:pid); most often both served
    models: dict[str, list[str]] = {}
    for a in answers:
        models.setdefault(a["request_id"], []).append(a["model"])
    assert models.keys() == sent.keys()  # every pool model answered every request, once (what learn needs)
    assert all(sorted(m) == sorted(default_pool.names) for m in models.values())


def test_the_console_of_every_gateway_lists_and_traces_the_whole_fleet(fleet):
    login = httpx.post(fleet.urls["gw-a"] + "/console/login", data={"key": KEY}, follow_redirects=False)
    assert login.status_code == 303, login.text
    cookies = {COOKIE: login.cookies[COOKIE]}
    sent = served_by(fleet)
    for name, url in fleet.urls.items():  # the cookie of gw-a's login at each gateway: one console secret
        rows = console_rows(url, cookies)
        assert len(rows) == len(sent), name  # no request twice, none missing
        assert {rid: replica_of(replica, fleet) for rid, replica in rows} == sent, name
        assert Counter(replica_of(replica, fleet) for _, replica in rows) == SENT, name
    # a gateway traces a request another one served, naming the process that served it
    other = next(rid for rid, name in sent.items() if name == "gw-w")
    page = httpx.get(fleet.urls["gw-a"] + f"/console/requests/{other}", cookies=cookies, timeout=30)
    assert page.status_code == 200 and replica_of(re.search(r'id="replica">([^<]+)<', page.text).group(1),
                                                  fleet) == "gw-w"


def test_the_traffic_report_counts_every_gateways_requests(fleet, default_pool, tmp_path):
    r = CliRunner().invoke(cli, ["traffic", "report", "--log", fleet.log, "--out", str(tmp_path), "--no-png",
                                 "--pool", str(fleet.pool)])
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "traffic.json").read_text())
    n = sum(SENT.values())
    assert report["traffic"]["requests"] == report["savings"]["requests"] == n
    answered = Counter(r.json()["model"] for answers in fleet.answers.values() for r in answers)
    assert {m["name"]: m["requests"] for m in report["traffic"]["models"]} == dict(answered)
    calls = {m["model"]: m["calls"] for m in report["traffic"]["spend_per_model"]}  # exploration's calls too
    assert calls == {m: n for m in default_pool.names}


def test_learn_trains_on_the_requests_of_every_gateway(fleet, tmp_path):
    r = CliRunner().invoke(cli, ["learn", "--from-log", fleet.log, "--run-dir", str(tmp_path), "--pool",
                                 str(fleet.pool), "--train-config", str(REPO / "configs" / "train.yaml"),
                                 "--budget", "1000", *FAST_TRAIN])
    assert r.exit_code in (0, 3), r.output  # 3: trained, and the verdict keeps the router in service
    learned = json.loads((tmp_path / "learn.json").read_text())
    n = sum(SENT.values())
    assert learned["complete"] == n and learned["train"] + learned["holdout"] == n
    assert json.loads((tmp_path / "router_onnx" / "router.json").read_text())["rollout"]["verdict"] in ("keep",
                                                                                                    "roll_out")
    replica = {r["request_id"]: replica_of(r["replica"], fleet) for r in read_log(fleet.log)[0]}
    learned_from = Counter(replica[e.id.removeprefix("log:")] for e in read_examples(tmp_path / "examples.parquet"))
    assert learned_from == SENT


def test_one_gateway_reads_the_spend_of_every_gateway_request_by_request(fleet):
    spend = httpx.get(fleet.urls["gw-b"] + "/v1/admin/spend?key=fleet", headers=AUTH, timeout=30).json()
    charged: dict[str, float] = {}
    for row in spend["rows"]:
        charged[row["request_id"]] = charged.get(row["request_id"], 0.0) + row["usd"]
    answers = [r for rs in fleet.answers.values() for r in rs]
    assert charged.keys() == {r.headers["x-request-id"] for r in answers}
    for r in answers:
        assert charged[r.headers["x-request-id"]] == pytest.approx(float(r.headers["x-switchcraft-cost-usd"]))
    assert sum(t["usd"] for t in spend["totals"]) == pytest.approx(sum(charged.values()))


def test_a_limit_holds_across_the_gateways(fleet, examples):
    """3 requests a minute for the metered key, one at each gateway: the fourth is refused. (POST /v1/route is
    admitted by the key's limits as a chat request is, and leaves the decision log as the other tests read it.)"""
    body = {"messages": openai_body(examples[0])["messages"]}
    for name in ("gw-a", "gw-w", "gw-b"):
        r = httpx.post(fleet.urls[name] + "/v1/route", json=body, headers=bearer(METERED), timeout=60)
        assert r.status_code == 200, (name, r.text)
    refused = httpx.post(fleet.urls["gw-a"] + "/v1/route", json=body, headers=bearer(METERED), timeout=60)
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "rate_limit_error", refused.text
    assert "limited to 3 requests" in refused.json()["error"]["message"]


def test_a_console_logout_at_one_gateway_is_refused_by_every_gateway(fleet):
    login = httpx.post(fleet.urls["gw-w"] + "/console/login", data={"key": KEY}, follow_redirects=False)
    cookies = {COOKIE: login.cookies[COOKIE]}
    assert httpx.get(fleet.urls["gw-a"] + "/console/keys", cookies=cookies).status_code == 200
    assert httpx.post(fleet.urls["gw-b"] + "/console/logout", cookies=cookies).status_code == 303
    for url in fleet.urls.values():
        assert httpx.get(url + "/console/keys", cookies=cookies).headers.get("location") == \
            "/console/login?next=/console/keys"

