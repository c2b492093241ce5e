"""A streamed request on one model reaches the caller as the upstream produces it, in all three APIs, passed
through or translated: the official clients get the first token before the upstream's pause elapses.

    .venv/bin/python -m pytest -q -s tests/serving/gateway/test_live_streams.py    # -s prints the TTFT figures

The stand-in provider (native_upstream.py) sends its first token at once and the rest `DELAY_S` (1 s) later. Each
test reads the stream with the official client (`anthropic` messages.stream, `openai` responses.stream and
chat.completions.stream), once from the stand-in directly and once through the gateway: the time to the first
token through the gateway must be the upstream's plus the gateway's own work, far under the pause. A passed-through
stream is the provider's events byte for byte but the last, which carries the trace and what was charged.
"""

from __future__ import annotations

import json
import time

import anthropic
import httpx
import openai
import pytest

from data.wire import chat_completion
from data.wire.raw import usage_from_wire
from serving.app import create_app
from serving.gateway.config import ServingConfig
from tests.serving.gateway.helpers import ledger, pool_env
from tests.serving.gateway.native_upstream import (DELAY_S, FIRST, MESSAGE, REST, SIGNATURE, THINKING, NativeUpstream,
                                                   message_events, response_events)
from tests.serving.gateway.test_passthrough import APIS, CHAT_MODEL, MESSAGES_MODEL, POOL, RESPONSES_MODEL, pool_behind
from tests.serving.helpers import KEY, Loopback, wait_for

pytestmark = pytest.mark.integration
USER = {"role": "user", "content": "Weather in Paris?"}
WEATHER = {"name": "get_weather", "description": "Weather now.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def live(client):
    """(gateway URL, stand-in URL, the stand-in)."""
    upstream = NativeUpstream()
    mp = pytest.MonkeyPatch()
    pool_env(mp)
    with Loopback(upstream.app()) as up, Loopback(create_app(ServingConfig(), client=client,
                                                             pool=pool_behind(up))) as url:
        for api in ("chat", "messages", "responses"):  # the clients' first stream builds their event types: not timed
            timed(api, up, "warm-up")
        yield url, up, upstream
    mp.undo()


def timed(api: str, base: str, model: str) -> tuple[float, float, str]:
    """(seconds to the first text delta, seconds to the end, the whole text) of `api`'s stream read by its
    official client at `base`."""
    t0, first = time.perf_counter(), None
    if api == "messages":
        with anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0, timeout=30).messages.stream(
                model=model, max_tokens=100, messages=[USER]) as s:
            for event in s:
                if event.type == "text" and first is None:
                    first = time.perf_counter() - t0
            text = "".join(b.text for b in s.get_final_message().content if b.type == "text")
    elif api == "responses":
        with openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0, timeout=30).responses.stream(
                model=model, input=[USER]) as s:
            for event in s:
                if event.type == "response.output_text.delta" and first is None:
                    first = time.perf_counter() - t0
            text = s.get_final_response().output_text
    else:
        with openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0, timeout=30).chat.completions.stream(
                model=model, messages=[USER]) as s:
            for event in s:
                if event.type == "content.delta" and first is None:
                    first = time.perf_counter() - t0
            text = s.get_final_completion().choices[0].message.content
    return first, time.perf_counter() - t0, text


OWN_API = {"openai_chat": "chat", "anthropic_messages": "messages", "openai_responses": "responses"}
CASES = [("chat", CHAT_MODEL, "passed through"), ("chat", MESSAGES_MODEL, "Messages upstream, decoded"),
         ("messages", MESSAGES_MODEL, "passed through"), ("messages", CHAT_MODEL, "translated"),
         ("messages", RESPONSES_MODEL, "translated"), ("responses", RESPONSES_MODEL, "passed through"),
         ("responses", CHAT_MODEL, "translated"), ("responses", MESSAGES_MODEL, "translated")]


@pytest.mark.parametrize("api, model, route", CASES)
def test_the_first_token_arrives_before_the_upstreams_pause(live, api, model, route):
    url, up, _ = live
    direct = timed(OWN_API[APIS.get(model, 'openai_chat')], up, POOL.get(model).model_id)  # the stand-in alone, in its API
    first, total, text = timed(api, url, model)
    print(f"\nTTFT {api} ← {model} ({route}): gateway {first * 1e3:.0f} ms, upstream alone {direct[0] * 1e3:.0f} ms "
          f"(+{(first - direct[0]) * 1e3:.0f} ms); whole answer {total:.2f} s")
    assert text == FIRST + REST
    assert first < DELAY_S / 2 < DELAY_S <= total  # the first token came before the upstream's pause ended


def events_of(raw: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in raw.split(b"\n\n") if e.strip()]


@pytest.mark.parametrize("path, model, made", [("messages", MESSAGES_MODEL, message_events),
                                               ("responses", RESPONSES_MODEL, response_events)])
def test_a_passed_through_stream_is_the_providers_events_the_last_with_the_trace(live, path, model, made):
    url, _, upstream = live
    body = {"model": model, "stream": True, **({"max_tokens": 100, "messages": [USER]} if path == "messages"
                                               else {"input": "Weather in Paris?", "max_output_tokens": 100})}
    with httpx.stream("POST", f"{url}/v1/{path}", json=body, timeout=30, headers={
            "authorization": f"Bearer {KEY}", "anthropic-beta": "fine-grained-tool-streaming-2025-05-14"}) as r:
        assert r.status_code == 200, r.read()
        raw, headers = r.read(), r.headers
    first, rest = made()
    sent, got = first + rest, events_of(raw)
    assert got[:-1] == sent[:-1]  # as the provider sent them
    last, theirs = (json.loads(e.split(b"data: ", 1)[1]) for e in (got[-1], sent[-1]))
    trace = last.pop("switchcraft") if path == "messages" else last["response"].pop("switchcraft")
    assert last == theirs and trace["answered_by"] == model and "x-switchcraft-cost-usd" not in headers
    assert ("anthropic-beta" in upstream.seen[-1][2]) is (path == "messages")
    answer = MESSAGE if path == "messages" else json.loads(sent[-1].split(b"data: ", 1)[1])["response"]
    cost = POOL.cost_usd(model, usage_from_wire(chat_completion(APIS[model], answer)["usage"]))
    assert cost > 0 and trace["charged_usd"] == pytest.approx(cost, abs=1e-10)  # the usage in its events
    rows = wait_for(lambda: ledger(url, headers["x-request-id"]))
    assert [(row["model"], row["kind"]) for row in rows] == [(model, "answer")]
    assert rows[0]["usd"] == pytest.approx(cost, abs=1e-10)


def test_a_streamed_thinking_block_keeps_its_signature_through_the_anthropic_client(live):
    url, _, _ = live
    client = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0)
    with client.messages.stream(model=MESSAGES_MODEL, max_tokens=2000, messages=[USER],
                                thinking={"type": "enabled", "budget_tokens": 1024}) as s:
        final = s.get_final_message()
    assert (final.content[0].type, final.content[0].thinking, final.content[0].signature) == (
        "thinking", THINKING, SIGNATURE)
    assert (final.usage.input_tokens, final.usage.cache_read_input_tokens, final.usage.output_tokens) == (40, 100, 7)


def test_a_translated_stream_renders_calls_as_they_come(live):
    """A chat model's streamed call, to a Messages caller as a tool_use block and to a Responses caller as a
    function_call item inside its namespace or a custom tool's call, each opened before the arguments end."""
    url, _, _ = live
    client = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0)
    t0 = time.perf_counter()
    with client.messages.stream(model=CHAT_MODEL, max_tokens=100,
                                messages=[{"role": "user", "content": "CALL get_weather"}],
                                tools=[{"name": "get_weather", "input_schema": WEATHER["parameters"]}]) as s:
        opened = next(time.perf_counter() - t0 for e in s if e.type == "content_block_start")
        final = s.get_final_message()
    assert opened < DELAY_S / 2 and final.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in final.content] == [("tool_use", "get_weather", {"city": "Paris"})]
    responses = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    namespace = {"type": "namespace", "name": "mcp__files", "description": "Files.",
                 "tools": [{"type": "function", **WEATHER}]}
    custom = {"type": "custom", "name": "apply_patch", "description": "Patch files."}
    for said, tools in (("CALL mcp__files__get_weather", [namespace]), ("CALL apply_patch", [custom])):
        with responses.responses.stream(model=CHAT_MODEL, input=said, tools=tools) as s:
            done = s.get_final_response()
        item = done.output[0].model_dump(exclude_none=True)
        if said.endswith("apply_patch"):
            assert (item["type"], item["name"], item["input"]) == ("custom_tool_call", "apply_patch", "*** Begin Patch")
        else:
            assert (item["type"], item["name"], item["namespace"], json.loads(item["arguments"])) == (
                "function_call", "get_weather", "mcp__files", {"city": "Paris"})
        assert done.model_extra["switchcraft"]["answered_by"] == CHAT_MODEL and done.usage.output_tokens == 7


@pytest.mark.parametrize("path, model", [("messages", MESSAGES_MODEL), ("responses", RESPONSES_MODEL)])
def test_a_passed_through_stream_that_breaks_ends_with_the_apis_error_event_and_is_charged(live, path, model):
    """The provider's connection drops after the first token: the caller gets that token, then its API's error
    event; the call is charged (the usage the provider reported by then, else an estimate)."""
    url, _, _ = live
    body = {"model": model, "stream": True, **({"max_tokens": 100, "messages": [{"role": "user", "content": "BREAK"}]}
                                               if path == "messages" else {"input": "BREAK", "max_output_tokens": 100})}
    with httpx.stream("POST", f"{url}/v1/{path}", json=body, timeout=30,
                      headers={"authorization": f"Bearer {KEY}"}) as r:
        got, headers = events_of(r.read()), r.headers
    last = json.loads(got[-1].split(b"data: ", 1)[1])
    assert got[-1].startswith(b"event: error\n") and last["type"] == "error"
    assert "stream broke" in json.dumps(last) and any(FIRST.encode() in e for e in got[:-1])
    rows = wait_for(lambda: ledger(url, headers["x-request-id"]))
    assert [row["model"] for row in rows] == [model] and rows[0]["usd"] > 0
