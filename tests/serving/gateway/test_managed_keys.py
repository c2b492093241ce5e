"""API keys in the state store, shared by gateway replicas: the configured keys seed it once, a key added or
revoked there reaches every app on the store within auth.refresh_s, and a store outage keeps the last keys.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_managed_keys.py

Real parts: gateway apps on loopback over one SQLite file or one real redis-server (evaluation/harness.py),
the keys written through a third handle on the store, as `switchcraft keys` writes them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import httpx
import pytest

from evaluation.harness import LocalRedis
from serving.app import create_app
from serving.core.auth import AuthSettings, KeyStore
from serving.core.errors import GatewayError
from serving.core.managed_keys import add_key, list_keys, revoke_key, set_limits, store_keys
from serving.core.state import StateSettings, open_state
from serving.gateway.config import ServingConfig
from tests.serving.gateway.helpers import POOL, pool_env
from tests.serving.helpers import KEY, Loopback, bearer

pytestmark = pytest.mark.integration
REFRESH_S = 0.3
ROUTE = {"messages": [{"role": "user", "content": "weather in Paris?"}]}
SEED = "sk-sc-test-seed-0123456789abcdefghij"


@pytest.fixture(params=["sqlite", "redis"])
def state(request, tmp_path, redis_server) -> dict:
    """`state:` of one store, SQLite file or Redis (its own prefix), that every app and handle of a test shares."""
    if request.param == "sqlite":
        return {"path": str(tmp_path / "state")}
    return {"redis_url": redis_server.url, "redis_prefix": f"keys{time.time_ns()}:"}


def in_store(state: dict, work):
    """`work(store)` on a handle of its own (as `switchcraft keys` opens one), closed after."""
    async def go():
        store = open_state(StateSettings(**state))
        try:
            return await work(store)
        finally:
            await store.aclose()
    return asyncio.run(go())


def route(url: str, key: str) -> httpx.Response:
    return httpx.post(url + "/v1/route", json=ROUTE, headers=bearer(key), timeout=30)


def gateway(client, state: dict):
    return create_app(ServingConfig(state=state, auth={"refresh_s": REFRESH_S}), client=client, pool=POOL)


def test_seeds_go_in_once_and_a_seed_changed_or_revoked_in_the_store_stays_so(state, caplog):
    def seeds(rpm: int, *more: dict) -> dict:
        return {"K": json.dumps([{"id": "seed", "key": SEED, "limits": {"requests_per_minute": rpm}}, *more])}

    async def started(store, environ) -> KeyStore:  # a gateway's start over the store
        keys = store_keys(AuthSettings(keys_env="K"), POOL.names, store, environ=environ)
        await keys.start()
        return keys

    async def first(store):
        keys = await started(store, seeds(5))
        assert keys.authenticate(f"Bearer {SEED}").limits.requests_per_minute == 5
        assert [(k.stored.id, k.stored.source) for k in await list_keys(store)] == [("seed", "seed")]
        await set_limits(store, "seed", {"requests_per_minute": 7}, POOL.names, now=time.time())
    in_store(state, first)

    async def restarted(store):  # the file now says 9; the store's 7 stays, and the difference is logged
        other = {"id": "other", "key": "sk-sc-test-other-0123456789abcdefghi"}
        keys = await started(store, seeds(9, other))
        assert keys.authenticate(f"Bearer {SEED}").limits.requests_per_minute == 7
        assert [(k.stored.id, k.stored.source) for k in await list_keys(store)] == [("other", "seed"), ("seed", "seed")]
        await revoke_key(store, "seed", now=time.time())
    with caplog.at_level(logging.WARNING, logger="switchcraft.gateway"):
        in_store(state, restarted)
    assert "differs from the state store's, which is used" in caplog.text

    async def after_revoke(store):
        keys = await started(store, seeds(5))
        with pytest.raises(GatewayError) as refused:
            keys.authenticate(f"Bearer {SEED}")
        assert refused.value.status == 401 and refused.value.reason == "revoked"
        assert [i.key_id for i in keys.identities()] == ["other"]
    in_store(state, after_revoke)


def test_a_key_added_then_revoked_in_the_store_reaches_a_second_app_within_refresh_s(client, monkeypatch, state):
    pool_env(monkeypatch)  # the test key (admin, a seed) in the environment, as an operator gives it
    with Loopback(gateway(client, state)) as a, Loopback(gateway(client, state)) as b:
        assert route(a, KEY).status_code == route(b, KEY).status_code == 200  # the seed, put in by both, once
        key = in_store(state, lambda s: add_key(s, "late", limits={"requests_per_minute": 100}, now=time.time()))
        time.sleep(REFRESH_S + 0.1)
        assert route(a, key).status_code == route(b, key).status_code == 200
        in_store(state, lambda s: revoke_key(s, "late", now=time.time()))
        time.sleep(REFRESH_S + 0.1)
        refused = route(b, key)
        assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
        assert key not in refused.text and route(a, key).status_code == 401
        assert route(b, KEY).status_code == 200  # other keys are untouched
        metrics = httpx.get(b + "/metrics", headers=bearer(KEY)).text
        assert 'switchcraft_auth_rejections_total{key="",reason="revoked"} 1.0' in metrics
    kept = in_store(state, list_keys)
    assert [(k.stored.id, k.stored.source, k.stored.revoked) for k in kept] == [("late", "managed", True),
                                                                                 ("test", "seed", False)]


def test_a_store_outage_keeps_the_last_keys_and_a_revoked_key_stays_refused(client, monkeypatch, tmp_path, caplog):
    pool_env(monkeypatch)
    server = LocalRedis(tmp_path / "redis")
    state = {"redis_url": server.start(), "timeout_s": 0.5}
    try:
        with caplog.at_level(logging.INFO, logger="switchcraft.gateway"), Loopback(gateway(client, state)) as url:
            late = in_store(state, lambda s: add_key(s, "late", now=time.time()))
            gone = in_store(state, lambda s: add_key(s, "gone", now=time.time()))
            in_store(state, lambda s: revoke_key(s, "gone", now=time.time()))
            time.sleep(REFRESH_S + 0.1)
            assert route(url, late).status_code == 200 and route(url, gone).status_code == 401
            server.kill()
            for _ in range(3):  # keys without limits keep working on the keys loaded last; the revoked one never
                time.sleep(REFRESH_S + 0.1)
                assert route(url, late).status_code == 200 and route(url, KEY).status_code == 200
                refused = route(url, gone)
                assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
            assert route(url, "sk-sc-never-issued-0123456789abcdef").status_code == 401
        lines = [r.getMessage() for r in caplog.records if "cannot be read from the state store" in r.getMessage()]
        assert len(lines) == 1 and "serving with the keys loaded last" in lines[0]  # said once
    finally:
        server.stop()
