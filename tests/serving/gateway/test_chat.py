"""The chat path's steps in process: the gateway's parts built without a server, upstreams an httpx.MockTransport.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_chat.py

plan (routed and named: one shape), reserve (the worst case held before any
call), run (a failed run is an Outcome, not an exception), and the whole
handler over httpx.ASGITransport: answer, headers, charge and ledger agree.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time

import httpx
import openai
import pytest

from data.logged import read_log
from data.pool import load_pool
from serving.app import build_gateway, create_app
from serving.core.auth import KeyEntry, KeyLimits, KeyStore
from serving.core.budget import first_step_usd, payload_size
from serving.gateway.chat import Pending, plan, reserve, run
from serving.gateway.config import ServingConfig
from serving.core.errors import GatewayError
from training.policy import Strategy
from tests.routers import REPO

pytestmark = pytest.mark.integration
POOL = load_pool(REPO / "configs" / "pool.yaml")
ADMIN, NARROW = "sk-sc-test-chat-admin-0123456789abcdef", "sk-sc-test-chat-narrow-0123456789abcde"
ALLOWED = sorted(POOL.names)[:3]
OUTSIDE = sorted(POOL.names)[-1]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def chat_body(model: str = "router", **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
            "tools": TOOLS, **extra}


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


class Upstream:
    """Every pool endpoint: a completion naming get_weather (with usage), or `status` for every call."""

    def __init__(self, status: int = 200) -> None:
        self.status, self.seen = status, []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request.url.host)
        if self.status != 200:
            return httpx.Response(self.status, json={"error": {"message": "down"}})
        return httpx.Response(200, json={
            "id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "[get_weather(city='Paris')]"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}})


def keys() -> KeyStore:
    return KeyStore([KeyEntry(id="admin", key=ADMIN, role="admin"),
                     KeyEntry(id="narrow", key=NARROW, limits=KeyLimits(models=ALLOWED))])


def with_upstream(gw, upstream: Upstream):
    gw.upstreams.http = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
    return gw


def test_routed_and_named_requests_make_one_kind_of_plan(client):
    gw = with_upstream(build_gateway(ServingConfig(), client=client, pool=POOL, keys=keys()), Upstream())
    narrow = gw.keys.authenticate(f"Bearer {NARROW}")

    async def plans():
        return (await plan(gw, chat_body(), None, None, narrow, False),
                await plan(gw, chat_body(ALLOWED[0]), ALLOWED[0], None, narrow, False),
                await plan(gw, chat_body(switchcraft={"strategy": {"first": ALLOWED[:2], "escalate": ALLOWED[2:]}}), None, None, narrow, True))

    routed, named, streamed = asyncio.run(plans())
    assert routed.meta["routed"] is True and routed.meta["chosen"] in ALLOWED
    assert routed.meta["decision"]["chosen"] == routed.meta["chosen"] and routed.ran == routed.strategy
    assert named.strategy == named.ran == Strategy.single(ALLOWED[0])
    assert (named.source, named.ranking) == ("model", [ALLOWED[0]])
    assert named.meta == {"routed": False, "chosen": ALLOWED[0],
                          "strategy": {**named.strategy.to_dict(), "source": "model", "ran": "single"}}
    # Both carry the models the key allows: what exploration may call after answering.
    assert routed.asked.allowed == named.asked.allowed == frozenset(ALLOWED)
    # A stream runs the single-model path down the ranking, whatever the strategy.
    assert streamed.source == "request" and streamed.strategy.kind != "single"
    assert streamed.ran == Strategy.single(streamed.ranking[0], tuple(streamed.ranking[1:]))
    assert streamed.meta["strategy"]["ran"] == "single"

    with pytest.raises(GatewayError) as refused:
        asyncio.run(plan(gw, chat_body(OUTSIDE), OUTSIDE, None, narrow, False))
    assert (refused.value.status, refused.value.reason, refused.value.param) == (403, "model", "model")
    assert 'switchcraft_auth_rejections_total{key="narrow",reason="model"} 1.0' in gw.metrics.render().decode()


@pytest.mark.parametrize("status", [200, 500], ids=["answered", "upstream-down"])
def test_reserve_holds_the_worst_case_and_a_failed_run_is_an_outcome(client, status):
    upstream = Upstream(status)
    gw = with_upstream(build_gateway(ServingConfig(), client=client, pool=POOL, keys=keys()), upstream)
    at = Pending("r1", time.perf_counter(), time.time(), ident=gw.keys.authenticate(f"Bearer {ADMIN}"))

    async def steps():
        at.plan = await plan(gw, chat_body(), None, None, at.ident, False)
        at.res = await reserve(gw, at)
        held = await gw.state.day_total("admin", at.res.day)
        assert not upstream.seen  # the hold comes before any upstream call
        return held, await run(gw, at.plan, False)

    held, out = asyncio.run(steps())
    p, st = at.plan, gw.cfg.state
    worst = first_step_usd(POOL, p.ran, p.body, lambda m: payload_size(p.body_for(m)),
                           chars_per_token=st.chars_per_token, default_output_tokens=st.default_output_tokens)
    assert at.res.usd == pytest.approx(worst) and held == (0.0, pytest.approx(worst))
    if status == 200:
        assert out.error is None and out.run.returned is not None and out.run.returned.ok
    else:  # no exception: the error and every call made come back together
        assert out.error is not None and out.error.status == 502 and out.run is not None
        assert [a["outcome"] for a in out.error.attempts] == ["http_500"] * len(out.run.attempts)
        assert len(out.run.calls) >= 1 and out.run.returned is None


def test_chat_in_process_answers_charges_and_refuses(client):
    upstream = Upstream()
    app = create_app(ServingConfig(), client=client, pool=POOL, keys=keys())
    with_upstream(app.state.gateway, upstream)

    async def exchange():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
            ok = await c.post("/v1/chat/completions", json=chat_body(ALLOWED[0]), headers=bearer(NARROW))
            refused = await c.post("/v1/chat/completions", json=chat_body(OUTSIDE), headers=bearer(NARROW))
            spend = await c.get("/v1/admin/spend", params={"key": "narrow"}, headers=bearer(ADMIN))
            routed = await c.post("/v1/route", json={"messages": chat_body()["messages"], "tools": TOOLS},
                                  headers=bearer(NARROW))
            return ok, refused, spend, routed

    ok, refused, spend, routed = asyncio.run(exchange())
    assert ok.status_code == 200, ok.text
    assert ok.headers["x-switchcraft-model"] == ALLOWED[0] == ok.json()["model"] and len(upstream.seen) == 1
    assert ok.json()["switchcraft"]["routed"] is False and ok.json()["switchcraft"]["strategy"]["source"] == "model"
    charged = float(ok.headers["x-switchcraft-cost-usd"])
    assert charged > 0 and charged == pytest.approx(spend.json()["totals"][0]["usd"])
    assert refused.status_code == 403 and refused.json()["error"]["param"] == "model"
    assert refused.headers["x-request-id"] and len(upstream.seen) == 1  # refused before any call
    assert routed.status_code == 200 and routed.headers["x-switchcraft-model"] in ALLOWED


class SlowUpstream:
    """Every pool endpoint, `delay_s` late: a completion, or for a stream request three chunks `delay_s` apart."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(self.delay_s)
        if b'"stream":true' not in request.content.replace(b" ", b""):
            return Upstream()(request)

        async def chunks():
            for word in ("It", " is", " sunny"):
                chunk = {"id": "s1", "object": "chat.completion.chunk", "model": "m",
                         "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
                await asyncio.sleep(self.delay_s)
            usage = {"id": "s1", "object": "chat.completion.chunk", "model": "m", "choices": [],
                     "usage": {"prompt_tokens": 50, "completion_tokens": 3, "total_tokens": 53}}
            yield f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode()

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())


def test_every_answer_says_what_the_gateway_added_and_the_log_keeps_it(client, tmp_path):
    """x-switchcraft-overhead-ms: the answer's time less the upstream's (0.2 s a wait here), on an answer, a
    stream (up to its first byte) and a refusal; the log row keeps it (a stream's once it has ended)."""
    delay, native = 0.2, "gpt-4o-2024-08-06-FC"  # a native OpenAI model: its stream is passed through
    app = create_app(ServingConfig(log={"path": str(tmp_path / "log")}), client=client, pool=POOL, keys=keys())
    with_upstream(app.state.gateway, SlowUpstream(delay))

    async def exchange():
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway/v1")
        sdk = openai.AsyncOpenAI(api_key=ADMIN, base_url="http://gateway/v1", http_client=http, max_retries=0)
        t0 = time.perf_counter()
        answered = await sdk.chat.completions.with_raw_response.create(model=ALLOWED[0], messages=chat_body()["messages"],
                                                                       tools=TOOLS)
        answered_ms = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        streamed = await sdk.chat.completions.with_raw_response.create(model=native, stream=True,
                                                                       messages=chat_body()["messages"])
        first_byte_ms = (time.perf_counter() - t0) * 1e3
        text = "".join([c.choices[0].delta.content or "" async for c in streamed.parse() if c.choices])
        t0 = time.perf_counter()
        refused = await http.post("/chat/completions", json=chat_body(OUTSIDE), headers=bearer(NARROW))
        refused_ms = (time.perf_counter() - t0) * 1e3
        metrics = await http.get("http://gateway/metrics", headers=bearer(ADMIN))
        await app.state.observers[0].flush()
        return answered, answered_ms, streamed, first_byte_ms, text, refused, refused_ms, metrics

    answered, answered_ms, streamed, first_byte_ms, text, refused, refused_ms, metrics = asyncio.run(exchange())
    assert answered.http_response.status_code == 200 and text == "It is sunny" and refused.status_code == 403
    own = {name: float(r.headers["x-switchcraft-overhead-ms"])
           for name, r in (("answered", answered), ("streamed", streamed), ("refused", refused))}
    assert 0 <= own["answered"] <= answered_ms - delay * 1e3  # the upstream's wait is not the gateway's
    assert 0 <= own["streamed"] <= first_byte_ms - delay * 1e3
    assert 0 <= own["refused"] <= refused_ms  # no upstream: all of it is the gateway's
    assert 'switchcraft_gateway_overhead_seconds_count{endpoint="chat"} 3.0' in metrics.text
    rows = {r["request_id"]: r for r in read_log(tmp_path / "log")[0]}
    logged = rows[answered.headers["x-request-id"]]
    assert 0 <= logged["overhead_ms"] <= logged["latency_ms"] - delay * 1e3 and logged["overhead_ms"] <= own["answered"]
    assert logged["replica"] == f"{socket.gethostname()}:{os.getpid()}"
    stream_row = rows[streamed.headers["x-request-id"]]  # written when the stream ended: its chunks' waits excluded
    assert stream_row["stream"] == 1 and own["streamed"] <= stream_row["overhead_ms"] < delay * 1e3
