"""Money that holds: limits and spend in a real store, across gateway processes, restarts and `kill -9`.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_money.py

Real parts only: gateways are `switchcraft serve` processes on loopback, the store is a SQLite file or a real
redis-server (the binary the test extra installs, started here), the upstream is the replay server answering
with the recorded BFCL v1 outputs and their real token usage, and a real SSE upstream streams with usage.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
import yaml
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from data.pool import load_pool
from serving.app import create_app
from serving.core.budget import first_step_usd
from serving.gateway.config import ServingConfig
from evaluation.harness import LocalRedis
from evaluation.harness import free_port
from tests.routers import REPO
from tests.serving.helpers import AUTH, KEY, KEYS_ENV, SECRET, Loopback, bearer, openai_body, use_keys
from training.policy import Strategy

pytestmark = pytest.mark.integration
POOL = load_pool(REPO / "configs" / "pool.yaml")
RPM_KEY, SMALL_KEY = "sk-sc-test-rpm5-0123456789abcdefghij", "sk-sc-test-small-budget-0123456789abc"
CHEAP = "gpt-4o-mini-2024-07-18"
LIMIT_USD = 0.0004


class Gateway:
    """`switchcraft serve` in a process of its own, on a free loopback port."""

    def __init__(self, overrides: list[str], env: dict[str, str], log_path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "switchcraft.cli", "serve", "--config", str(REPO / "configs" / "serving.yaml"),
                     f"port={self.port}", *overrides]
        self.env, self.log_path, self.proc = env, log_path, None

    def start(self) -> Gateway:
        self.proc = subprocess.Popen(self.args, env=self.env, cwd=REPO, stdout=open(self.log_path, "ab"),
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()[-3000:]
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"gateway did not start: {self.log_path.read_text()[-3000:]}")

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)


def spent(url: str, key_id: str) -> float:
    r = httpx.get(url + "/v1/admin/spend", params={"key": key_id}, headers=AUTH, timeout=10)
    assert r.status_code == 200, r.text
    return sum(t["usd"] for t in r.json()["totals"])


def route_body(example) -> dict:
    return {"messages": openai_body(example)["messages"], "tools": openai_body(example)["tools"]}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["redis", "sqlite"])
def test_limits_and_spend_hold_across_processes_concurrency_and_kill_9(backend, replay, examples, exported,
                                                                       redis_server, tmp_path):
    good, _ = replay
    good.state.reset()
    pool_file = tmp_path / "pool.yaml"
    pool_file.write_text(yaml.safe_dump({"models": [
        {**m.model_dump(mode="json", exclude_none=True), "base_url": good.base_url} for m in POOL.models]}))
    env = {**os.environ, KEYS_ENV: json.dumps([
        {"id": "test", "key": KEY, "role": "admin"},
        {"id": "rpm5", "key": RPM_KEY, "limits": {"requests_per_minute": 5}},
        {"id": "small", "key": SMALL_KEY, "limits": {"usd_per_day": LIMIT_USD}}])}
    env.update({m.api_key_env: SECRET for m in POOL.models if m.api_key_env})
    store = [f"state.redis_url={redis_server.url}", f"state.redis_prefix=t{time.time_ns()}."] if backend == "redis" \
        else [f"state.path={tmp_path / 'state'}"]
    overrides = [f"router.dir={exported[0]}", f"upstream.pool={pool_file}", *store]
    n = 2 if backend == "redis" else 1  # SQLite is the one-process default; Redis is for replicas
    gateways = [Gateway(overrides, env, tmp_path / f"gateway{i}.log") for i in range(n)]
    try:
        for g in gateways:
            g.proc = None
        procs = [g.start() for g in gateways]
        urls = [g.url for g in procs]

        # requests_per_minute: 5 across every process, exactly.
        statuses = [httpx.post(urls[i % n] + "/v1/route", json=route_body(examples[0]), headers=bearer(RPM_KEY),
                               timeout=30).status_code for i in range(9)]
        assert statuses.count(200) == 5 and statuses.count(429) == 4, statuses

        # usd_per_day under 20 concurrent requests split across the processes: at most one reservation over.
        body = {**openai_body(examples[1], model=CHEAP), "max_tokens": 64}

        async def burst():
            async with httpx.AsyncClient(timeout=60) as http:
                return await asyncio.gather(*(http.post(urls[i % n] + "/v1/chat/completions", json=body,
                                                        headers=bearer(SMALL_KEY)) for i in range(20)))
        answers = asyncio.run(burst())
        codes = [r.status_code for r in answers]
        assert set(codes) <= {200, 429} and codes.count(200) >= 1 and codes.count(429) >= 1, codes
        from serving.gateway.answers import upstream_body
        from serving.core.budget import payload_size
        from serving.gateway.requests import to_schema

        sent = upstream_body(body, to_schema(body["messages"], body["tools"])[1], POOL.get(CHEAP))
        reserve = first_step_usd(POOL, Strategy.single(CHEAP), body, lambda m: payload_size(sent),
                                 chars_per_token=3.0, default_output_tokens=4096)
        total = spent(urls[0], "small")
        charged = sum(float(r.headers["x-switchcraft-cost-usd"]) for r in answers if r.status_code == 200)
        assert total == pytest.approx(charged) and total > 0
        assert total <= LIMIT_USD + reserve, (total, LIMIT_USD, reserve)
        assert good.state.stats()["completions"] == codes.count(200)  # refused requests never reached an upstream
        for r in answers:
            if r.status_code == 429:
                assert r.json()["error"]["type"] == "rate_limit_error" and "'small'" in r.json()["error"]["message"]

        # kill -9 one process and start it again: every count and every cent is still there.
        before = spent(urls[-1], "small")
        gateways[-1].kill9()
        gateways[-1].start()
        assert spent(urls[-1], "small") == pytest.approx(before)
        if total >= LIMIT_USD:
            r = httpx.post(urls[-1] + "/v1/chat/completions", json=body, headers=bearer(SMALL_KEY), timeout=30)
            assert r.status_code == 429 and "'small' has spent" in r.json()["error"]["message"]
        r = httpx.post(urls[-1] + "/v1/route", json=route_body(examples[0]), headers=bearer(RPM_KEY), timeout=30)
        assert r.status_code == 429 and "5 requests per minute" in r.json()["error"]["message"]

        # SIGHUP reloads router.dir in a running `switchcraft serve` (docs/learning.md, "Roll out").
        gateways[0].proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while 'switchcraft_router_reloads_total{outcome="ok"} 1.0' not in httpx.get(
                urls[0] + "/metrics", headers=AUTH, timeout=10).text:
            assert time.monotonic() < deadline and gateways[0].proc.poll() is None, "SIGHUP did not reload"
            time.sleep(0.2)
    finally:
        for g in gateways:
            g.stop()


@pytest.fixture
def sse_upstream():
    """A native upstream that streams a tool call, with usage when asked (OpenAI `stream_options.include_usage`),
    and records what it was sent."""
    seen: list[dict] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> StreamingResponse:
        body = await request.json()
        seen.append(body)
        usage = (body.get("stream_options") or {}).get("include_usage") and not body.get("metadata", {}).get("no_usage")

        async def gen():
            for piece in ('{"city": ', '"Paris"}'):
                delta = {"tool_calls": [{"index": 0, "function": {"name": "get_weather", "arguments": piece}}]}
                yield f"data: {json.dumps({'object': 'chat.completion.chunk', 'choices': [{'index': 0, 'delta': delta}], **({'usage': None} if usage else {})})}\n\n"
            if usage:
                yield f"data: {json.dumps({'object': 'chat.completion.chunk', 'choices': [], 'usage': {'prompt_tokens': 1000, 'completion_tokens': 500}})}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(gen(), media_type="text/event-stream")

    with Loopback(app) as url:
        yield url + "/v1", seen


def weather(model: str, **extra) -> dict:
    return {"model": model, "stream": True, "messages": [{"role": "user", "content": "weather in Paris?"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}}}}}], **extra}


def stream_events(url: str, body: dict, key: str = KEY) -> tuple[int, list]:
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, headers=bearer(key), timeout=30) as r:
        if r.status_code != 200:
            r.read()
            return r.status_code, [r.json()]
        return 200, [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]


def test_streamed_native_answers_are_charged_and_usage_reaches_only_who_asked(sse_upstream, client, monkeypatch,
                                                                              tmp_path):
    base_url, seen = sse_upstream
    native = next(m for m in POOL.models if m.prompt_style == "native" and m.prices.input_per_mtok)
    pool = POOL.model_copy(update={"models": [m.model_copy(update={"base_url": base_url}) for m in POOL.models]})
    for m in POOL.models:
        monkeypatch.setenv(m.api_key_env, SECRET)
    price = native.prices
    real = (1000 * price.input_per_mtok + 500 * price.output_per_mtok) / 1e6
    tiny = "sk-sc-test-tiny-budget-0123456789abcd"
    use_keys(monkeypatch, {"id": "tiny", "key": tiny, "limits": {"usd_per_day": real / 2}})
    cfg = ServingConfig(state={"path": str(tmp_path / "state")})
    with Loopback(create_app(cfg, client=client, pool=pool)) as url:
        status, chunks = stream_events(url, weather(native.name))
        assert status == 200
        assert seen[-1]["stream_options"] == {"include_usage": True}  # asked of the upstream though the client did not
        assert not any("usage" in c for c in chunks)  # ... and not passed to a client that did not ask
        cost = chunks[-1]["switchcraft"]
        assert cost["cost_usd"] == pytest.approx(real) and cost["cost_estimated_usd"] == 0
        assert [(c["model"], c["kind"]) for c in cost["charges"]] == [(native.name, "answer")]
        args = "".join(c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] for c in chunks if c["choices"])
        assert json.loads(args) == {"city": "Paris"}

        status, chunks = stream_events(url, weather(native.name, stream_options={"include_usage": True}))
        assert status == 200 and chunks[-2]["usage"] == {"prompt_tokens": 1000, "completion_tokens": 500}

        # No usage from the provider: charged an estimate, marked as one.
        status, chunks = stream_events(url, weather(native.name, metadata={"no_usage": True}))
        assert chunks[-1]["switchcraft"]["charges"][-1]["kind"] == "estimated"
        assert chunks[-1]["switchcraft"]["cost_estimated_usd"] > 0

        # The streamed answer counts against a key's budget: one stream spends the tiny day, the next is refused.
        assert stream_events(url, weather(native.name), key=tiny)[0] == 200
        status, body = stream_events(url, weather(native.name), key=tiny)
        assert status == 429 and "'tiny' has spent" in body[0]["error"]["message"]
        ledger = httpx.get(url + "/v1/admin/spend", params={"key": "tiny"}, headers=AUTH).json()
        assert ledger["totals"][0]["usd"] == pytest.approx(real) and ledger["totals"][0]["by_kind"] == {
            "answer": pytest.approx(real)}


def test_operator_surfaces_are_closed_to_callers(replay, client, monkeypatch):
    use_keys(monkeypatch, {"id": "caller", "key": RPM_KEY})
    for m in POOL.models:
        monkeypatch.setenv(m.api_key_env, SECRET)
    with Loopback(create_app(ServingConfig(), client=client, pool=POOL)) as url:
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert httpx.get(url + path).status_code == 404
        assert httpx.get(url + "/metrics").status_code == 401
        assert httpx.get(url + "/metrics", headers=bearer(RPM_KEY)).status_code == 403
        assert "switchcraft_requests_total" in httpx.get(url + "/metrics", headers=AUTH).text
        ready = httpx.get(url + "/readyz", headers=bearer(RPM_KEY)).json()
        assert set(ready) == {"ready", "router", "credentials"}  # no upstream URLs, no router version
        detailed = httpx.get(url + "/readyz", headers=AUTH).json()
        assert "upstreams" in detailed and detailed["state"] == {"store": "sqlite", "durable": False, "reachable": True}
        assert httpx.get(url + "/v1/admin/spend", headers=bearer(RPM_KEY)).status_code == 403
        assert httpx.get(url + "/v1/admin/spend", params={"day": "yesterday"}, headers=AUTH).status_code == 400
        assert httpx.get(url + "/healthz").status_code == 200
    with Loopback(create_app(ServingConfig(admin={"docs": True}), client=client, pool=POOL)) as url:
        assert httpx.get(url + "/openapi.json").status_code == 200


def test_keys_with_limits_fail_closed_when_the_store_is_down(replay, examples, client, monkeypatch, tmp_path):
    good, _ = replay
    server = LocalRedis(tmp_path / "redis")
    server.start()
    use_keys(monkeypatch, {"id": "rpm5", "key": RPM_KEY, "limits": {"requests_per_minute": 5}})
    pool = POOL.model_copy(update={"models": [m.model_copy(update={"base_url": good.base_url}) for m in POOL.models]})
    for m in POOL.models:
        monkeypatch.setenv(m.api_key_env, SECRET)
    cfg = ServingConfig(state={"redis_url": server.url, "timeout_s": 0.5})
    try:
        with Loopback(create_app(cfg, client=client, pool=pool)) as url:
            assert httpx.post(url + "/v1/route", json=route_body(examples[0]), headers=bearer(RPM_KEY)).status_code == 200
            server.kill()
            r = httpx.post(url + "/v1/route", json=route_body(examples[0]), headers=bearer(RPM_KEY), timeout=30)
            assert r.status_code == 503 and r.json()["error"]["type"] == "state_unavailable"
            assert r.headers["retry-after"] == "2"
            # A key without limits keeps working; its charge is counted as unrecorded.
            ok = httpx.post(url + "/v1/chat/completions", json=openai_body(examples[0], model=CHEAP), headers=AUTH,
                            timeout=30)
            assert ok.status_code == 200
            metrics = httpx.get(url + "/metrics", headers=AUTH).text
            assert 'switchcraft_state_errors_total{op="admit"} 1.0' in metrics
            assert 'switchcraft_state_errors_total{op="settle"} 1.0' in metrics
    finally:
        server.stop()


def test_spend_command_prints_the_ledger(tmp_path):
    from typer.testing import CliRunner

    from serving.core.state import Charge, SQLiteState
    from switchcraft.cli import app

    store = SQLiteState(tmp_path / "state.sqlite")

    async def fill():
        res = await store.reserve("acme", 0.01, limit=1.0, request_id="r1", now=1_764_600_000.0)
        await store.settle(res, [Charge(CHEAP, "answer", 0.002), Charge(CHEAP, "abandoned", 0.001)], now=1_764_600_000.0)
    asyncio.run(fill())
    out = CliRunner().invoke(app, ["spend", "--state", str(tmp_path), "--key", "acme", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["totals"] == [{"key": "acme", "day": "2025-12-01", "usd": pytest.approx(0.003), "calls": 2,
                                 "by_kind": {"answer": 0.002, "abandoned": 0.001},
                                 "by_model": {CHEAP: pytest.approx(0.003)}}]
    table = CliRunner().invoke(app, ["spend", "--state", str(tmp_path)], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "acme" in table.output and "0.003000" in table.output
    bad = CliRunner().invoke(app, ["spend", "--state", str(tmp_path), "--day", "2025/12/01"])
    assert bad.exit_code == 1 and "YYYY-MM-DD" in bad.output
    none = CliRunner().invoke(app, ["spend", "--state", str(tmp_path / "nowhere")])
    assert none.exit_code == 1 and "no ledger" in none.output


@pytest.fixture
def slow_sse_upstream():
    """A native upstream that streams 30 chunks 0.1 s apart, usage last, and records how each stream ended:
    `finished` (it sent everything, and the provider would bill everything) or `cancelled` (the gateway closed)."""
    ended: list[str] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> StreamingResponse:
        await request.json()

        async def gen():
            outcome = "cancelled"
            try:
                for i in range(30):
                    await asyncio.sleep(0.1)
                    delta = {"content": f"word{i} "}
                    yield f"data: {json.dumps({'object': 'chat.completion.chunk', 'choices': [{'index': 0, 'delta': delta}]})}\n\n"
                yield f"data: {json.dumps({'object': 'chat.completion.chunk', 'choices': [], 'usage': {'prompt_tokens': 1000, 'completion_tokens': 500}})}\n\n"
                yield "data: [DONE]\n\n"
                outcome = "finished"
            finally:
                ended.append(outcome)
        return StreamingResponse(gen(), media_type="text/event-stream")

    with Loopback(app) as url:
        yield url + "/v1", ended


def _hang_up(url: str, body: dict, key: str, *, after_first_chunk: bool) -> None:
    """Send a streamed request on a raw socket and close it: at once, or once the first bytes of the answer came."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    payload = json.dumps(body).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: {parts.hostname}\r\nauthorization: Bearer {key}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n").encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(head + payload)
        if after_first_chunk:
            got = b""
            while b"data: {" not in got:
                got += sock.recv(65536)


@pytest.mark.parametrize("after_first_chunk", [False, True], ids=["before-the-first-byte", "mid-stream"])
def test_a_stream_the_client_leaves_is_closed_upstream_and_charged_its_worst_case(
        slow_sse_upstream, client, monkeypatch, tmp_path, after_first_chunk):
    base_url, ended = slow_sse_upstream
    native = next(m for m in POOL.models if m.prompt_style == "native" and m.prices.input_per_mtok)
    pool = POOL.model_copy(update={"models": [m.model_copy(update={"base_url": base_url}) for m in POOL.models]})
    for m in POOL.models:
        monkeypatch.setenv(m.api_key_env, SECRET)
    leaver = "sk-sc-test-stream-leaver-0123456789ab"
    use_keys(monkeypatch, {"id": "leaver", "key": leaver})
    body = weather(native.name, max_tokens=800)
    with Loopback(create_app(ServingConfig(state={"path": str(tmp_path / "state")}), client=client, pool=pool)) as url:
        for _ in range(3):
            _hang_up(url, body, leaver, after_first_chunk=after_first_chunk)
        deadline = time.monotonic() + 20
        while len(ended) < 3:
            assert time.monotonic() < deadline, ended
            time.sleep(0.05)
        while True:
            rows = httpx.get(url + "/v1/admin/spend", params={"key": "leaver"}, headers=AUTH).json()["rows"]
            if len(rows) == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    # The upstream stopped generating: none of the three ran to its end (before the fix all three did).
    assert ended == ["cancelled"] * 3
    # What the provider billed until the close is unknown: the ledger takes the call's worst case, never less
    # than what a finished stream would have cost.
    price = native.prices
    real = (1000 * price.input_per_mtok + 500 * price.output_per_mtok) / 1e6
    assert [r["kind"] for r in rows] == ["abandoned"] * 3
    worst = first_step_usd(pool, Strategy.single(native.name), body, lambda m: 0, chars_per_token=4.0,
                           default_output_tokens=1024)
    assert all(r["usd"] >= real and r["usd"] >= worst for r in rows), (rows, real, worst)
