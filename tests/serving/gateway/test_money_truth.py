"""Money that tells the truth: the cap a hold assumes is the cap sent, holds are staged, and refusals say when.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_money_truth.py

Real parts: the gateway on loopback (uvicorn) with its state in a SQLite file and its decision log on; the
upstream is a stand-in on loopback that writes as many tokens as it is allowed (16,000 when it is sent no cap)
and reports that usage, or the replay server answering with the recorded BFCL v1 outputs (typical requests).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from data.logged import FILE
from data.pool import load_pool
from serving.app import create_app
from serving.core.budget import call_worst_case_usd, clear_wait_s, payload_size
from serving.gateway.config import ServingConfig
from tests.routers import REPO
from tests.serving.gateway.helpers import pool_env, replay_app
from tests.serving.helpers import AUTH, Loopback, bearer, openai_body, wait_for

pytestmark = pytest.mark.integration
POOL = load_pool(REPO / "configs" / "pool.yaml")
CHEAP, FLASH = "gpt-4o-mini-2024-07-18", "gemini-1.5-flash-preview-0514"  # prompt style, native
TOP = "gpt-4o-2024-08-06-FC"  # ~17x FLASH's output price
LONG = 16_000  # what the stand-in writes when it is sent no cap
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}
WEATHER = "What is the weather in Paris today?"


@pytest.fixture
def writer():
    """(base URL, bodies seen): an OpenAI upstream that writes as many tokens as it is allowed and bills them
    (`completion_tokens` is the cap it was sent, LONG without one; `prompt_tokens` its body's bytes / 4). The
    caller's `metadata.delay_s` holds the answer back; a model named in `metadata.fail` answers 500, one named in
    `metadata.call` calls get_weather instead of answering in text."""
    seen: list[dict] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def complete(request: Request):
        body = await request.json()
        seen.append(body)
        meta = body.get("metadata") or {}
        await asyncio.sleep(float(meta.get("delay_s", 0)))
        if body["model"] in meta.get("fail", []):
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=500)
        out = body.get("max_completion_tokens") or body.get("max_tokens") or LONG
        usage = {"prompt_tokens": len(json.dumps(body)) // 4, "completion_tokens": out}
        message = {"role": "assistant", "content": "Sunny, 21 degrees. " * 8}
        if body["model"] in meta.get("call", []):
            message = {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]}
        return {"id": "c1", "object": "chat.completion", "model": body["model"], "usage": usage,
                "choices": [{"index": 0, "finish_reason": "length", "message": message}]}

    with Loopback(app) as url:
        yield url + "/v1", seen


def gateway(client, base_url: str, tmp_path, monkeypatch, redis_url: str | None = None, **limits: float) -> Loopback:
    """The gateway over `base_url` (every pool model speaking Chat Completions there), a key per `limits` entry
    (id: its usd_per_day), its state (SQLite, or the Redis at `redis_url`) and decision log under `tmp_path`."""
    pool_env(monkeypatch, *({"id": k, "key": key_of(k), "limits": {"usd_per_day": usd}} for k, usd in limits.items()))
    pool = POOL.model_copy(update={"models": [m.model_copy(update={"base_url": base_url, "api": "openai_chat"})
                                              for m in POOL.models]})
    state = ({"redis_url": redis_url, "redis_prefix": f"t{time.time_ns()}."} if redis_url
             else {"path": str(tmp_path / "state")})
    # One endpoint serves every model here: its breaker must not close it for the failures a test asks for.
    cfg = ServingConfig(state=state, log={"path": str(tmp_path / "log")}, upstream={"breaker": {"failures": 1000}})
    return Loopback(create_app(cfg, client=client, pool=pool))


def key_of(key_id: str) -> str:
    return f"sk-sc-test-{key_id}-".ljust(40, "0")


def uncapped(api: str, model: str) -> dict:
    """A request with no output cap from the caller (Messages requires one: the most the stand-in writes)."""
    if api == "messages":
        return {"model": model, "max_tokens": LONG, "messages": [{"role": "user", "content": WEATHER}]}
    if api == "responses":
        return {"model": model, "input": WEATHER}
    return {"model": model, "messages": [{"role": "user", "content": WEATHER}]}


def spent(url: str, key_id: str) -> float:
    r = httpx.get(url + "/v1/admin/spend", params={"key": key_id}, headers=AUTH, timeout=10)
    return sum(t["usd"] for t in r.json()["totals"])


async def burst(url: str, path: str, bodies: list[dict], key: str) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=60) as http:
        return await asyncio.gather(*(http.post(url + path, json=b, headers=bearer(key)) for b in bodies))


@pytest.mark.parametrize(("api", "model"), [("chat", CHEAP), ("chat", FLASH), ("chat", "router"),
                                            ("responses", CHEAP), ("messages", CHEAP)])
def test_uncapped_requests_are_sent_the_cap_their_hold_assumes_and_the_day_ends_within_one_hold(
        api, model, writer, client, tmp_path, monkeypatch):
    base_url, seen = writer
    limit = 0.05
    body = uncapped(api, model)
    if model == "router":  # routed among two cheap models (one prompt-style, one native): any strategy of them
        body["switchcraft"] = {"allowed_models": [CHEAP, FLASH]}
    with gateway(client, base_url, tmp_path, monkeypatch, small=limit) as url:
        answers = asyncio.run(burst(url, PATHS[api], [body] * 20, key_of("small")))
        total = spent(url, "small")
    codes = [r.status_code for r in answers]
    assert set(codes) <= {200, 429} and codes.count(200) >= 1, codes
    # One hold (an agreement's first step holds two calls): each call at its payload and the cap it was sent.
    one_call = max(call_worst_case_usd(POOL, m, b, payload_size(b), chars_per_token=3.0,
                                       default_output_tokens=4096) for b in seen for m in (CHEAP, FLASH)
                   if POOL.get(m).endpoint_model == b["model"])
    assert total <= limit + 2 * one_call, (total, limit, one_call)
    assert total > limit / 2  # the day was used, not refused early (holds price input a little high)
    # Every call went out capped, at the cap the hold priced: the caller's, else state.default_output_tokens.
    caps = [b.get("max_completion_tokens") or b.get("max_tokens") for b in seen]
    assert caps and set(caps) == {LONG if api == "messages" else 4096}, caps


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_concurrent_extensions_end_the_day_within_one_hold(backend, writer, client, redis_server, tmp_path,
                                                           monkeypatch):
    """Every request's first model fails, so each answer is a dearer fallback the hold must be extended for: 20 at
    once extend one key's day, in either store, and it still ends within one hold of the limit."""
    base_url, seen = writer
    limit = 0.03
    body = {**uncapped("chat", "router"), "max_tokens": 1000, "metadata": {"fail": [FLASH]},
            "switchcraft": {"strategy": {"first": [FLASH], "escalate": [TOP]}}}
    redis_url = redis_server.url if backend == "redis" else None
    with gateway(client, base_url, tmp_path, monkeypatch, redis_url, ext=limit) as url:
        answers = asyncio.run(burst(url, PATHS["chat"], [body] * 20, key_of("ext")))
        total = spent(url, "ext")
    codes = [r.status_code for r in answers]
    assert set(codes) == {200, 429}, codes
    assert all(r.json()["model"] == TOP for r in answers if r.status_code == 200)
    one_call = max(call_worst_case_usd(POOL, TOP, b, payload_size(b), chars_per_token=3.0,
                                       default_output_tokens=4096) for b in seen if b["model"] == POOL.get(TOP).endpoint_model)
    assert 0 < total <= limit + one_call, (total, limit, one_call)
    refused = [r for r in answers if r.status_code == 429]
    assert all("nothing more can be held" in r.json()["error"]["message"] for r in refused)
    assert any("budget_refused" in [a["outcome"] for a in r.json()["error"].get("attempts", [])] for r in refused)


def test_a_small_daily_budget_serves_four_concurrent_typical_routed_requests(replay, examples, client, tmp_path,
                                                                             monkeypatch):
    good, _ = replay
    good.state.reset()
    pool_env(monkeypatch, {"id": "half", "key": key_of("half"), "limits": {"usd_per_day": 0.5}})
    app = replay_app(client, good, state={"path": str(tmp_path / "state")})
    with Loopback(app) as url:
        answers = asyncio.run(burst(url, PATHS["chat"], [openai_body(ex) for ex in examples[:4]], key_of("half")))
        total = spent(url, "half")
    assert [r.status_code for r in answers] == [200] * 4, [r.text[:300] for r in answers if r.status_code != 200]
    assert 0 < total < 0.5


def test_a_refusal_by_holds_says_seconds_and_one_by_spend_says_midnight_and_both_are_in_the_decision_log(
        writer, client, tmp_path, monkeypatch):
    base_url, _ = writer
    body = {**uncapped("chat", CHEAP), "max_tokens": 1000}  # ~0.00062 USD a call, held and charged alike
    with gateway(client, base_url, tmp_path, monkeypatch, tight=0.001) as url:
        headers = bearer(key_of("tight"))
        assert httpx.post(url + PATHS["chat"], json=body, headers=headers, timeout=30).status_code == 200
        slow = {**body, "metadata": {"delay_s": 1.5}}

        async def while_one_is_held():
            async with httpx.AsyncClient(timeout=30) as http:
                held = asyncio.create_task(http.post(url + PATHS["chat"], json=slow, headers=headers))
                await asyncio.sleep(0.5)
                refused = await http.post(url + PATHS["chat"], json=body, headers=headers)
                return await held, refused
        held, refused = asyncio.run(while_one_is_held())
        assert held.status_code == 200 and refused.status_code == 429, refused.text
        # Spent alone is under the limit: the hold in flight is in the way, and clears within seconds.
        assert refused.headers["retry-after"] == "1" and int(refused.headers["retry-after-ms"]) <= 1000
        assert refused.json()["error"]["message"].endswith("retry after 1 s")
        assert "expected to clear" in refused.json()["error"]["message"]
        # Now spent alone is past it: until 00:00 UTC.
        late = httpx.post(url + PATHS["chat"], json=body, headers=headers, timeout=30)
        to_midnight = 86400 - time.time() % 86400
        assert late.status_code == 429 and "resets at 00:00 UTC" in late.json()["error"]["message"]
        assert abs(int(late.headers["retry-after"]) - to_midnight) < 5
        rows = wait_for(lambda: refusals(tmp_path) if len(refusals(tmp_path)) == 2 else None, 10)
    assert rows == [("tight", 429, "budget_held"), ("tight", 429, "budget")]


def test_a_further_call_the_budget_cannot_hold_is_not_sent_and_its_429_is_logged(writer, client, tmp_path,
                                                                               monkeypatch):
    base_url, seen = writer
    body = {**uncapped("chat", "router"), "max_tokens": 1000, "metadata": {"fail": [FLASH]},
            "switchcraft": {"strategy": {"first": [FLASH], "escalate": [TOP]}}}
    with gateway(client, base_url, tmp_path, monkeypatch, one=0.0005) as url:
        r = httpx.post(url + PATHS["chat"], json=body, headers=bearer(key_of("one")), timeout=30)
        assert r.status_code == 429, r.text
        assert [a["outcome"] for a in r.json()["error"]["attempts"]] == ["http_500", "budget_refused"]
        assert [b["model"] for b in seen] == [FLASH]  # the fallback was never sent
        assert r.headers["retry-after"] == "1"  # its own hold is not in its way: it is released with this answer
        assert spent(url, "one") == 0
        rows = wait_for(lambda: refusals(tmp_path) or None, 10)
    assert rows == [("one", 429, "budget_held:extension")]


def test_an_escalation_the_budget_cannot_hold_returns_the_answer_in_hand_and_is_logged(writer, client, tmp_path,
                                                                                      monkeypatch):
    base_url, seen = writer
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    body = {**uncapped("chat", "router"), "max_tokens": 1000, "tools": [tool], "metadata": {"call": [FLASH]},
            "switchcraft": {"strategy": {"first": [CHEAP, FLASH], "escalate": [TOP]}}}
    with gateway(client, base_url, tmp_path, monkeypatch, pair=0.001) as url:  # the first step (two calls) fills it
        r = httpx.post(url + PATHS["chat"], json=body, headers=bearer(key_of("pair")), timeout=30)
        assert r.status_code == 200, r.text
        trace = r.json()["switchcraft"]
        assert trace["agreement"]["verdict"] == "disagree" and trace["returned"]["model"] in (CHEAP, FLASH)
        assert trace["refused"]["reason"] == "budget_held" and trace["refused"]["extension"]
        assert sorted(b["model"] for b in seen) == sorted([CHEAP, FLASH])  # the escalation was never sent
        assert [c["outcome"] for c in trace["calls"]][-1] == "budget_refused"
        rows = wait_for(lambda: refusals(tmp_path) or None, 10)
    assert rows == [("pair", 200, "budget_held:extension")]


def test_a_fallback_no_dearer_than_a_call_that_failed_unbilled_needs_no_extension(writer, client, tmp_path,
                                                                                  monkeypatch):
    base_url, seen = writer
    body = {**uncapped("chat", "router"), "max_tokens": 1000, "metadata": {"fail": [CHEAP]},
            "switchcraft": {"strategy": {"first": [CHEAP], "escalate": [FLASH]}}}
    with gateway(client, base_url, tmp_path, monkeypatch, one=0.0005) as url:  # less than one call's hold
        r = httpx.post(url + PATHS["chat"], json=body, headers=bearer(key_of("one")), timeout=30)
        assert r.status_code == 200 and r.json()["model"] == FLASH, r.text
        assert "refused" not in r.json()["switchcraft"]
        assert [b["model"] for b in seen] == [CHEAP, FLASH]


def refusals(tmp_path) -> list[tuple]:
    db = sqlite3.connect(tmp_path / "log" / FILE)
    try:
        return db.execute("SELECT key_id, status, refused FROM requests WHERE refused IS NOT NULL ORDER BY id").fetchall()
    finally:
        db.close()


@pytest.mark.parametrize(("spent_usd", "holds", "now", "want"), [
    (0.0, [(100.0, 0.4), (100.5, 0.3), (101.0, 0.3)], 101.0, 1.0),  # the oldest clears at 102: 1 s
    (0.0, [(100.0, 0.6), (110.0, 0.6)], 101.0, 29.0),  # both in the way of 1.0: the first clears at 130
    (0.9, [(100.0, 0.05), (110.0, 0.2)], 101.0, 39.0),  # 0.9 + 0.2 ≥ 1.0: in the way until the second clears
    (0.0, [], 101.0, 1.0),  # holds gone already (settled since): at once, or rather in 1 s
])
def test_the_wait_is_until_enough_holds_are_expected_to_clear(spent_usd, holds, now, want):
    assert clear_wait_s(spent_usd, 1.0, holds, now, 30.0 if want > 1.0 else 2.0) == pytest.approx(want)
