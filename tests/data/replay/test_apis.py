"""The pool runner against the replay server in each provider API (Chat Completions, Messages, Responses).

.venv/bin/python -m pytest -q tests/data/replay/test_apis.py

Tiny recordings built here: a call, a text answer, text then a call and a call then text (order kept), one with
cache counts and one without token counts. Each pool model speaks one API; the runner's stored answers equal the
recordings (raw, usage, cost), and the replay server answers each API's own shape, streamed as its events.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from data.pool import Pool
from data.pool_runner import run_pool
from data.wire import StreamDecoder, sse_events
from data.replay import ReplayState
from data.replay.recordings import ExampleIndex, Recording
from data.replay.serve import ReplayServer
from data.schema import Example, Expected, Message, Tool, Usage, read_outputs

APIS = ("openai_chat", "anthropic_messages", "openai_responses")
TOOL = Tool(name="math.factorial", description="n!", parameters={"type": "object",
                                                                  "properties": {"n": {"type": "integer"}}})
RAWS = {
    "t:call": [{"math_factorial": '{"n": 5}'}],
    "t:text": "I cannot help with that.",
    "t:text_call": ["Let me compute.", {"math_factorial": '{"n": 3}'}],
    "t:call_text": [{"math_factorial": '{"n": 4}'}, "Done."],
    "t:cached": [{"math_factorial": '{"n": 7}'}],
    "t:unknown": [{"math_factorial": '{"n": 9}'}],
}
USAGE = {"t:cached": Usage(input_tokens=1200, output_tokens=20, cached_input_tokens=1000),
         "t:unknown": Usage()}


def examples() -> list[Example]:
    return [Example(id=i, source="t", category="simple", messages=[Message(role="user", content=f"question {i}")],
                    tools=[TOOL], expected=Expected.nothing()) for i in RAWS]


def recordings() -> dict:
    return {"rec": {i: Recording(raw, USAGE.get(i, Usage(input_tokens=100 + k, output_tokens=10 + k)))
                    for k, (i, raw) in enumerate(RAWS.items())}}


@pytest.fixture(scope="module")
def server():
    with ReplayServer(ReplayState(recordings(), ExampleIndex(examples()), api_key="sk-replay-key")) as srv:
        yield srv


def pool(srv) -> Pool:
    prices = {"input_per_mtok": 1.0, "output_per_mtok": 4.0, "cached_input_per_mtok": 0.1}
    return Pool.model_validate({"models": [
        {"name": api, "model_id": "rec", "api": api, "base_url": srv.model_url("rec"), "prices": prices,
         "api_key_env": "REPLAY_KEY", "max_retries": 0} for api in APIS]})


def test_the_runner_gets_every_recording_back_in_each_api(server, tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAY_KEY", "sk-replay-key")
    p = pool(server)
    summary = run_pool(p, examples(), tmp_path / "calls.sqlite", out=tmp_path / "out.parquet", progress=False)
    assert summary.complete and summary.calls_made == len(APIS) * len(RAWS)
    recs = recordings()["rec"]
    outputs = read_outputs(tmp_path / "out.parquet")
    assert len(outputs) == len(APIS) * len(RAWS)
    for o in outputs:
        rec = recs[o.example_id]
        assert o.raw == rec.raw, (o.model, o.example_id)
        # Messages and Responses always state their cache counts (0 where the recording says nothing)
        stated = {k: getattr(o.usage, k) or None for k in ("cached_input_tokens", "cache_write_tokens")}
        assert o.usage.model_copy(update=stated) == rec.usage, (o.model, o.example_id)
    # cached input priced at its own price: 200 fresh + 1,000 cached + 20 output
    cached = {o.model: p.cost_usd(o.model, o.usage) for o in outputs if o.example_id == "t:cached"}
    assert list(cached.values()) == [pytest.approx((200 * 1.0 + 1000 * 0.1 + 20 * 4.0) / 1e6)] * len(APIS)


def test_each_api_is_answered_in_its_own_shape_with_the_official_clients(server):
    base = f"http://{server.host}:{server.port}/models/rec/v1"
    q = {"role": "user", "content": "question t:call"}
    a = anthropic.Anthropic(base_url=base.removesuffix("/v1"), api_key="sk-replay-key", max_retries=0)
    msg = a.messages.create(model="rec", max_tokens=100, messages=[q],
                            tools=[{"name": "math_factorial", "input_schema": TOOL.parameters}])
    assert [(b.type, b.name, b.input) for b in msg.content] == [("tool_use", "math_factorial", {"n": 5})]
    assert msg.stop_reason == "tool_use" and msg.usage.input_tokens == 100
    with a.messages.stream(model="rec", max_tokens=100, messages=[q]) as s:
        final = s.get_final_message()
    assert [(b.type, b.input) for b in final.content] == [("tool_use", {"n": 5})]
    o = openai.OpenAI(base_url=base, api_key="sk-replay-key", max_retries=0)
    r = o.responses.create(model="rec", input=[q])
    assert [(i.type, i.name, i.arguments) for i in r.output] == [("function_call", "math_factorial", '{"n": 5}')]
    assert r.usage.input_tokens == 100
    kinds = [e.type for e in o.responses.create(model="rec", input=[q], stream=True)]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"


@pytest.mark.parametrize("api", APIS[1:])
def test_a_native_stream_decodes_to_chat_chunks_with_cached_usage(server, api):
    path = "/messages" if api == "anthropic_messages" else "/responses"
    body = ({"model": "rec", "max_tokens": 100, "messages": [{"role": "user", "content": "question t:cached"}],
             "stream": True} if api == "anthropic_messages" else
            {"model": "rec", "input": "question t:cached", "stream": True})
    r = httpx.post(server.model_url("rec") + path, json=body, headers={"authorization": "Bearer sk-replay-key"})
    assert r.headers["content-type"].startswith("text/event-stream")
    decoder, chunks = StreamDecoder(api), []
    for event, data in sse_events(r.text.splitlines()):
        chunks += decoder.feed(event, data)
    assert decoder.done
    args = "".join(tc["function"].get("arguments") or "" for c in chunks for ch in c["choices"]
                   for tc in ch["delta"].get("tool_calls") or [])
    assert json.loads(args) == {"n": 7}
    assert [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]] == ["tool_calls"]
    assert chunks[-1]["usage"]["prompt_tokens"] == 1200
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 1000
