"""The gateway over loopback, with the pool replay server (real recorded BFCL v1 answers) as every upstream.

    .venv/bin/python -m pytest tests/serving/gateway/test_app.py -q

Covers routing and forwarding (tools intact), `router-<τ>` and pass-through,
fallback when the chosen model's upstream fails (and what the upstreams saw:
nothing lost, nothing duplicated), streaming (the replay endpoint answers with
JSON, re-emitted as SSE; a real SSE upstream is passed through), metrics,
readiness, logs without secrets or bodies, and precise 4xx errors.
"""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from data.pool import load_pool
from serving.client import RouterClient
from serving.app import create_app
from serving.gateway.config import ServingConfig
from serving.tools.policy import Caller
from tests.routers import REPO
from tests.serving.helpers import AUTH, SECRET, Loopback, bearer, openai_body, post, stream, use_keys

pytestmark = pytest.mark.integration


def routed_as(client, body: dict, **kw):
    """What the gateway's router sees: the request as the gateway parses it (tools' `original` is the OpenAI function)."""
    from serving.gateway.requests import to_schema

    return client.route(*to_schema(body["messages"], body.get("tools")), **kw).decision


def test_routes_then_forwards_with_tools_intact(replay_gateway, examples, client, caplog):
    make, good, _ = replay_gateway
    url = make()
    ex = examples[1]
    expected = routed_as(client, openai_body(ex))
    with caplog.at_level(logging.INFO, logger="switchcraft.gateway"):
        r = post(url + "/v1/chat/completions", json=openai_body(ex), timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert r.headers["x-switchcraft-model"] == expected.chosen == body["model"] == body["switchcraft"]["answered_by"]
    assert body["switchcraft"]["decision"]["ranking"] == expected.ranking and body["switchcraft"]["fallback"] is False
    assert body["choices"][0]["message"]["role"] == "assistant"
    recording = good.state.recordings[load_pool(REPO / "configs" / "pool.yaml").get(expected.chosen).recording]
    assert ex.id in recording  # the replay matched the forwarded request (question + tool names) to this example
    stats = good.state.stats()
    assert stats["completions"] == 1 and stats["outcomes"] == {"completion": 1}
    logs = caplog.text
    assert SECRET not in logs and ex.messages[-1].content[:30] not in logs and expected.chosen in logs


def test_upstream_failure_falls_back_down_the_ranking_and_loses_nothing(replay_gateway, examples, client):
    make, good, bad = replay_gateway
    ex = examples[2]
    ranking = routed_as(client, openai_body(ex)).ranking
    url = make(failing={ranking[0]})
    r = post(url + "/v1/chat/completions", json=openai_body(ex), timeout=30)
    assert r.status_code == 200, r.text
    meta = r.json()["switchcraft"]
    assert meta["chosen"] == ranking[0] and meta["answered_by"] == ranking[1] and meta["fallback"] is True
    assert [(a["model"], a["outcome"]) for a in meta["attempts"]] == [(ranking[0], "http_500"), (ranking[1], "ok")]
    assert r.headers["x-switchcraft-model"] == ranking[1] == r.json()["model"]
    assert bad.state.stats()["outcomes"] == {"500": 1} and good.state.stats()["completions"] == 1
    metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert f'switchcraft_fallbacks_total{{from_model="{ranking[0]}",reason="http_500"}} 1.0' in metrics
    # Every model failing: a 502 that lists every attempt, no more than max_attempts.
    url = make(failing=set(ranking), upstream={"max_attempts": 2})
    r = post(url + "/v1/chat/completions", json=openai_body(ex), timeout=30)
    assert r.status_code == 502 and len(r.json()["error"]["attempts"]) == 2
    assert "no upstream answered" in r.json()["error"]["message"]


def test_pass_through_threshold_model_names_and_route_endpoint(replay_gateway, examples, client):
    make, _, _ = replay_gateway
    ex = examples[0]
    url = make(failing={"gpt-4-0613"})
    r = post(url + "/v1/chat/completions", json=openai_body(ex, model="claude-3-haiku-20240307"), timeout=30)
    meta = r.json()["switchcraft"]
    assert r.status_code == 200 and {k: meta[k] for k in ("routed", "chosen", "answered_by", "fallback")} == {
        "routed": False, "chosen": "claude-3-haiku-20240307", "answered_by": "claude-3-haiku-20240307",
        "fallback": False}
    # A named model runs alone: no cascade, no fallback to another model.
    assert (meta["strategy"]["kind"], meta["strategy"]["source"]) == ("single", "model") and "decision" not in meta
    assert [c["model"] for c in meta["calls"]] == ["claude-3-haiku-20240307"] and meta["agreement"] is None
    r = post(url + "/v1/chat/completions", json=openai_body(ex, model="gpt-4-0613"), timeout=30)
    assert r.status_code == 502  # a named model is never silently swapped for another
    strict = post(url + "/v1/route", json={"messages": openai_body(ex)["messages"], "tools": openai_body(ex)["tools"],
                                                "threshold": 0.9999}, timeout=30).json()
    assert strict["rule"] == "most_probable" and strict["threshold"] == 0.9999
    assert strict["chosen"] == routed_as(client, openai_body(ex), threshold=0.9999).chosen
    assert set(strict) >= {"probabilities", "costs", "ranking", "router_version", "latency_ms", "tools"}
    r = post(url + "/v1/route", json={"messages": openai_body(ex)["messages"],
                                            "constraints": {"allowed_models": ["open-mistral-nemo-2407-FC-Auto"]}})
    assert r.json()["chosen"] == "open-mistral-nemo-2407-FC-Auto"
    r = post(url + "/v1/chat/completions", json=openai_body(ex, model="router-0.95"), timeout=30)
    assert r.json()["switchcraft"]["decision"]["threshold"] == 0.95


def test_streaming_through_replay_and_a_real_sse_upstream(replay_gateway, examples, client):
    make, _, _ = replay_gateway
    ex = examples[3]
    url = make()
    with stream("POST", url + "/v1/chat/completions", json=openai_body(ex, stream=True), timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        chosen = r.headers["x-switchcraft-model"]
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    first = json.loads(events[0])
    assert first["object"] == "chat.completion.chunk" and first["model"] == chosen == first["switchcraft"]["answered_by"]

    # An upstream that really streams: chunks pass through in order, each relabelled with the answering model.
    words = ["Hel", "lo", " wor", "ld"]

    sse = FastAPI()

    @sse.post("/v1/chat/completions")
    async def stream_words() -> StreamingResponse:
        async def gen():
            for w in words:
                yield f'data: {{"object":"chat.completion.chunk","model":"x","choices":[{{"index":0,"delta":{{"content":"{w}"}}}}]}}\n\n'
            yield "data: [DONE]\n\n"
        return StreamingResponse(gen(), media_type="text/event-stream")

    with Loopback(sse) as sse_url:
        base = load_pool(REPO / "configs" / "pool.yaml")
        pool = base.model_copy(update={"models": [m.model_copy(update={"base_url": sse_url + "/v1"}) for m in base.models]})
        with (Loopback(create_app(ServingConfig(), client=client, pool=pool)) as gw,
              stream("POST", gw + "/v1/chat/completions", json=openai_body(ex, stream=True), timeout=30) as r):
            chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
            header = r.headers["x-switchcraft-model"]
    text, cost = chunks[:-1], chunks[-1]  # the last chunk (no choices) says what the stream was charged
    assert "".join(c["choices"][0]["delta"]["content"] for c in text) == "Hello world"
    assert {c["model"] for c in chunks} == {header} and "switchcraft" in chunks[0] and "switchcraft" not in chunks[1]
    assert cost["choices"] == [] and cost["switchcraft"]["charges"][-1]["kind"] == "estimated"  # no usage was sent


@pytest.mark.parametrize("body, status, fragment", [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 400, "must be a JSON object"),
    (b"", 400, "body is empty"),
    (json.dumps({"model": "router", "messages": []}).encode(), 400, "messages: must contain at least one message"),
    (json.dumps({"model": "router", "messages": "hi"}).encode(), 400, "messages: is required and must be a list"),
    (json.dumps({"model": "router", "messages": [{"role": "robot", "content": "x"}]}).encode(), 400, "messages[0].role"),
    (json.dumps({"model": "router", "messages": [{"role": "user", "content": 5}]}).encode(), 400, "messages[0].content"),
    (json.dumps({"model": "router", "messages": [{"role": "user", "content": "x"}],
                 "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "dict"}}}]}).encode(),
     400, "tools[0].function.parameters.type: type 'dict' is not a JSON Schema type"),
    (json.dumps({"model": "router", "messages": [{"role": "user", "content": "x"}],
                 "tools": [{"type": "function", "function": {"name": "f", "parameters": {
                     "type": "object", "properties": {"a": 3}}}}]}).encode(), 400, "properties.a: must be a JSON Schema object"),
    (json.dumps({"model": "router-7", "messages": [{"role": "user", "content": "x"}]}).encode(), 400, "within [0, 1]"),
    (json.dumps({"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]}).encode(), 404, "not in the pool"),
    (json.dumps({"model": "router", "messages": [{"role": "user", "content": "x"}],
                 "switchcraft": {"allowed_models": ["nobody"]}}).encode(), 400, "switchcraft.allowed_models"),
    (json.dumps({"model": "router", "messages": [{"role": "user", "content": "x"}],
                 "switchcraft": {"max_cost_usd": 0.0}}).encode(), 422, "no model satisfies"),
    (json.dumps({"model": "router", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}).encode(), 400, "stream"),
    (b'{"model": "router", "messages": [{"role": "user", "content": "' + b"x" * 5000 + b'"}]}', 413, "limit"),
])


def test_bad_input_gets_a_precise_4xx(replay_gateway, body, status, fragment):
    make, good, _ = replay_gateway
    url = make(max_body_bytes=4096)
    r = post(url + "/v1/chat/completions", content=body, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == status, r.text
    assert fragment in r.json()["error"]["message"]
    assert good.state.stats()["requests"] == 0  # nothing reached an upstream
    assert httpx.get(url + "/healthz").json() == {"status": "ok"}  # and the gateway is still up


def test_health_readiness_and_metrics(replay_gateway, examples, client):
    make, _, _ = replay_gateway
    url = make()
    ready = httpx.get(url + "/readyz", headers=AUTH)
    assert ready.status_code == 200 and ready.json()["ready"] is True and ready.json()["router_version"] == client.version
    ex = examples[4]
    for _ in range(2):
        post(url + "/v1/route", json={"messages": openai_body(ex)["messages"], "tools": openai_body(ex)["tools"]})
    text = httpx.get(url + "/metrics", headers=AUTH).text
    chosen = routed_as(client, openai_body(ex)).chosen
    assert f'switchcraft_decisions_total{{model="{chosen}"' in text
    assert "switchcraft_routing_latency_seconds_count 2.0" in text
    assert 'switchcraft_requests_total{endpoint="route",status="200"} 2.0' in text


def test_tool_router_hook_puts_the_exposed_tools_in_the_decision(replay_gateway, examples, monkeypatch):
    make, _, _ = replay_gateway
    seen = []

    def first_tool_only(messages, tools, caller):
        seen.append(caller)
        return [t.name for t in tools[:1]]

    acme = "sk-sc-test-acme-support-0123456789abcdef"
    use_keys(monkeypatch, {"id": "acme", "key": acme, "caller": {"tenant": "acme", "roles": ["support"]}})
    url = make(tool_selector=first_tool_only)
    ex = next(e for e in examples if len(e.tools) > 1)
    body = {"messages": openai_body(ex)["messages"], "tools": openai_body(ex)["tools"], "constraints": {"caller": "acme"}}
    r = post(url + "/v1/route", json=body, timeout=30, headers=bearer(acme))
    # The hook gets the key's identity narrowed by the body: a string is the tenant alone, without the key's roles.
    assert r.status_code == 200 and r.json()["tools"] == [ex.tools[0].name] and seen == [Caller(tenant="acme")]
    r = post(url + "/v1/route", json=body, timeout=30)  # the anonymous test key may not claim a tenant
    assert r.status_code == 403 and r.json()["error"]["param"] == "constraints.caller" and len(seen) == 1


def test_serving_config_loads_with_overrides_and_names_bad_fields():
    from data.errors import DataError
    from serving.gateway.config import load_serving_config

    cfg = load_serving_config(REPO / "configs" / "serving.yaml", ["router.backend=triton-grpc",
                                                                  "router.triton_url=127.0.0.1:8001"])
    assert cfg.host == "127.0.0.1" and cfg.router.backend == "triton-grpc" and cfg.upstream.max_attempts == 3
    with pytest.raises(DataError, match="needs router.triton_url"):
        load_serving_config(REPO / "configs" / "serving.yaml", ["router.backend=triton-http"])
    # A bad value set on the command line is named there, not at an unrelated line of the file.
    with pytest.raises(DataError, match=r"<command line>: field 'router.threads': .* \(the override 'router.threads=x'\)"):
        load_serving_config(REPO / "configs" / "serving.yaml", ["router.threads=x"])
    with pytest.raises(DataError, match=r"<command line>: field 'bogus': Extra inputs .* \(the override 'bogus.key=1'\)"):
        load_serving_config(REPO / "configs" / "serving.yaml", ["bogus.key=1"])
    cfg = load_serving_config(REPO / "configs" / "serving.yaml", ["router.rule=lambda", "router.lam=0.0016"])
    assert (cfg.router.rule, cfg.router.lam) == ("lambda", 0.0016)
    with pytest.raises(DataError, match="router.lam"):
        load_serving_config(REPO / "configs" / "serving.yaml", ["router.lam=-1"])


def test_a_bad_field_in_the_serving_file_is_named_by_its_line_whatever_the_overrides(tmp_path):
    from data.errors import DataError
    from serving.gateway.config import load_serving_config

    path = tmp_path / "serving.yaml"
    path.write_text("host: 127.0.0.1\nport: 8080\nupstream:\n  max_attempts: 0\n")
    with pytest.raises(DataError, match=r"serving.yaml:4: field 'upstream.max_attempts'"):
        load_serving_config(path, ["port=9000"])


def test_client_serves_the_lambda_rule_when_asked(exported, examples):
    from serving.gateway.requests import to_schema

    lam = RouterClient.from_dir(exported[0], threads=1, rule="lambda", lam=0.002)
    assert (lam.policy.rule, lam.policy.lam) == ("lambda", 0.002)
    for ex in examples:
        body = openai_body(ex)
        d = lam.route(*to_schema(body["messages"], body["tools"])).decision
        utility = {m: 0.002 * d.probabilities[m] - d.costs[m] for m in lam.models}
        assert d.rule == "lambda" and d.chosen == max(lam.models, key=lambda m: (utility[m], -d.costs[m]))

def test_readyz_is_not_ready_while_no_pool_model_has_its_provider_key(client, monkeypatch):
    pool = load_pool(REPO / "configs" / "pool.yaml")
    use_keys(monkeypatch)
    for m in pool.models:
        if m.api_key_env:
            monkeypatch.delenv(m.api_key_env, raising=False)
    with Loopback(create_app(ServingConfig(), client=client, pool=pool)) as url:
        r = httpx.get(url + "/readyz")
        assert r.status_code == 503 and r.json()["credentials"] is False
        assert "export the variables the pool file names" in r.json()["reason"] and "OPENAI_API_KEY" in r.json()["reason"]
        assert set(httpx.get(url + "/readyz", headers=AUTH).json()["missing_credentials"]) == set(pool.names)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        r = httpx.get(url + "/readyz", headers=AUTH)
        assert r.status_code == 200 and r.json()["ready"] and "gpt-4o-2024-08-06-FC" not in r.json()["missing_credentials"]
