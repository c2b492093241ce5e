"""The gateway calls each pool model in its provider's API: real recorded BFCL v1 answers from the replay server.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_apis_outbound.py

The pool's models are given `api: anthropic_messages` (a prompt-style model and a native one) and
`api: openai_responses` (a native one); the replay server answers each on its own path. Through POST
/v1/chat/completions (streamed and not), POST /v1/messages and a cascade, the calls come back equal to the
recorded answer, each upstream call arrived in its model's API, and what is charged is the recording's usage ×
the pool's prices, in the headers, the last stream chunk and the spend ledger.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.serving.gateway.helpers import A, B, POOL, TOP, replay_app, cost_of, decoded, pool_env
from tests.serving.helpers import AUTH, Loopback, openai_body, post, stream

pytestmark = pytest.mark.integration
APIS = {A: "anthropic_messages", B: "openai_responses", TOP: "anthropic_messages"}


@pytest.fixture(scope="module")
def served(cascade_replay, client):
    good, _, _ = cascade_replay
    mp = pytest.MonkeyPatch()
    pool_env(mp)
    with Loopback(replay_app(client, good, apis=APIS)) as url:
        yield url, good
    mp.undo()


def ledger_usd(url: str, rid: str) -> float:
    r = httpx.get(url + "/v1/admin/spend", params={"key": "test"}, headers=AUTH, timeout=10)
    return sum(row["usd"] for row in r.json()["rows"] if row["request_id"] == rid)


def apis_called(state, since: int) -> dict[str, str]:
    """recording → the API its last request came in, for the requests after `since`."""
    recording = {m.recording: m.name for m in POOL.models}
    return {recording[e["model"]]: e["api"] for e in state.stats()["events"][since:]}


def expected(good, model, ex) -> list[tuple[str, dict]]:
    return [(c.name, c.arguments) for c in decoded(good.state, model, ex)]


@pytest.mark.parametrize("model", [A, B, TOP])
def test_a_pool_model_is_called_in_its_api_and_charged_its_recorded_usage(served, picked, model):
    url, good = served
    ex = picked["agree"]
    since = len(good.state.stats()["events"])
    r = post(url + "/v1/chat/completions", json=openai_body(ex, model), timeout=60)
    assert r.status_code == 200, r.text
    assert apis_called(good.state, since) == {model: APIS[model]}
    calls = [(tc["function"]["name"], json.loads(tc["function"]["arguments"]))
             for tc in r.json()["choices"][0]["message"]["tool_calls"]]
    assert calls == expected(good, model, ex) and calls
    cost = float(r.headers["x-switchcraft-cost-usd"])
    assert cost == pytest.approx(cost_of(good.state, model, ex), abs=1e-9) and cost > 0
    assert float(r.headers["x-switchcraft-cost-estimated-usd"]) == 0
    assert ledger_usd(url, r.headers["x-request-id"]) == pytest.approx(cost, abs=1e-9)
    rec = good.state.recordings[POOL.get(model).recording][ex.id]
    assert r.json()["usage"]["prompt_tokens"] == rec.usage.input_tokens


@pytest.mark.parametrize("model", [B, TOP])
def test_a_native_stream_reaches_a_chat_caller_as_chunks_and_is_charged_its_usage(served, picked, model):
    url, good = served
    ex = picked["agree"]
    since = len(good.state.stats()["events"])
    with stream("POST", url + "/v1/chat/completions", json=openai_body(ex, model, stream=True), timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
        rid = r.headers["x-request-id"]
    assert lines[-1] == "[DONE]" and apis_called(good.state, since) == {model: APIS[model]}
    chunks = [json.loads(line) for line in lines[:-1]]
    calls: dict[int, dict] = {}
    for c in chunks:
        for ch in c["choices"]:
            for tc in ch["delta"].get("tool_calls") or []:
                slot = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
                slot["name"] += tc.get("function", {}).get("name") or ""
                slot["arguments"] += tc.get("function", {}).get("arguments") or ""
    got = [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())]
    assert got == expected(good, model, ex) and got
    assert {c["model"] for c in chunks} == {model} and "switchcraft" in chunks[0]
    charged = chunks[-1]["switchcraft"]
    assert charged["cost_usd"] == pytest.approx(cost_of(good.state, model, ex), abs=1e-9)
    assert charged["cost_estimated_usd"] == 0 and charged["charges"][-1]["kind"] == "answer"
    assert ledger_usd(url, rid) == pytest.approx(charged["cost_usd"], abs=1e-9)


def test_a_messages_caller_served_by_a_responses_model_and_a_cascade_across_apis(served, picked):
    url, good = served
    ex = picked["agree"]
    body = {"model": B, "max_tokens": 512, "messages": [{"role": "user", "content": ex.messages[-1].content}],
            "tools": [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in ex.tools]}
    since = len(good.state.stats()["events"])
    r = post(url + "/v1/messages", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert apis_called(good.state, since) == {B: "openai_responses"}
    msg = r.json()
    assert [(b["name"], b["input"]) for b in msg["content"] if b["type"] == "tool_use"] == expected(good, B, ex)
    rec = good.state.recordings[POOL.get(B).recording][ex.id]
    assert (msg["usage"]["input_tokens"], msg["usage"]["output_tokens"]) == (rec.usage.input_tokens,
                                                                            rec.usage.output_tokens)
    since = len(good.state.stats()["events"])
    r = post(url + "/v1/chat/completions", timeout=60, json=openai_body(
        ex, switchcraft={"strategy": {"first": [A, B], "escalate": [TOP]}}))
    assert r.status_code == 200, r.text
    assert apis_called(good.state, since) == {A: APIS[A], B: APIS[B]}
    cost = float(r.headers["x-switchcraft-cost-usd"])
    assert cost == pytest.approx(cost_of(good.state, A, ex) + cost_of(good.state, B, ex), abs=1e-9)
    assert ledger_usd(url, r.headers["x-request-id"]) == pytest.approx(cost, abs=1e-9)
