"""The gateway's routing micro-batcher: same decisions as single calls, fewer backend calls, 429 when full.

    .venv/bin/python -m pytest tests/serving/gateway/test_batcher.py -q

The router is the tests' tiny exported one (tests/conftest.py's `exported`) on the
real ONNX Runtime backend, wrapped only to count its calls and, where a test
needs requests to pile up, to hold them at a gate the test opens. No timing
asserts: waits end on a state (calls queued), and speed is measured by
`switchcraft bench gateway`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from data.pool import load_pool
from serving.backends import BackendError, OrtBackend
from serving.client import RouterClient
from serving.app import create_app
from serving.gateway.batcher import RoutingBatcher
from serving.gateway.config import ServingConfig
from serving.core.metrics import GatewayMetrics
from serving.core.errors import GatewayError
from serving.gateway.requests import to_schema
from serving.policy import Constraints, NoEligibleModel
from tests.routers import REPO, bfcl_sample
from tests.serving.helpers import AUTH, Loopback, openai_body, use_keys, with_strategy_policy

pytestmark = pytest.mark.integration


class CountingBackend:
    """The real ORT backend, recording each call's batch size; calls wait while `gate` is closed."""

    def __init__(self, inner: OrtBackend) -> None:
        self.inner, self.name = inner, inner.name
        self.calls: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail_next = False

    def infer(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        self.calls.append(len(feed["input_ids"]))
        assert self.gate.wait(timeout=120), "the test never opened the gate"
        if self.fail_next:
            self.fail_next = False
            raise BackendError("triton-grpc 127.0.0.1:1: connection refused (a test's failure)")
        return self.inner.infer(feed)

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        self.inner.close()


def counting_client(path) -> tuple[RouterClient, CountingBackend]:
    client = RouterClient.from_dir(path, threads=1)
    backend = CountingBackend(client.backend)
    client.backend = backend
    return client, backend


def wait_until(condition, what: str) -> None:
    """Waits on a state, not a duration: the deadline only turns a hang into a failure."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.005)


def same(a, b, where: str = "decision") -> None:
    """Equal, floats within 1e-5 (a padded batch moves probabilities by ~1e-7; every choice must be identical)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and not isinstance(b, str):
        assert b == pytest.approx(a, abs=1e-5), where
    else:
        assert a == b, where


@pytest.mark.parametrize("router", ["plain", "strategy_policy"])
def test_batched_decisions_equal_single_calls(router, exported, bfcl_requests, tmp_path):
    path = exported[0] if router == "plain" else with_strategy_policy(exported, tmp_path)[0]
    client, backend = counting_client(path)
    models = client.models
    cheapest = min(models, key=client.policy.costs.get)
    asks = [(None, None), (Constraints(max_cost_usd=client.policy.costs[cheapest] * 1.5), None),
            (Constraints(allowed_models=frozenset(models[3:6])), None), (Constraints(min_probability=0.4), None),
            (None, 0.9), (None, 0.2)]
    calls = [(r, c, t) for r in bfcl_requests for c, t in asks]
    calls.insert(7, (bfcl_requests[0], Constraints(max_cost_usd=0.0), None))  # no model fits: that request alone fails
    with pytest.raises(NoEligibleModel):
        client.route(*bfcl_requests[0], Constraints(max_cost_usd=0.0))
    alone = [client.route(m, t, c, threshold=th).decision for (m, t), c, th in calls if c is None or c.max_cost_usd != 0]
    backend.calls.clear()
    # Every call in one batch: the batch starts once it is full (the long delay is never reached). No length
    # groups: the most padding a batch can carry, and still every decision of a single call.
    batcher = RoutingBatcher(client, GatewayMetrics(), max_batch_size=len(calls), delay_s=60, max_queue=len(calls),
                             length_ratio=None)

    async def all_at_once():
        try:
            return await asyncio.gather(*(batcher.route(m, t, c, threshold=th) for (m, t), c, th in calls),
                                        return_exceptions=True)
        finally:
            await batcher.aclose()

    together = asyncio.run(all_at_once())
    assert isinstance(together.pop(7), NoEligibleModel)
    assert len(together) == len(alone) == len(bfcl_requests) * len(asks)
    for i, (routed, single) in enumerate(zip(together, alone)):
        same(routed.decision.to_dict(), single.to_dict(), f"call {i}")
    # One inference over all 97 packed requests, split only by the client's own max_batch_size.
    assert sum(backend.calls) == len(calls) and len(backend.calls) == -(-len(calls) // client.max_batch_size)
    if router == "strategy_policy":
        assert {r.decision.strategy.kind for r in together} == {"single", "agree"}
    assert len({r.decision.chosen for r in together}) > 2
    client.close()


@pytest.fixture
def gateway(exported, monkeypatch):
    """make(**cfg) -> (url, app, backend): a gateway on loopback whose router counts (and can hold) its calls."""
    pool = load_pool(REPO / "configs" / "pool.yaml")
    for m in pool.models:
        monkeypatch.setenv(m.api_key_env, "sk-test-unused-upstream-key-0123456789")
    use_keys(monkeypatch)
    servers, backends = [], []

    def make(**cfg):
        client, backend = counting_client(exported[0])
        app = create_app(ServingConfig(**cfg), client=client, pool=pool)
        servers.append(Loopback(app))
        backends.append(backend)
        return servers[-1].__enter__(), app, backend

    yield make
    for b in backends:
        b.gate.set()
    for s in servers:
        s.__exit__()


def route_body(example) -> dict:
    body = openai_body(example)
    return {"messages": body["messages"], "tools": body["tools"]}


def metric(url: str, line: str) -> float:
    for row in httpx.get(url + "/metrics", headers=AUTH).text.splitlines():
        if row.startswith(line + " "):
            return float(row.rsplit(" ", 1)[1])
    return 0.0


def one_then_the_rest(url: str, app, backend: CountingBackend, examples: list) -> list[httpx.Response]:
    """/v1/route for each example: the first one's inference held at the gate until all the others are queued."""
    backend.gate.clear()
    with httpx.Client(base_url=url, headers=AUTH, timeout=120) as http, ThreadPoolExecutor(len(examples)) as threads:
        try:  # whatever fails, the gate opens: held requests never wait out their timeout
            first = threads.submit(http.post, "/v1/route", json=route_body(examples[0]))
            wait_until(lambda: len(backend.calls) == 1, "the first inference started")
            rest = [threads.submit(http.post, "/v1/route", json=route_body(e)) for e in examples[1:]]
            wait_until(lambda: app.state.slot.batcher.queued == len(rest), f"{len(rest)} routing calls queued")
        finally:
            backend.gate.set()
        return [first.result(), *(f.result() for f in rest)]


def test_concurrent_requests_share_backend_calls_and_keep_their_decisions(gateway, shared_data, exported):
    url, app, backend = gateway(router={"batch_length_ratio": None})  # one call per batch, whatever the lengths
    examples = bfcl_sample(shared_data, 16)
    answers = one_then_the_rest(url, app, backend, examples)  # the other 15 queue up behind the first
    assert [r.status_code for r in answers] == [200] * 16, [r.text for r in answers if r.status_code != 200]
    assert backend.calls == [1, 15]  # 16 requests, two inference calls
    alone = RouterClient.from_dir(exported[0], threads=1)
    for ex, r in zip(examples, answers):
        single = alone.route(*to_schema(route_body(ex)["messages"], route_body(ex)["tools"])).decision.to_dict()
        same({k: r.json()[k] for k in single}, single, ex.id)
    alone.close()
    assert metric(url, "switchcraft_router_batch_size_count") == 2
    assert metric(url, "switchcraft_router_batch_size_sum") == 16
    assert metric(url, "switchcraft_router_queue") == 0


def test_full_queue_answers_429_with_retry_after_and_counts_it(gateway, shared_data):
    url, app, backend = gateway(router={"max_queue": 2})
    ex = bfcl_sample(shared_data, 2)[1]
    backend.gate.clear()
    with httpx.Client(base_url=url, headers=AUTH, timeout=120) as http, ThreadPoolExecutor(2) as threads:
        try:  # refused at once: a request admitted by mistake would wait at the gate, so a short timeout fails fast
            held = [threads.submit(http.post, "/v1/route", json=route_body(ex)) for _ in range(2)]
            wait_until(lambda: app.state.slot.batcher.admitted == 2, "two routing calls admitted")
            busy = [http.post("/v1/route", json=route_body(ex), timeout=15),
                    http.post("/v1/chat/completions", json=openai_body(ex), timeout=15)]
        finally:
            backend.gate.set()
        assert [f.result().status_code for f in held] == [200, 200]
    for r in busy:
        assert r.status_code == 429, r.text
        error = r.json()["error"]
        assert error["type"] == "router_busy" and "router.max_queue 2" in error["message"]
        # One batch ahead (2 admitted, batches of 32) × the first guess of a batch's time (50 ms; none measured yet).
        assert r.headers["retry-after-ms"] == "50" and r.headers["retry-after"] == "1"
    assert metric(url, "switchcraft_router_busy_total") == 2
    assert metric(url, 'switchcraft_requests_total{endpoint="route",status="429"}') == 1
    assert metric(url, 'switchcraft_requests_total{endpoint="chat",status="429"}') == 1
    assert httpx.post(url + "/v1/route", json=route_body(ex), headers=AUTH, timeout=60).status_code == 200  # room again


def test_admission_takes_exactly_max_queue_calls_and_prices_the_wait(exported, shared_data):
    """The batcher alone, its real client held at the gate: max_queue calls in, the next refused at once."""
    client, backend = counting_client(exported[0])
    messages, tools = to_schema(route_body(bfcl_sample(shared_data, 1)[0])["messages"], None)
    metrics = GatewayMetrics()

    async def scenario() -> list:
        batcher = RoutingBatcher(client, metrics, max_batch_size=1, delay_s=0, max_queue=3)
        batcher.batch_s = 0.25  # the recent batch time the wait is priced with
        backend.gate.clear()
        try:
            held = [asyncio.ensure_future(batcher.route(messages, tools)) for _ in range(3)]
            deadline = time.monotonic() + 30
            while batcher.admitted < 3:
                assert time.monotonic() < deadline and not any(h.done() for h in held)
                await asyncio.sleep(0.005)
            with pytest.raises(GatewayError) as refused:  # an admission off by one would queue it: 5 s, then a failure
                await asyncio.wait_for(batcher.route(messages, tools), 5)
            assert refused.value.status == 429 and "3 routing calls queued or running" in refused.value.message
            # Three batches of one ahead of it, 250 ms each.
            assert refused.value.headers == {"retry-after": "1", "retry-after-ms": "750"}
        finally:
            backend.gate.set()
        answers = await asyncio.gather(*held)
        await batcher.aclose()
        return answers

    answers = asyncio.run(scenario())
    assert len(answers) == 3 and all(a.decision.chosen in client.models for a in answers)
    assert metrics.router_busy._value.get() == 1


def test_backend_error_fails_its_batch_with_503_and_the_batcher_lives_on(gateway, shared_data):
    url, app, backend = gateway(router={"batch_length_ratio": None})
    examples = bfcl_sample(shared_data, 4)
    backend.fail_next = True
    failed, *answered = one_then_the_rest(url, app, backend, examples)
    assert failed.status_code == 503 and failed.json()["error"]["type"] == "router_unavailable"
    assert "connection refused" in failed.json()["error"]["message"]
    assert [r.status_code for r in answered] == [200] * 3 and backend.calls == [1, 3]
    assert metric(url, "switchcraft_router_unavailable_total") == 1
    assert metric(url, "switchcraft_router_queue") == 0


def test_a_batch_runs_as_one_call_per_group_of_similar_length(exported):
    client, backend = counting_client(exported[0])
    batcher = RoutingBatcher(client, GatewayMetrics(), length_ratio=1.25)
    assert batcher.length_groups([100, 40, 124, 126, 49, 50, 300]) == [[1, 4, 5], [0, 2], [3], [6]]
    assert RoutingBatcher(client, GatewayMetrics(), length_ratio=None).length_groups([100, 40, 300]) == [[1, 0, 2]]
    client.close()


def test_batcher_settings_are_validated():
    from pydantic import ValidationError

    for bad in ({"batch_delay_ms": -1}, {"max_queue": 0}, {"max_batch_size": 0}, {"batch_delay_ms": 5000},
                {"batch_length_ratio": 0.5}):
        with pytest.raises(ValidationError, match=next(iter(bad))):
            ServingConfig(router=bad)
    with pytest.raises(ValueError, match="max_queue"):
        RoutingBatcher(None, GatewayMetrics(), max_queue=0)  # type: ignore[arg-type]
