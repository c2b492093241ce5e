"""Each API key's share of the upstream connections: one key's slow requests never make another key wait.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_fairshare.py

A stand-in upstream on loopback answers `SLOW` questions after a pause and the others at once; the gateway
has four upstream connections and a share of one half per key.
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from serving.app import create_app
from serving.gateway.config import ServingConfig
from tests.serving.gateway.helpers import B, POOL, pool_env
from tests.serving.helpers import Loopback, bearer, wait_for

pytestmark = pytest.mark.integration
KEY_A, KEY_B = "sk-sc-test-fair-a-0123456789abcdefghij", "sk-sc-test-fair-b-0123456789abcdefghij"
SLOW_S = 1.5


@pytest.fixture(scope="module")
def slow_upstream():
    """(base URL, in flight): `SLOW …` questions are answered after SLOW_S, the others at once."""
    flight = {"now": 0, "most": 0}
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> dict:
        body = await request.json()
        flight["now"] += 1
        flight["most"] = max(flight["most"], flight["now"])
        try:
            if body["messages"][-1]["content"].startswith("SLOW"):
                await asyncio.sleep(SLOW_S)
        finally:
            flight["now"] -= 1
        if body.get("stream"):
            chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
                     "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}
            return StreamingResponse(iter([f"data: {json.dumps(chunk)}\n\n", "data: [DONE]\n\n"]),
                                     media_type="text/event-stream")
        return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}

    with Loopback(app) as url:
        yield url + "/v1", flight


def gateway(client, upstream: str, monkeypatch, **upstream_cfg):
    pool_env(monkeypatch, {"id": "a", "key": KEY_A}, {"id": "b", "key": KEY_B})
    pool = POOL.model_copy(update={"models": [m.model_copy(update={"base_url": upstream}) for m in POOL.models]})
    cfg = ServingConfig(upstream={"max_connections": 4, "key_share": 0.5, "max_attempts": 1, **upstream_cfg})
    return create_app(cfg, client=client, pool=pool)


def ask(url: str, key: str, question: str) -> tuple[httpx.Response, float]:
    t0 = time.monotonic()
    r = httpx.post(url + "/v1/chat/completions", headers=bearer(key), timeout=30,
                   json={"model": B, "messages": [{"role": "user", "content": question}]})
    return r, time.monotonic() - t0


@pytest.mark.parametrize("wait_s", [10.0, 0.3])
def test_one_keys_slow_requests_leave_the_other_keys_share_free(client, slow_upstream, monkeypatch, wait_s):
    upstream, flight = slow_upstream
    flight["most"] = 0
    app = gateway(client, upstream, monkeypatch, key_wait_s=wait_s)
    with Loopback(app) as url, ThreadPoolExecutor(8) as pool:
        assert ask(url, KEY_B, "warm up")[0].status_code == 200
        slow = [pool.submit(ask, url, KEY_A, f"SLOW {i}") for i in range(6)]
        wait_for(lambda: flight["now"] >= 2, 10)
        time.sleep(0.1)  # A's other four are queued now
        r, took = ask(url, KEY_B, "quick question")
        assert r.status_code == 200 and took < 0.5, took  # B never waited for A's slow calls
        answers = [f.result() for f in slow]
    assert flight["most"] <= 3  # A held two connections at most (B's one beside them)
    statuses = sorted(r.status_code for r, _ in answers)
    if wait_s > SLOW_S:  # beyond its share, A waited for its own calls: all answered, in waves of two
        assert statuses == [200] * 6 and max(t for _, t in answers) >= 3 * SLOW_S - 0.2
    else:  # or was refused with 429 and a Retry-After once it waited key_wait_s
        assert statuses == [200, 200, 429, 429, 429, 429]
        busy = next(r for r, _ in answers if r.status_code == 429)
        assert busy.json()["error"]["type"] == "key_upstream_busy" and int(busy.headers["retry-after"]) >= 1
        assert busy.headers["x-content-type-options"] == "nosniff"


def test_a_stream_holds_its_keys_slot_until_it_is_closed(client, slow_upstream, monkeypatch):
    upstream, _ = slow_upstream
    app = gateway(client, upstream, monkeypatch)
    with Loopback(app) as url:
        shares = app.state.upstreams.shares
        with httpx.stream("POST", url + "/v1/chat/completions", headers=bearer(KEY_A), timeout=30,
                          json={"model": B, "stream": True, "messages": [{"role": "user", "content": "hi"}]}) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            assert shares.held == {"a": 1}  # the answer is open: the call still holds its connection
            assert "[DONE]" in r.read().decode()
        wait_for(lambda: shares.held == {}, 5)


def test_without_a_share_one_keys_slow_requests_make_the_other_wait(client, slow_upstream, monkeypatch):
    """The contrast: key_share 1 lets one key hold every connection, and another key's quick request queues."""
    upstream, flight = slow_upstream
    app = gateway(client, upstream, monkeypatch, key_share=1.0, key_wait_s=10.0)
    with Loopback(app) as url, ThreadPoolExecutor(8) as pool:
        assert ask(url, KEY_B, "warm up")[0].status_code == 200
        slow = [pool.submit(ask, url, KEY_A, f"SLOW {i}") for i in range(6)]
        wait_for(lambda: flight["now"] >= 4, 10)
        r, took = ask(url, KEY_B, "quick question")
        assert r.status_code == 200 and took > 0.8, took  # it waited for one of A's calls to end
        assert all(f.result()[0].status_code == 200 for f in slow)
