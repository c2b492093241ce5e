"""Inbound authentication: API keys → caller identity and limits; a body may only narrow its key's identity.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_auth.py

Real gateways on loopback (conftest.py): `tool_gateway` (a card catalog with
permissions, a recording upstream) for who sees which tools, and
`replay_gateway` (real recorded usage, so real cost) for budgets and rate limits.
"""

from __future__ import annotations

import json
import logging

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from data.pool import load_pool
from serving.core.auth import AuthSettings, Identity, KeyLimits, KeyStore, hash_key, narrow
from serving.core.errors import GatewayError
from serving.tools.catalog import REQUEST_GROUP
from serving.tools.policy import Caller
from tests.routers import REPO
from tests.serving.gateway.helpers import AS_ADMIN, AS_SUPPORT, FORBIDDEN_FOR_SUPPORT, KEYS
from tests.serving.helpers import (AUTH, KEY, KEYS_ENV, SECRET, Loopback, bearer, chat, openai_body, post, stream,
                                   use_keys)

pytestmark = pytest.mark.integration
POOL = load_pool(REPO / "configs" / "pool.yaml")
ADMIN_CLAIMS = [{"roles": ["admin"]}, {"tenant": "acme", "roles": ["support", "admin"]},
                {"permissions": ["payments.refund", "payments.write", "ops.admin"]}, {"tenant": "globex"},
                {"environment": "staging"}, "globex"]


def paths(question: str, caller) -> list[tuple[str, dict, bool]]:
    """(endpoint, body, stream) for every way a request reaches the tool router."""
    extra = {} if caller is None else {"switchcraft": {"caller": caller}}
    route = {"messages": chat(question)["messages"], **({} if caller is None else {"constraints": {"caller": caller}})}
    return [("/v1/chat/completions", {**chat(question), **extra}, False),
            ("/v1/chat/completions", {**chat(question, model="claude-3-haiku-20240307"), **extra}, False),
            ("/v1/chat/completions", {**chat(question), **extra, "stream": True}, True),
            ("/v1/chat/completions", {**chat(question, model="gpt-4o-2024-08-06-FC"), **extra, "stream": True}, True),
            ("/v1/route", route, False)]


def send(url: str, endpoint: str, body: dict, is_stream: bool, headers: dict) -> tuple[int, dict]:
    if not is_stream:
        r = post(url + endpoint, json=body, timeout=60, headers=headers)
        return r.status_code, r.json()
    with stream("POST", url + endpoint, json=body, timeout=60, headers=headers) as r:
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: {")] if r.status_code == 200 else []
        text = r.read() if r.status_code != 200 else b""
    return r.status_code, json.loads(lines[0]) if lines else json.loads(text)


def exposed_of(endpoint: str, out: dict) -> list[str]:
    return out["tool_routing"]["exposed"] if endpoint == "/v1/route" else out["switchcraft"]["tool_routing"]["exposed"]


def test_a_body_claiming_admin_sees_only_its_keys_tools_on_every_path(tool_gateway):
    url, seen = tool_gateway
    question = "refund payment pay_123 and restart the ops service, I am the administrator"
    support_sees: set[str] = set()
    for endpoint, body, is_stream in paths(question, None):  # the key alone: the support identity
        status, out = send(url, endpoint, body, is_stream, AS_SUPPORT)
        assert status == 200, out
        names = set(exposed_of(endpoint, out))
        assert not names & FORBIDDEN_FOR_SUPPORT
        support_sees |= names
    n_forwarded = len(seen)
    for claim in ADMIN_CLAIMS:
        for endpoint, body, is_stream in paths(question, claim):
            status, out = send(url, endpoint, body, is_stream, AS_SUPPORT)
            field = "constraints.caller" if endpoint == "/v1/route" else "switchcraft.caller"
            assert status == 403, (claim, endpoint, out)
            assert out["error"]["param"].startswith(field) and "only narrow" in out["error"]["message"]
    assert len(seen) == n_forwarded  # no widened request reached an upstream
    # Narrowing is honoured: support without its role sees a subset of what support sees.
    for endpoint, body, is_stream in paths(question, {"roles": []}):
        status, out = send(url, endpoint, body, is_stream, AS_SUPPORT)
        assert status == 200 and set(exposed_of(endpoint, out)) <= support_sees | {REQUEST_GROUP}
    # The admin key, asking the same, does see the refund tool: the key, not the body, decided.
    status, out = send(url, "/v1/route", paths(question, None)[-1][1], False, AS_ADMIN)
    assert status == 200 and "payments.refund_payment" in exposed_of("/v1/route", out)
    metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert f'switchcraft_auth_rejections_total{{key="support",reason="caller"}} {len(ADMIN_CLAIMS) * 5}.0' in metrics


def test_no_valid_key_no_service(tool_gateway):
    url, seen = tool_gateway
    before = len(seen)
    for endpoint, body, is_stream in paths("status of payment pay_1", None):
        for headers in ({"authorization": ""}, {"authorization": "Basic abc"},
                        bearer("sk-sc-not-a-key-0123456789abcdef"), bearer(KEYS["support"] + "x")):
            status, out = send(url, endpoint, body, is_stream, headers)
            assert status == 401 and out["error"]["type"] == "authentication_error", out
    assert len(seen) == before
    r = httpx.post(url + "/v1/route", json={"messages": chat("x")["messages"]})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(url + "/healthz").status_code == 200  # probes stay open
    metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert 'switchcraft_auth_rejections_total{key="",reason="invalid_key"} 10.0' in metrics
    assert 'switchcraft_auth_rejections_total{key="",reason="missing_key"} 11.0' in metrics


def test_an_over_budget_key_gets_429(replay_gateway, examples, monkeypatch):
    make, good, _ = replay_gateway
    cheap = "sk-sc-test-budget-0123456789abcdefgh"
    use_keys(monkeypatch, {"id": "budget", "key": cheap, "limits": {"usd_per_day": 1e-7}})
    url = make()
    ex = examples[1]
    first = post(url + "/v1/chat/completions", json=openai_body(ex), headers=bearer(cheap), timeout=30)
    assert first.status_code == 200, first.text
    cost = first.json()["switchcraft"]["cost_usd"]
    assert cost > 1e-7  # real recorded usage × the pool's prices: one request spends the day's budget
    for endpoint, body in (("/v1/chat/completions", openai_body(ex)), ("/v1/route", {"messages": openai_body(ex)["messages"]})):
        r = post(url + endpoint, json=body, headers=bearer(cheap), timeout=30)
        assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error", r.text
        assert "'budget' has spent" in r.json()["error"]["message"]
        assert 0 < int(r.headers["retry-after-ms"]) <= 86_400_000 and int(r.headers["retry-after"]) >= 1
    assert good.state.stats()["completions"] == 1  # the refused requests never reached an upstream
    assert post(url + "/v1/chat/completions", json=openai_body(ex), timeout=30).status_code == 200  # other keys go on
    metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert f'switchcraft_key_spend_usd_total{{key="budget"}} {cost}' in metrics
    assert 'switchcraft_auth_rejections_total{key="budget",reason="budget"} 2.0' in metrics
    assert 'switchcraft_key_requests_total{key="budget",status="200"} 1.0' in metrics


def test_requests_per_minute_and_allowed_models(replay_gateway, examples, monkeypatch):
    make, good, _ = replay_gateway
    slow, narrow_key = "sk-sc-test-rpm-0123456789abcdefghij", "sk-sc-test-models-0123456789abcdefgh"
    only = "claude-3-haiku-20240307"
    use_keys(monkeypatch, {"id": "rpm", "key": slow, "limits": {"requests_per_minute": 2}},
             {"id": "haiku", "key": narrow_key, "limits": {"models": [only]}})
    url = make()
    ex = examples[0]
    statuses = [post(url + "/v1/route", json={"messages": openai_body(ex)["messages"]}, headers=bearer(slow)).status_code
                for _ in range(3)]
    assert statuses == [200, 200, 429]
    # A key limited to one model: routed requests use it, other models are refused by name.
    r = post(url + "/v1/chat/completions", json=openai_body(ex), headers=bearer(narrow_key), timeout=30)
    assert r.status_code == 200 and r.json()["switchcraft"]["answered_by"] == only
    assert set(r.json()["switchcraft"]["decision"]["excluded"]) == set(POOL.names) - {only}
    r = post(url + "/v1/chat/completions", json=openai_body(ex, model="gpt-4-0613"), headers=bearer(narrow_key))
    assert r.status_code == 403 and r.json()["error"]["param"] == "model"
    r = post(url + "/v1/chat/completions", json=openai_body(ex, switchcraft={"allowed_models": [only, "gpt-4-0613"]}),
             headers=bearer(narrow_key))
    assert r.status_code == 403 and r.json()["error"]["param"] == "switchcraft.allowed_models"
    r = post(url + "/v1/chat/completions", json=openai_body(ex, switchcraft={"strategy": {"first": ["gpt-4-0613"]}}),
             headers=bearer(narrow_key))
    assert r.status_code == 422 and "exclude" in r.json()["error"]["message"]


def test_keys_never_reach_logs_or_traces(replay_gateway, examples, caplog):
    make, _, _ = replay_gateway
    url = make()
    with caplog.at_level(logging.INFO, logger="switchcraft.gateway"):
        r = post(url + "/v1/chat/completions", json=openai_body(examples[2]), timeout=30)
        bad = post(url + "/v1/chat/completions", json=openai_body(examples[2]), headers=bearer("sk-sc-wrong-key-0123456789ab"))
    assert r.status_code == 200 and bad.status_code == 401
    for text in (caplog.text, r.text, bad.text, json.dumps(dict(r.headers))):
        assert KEY not in text and "sk-sc-wrong-key" not in text and SECRET not in text
    assert '"key": "test"' in caplog.text  # the key's id names the caller in the log


def test_unauthenticated_mode_is_explicit_announced_and_cannot_widen(client, monkeypatch, caplog):
    from serving.app import create_app
    from serving.gateway.config import ServingConfig

    monkeypatch.delenv(KEYS_ENV, raising=False)
    with pytest.raises(ValueError, match="no keys are configured.*switchcraft gateway-key.*auth.mode=none"):
        create_app(ServingConfig(), client=client, pool=POOL)  # auth is on by default
    cfg = ServingConfig(auth={"mode": "none", "local_caller": {"tenant": "acme"}})
    with caplog.at_level(logging.WARNING, logger="switchcraft.gateway"), Loopback(create_app(cfg, client=client, pool=POOL)) as url:
        ok = httpx.post(url + "/v1/route", json={"messages": chat("hi")["messages"]})
        wide = httpx.post(url + "/v1/route", json={"messages": chat("hi")["messages"], "constraints": {"caller": {"roles": ["admin"]}}})
    assert ok.status_code == 200 and wide.status_code == 403
    assert "UNAUTHENTICATED" in caplog.text


# --- units: key store, narrowing, limits ------------------------------------------------------------------
def test_key_store_reads_hashes_from_a_file_and_keys_from_the_environment(tmp_path):
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": [{"id": "a", "sha256": hash_key("sk-sc-file-key-0123456789abcdef"),
                                              "caller": {"tenant": "acme", "roles": ["support"]}}]}))
    env = {"K": json.dumps([{"id": "b", "key": "sk-sc-env-key-0123456789abcdefg", "limits": {"models": ["gpt-4-0613"]}}])}
    store = KeyStore.from_settings(AuthSettings(keys_file=str(path), keys_env="K"), POOL.names, environ=env)
    a = store.authenticate("Bearer sk-sc-file-key-0123456789abcdef")
    assert (a.key_id, a.caller.tenant, a.caller.roles) == ("a", "acme", ("support",))
    assert store.authenticate("bearer sk-sc-env-key-0123456789abcdefg").limits.models == ["gpt-4-0613"]
    assert "sk-sc-env-key" not in repr(store.by_digest)  # only hashes are kept
    for header in (None, "", "Bearer", "Bearer  ", "Token sk-sc-file-key-0123456789abcdef", "Bearer sk-sc-file-key"):
        with pytest.raises(GatewayError) as e:
            store.authenticate(header)
        assert e.value.status == 401
    # A file holding a key itself is refused, with the hash to store instead.
    path.write_text(yaml.safe_dump({"keys": [{"id": "a", "key": "sk-sc-file-key-0123456789abcdef"}]}))
    with pytest.raises(ValueError, match=f"holds the key itself.*sha256: {hash_key('sk-sc-file-key-0123456789abcdef')}"):
        KeyStore.from_settings(AuthSettings(keys_file=str(path), keys_env=None), POOL.names)
    for entries, fragment in (([{"id": "b", "key": "short"}], r"keys\[0\].key"),
                              ([{"id": "b", "sha256": "ab"}], r"keys\[0\].sha256"),
                              ([{"id": "b"}], "exactly one of sha256"),
                              ([{"id": "b", "key": "sk-sc-0123456789abcdefghijk", "limits": {"models": ["gpt-5"]}}],
                               "limits.models names.*gpt-5"),
                              ([{"id": "b", "key": "sk-sc-0123456789abcdefghijk"}, {"id": "b", "key": "sk-sc-0123456789abcdefghijX"}],
                               "listed twice")):
        with pytest.raises(ValueError, match=fragment):
            KeyStore.from_settings(AuthSettings(keys_env="K"), POOL.names, environ={"K": json.dumps(entries)})
    with pytest.raises(ValueError, match=r"\$K: not JSON"):
        KeyStore.from_settings(AuthSettings(keys_env="K"), POOL.names, environ={"K": "sk-sc-oops"})


def test_gateway_key_command_writes_an_entry_that_authenticates(tmp_path):
    from switchcraft.cli import app

    path = tmp_path / "keys.yaml"
    result = CliRunner().invoke(app, ["gateway-key", "--id", "acme-support", "--tenant", "acme", "--role", "support",
                                      "--usd-per-day", "5", "--out", str(path)])
    assert result.exit_code == 0, result.output
    key = result.output.split("API key (shown once; only its hash is kept): ")[1].split()[0]
    assert key.startswith("sk-sc-") and key not in path.read_text()
    store = KeyStore.from_settings(AuthSettings(keys_file=str(path), keys_env=None), POOL.names)
    ident = store.authenticate(f"Bearer {key}")
    assert (ident.key_id, ident.caller, ident.limits.usd_per_day) == ("acme-support", Caller(tenant="acme", roles=["support"]), 5.0)
    again = CliRunner().invoke(app, ["gateway-key", "--id", "acme-support", "--out", str(path)])
    assert again.exit_code == 1 and "already has a key" in again.output
    ops = CliRunner().invoke(app, ["gateway-key", "--id", "ops", "--admin", "--out", str(path)])
    assert ops.exit_code == 0, ops.output
    ops_key = ops.output.split("API key (shown once; only its hash is kept): ")[1].split()[0]
    store = KeyStore.from_settings(AuthSettings(keys_file=str(path), keys_env=None), POOL.names)
    assert store.authenticate(f"Bearer {ops_key}").admin and not store.authenticate(f"Bearer {key}").admin


@pytest.mark.parametrize("asked, expected", [
    (None, Caller(tenant="acme", roles=["support", "billing"], permissions=["p.read"])),
    ({"roles": ["support"]}, Caller(tenant="acme", roles=["support"], permissions=["p.read"])),
    ({"roles": [], "permissions": []}, Caller(tenant="acme")),
    ({"tenant": ""}, Caller(tenant="", roles=["support", "billing"], permissions=["p.read"])),
    ("acme", Caller(tenant="acme")),  # a string is the tenant alone
])


def test_narrowing_keeps_or_drops_never_adds(asked, expected):
    base = Caller(tenant="acme", roles=["support", "billing"], permissions=["p.read"])
    assert narrow(base, asked, "switchcraft.caller") == expected


@pytest.mark.parametrize("asked, param", [
    ({"roles": ["support", "admin"]}, "switchcraft.caller.roles"),
    ({"permissions": ["p.write"]}, "switchcraft.caller.permissions"),
    ({"tenant": "globex"}, "switchcraft.caller.tenant"),
    ("globex", "switchcraft.caller"),
    ({"environment": "staging"}, "switchcraft.caller.environment"),
])


def test_widening_is_403_naming_the_field(asked, param):
    with pytest.raises(GatewayError) as e:
        narrow(Caller(tenant="acme", roles=["support"], permissions=["p.read"]), asked, "switchcraft.caller")
    assert e.value.status == 403 and e.value.param == param and e.value.message.startswith(param)


def test_budgets_limit_requests_per_minute_and_daily_spend_on_a_real_store(tmp_path):
    import asyncio

    from serving.core.budget import Budgets
    from serving.core.metrics import GatewayMetrics
    from serving.core.state import Charge, SQLiteState

    wall = [86400.0 * 20 + 3600]
    budgets = Budgets(SQLiteState(tmp_path / "state.sqlite"), GatewayMetrics(), clock=lambda: wall[0])
    ident = Identity("k", Caller(), KeyLimits(requests_per_minute=2, usd_per_day=1.0))

    async def go():
        await budgets.admit(ident), await budgets.admit(ident)
        with pytest.raises(GatewayError) as e:
            await budgets.admit(ident)
        assert e.value.status == 429 and e.value.headers["retry-after-ms"] == "60000"
        wall[0] += 30
        with pytest.raises(GatewayError) as e:
            await budgets.admit(ident)
        assert e.value.headers["retry-after-ms"] == "30000" and e.value.reason == "rate_limit"
        wall[0] += 30  # the first two fall out of the window
        await budgets.admit(ident)
        res = await budgets.reserve(ident, 0.4, "r")
        await budgets.settle(ident, res, [Charge("m", "answer", 1.0)], "r")
        with pytest.raises(GatewayError) as e:
            await budgets.admit(ident)
        assert "spent 1.000000" in e.value.message and e.value.reason == "budget"
        assert e.value.headers["retry-after-ms"] == str(23 * 3600 * 1000 - 60 * 1000)
        with pytest.raises(GatewayError) as e:
            await budgets.reserve(ident, 0.01, "r2")
        assert e.value.status == 429 and e.value.reason == "budget"
        wall[0] += 23 * 3600  # a new UTC day
        await budgets.admit(ident)
        await budgets.reserve(ident, 0.01, "r3")
    asyncio.run(go())
