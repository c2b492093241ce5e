"""A wire API that exists only in this file, registered here and then spoken by every part that speaks APIs.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_wire_registry.py

`echo_json` is a made-up provider API: POST <base_url>/echo with `turns` and `tools` ({fn, about, schema}), the
key in `x-echo-key`; its answer is `{kind: "echo", parts: [{said} | {did, id, args}], usage: {in, out, cached}}`;
its stream is `echo.start`, `echo.said` / `echo.did` per part, `echo.end`. Its outbound half (a WireApi) and
its inbound half (an Api at POST /v1/echo) are registered by the `echo` fixture and removed after; no other
module names it. Then, on real recorded BFCL v1 answers: a pool file may say `api: echo_json`; the pool runner
asks the replay server in it and stores the recordings unchanged; the replay server answers and streams in it;
the gateway calls a pool model in it (JSON and streamed) and serves callers who speak it (JSON, its stream, its
error shape, its token count and model list). A part that bypassed the registry would send another API's body
to another path, and the replay server's log of the API each request came in would say so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.responses import JSONResponse, Response

from data.pool import load_pool
from data.pool_runner import run_pool
from data.replay.serve import ReplayServer, build_state
from data.schema import read_outputs
from data.wire import StreamDecoder, registry as wire_registry, sse_events
from data.wire.common import ChunkMaker, answer_blocks, chat_answer, sse, text_of, usage_numbers
from data.wire.raw import WireError
from data.wire.registry import WireApi
from serving.core.errors import GatewayError, bad
from serving.gateway.apis import Api, Inbound, Reply, event_stream, registry as inbound_registry
from tests.serving.gateway.helpers import B, POOL, decoded, pool_env, replay_app
from tests.serving.helpers import KEY, SECRET, Loopback, openai_body

pytestmark = pytest.mark.integration
ECHO = "echo_json"


# The outbound half: a chat request in echo_json, its answers and stream read back, a recording answered in it.

def echo_request(chat: dict[str, Any]) -> dict[str, Any]:
    turns = []
    for m in chat.get("messages") or []:
        turn = {"who": m.get("role"), "said": text_of(m.get("content"))}
        if m.get("tool_calls"):
            turn["did"] = [{"did": c["function"]["name"], "id": c.get("id"), "args": c["function"]["arguments"]}
                           for c in m["tool_calls"]]
        turns.append(turn)
    out = {"model": chat.get("model"), "turns": turns, "stream": chat.get("stream") is True,
           "tools": [{"fn": t["function"]["name"], "about": t["function"].get("description") or "",
                      "schema": t["function"].get("parameters") or {"type": "object"}} for t in chat.get("tools") or []]}
    meta = chat.get("metadata")
    if isinstance(meta, dict) and meta.get("example_id"):
        out["tag"] = meta["example_id"]
    return out


def chat_usage(u: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt_tokens": u["in"], "completion_tokens": u["out"], "total_tokens": u["in"] + u["out"]}
    return out | ({"prompt_tokens_details": {"cached_tokens": u["cached"]}} if u["cached"] else {})


def echo_answer(data: dict[str, Any]) -> dict[str, Any]:
    if data.get("kind") != "echo" or not isinstance(data.get("parts"), list):
        raise WireError("response is not an echo answer (kind 'echo' with a parts list)")
    parts, calls = [], []
    for p in data["parts"]:
        if "said" in p:
            parts.append({"type": "text", "text": p["said"]})
        else:
            calls.append({"id": p["id"], "type": "function", "function": {"name": p["did"], "arguments": p["args"]}})
            parts.append({"type": "tool_call", "id": p["id"]})
    usage = chat_usage(data["usage"]) if data.get("usage") else None
    return chat_answer(data, parts, calls, "tool_calls" if calls else "stop", usage)


def echo_body(message: dict[str, Any], usage: dict[str, int], model: str) -> dict[str, Any]:
    parts = [{"said": b["text"]} if b["type"] == "text" else {"did": b["name"], "id": b["id"] or f"echo_{i}",
                                                              "args": b["arguments"]}
             for i, b in enumerate(answer_blocks(message))]
    return {"kind": "echo", "id": "echo-1", "model": model, "parts": parts,
            "usage": {"in": usage["input"], "out": usage["output"], "cached": usage["cached"]}}


def echo_from_chat(chat: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
    return echo_body(chat["choices"][0]["message"], usage_numbers(chat.get("usage")), chat["model"])


def echo_events(body: dict[str, Any], last: dict[str, Any] | None = None) -> Iterator[bytes]:
    yield sse("echo.start", {"id": body["id"], "model": body["model"]})
    for p in body["parts"]:
        yield sse("echo.said" if "said" in p else "echo.did", p)
    yield sse("echo.end", {"usage": body.get("usage"), **(last or {})})


class EchoChunks(ChunkMaker):
    def feed(self, kind: str | None, data: dict[str, Any]) -> list[dict[str, Any]]:
        if kind == "echo.start":
            self.id, self.model = data.get("id"), data.get("model")
            return [self.chunk({"role": "assistant", "content": ""})]
        if kind == "echo.said":
            return [self.chunk({"content": data.get("said") or ""})]
        if kind == "echo.did":
            k = self.calls[len(self.calls)] = len(self.calls)
            return [self.chunk({"tool_calls": [{"index": k, "id": data.get("id"), "type": "function",
                                                "function": {"name": data.get("did"), "arguments": data.get("args")}}]})]
        if kind == "echo.end":
            self.done = True
            usage = [self.chunk(usage=chat_usage(data["usage"]))] if data.get("usage") else []
            return [self.chunk({}, "tool_calls" if self.calls else "stop"), *usage]
        return []


def echo_view(body: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"example_id": body.get("tag")}, "tools": [t.get("fn") for t in body.get("tools") or []],
            "messages": [{"role": "user", "content": t["said"]} for t in body.get("turns") or []
                         if t.get("who") == "user"]}


WIRE = WireApi(ECHO, "/echo", echo_request, echo_answer, echo_from_chat, match_view=echo_view, stream=EchoChunks,
               events=echo_events, key_header="x-echo-key")


# The inbound half: callers speaking echo_json to the gateway.

def echo_inbound(body: dict[str, Any]) -> Inbound:
    turns = body.get("turns")
    if not isinstance(turns, list) or not turns:
        raise bad("is required: a non-empty list of {who, said}", "turns")
    messages = []
    for i, t in enumerate(turns):
        if not isinstance(t, dict) or t.get("who") not in ("system", "user", "assistant") or \
                not isinstance(t.get("said"), str):
            raise bad("must be {who: system | user | assistant, said: text}", f"turns[{i}]")
        messages.append({"role": t["who"], "content": t["said"]})
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if body.get("tools"):
        chat["tools"] = [{"type": "function", "function": {"name": t["fn"], "description": t.get("about", ""),
                                                           "parameters": t.get("schema")}} for t in body["tools"]]
    return Inbound(chat, body.get("stream") is True, [f"turns[{i}]" for i in range(len(turns))], messages="turns")


def echo_reply(r: Reply) -> Response:
    message, _ = r.choice()
    body = echo_body(message, usage_numbers(r.body.get("usage")), r.model)
    if r.stream:
        return event_stream(echo_events(body, {"switchcraft": r.trace()}), r.headers)
    return JSONResponse({**body, "switchcraft": r.trace()}, headers=r.headers)


def echo_error(e: GatewayError) -> dict[str, Any]:
    return {"echo_error": {"why": e.message, "field": e.param}}


INBOUND = Api(name=ECHO, path="/v1/echo", endpoint="echo", inbound=echo_inbound, reply=echo_reply,
              error_body=echo_error, key_header="x-echo-key", count_path="/v1/echo/count",
              count_body=lambda n: {"echo_tokens": n}, models_header="x-echo-client",
              models_body=lambda names: {"echo_models": names})


@pytest.fixture(scope="module")
def echo():
    """echo_json registered on both sides for this module's tests, and taken out after them."""
    wire_registry.register(WIRE)
    inbound_registry.register(INBOUND)
    yield
    inbound_registry.INBOUND.remove(ECHO)
    wire_registry.WIRE_APIS.remove(ECHO)


@pytest.fixture(scope="module")
def echo_replay(echo, cascade_examples, pool_recordings):
    """A replay server over the real recordings, started once echo_json is registered (so it serves /v1/echo)."""
    state = build_state(None, cascade_examples, pool=POOL, api_key=SECRET, recordings=pool_recordings)
    with ReplayServer(state) as server:
        yield server


def expected(state, ex) -> list[tuple[str, dict]]:
    return [(c.name, c.arguments) for c in decoded(state, B, ex)]


def apis_seen(state, since: int) -> set[str]:
    return {e["api"] for e in state.stats()["events"][since:]}


def test_the_registries_list_the_new_api_and_an_inbound_half_needs_an_outbound_one(echo):
    assert ECHO in wire_registry.names() and ECHO in inbound_registry.names()
    assert inbound_registry.names() == wire_registry.names()  # every API has both halves here
    with pytest.raises(ValueError, match="inbound API 'morse' .*has no wire API of that name.*echo_json"):
        inbound_registry.register(Api(name="morse", path="/v1/morse"))


def test_a_pool_file_may_name_it_and_the_runner_asks_the_replay_server_in_it(echo_replay, cascade_examples, tmp_path,
                                                                              monkeypatch):
    monkeypatch.setenv("ECHO_KEY", SECRET)
    m = POOL.get(B)
    f = tmp_path / "pool.yaml"
    f.write_text(f"models:\n  - name: {m.name}\n    model_id: {m.endpoint_model}\n    recorded_as: {m.recording}\n"
                 f"    base_url: {echo_replay.base_url}\n    api: {ECHO}\n    api_key_env: ECHO_KEY\n"
                 "    max_retries: 0\n    prices: {usd_per_query: 0.001}\n")
    pool = load_pool(f)
    recorded = echo_replay.state.recordings[m.recording]
    examples = [ex for ex in cascade_examples if ex.id in recorded][:6]
    since = len(echo_replay.state.stats()["events"])
    summary = run_pool(pool, examples, tmp_path / "calls.sqlite", out=tmp_path / "out.parquet", progress=False)
    assert summary.complete and summary.calls_made == len(examples) == 6
    assert apis_seen(echo_replay.state, since) == {ECHO}
    outputs = read_outputs(tmp_path / "out.parquet")
    assert sorted((o.example_id, o.raw) for o in outputs) == sorted((ex.id, recorded[ex.id].raw) for ex in examples)


def test_the_replay_server_streams_a_recording_as_the_new_apis_events(echo_replay, picked):
    ex = picked["agree"]
    body = echo_request(openai_body(ex, POOL.get(B).endpoint_model, stream=True))
    r = httpx.post(echo_replay.base_url + "/echo", json=body, headers={"x-echo-key": SECRET}, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = list(sse_events(r.text.splitlines()))
    assert [e for e, _ in events][0] == "echo.start" and events[-1][0] == "echo.end"
    decoder, chunks = StreamDecoder(ECHO), []
    for event, data in events:
        chunks += decoder.feed(event, data)
    assert decoder.done and chunks[-1]["usage"]["prompt_tokens"] > 0
    calls = [c["delta"]["tool_calls"][0]["function"] for ch in chunks for c in ch["choices"]
             if c["delta"].get("tool_calls")]
    recorded = echo_replay.state.recordings[POOL.get(B).recording][ex.id].raw
    assert [{c["name"]: c["arguments"]} for c in calls] == recorded


@pytest.fixture
def gateway(echo_replay, client, monkeypatch):
    """A gateway (created after the registration) whose pool model B speaks echo_json to the replay server."""
    pool_env(monkeypatch)
    with Loopback(replay_app(client, echo_replay, apis={B: ECHO})) as url:
        yield url


def test_the_gateway_calls_a_pool_model_in_the_new_api(gateway, echo_replay, picked):
    ex, state = picked["agree"], echo_replay.state
    since = len(state.stats()["events"])
    r = httpx.post(gateway + "/v1/chat/completions", json=openai_body(ex, B), headers={"authorization": f"Bearer {KEY}"},
                   timeout=60)
    assert r.status_code == 200, r.text
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
             for c in r.json()["choices"][0]["message"]["tool_calls"]]
    assert calls == expected(state, ex) and calls
    assert r.json()["usage"]["prompt_tokens"] == state.recordings[POOL.get(B).recording][ex.id].usage.input_tokens
    with httpx.stream("POST", gateway + "/v1/chat/completions", json=openai_body(ex, B, stream=True),
                      headers={"authorization": f"Bearer {KEY}"}, timeout=60) as s:
        lines = [line[6:] for line in s.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    deltas = [c["delta"] for line in lines[:-1] for c in json.loads(line)["choices"]]
    streamed = [(d["tool_calls"][0]["function"]["name"], json.loads(d["tool_calls"][0]["function"]["arguments"]))
                for d in deltas if d.get("tool_calls")]
    assert streamed == calls
    assert apis_seen(state, since) == {ECHO}  # both calls went out in echo_json


def test_the_gateway_serves_callers_that_speak_the_new_api(gateway, echo_replay, picked):
    ex, state = picked["agree"], echo_replay.state
    headers = {"x-echo-key": KEY}  # the API's own key header
    body = {k: v for k, v in echo_request(openai_body(ex, B)).items() if k not in ("tag", "stream")}
    r = httpx.post(gateway + "/v1/echo", json=body, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["kind"] == "echo" and answer["model"] == B and answer["switchcraft"]["chosen"] == B
    assert [(p["did"], json.loads(p["args"])) for p in answer["parts"]] == expected(state, ex)
    with httpx.stream("POST", gateway + "/v1/echo", json={**body, "stream": True}, headers=headers, timeout=60) as s:
        events = list(sse_events(s.iter_lines()))
    assert [e for e, _ in events] == ["echo.start", *["echo.did"] * len(answer["parts"]), "echo.end"]
    assert events[-1][1]["switchcraft"]["chosen"] == B
    refused = httpx.post(gateway + "/v1/echo", json={**body, "turns": []}, headers=headers, timeout=30)
    assert refused.status_code == 400 and refused.json()["echo_error"]["field"] == "turns"
    counted = httpx.post(gateway + "/v1/echo/count", json=body, headers=headers, timeout=30)
    assert counted.status_code == 200 and counted.json()["echo_tokens"] > 0
    models = httpx.get(gateway + "/v1/models", headers={**headers, "x-echo-client": "1"}, timeout=30)
    assert models.status_code == 200 and models.json()["echo_models"][0] == "router" and B in models.json()["echo_models"]
    assert "x-switchcraft-overhead-ms" in r.headers
    metrics = httpx.get(gateway + "/metrics", headers={"authorization": f"Bearer {KEY}"}, timeout=30).text
    assert 'switchcraft_requests_total{endpoint="echo",status="200"}' in metrics  # its label, from its registration
    assert 'switchcraft_gateway_overhead_seconds_count{endpoint="echo"}' in metrics
