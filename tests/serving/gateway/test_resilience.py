"""Upstream faults: breakers skip dead endpoints, fallbacks reach other endpoints, 503 + Retry-After, abandoned calls.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_resilience.py

Two real replay servers (recorded BFCL v1 answers): endpoint A serves the
pool's OpenAI models, endpoint B the others. Faults are the replay server's
own (slow, drop, reject with a status, bad body, 5xx, 429) or an endpoint
taken down (`ReplayServer.stop`). Requests force their candidates with
`switchcraft.strategy` so each test knows which endpoint a call goes to.
"""

from __future__ import annotations

import email.utils
import json
import time

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from data.replay import Faults
from data.replay.serve import ReplayServer, build_state
from serving.client import RouterClient
from serving.app import create_app
from serving.gateway.breaker import Breaker, Breakers
from serving.gateway.config import BreakerSettings, ServingConfig
from serving.gateway.upstream import retry_after
from tests.serving.gateway.helpers import POOL, pool_env
from tests.serving.helpers import AUTH, SECRET, Loopback, openai_body, post, stream, use_keys

pytestmark = pytest.mark.integration
MINI, GPT4O, GPT4 = "gpt-4o-mini-2024-07-18", "gpt-4o-2024-08-06-FC", "gpt-4-0613"  # endpoint A
HAIKU, NEMO = "claude-3-haiku-20240307", "open-mistral-nemo-2407-FC-Auto"  # endpoint B
ON_A = {m.name for m in POOL.models if "openai.com" in m.base_url}
# A-first, then the rest of A, then B: a request whose first endpoint is dead must still be answered.
A_THEN_B = {"first": [MINI], "escalate": [GPT4O, GPT4, HAIKU]}


@pytest.fixture(scope="module")
def servers(shared_data, examples):
    a = ReplayServer(build_state(shared_data / "bfcl_v1_pool_outputs_2024-08-11", examples, pool=POOL, api_key=SECRET))
    b = ReplayServer(build_state(shared_data / "bfcl_v1_pool_outputs_2024-08-11", examples, pool=POOL, api_key=SECRET))
    with a, b:
        yield a, b


@pytest.fixture
def gateway(servers, client, monkeypatch):
    """make(**config) -> URL; both endpoints up and fault-free at the start and the end of each test."""
    a, b = servers
    pool_env(monkeypatch)
    made = []

    def make(**cfg) -> str:
        models = [m.model_copy(update={"base_url": (a if m.name in ON_A else b).base_url}) for m in POOL.models]
        made.append(Loopback(create_app(ServingConfig(**cfg), client=client, pool=POOL.model_copy(update={"models": models}))))
        return made[-1].__enter__()

    for s in servers:
        s.state.faults = Faults()
        s.state.reset()
    yield make
    for g in made:
        g.__exit__()
    for s in servers:
        if not s._thread.is_alive():
            s.start()
        s.state.faults = Faults()


def ask(url: str, ex, strategy: dict | None = None, **extra) -> httpx.Response:
    return post(url + "/v1/chat/completions", json=openai_body(ex, switchcraft={"strategy": strategy or A_THEN_B}, **extra),
                timeout=30)


def outcomes(r: httpx.Response) -> list[tuple[str, str]]:
    meta = r.json().get("switchcraft") or {}
    return [(c["model"], c["outcome"]) for c in meta.get("calls", [])]


def endpoint(server) -> str:
    return server.base_url.rstrip("/")


# --- the breaker alone ----------------------------------------------------------------------------------
def test_breaker_opens_after_consecutive_failures_and_closes_after_a_probe():
    now = [0.0]
    b = Breaker("http://a/v1", failures_to_open=3, open_s=10, probes=1, clock=lambda: now[0])
    for _ in range(2):
        assert b.allow()
        b.record(failed=True)
    assert b.allow()
    b.record(failed=False)  # a success in between: the count starts again
    for _ in range(3):
        assert b.allow()
        b.record(failed=True)
    assert b.current() == "open" and not b.allow() and b.retry_after_s() == 10
    now[0] = 9.5
    assert not b.allow() and b.retry_after_s() == pytest.approx(0.5)
    now[0] = 10.0
    assert b.allow() and b.current() == "half_open"
    assert not b.allow()  # one probe at a time
    b.record(failed=True)  # the probe failed: open again, for open_s from now
    assert b.current() == "open" and b.retry_after_s() == 10
    now[0] = 20.0
    assert b.allow()
    b.release()  # a cancelled probe frees its slot without a verdict
    assert b.current() == "half_open" and b.allow()
    b.record(failed=False)
    assert b.current() == "closed" and b.allow() and b.allow() and b.failures == 0


# --- endpoints down -------------------------------------------------------------------------------------
def test_a_dead_endpoint_is_tried_once_then_skipped_and_another_endpoint_answers(gateway, servers, examples):
    a, b = servers
    url = gateway(upstream={"breaker": {"failures": 2, "open_s": 1.0}})
    ex = examples[1]
    a.stop()
    for _ in range(2):  # one connection attempt per request, never three: the rest of A is skipped at once
        r = ask(url, ex)
        assert r.status_code == 200, r.text
        assert outcomes(r) == [(MINI, "connect_error"), (GPT4O, "endpoint_down"), (GPT4, "endpoint_down"), (HAIKU, "ok")]
        assert r.json()["switchcraft"]["answered_by"] == HAIKU and r.json()["switchcraft"]["fallback"] is True
        assert r.headers["x-switchcraft-models-called"] == f"{MINI},{HAIKU}"
    r = ask(url, ex)  # two failures in a row: A's breaker is open, nothing is sent there
    assert outcomes(r) == [(MINI, "circuit_open"), (GPT4O, "circuit_open"), (GPT4, "circuit_open"), (HAIKU, "ok")]
    assert [c["latency_ms"] for c in r.json()["switchcraft"]["calls"][:3]] == [0.0, 0.0, 0.0]
    metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert f'switchcraft_circuit_state{{endpoint="{endpoint(a)}"}} 2.0' in metrics
    assert f'switchcraft_circuit_state{{endpoint="{endpoint(b)}"}} 0.0' in metrics
    assert f'switchcraft_circuit_opens_total{{endpoint="{endpoint(a)}"}} 1.0' in metrics
    ready = httpx.get(url + "/readyz", headers=AUTH).json()
    assert ready["ready"] is True and ready["upstreams"] == {endpoint(a): "open", endpoint(b): "closed"}
    assert b.state.stats()["completions"] == 3
    # A comes back; after open_s one probe goes through and closes the breaker.
    a.start()
    time.sleep(1.05)
    r = ask(url, ex)
    assert outcomes(r) == [(MINI, "ok")]
    assert httpx.get(url + "/readyz", headers=AUTH).json()["upstreams"][endpoint(a)] == "closed"


def test_no_reachable_candidate_is_a_503_with_retry_after(gateway, servers, examples):
    a, b = servers
    url = gateway(upstream={"breaker": {"failures": 1, "open_s": 5.0}})
    only_a = {"first": [MINI], "escalate": [GPT4O]}

    def wait_ms(r: httpx.Response, opened: tuple[float, float], asked: tuple[float, float]) -> int:
        """The 503's retry-after-ms, checked against what causality allows: a breaker opened within `opened` (client
        clock before the request that opened it, after its answer), reported within `asked`: 5 s less the time
        between."""
        ms = int(r.headers["retry-after-ms"])
        assert 5000 - (asked[1] - opened[0]) * 1e3 - 1 <= ms <= 5000 - (asked[0] - opened[1]) * 1e3 + 1, ms
        assert r.headers["retry-after"] == str(-(-ms // 1000)) and f"retry after {ms} ms" in r.text
        return ms

    a.stop()
    t0 = time.monotonic()
    r = ask(url, examples[0], only_a)  # connection refused: the other model on A is not tried
    a_opened = (t0, time.monotonic())
    assert r.status_code == 503 and r.json()["error"]["type"] == "upstream_unavailable", r.text
    assert [x["outcome"] for x in r.json()["error"]["attempts"]] == ["connect_error", "endpoint_down"]
    t0 = time.monotonic()
    r = ask(url, examples[0], only_a)  # A's breaker is open: not one call sent
    wait_ms(r, a_opened, (t0, time.monotonic()))
    assert r.status_code == 503 and [x["outcome"] for x in r.json()["error"]["attempts"]] == ["circuit_open"] * 2
    assert ask(url, examples[0]).status_code == 200  # B still answers A_THEN_B
    b.stop()
    time.sleep(0.5)  # B opens half a second after A: the soonest to reopen stays A, by ~0.5 s
    t0 = time.monotonic()
    r = ask(url, examples[0])
    b_opened = (t0, time.monotonic())
    assert r.status_code == 503 and r.json()["error"]["attempts"][-1]["outcome"] == "connect_error"
    wait_ms(r, a_opened, b_opened)  # A's wait, not B's: the soonest endpoint
    # Every endpoint open: refused before routing, for routed and forced requests alike, with A's (the soonest) wait.
    for body in (openai_body(examples[0]), openai_body(examples[0], switchcraft={"strategy": A_THEN_B})):
        t0 = time.monotonic()
        r = post(url + "/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 503 and "attempts" not in r.json()["error"] and "switchcraft" not in r.json(), r.text
        wait_ms(r, a_opened, (t0, time.monotonic()))
    ready = httpx.get(url + "/readyz", headers=AUTH)
    assert ready.status_code == 503 and set(ready.json()["upstreams"].values()) == {"open"}


# --- each failure, each fallback ------------------------------------------------------------------------
@pytest.mark.parametrize("faults, outcome", [
    (Faults(rate_slow=1.0, slow_s=1.0, max_faults_per_call=100), "timeout"),
    (Faults(rate_drop=1.0, max_faults_per_call=100), "dropped"),
    (Faults(rate_bad_body=1.0, max_faults_per_call=100), "bad_body"),
    (Faults(rate_500=1.0, max_faults_per_call=100), "http_500"),
    (Faults(rate_429=1.0, max_faults_per_call=100), "http_429"),
    (None, "connect_error"),
])


def test_each_upstream_failure_falls_back_to_the_next_model(gateway, servers, examples, faults, outcome):
    a, b = servers
    url = gateway(upstream={"timeout_s": 0.3})
    if faults is None:
        a.stop()
    else:
        a.state.faults = faults
    r = ask(url, examples[2], {"first": [MINI], "escalate": [HAIKU]})
    assert r.status_code == 200, r.text
    assert outcomes(r) == [(MINI, outcome), (HAIKU, "ok")]
    metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert f'switchcraft_fallbacks_total{{from_model="{MINI}",reason="{outcome}"}} 1.0' in metrics


@pytest.mark.parametrize("status", [400, 413, 422])
def test_an_upstream_rejection_goes_back_to_the_caller_without_fallback(gateway, servers, examples, status):
    a, b = servers
    url = gateway()
    a.state.faults = Faults(rate_reject=1.0, reject_status=status, max_faults_per_call=100)
    r = ask(url, examples[2], {"first": [MINI], "escalate": [HAIKU]})
    assert r.status_code == status and r.json()["error"]["type"] == "upstream_rejected", r.text
    assert "Invalid request (replay fault injection)" in r.json()["error"]["message"]
    assert [x["outcome"] for x in r.json()["error"]["attempts"]] == [f"http_{status}"]
    assert b.state.stats()["requests"] == 0  # every model would refuse it: none was tried


# --- upstream 429: Retry-After per endpoint ---------------------------------------------------------------
def test_breakers_report_the_soonest_wait_of_open_and_rate_limited_endpoints():
    now = [0.0]
    breakers = Breakers(POOL, BreakerSettings(failures=1, open_s=10.0), clock=lambda: now[0])
    a, b = breakers.of(MINI), breakers.of(HAIKU)
    assert a is not b and breakers.retry_after_s([MINI, HAIKU]) is None
    a.allow(), a.record(failed=True)  # A opens at t=0, B at t=4: at t=5 A takes a probe in 5 s, B in 9 s
    now[0] = 4.0
    b.allow(), b.record(failed=True)
    now[0] = 5.0
    assert breakers.retry_after_s([MINI, HAIKU]) == pytest.approx(5.0)
    assert breakers.retry_after_s([HAIKU]) == pytest.approx(9.0)
    # A 429's Retry-After: no call until it has passed, whatever the circuit's state; the soonest one is reported.
    now[0] = 20.0  # both half-open now
    assert a.rate_limited(7.0) == 7.0 and b.rate_limited(3.0) == 3.0
    assert not a.allow() and not b.allow() and a.current() == "half_open"
    assert breakers.limited_s([MINI, HAIKU]) == pytest.approx(3.0) and breakers.retry_after_s([MINI]) == pytest.approx(7.0)
    now[0] = 23.0
    assert b.allow() and not a.allow() and breakers.limited_s([MINI, HAIKU]) == pytest.approx(4.0)
    assert a.rate_limited(None) == 1.0 and a.rate_limited(10**9) == 300.0  # none sent: 1 s; absurd: 5 minutes


@pytest.mark.parametrize("headers, seconds", [({"retry-after": "7"}, 7.0), ({"retry-after-ms": "1500", "retry-after": "2"}, 1.5),
                                              ({"retry-after": "soon"}, None), ({}, None), ({"retry-after": "-3"}, None)])


def test_retry_after_headers_are_read(headers, seconds):
    assert retry_after(httpx.Headers(headers)) == seconds


def test_retry_after_as_an_http_date():
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 28 <= retry_after(httpx.Headers({"retry-after": when})) <= 30


def test_an_upstream_429_pauses_its_endpoint_and_other_endpoints_answer(gateway, servers, examples):
    a, b = servers
    url = gateway()
    a.state.faults = Faults(rate_429=1.0, retry_after_s=7, max_faults_per_call=100)
    ex = examples[5]
    r = ask(url, ex)  # A says 429 with Retry-After 7: the rest of A is not asked, B answers
    assert r.status_code == 200, r.text
    assert outcomes(r) == [(MINI, "http_429"), (GPT4O, "rate_limited"), (GPT4, "rate_limited"), (HAIKU, "ok")]
    assert r.json()["switchcraft"]["calls"][0]["status"] == 429
    assert [x["retry_after_s"] for x in r.json()["switchcraft"]["attempts"]] == [7.0, None, None, None]
    r = ask(url, ex)  # the next request does not ask A either
    assert outcomes(r) == [(MINI, "rate_limited"), (GPT4O, "rate_limited"), (GPT4, "rate_limited"), (HAIKU, "ok")]
    assert a.state.stats()["requests"] == 1
    # Only A's models: a 429 with the time A asked for (what is left of its 7 s), not a 502.
    r = ask(url, ex, {"first": [MINI], "escalate": [GPT4O]})
    assert r.status_code == 429 and r.json()["error"]["type"] == "upstream_rate_limited", r.text
    ms = int(r.headers["retry-after-ms"])
    assert 4000 < ms <= 7000 and r.headers["retry-after"] == str(-(-ms // 1000)) and f"retry after {ms} ms" in r.text
    assert [x["outcome"] for x in r.json()["error"]["attempts"]] == ["rate_limited", "rate_limited"]
    assert a.state.stats()["requests"] == 1
    metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert f'switchcraft_upstream_rate_limited_total{{endpoint="{endpoint(a)}"}} 1.0' in metrics
    assert 'switchcraft_requests_total{endpoint="chat",status="429"} 1.0' in metrics


def test_a_cascade_does_not_fan_out_over_rate_limited_endpoints(gateway, servers, examples):
    """A 429 with Retry-After 7 stays a 429: it must not become a 502 after 6 calls across 6 models in ~50 ms."""
    a, b = servers
    url = gateway()
    a.state.faults = Faults(rate_429=1.0, retry_after_s=7, max_faults_per_call=100)
    b.state.faults = Faults(rate_429=1.0, retry_after_s=3, max_faults_per_call=100)
    cascade = {"first": [MINI, GPT4O], "tie_breaker": GPT4, "escalate": [HAIKU, NEMO]}
    r = ask(url, examples[1], cascade)
    # The first pair is asked at once (concurrently); after that no model of a rate-limited endpoint is asked.
    assert r.status_code == 429 and r.json()["error"]["type"] == "upstream_rate_limited", r.text
    called = [(c["model"], c["outcome"]) for c in r.json()["switchcraft"]["calls"] if c["outcome"] != "rate_limited"]
    assert called == [(MINI, "http_429"), (GPT4O, "http_429"), (HAIKU, "http_429")]
    assert a.state.stats()["requests"] == 2 and b.state.stats()["requests"] == 1
    ms = int(r.headers["retry-after-ms"])  # the soonest: B's 3 s, not A's 7 s
    assert 1000 < ms <= 3000 and r.headers["retry-after"] == str(-(-ms // 1000))
    # B's pause ends first: then B answers, A is still not asked.
    b.state.faults = Faults()
    time.sleep(ms / 1e3 + 0.05)
    r = ask(url, examples[1], cascade)
    assert r.status_code == 200 and r.json()["switchcraft"]["answered_by"] == HAIKU, r.text
    assert a.state.stats()["requests"] == 2


# --- abandoned calls and hedging ------------------------------------------------------------------------
def test_a_timed_out_call_is_abandoned_and_its_estimated_cost_counted(gateway, servers, examples, client):
    a, b = servers
    url = gateway(upstream={"timeout_s": 0.3})
    a.state.faults = Faults(rate_slow=1.0, slow_s=1.0, max_faults_per_call=100)
    r = ask(url, examples[3], {"first": [MINI], "escalate": [HAIKU]})
    assert r.status_code == 200, r.text
    meta = r.json()["switchcraft"]
    estimate = meta["decision"]["costs"][MINI]
    assert meta["calls"][0]["abandoned"] is True and meta["calls"][0]["estimated_cost_usd"] == estimate
    assert meta["calls"][1]["abandoned"] is False and meta["abandoned"] == {"calls": 1, "estimated_cost_usd": estimate}
    # The provider generated (and bills) the answer nobody read.
    assert a.state.stats()["completions"] == 1 and b.state.stats()["completions"] == 1
    metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert f'switchcraft_abandoned_calls_total{{model="{MINI}",reason="timeout"}} 1.0' in metrics
    assert f'switchcraft_abandoned_cost_usd_total{{model="{MINI}"}} {estimate}' in metrics
    spent = float(metrics.split('switchcraft_key_spend_usd_total{key="test"} ')[1].split()[0])
    assert spent == pytest.approx(meta["cost_usd"] + estimate)


def test_a_hedge_asks_the_next_model_when_the_first_is_slow(gateway, servers, examples):
    a, b = servers
    url = gateway(upstream={"hedge_after_s": 0.2, "timeout_s": 10})
    a.state.faults = Faults(rate_slow=1.0, slow_s=2.0, max_faults_per_call=100)
    r = ask(url, examples[4], {"first": [MINI], "escalate": [HAIKU]})
    assert r.status_code == 200, r.text
    meta = r.json()["switchcraft"]
    assert outcomes(r) == [(MINI, "hedge_lost"), (HAIKU, "ok")] and meta["returned"]["rule"] == "hedge"
    assert meta["calls"][1]["role"] == "hedge" and meta["abandoned"]["calls"] == 1
    assert meta["abandoned"]["estimated_cost_usd"] == meta["decision"]["costs"][MINI]
    metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert f'switchcraft_hedges_total{{model="{HAIKU}"}} 1.0' in metrics
    assert f'switchcraft_abandoned_calls_total{{model="{MINI}",reason="hedge_lost"}} 1.0' in metrics
    # A fast first model is never hedged.
    r = ask(url, examples[4], {"first": [HAIKU], "escalate": [MINI]})
    assert outcomes(r) == [(HAIKU, "ok")]


# --- the router backend, a broken stream ----------------------------------------------------------------
def test_router_backend_down_is_503_and_not_ready(exported, monkeypatch):
    use_keys(monkeypatch)
    dead = RouterClient.from_dir(exported[0], backend="triton-http", url="127.0.0.1:9", timeout_s=0.5)
    with Loopback(create_app(ServingConfig(), client=dead, pool=POOL)) as url:
        r = post(url + "/v1/route", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=30)
        assert r.status_code == 503 and r.json()["error"]["type"] == "router_unavailable", r.text
        ready = httpx.get(url + "/readyz", headers=AUTH)
    assert ready.status_code == 503 and ready.json()["router"] is False


def test_a_stream_breaking_halfway_ends_with_an_error_event(client, examples, monkeypatch):
    sse = FastAPI()

    @sse.post("/v1/chat/completions")
    async def half() -> StreamingResponse:
        async def gen():
            for w in ("Hel", "lo"):
                yield f'data: {{"object":"chat.completion.chunk","choices":[{{"index":0,"delta":{{"content":"{w}"}}}}]}}\n\n'
            raise ConnectionResetError("upstream died mid-stream")
        return StreamingResponse(gen(), media_type="text/event-stream")

    pool_env(monkeypatch)
    with Loopback(sse) as sse_url:
        pool = POOL.model_copy(update={"models": [m.model_copy(update={"base_url": sse_url + "/v1"}) for m in POOL.models]})
        with (Loopback(create_app(ServingConfig(), client=client, pool=pool)) as gw,
              stream("POST", gw + "/v1/chat/completions", json=openai_body(examples[0], model=GPT4O, stream=True),
                     timeout=30) as r):
            events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert r.status_code == 200
    assert "".join(e["choices"][0]["delta"]["content"] for e in events[:-1]) == "Hello"
    assert events[-1]["error"]["type"] == "upstream_error" and "stream broke" in events[-1]["error"]["message"]
