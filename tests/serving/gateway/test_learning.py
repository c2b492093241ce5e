"""The gateway's side of learning from traffic: the decision log, exploration after answering, router reload.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_learning.py

A real gateway on loopback in front of the replay server (real recorded BFCL v1 answers and usage).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time

import httpx
import pytest

from serving.app import create_app
from serving.gateway.config import ServingConfig
from data.logged import read_log
from tests.serving.gateway.helpers import POOL, pool_env
from tests.serving.helpers import (AUTH, Loopback, bearer, explorations, log_has, openai_body, post, use_keys,
                                   wait_for)

pytestmark = pytest.mark.integration
CALLER = "sk-sc-test-learning-caller-0123456789"


@pytest.fixture
def pool(replay, monkeypatch):
    good, _ = replay
    good.state.reset()
    pool_env(monkeypatch, {"id": "caller", "key": CALLER})
    return POOL.model_copy(update={"models": [m.model_copy(update={"base_url": good.base_url}) for m in POOL.models]})


def test_every_request_is_logged_and_explored_within_the_operators_budget(pool, client, examples, tmp_path):
    cfg = ServingConfig(state={"path": str(tmp_path / "state")},
                        log={"path": str(tmp_path / "log"), "requests": True},
                        explore={"rate": 1.0, "usd_per_day": 1.0})
    app = create_app(cfg, client=client, pool=pool)
    with Loopback(app) as url:
        answered = [post(url + "/v1/chat/completions", json=openai_body(ex), headers=bearer(CALLER), timeout=60)
                    for ex in examples[:3]]
        assert [r.status_code for r in answered] == [200] * 3
        wait_for(lambda: explorations(url, "explored", 3))
        requests, answers = wait_for(lambda: log_has(tmp_path / "log", 3, 3 * len(POOL.names)))
        spend = httpx.get(url + "/v1/admin/spend", headers=AUTH).json()
        metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert [r["request_id"] for r in requests] == [r.headers["x-request-id"] for r in answered]
    for r, ex, resp in zip(requests, examples, answered):
        assert r["example_id"] == ex.id and r["key_id"] == "caller" and r["router_version"] == client.version
        assert r["answered_by"] == resp.json()["switchcraft"]["answered_by"]
        logged = json.loads(r["request"])
        assert logged["messages"][0]["content"] == ex.messages[0].content and len(logged["tools"]) == len(ex.tools)
        mine = [a for a in answers if a["request_id"] == r["request_id"]]
        assert sorted(a["model"] for a in mine) == sorted(POOL.names)  # the strategy's calls + every other model
        explored = {a["model"] for a in mine if a["role"] == "explore"}
        called = {c["model"] for c in resp.json()["switchcraft"]["calls"]}
        assert explored == set(POOL.names) - called
        assert all(a["outcome"] == "ok" and json.loads(a["calls"]) is not None for a in mine)
    # Exploration is the operator's spend, not the caller's.
    by_key = {t["key"]: t for t in spend["totals"]}
    caller_usd = sum(float(r.headers["x-switchcraft-cost-usd"]) for r in answered)
    assert by_key["caller"]["usd"] == pytest.approx(caller_usd)
    assert set(by_key["__explore__"]["by_kind"]) == {"explore"} and by_key["__explore__"]["usd"] > 0
    assert 'switchcraft_explorations_total{outcome="explored"} 3.0' in metrics
    assert "switchcraft_decision_log_records_total" in metrics


def test_min_answers_is_a_target_never_a_reason_to_explore_more(pool, client, examples, tmp_path):
    # Every model is under its target, and the rate is (almost) zero: nothing is explored, from the first request.
    cfg = ServingConfig(log={"path": str(tmp_path / "log")}, explore={"rate": 1e-9, "min_answers": 200})
    app = create_app(cfg, client=client, pool=pool)
    explorer = app.state.observers[1]
    with Loopback(app) as url:
        for i, ex in enumerate(examples[:4]):
            assert post(url + "/v1/chat/completions", json=openai_body(ex), timeout=60).status_code == 200
            wait_for(lambda i=i: log_has(tmp_path / "log", i + 1, 0))
            wait_for(lambda: not explorer.tasks)
        metrics = httpx.get(url + "/metrics", headers=AUTH).text
    _, answers = read_log(tmp_path / "log")
    assert [a for a in answers if a["role"] == "explore"] == []
    assert f"switchcraft_explore_models_below_target {float(len(POOL.names))}" in metrics
    assert 'switchcraft_explorations_total{outcome="explored"}' not in metrics


RESTRICTED = "sk-sc-test-learning-restricted-0123456789"


@pytest.mark.parametrize("named", [False, True], ids=["routed", "named-model"])
def test_exploration_sends_a_request_only_to_models_its_key_may_use(pool, client, examples, tmp_path,
                                                                   monkeypatch, named):
    allowed = sorted(POOL.names)[:2]
    use_keys(monkeypatch, {"id": "restricted", "key": RESTRICTED, "limits": {"models": allowed}})
    cfg = ServingConfig(log={"path": str(tmp_path / "log")}, explore={"rate": 1.0, "usd_per_day": 100})
    app = create_app(cfg, client=client, pool=pool)
    explorer = app.state.observers[1]
    with Loopback(app) as url:
        for ex in examples[:3]:
            body = {**openai_body(ex), "model": allowed[0]} if named else openai_body(ex)
            r = post(url + "/v1/chat/completions", json=body, headers=bearer(RESTRICTED), timeout=60)
            assert r.status_code == 200, r.text
            assert {c["model"] for c in r.json()["switchcraft"]["calls"]} <= set(allowed)
        wait_for(lambda: not explorer.tasks)
        time.sleep(0.5)  # the last answers' write
    _, answers = read_log(tmp_path / "log")
    explored = {a["model"] for a in answers if a["role"] == "explore"}
    assert explored and explored <= set(allowed)  # the other pool models never saw the conversation


def test_exploration_respects_the_requests_own_allowed_models(pool, client, examples, tmp_path):
    allowed = sorted(POOL.names)[-3:]
    cfg = ServingConfig(log={"path": str(tmp_path / "log")}, explore={"rate": 1.0, "usd_per_day": 100})
    app = create_app(cfg, client=client, pool=pool)
    explorer = app.state.observers[1]
    with Loopback(app) as url:
        body = {**openai_body(examples[0]), "switchcraft": {"allowed_models": allowed}}
        assert post(url + "/v1/chat/completions", json=body, timeout=60).status_code == 200
        wait_for(lambda: not explorer.tasks)
        time.sleep(0.5)
    _, answers = read_log(tmp_path / "log")
    explored = {a["model"] for a in answers if a["role"] == "explore"}
    assert explored and explored <= set(allowed)


def test_explore_models_outside_the_pool_are_refused_at_start(pool, client):
    with pytest.raises(ValueError, match=r"explore.models names \['gpt-5'\], not in the pool"):
        create_app(ServingConfig(explore={"rate": 0.1, "models": ["gpt-5"]}), client=client, pool=pool)


def test_exploration_stops_at_its_budget(pool, client, examples, tmp_path):
    cfg = ServingConfig(explore={"rate": 1.0, "usd_per_day": 1e-9})
    app = create_app(cfg, client=client, pool=pool)
    with Loopback(app) as url:
        assert post(url + "/v1/chat/completions", json=openai_body(examples[0]), timeout=60).status_code == 200
        wait_for(lambda: explorations(url, "explored", 1))  # the first spends the day (one reservation over)
        assert post(url + "/v1/chat/completions", json=openai_body(examples[1]), timeout=60).status_code == 200
        wait_for(lambda: explorations(url, "skipped_budget", 1))


def test_reload_swaps_the_router_without_dropping_requests(pool, client, examples, exported, tmp_path):
    app = create_app(ServingConfig(), client=client, pool=pool)
    with Loopback(app) as url:
        async def traffic_during_reload():
            async with httpx.AsyncClient(timeout=60, headers=AUTH) as http:
                sends = [http.post(url + "/v1/route", json={"messages": openai_body(examples[i % 6])["messages"]})
                         for i in range(12)]
                reload = http.post(url + "/v1/admin/reload", json={"dir": str(exported[0])})
                return await asyncio.gather(reload, *sends)
        reloaded, *routed = asyncio.run(traffic_during_reload())
        assert reloaded.status_code == 200, reloaded.text
        assert reloaded.json()["router_version"] == reloaded.json()["previous_version"] == client.version
        assert [r.status_code for r in routed] == [200] * 12
        assert httpx.post(url + "/v1/admin/reload", json={}, headers=bearer(CALLER)).status_code == 403
        bad = httpx.post(url + "/v1/admin/reload", json={"dir": str(tmp_path / "nowhere")}, headers=AUTH)
        assert bad.status_code == 422 and "no router.json" in bad.json()["error"]["message"]
        # A directory whose router.json is malformed, or whose ONNX file is truncated: refused, the old one serves.
        nulled, truncated = tmp_path / "nulled", tmp_path / "truncated"
        shutil.copytree(exported[0], nulled)
        shutil.copytree(exported[0], truncated)
        spec = json.loads((nulled / "router.json").read_text())
        (nulled / "router.json").write_text(json.dumps({**spec, "models": None}))
        for onnx in truncated.glob("*.onnx"):
            onnx.write_bytes(onnx.read_bytes()[:1000])
        for broken in (nulled, truncated):
            r = httpx.post(url + "/v1/admin/reload", json={"dir": str(broken)}, headers=AUTH)
            assert r.status_code == 422, r.text
            assert r.json()["error"]["message"].startswith("router not reloaded: ")
        assert post(url + "/v1/route", json={"messages": openai_body(examples[0])["messages"]}).status_code == 200
        metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert 'switchcraft_router_reloads_total{outcome="ok"} 1.0' in metrics
    assert 'switchcraft_router_reloads_total{outcome="failed"} 3.0' in metrics


def test_request_ids_are_the_gateways_even_when_callers_reuse_theirs(pool, client, examples, tmp_path,
                                                                     caplog):
    from data.logged import log_contracts

    cfg = ServingConfig(log={"path": str(tmp_path / "log"), "requests": True})
    with caplog.at_level("INFO", logger="switchcraft.gateway"), Loopback(create_app(cfg, client=client, pool=pool)) as url:
        answered = [post(url + "/v1/chat/completions", json=openai_body(ex), headers={"x-request-id": "job-7"},
                         timeout=60) for ex in examples[:2]]
        wait_for(lambda: log_has(tmp_path / "log", 2, 2))
    assert [r.status_code for r in answered] == [200, 200]
    ids = [r.headers["x-request-id"] for r in answered]
    assert len(set(ids)) == 2 and "job-7" not in ids
    requests, answers = read_log(tmp_path / "log")
    assert sorted(r["request_id"] for r in requests) == sorted(ids)
    # `switchcraft learn` sees two requests, each with its own answers (one caller id would have merged them).
    examples_, outputs = log_contracts(requests, answers, pool)
    assert len(examples_) == 2 and {o.example_id for o in outputs} == {f"log:{i}" for i in ids}
    joined = [json.loads(r.getMessage()) for r in caplog.records if '"client_request_id"' in r.getMessage()]
    assert sorted(j["request_id"] for j in joined) == sorted(ids) and {j["client_request_id"] for j in joined} == {"job-7"}


def test_reload_refuses_a_router_learn_said_to_keep_out_of_service_unless_forced(pool, client, exported, tmp_path):
    kept = tmp_path / "kept"
    shutil.copytree(exported[0], kept)
    spec = json.loads((kept / "router.json").read_text())
    spec["rollout"] = {"verdict": "keep", "why": "less accurate than the router in service (consensus labels): "
                                                 "Δ -0.100 [-0.250, -0.010]"}
    (kept / "router.json").write_text(json.dumps(spec))
    app = create_app(ServingConfig(), client=client, pool=pool)
    with Loopback(app) as url:
        r = httpx.post(url + "/v1/admin/reload", json={"dir": str(kept)}, headers=AUTH)
        assert r.status_code == 409, r.text
        err = r.json()["error"]
        assert err["type"] == "rollout_refused" and "less accurate than the router in service" in err["message"]
        assert '"force": true' in err["message"]
        assert httpx.post(url + "/v1/admin/reload", json={"dir": str(kept), "force": "yes"},
                          headers=AUTH).status_code == 400
        forced = httpx.post(url + "/v1/admin/reload", json={"dir": str(kept), "force": True}, headers=AUTH)
        assert forced.status_code == 200 and forced.json()["dir"] == str(kept)
        metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert 'switchcraft_router_reloads_total{outcome="refused"} 1.0' in metrics
