"""The pool's provider APIs: a chat request in Messages and Responses, their answers back, the `api` field.

.venv/bin/python -m pytest -q tests/data/wire/test_apis.py
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.errors import DataError
from data.pool import Pool, Prices
from data import wire
from data.wire.raw import WireError, usage_from_wire
from data.schema import Usage
from data.yaml_config import load_yaml_model

CHAT = {"model": "m", "max_tokens": 300, "stream": True, "stop": "END", "parallel_tool_calls": False,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                                    "parameters": {"type": "object", "properties": {}}}}],
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Weather in Paris?"},
                     {"role": "assistant", "content": "Checking.", "tool_calls": [
                         {"id": "call_1", "type": "function",
                          "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
                     {"role": "user", "content": "And Rome?"}]}


def test_a_chat_request_as_messages():
    body = wire.native_request("anthropic_messages", CHAT)
    assert body["system"] == "Be brief." and body["max_tokens"] == 300 and body["stop_sequences"] == ["END"]
    assert body["tools"] == [{"name": "get_weather", "description": "Weather now",
                              "input_schema": {"type": "object", "properties": {}}}]
    assert body["tool_choice"] == {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}
    assert [t["role"] for t in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]
    # the tool result and the next question are one user turn (Messages alternates roles)
    assert body["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
                                              {"type": "text", "text": "And Rome?"}]
    assert body["stream"] is True and wire.native_request("anthropic_messages", {
        "messages": [{"role": "user", "content": "x"}]})["max_tokens"] == 4096


def test_a_chat_request_as_responses():
    body = wire.native_request("openai_responses", CHAT)
    assert body["instructions"] == "Be brief." and body["max_output_tokens"] == 300 and body["store"] is False
    assert body["tools"] == [{"type": "function", "name": "get_weather", "description": "Weather now",
                              "parameters": {"type": "object", "properties": {}}}]
    assert body["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert [i["type"] for i in body["input"]] == ["message", "message", "function_call", "function_call_output",
                                                 "message"]
    assert body["input"][2] == {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                                "arguments": '{"city": "Paris"}'}
    assert body["input"][3] == {"type": "function_call_output", "call_id": "call_1", "output": "18C"}
    assert body["parallel_tool_calls"] is False and wire.native_request("openai_chat", CHAT) is CHAT


def test_answers_back_with_cache_counts():
    msg = {"type": "message", "id": "msg_1", "model": "claude", "stop_reason": "tool_use",
           "content": [{"type": "thinking", "thinking": "…"}, {"type": "text", "text": "On it."},
                       {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Rome"}}],
           "usage": {"input_tokens": 50, "cache_read_input_tokens": 900, "cache_creation_input_tokens": 100,
                     "output_tokens": 12}}
    chat = wire.chat_completion("anthropic_messages", msg)
    m = chat["choices"][0]["message"]
    assert m["content"] == "On it." and m["tool_calls"][0]["function"] == {"name": "get_weather",
                                                                          "arguments": '{"city": "Rome"}'}
    assert chat["choices"][0]["finish_reason"] == "tool_calls"
    assert usage_from_wire(chat["usage"]) == Usage(input_tokens=1050, output_tokens=12, cached_input_tokens=900,
                                                   cache_write_tokens=100)
    resp = {"object": "response", "id": "resp_1", "status": "incomplete", "model": "gpt",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "reasoning", "summary": []},
                       {"type": "message", "content": [{"type": "output_text", "text": "Partial"}]}],
            "usage": {"input_tokens": 2000, "input_tokens_details": {"cached_tokens": 1536}, "output_tokens": 7}}
    chat = wire.chat_completion("openai_responses", resp)
    assert chat["choices"][0] == {"index": 0, "message": {"role": "assistant", "content": "Partial"},
                                  "finish_reason": "length"}
    assert usage_from_wire(chat["usage"]).cached_input_tokens == 1536
    for api in ("anthropic_messages", "openai_responses"):
        with pytest.raises(WireError):
            wire.chat_completion(api, {"choices": []})


def test_cache_prices_and_an_unknown_api_named_with_its_line(tmp_path):
    p = Prices(input_per_mtok=3, output_per_mtok=15, cached_input_per_mtok=0.3, cache_write_per_mtok=3.75)
    usage = Usage(input_tokens=1050, output_tokens=12, cached_input_tokens=900, cache_write_tokens=100)
    assert p.cost_usd(usage) == pytest.approx((50 * 3 + 900 * 0.3 + 100 * 3.75 + 12 * 15) / 1e6)
    plain = Prices(input_per_mtok=3, output_per_mtok=15)
    assert plain.cost_usd(usage) == plain.cost_usd(Usage(input_tokens=1050, output_tokens=12))
    f = tmp_path / "pool.yaml"
    f.write_text("models:\n  - name: a\n    api: anthropic\n    prices: {input_per_mtok: 1, output_per_mtok: 1}\n")
    with pytest.raises(DataError, match=r"pool.yaml:3.*models.0.api.*not one of the wire APIs anthropic_messages, openai_chat, openai_responses"):
        load_yaml_model(f, Pool)
    assert Pool.model_validate({"models": [{"name": "a", "prices": {"usd_per_query": 1}}]}).models[0].api == \
        "openai_chat"


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
                        st.sampled_from(["type", "content", "output", "text", "name", "input", "id", "usage",
                                         "input_tokens", "object", "status", "call_id", "arguments",
                                         "stop_reason", "cache_read_input_tokens", "input_tokens_details"]),
                        kids, max_size=5), max_leaves=12)
SHAPES = {"anthropic_messages": {"type": "message"}, "openai_responses": {"object": "response"}}


@settings(max_examples=300, deadline=None)
@given(api=st.sampled_from(sorted(SHAPES)), body=st.dictionaries(
    st.sampled_from(["content", "output", "usage", "stop_reason", "status", "incomplete_details", "model", "index",
                     "content_block", "delta", "message", "item", "output_index", "response"]), JSON))
def test_a_malformed_native_answer_is_a_wire_error_never_a_crash(api, body):
    try:
        chat = wire.chat_completion(api, {**body, **SHAPES[api]})
    except WireError:
        return
    usage_from_wire(chat.get("usage"))
    decoder = wire.StreamDecoder(api)
    for kind in ("message_start", "content_block_start", "content_block_delta", "message_delta", "message_stop",
                 "response.created", "response.output_item.added", "response.function_call_arguments.delta",
                 "response.completed"):
        decoder.feed(kind, body)


@pytest.mark.parametrize("choice, parallel, messages, responses", [
    ("none", None, {"type": "none"}, "none"),
    ("required", None, {"type": "any"}, "required"),
    ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}, "auto"),
    ({"type": "function", "function": {"name": "get_weather"}}, False,
     {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
     {"type": "function", "name": "get_weather"})])
def test_tool_choice_and_parallel_calls_are_sent_in_every_api(choice, parallel, messages, responses):
    chat = {**CHAT, "tool_choice": choice, "parallel_tool_calls": parallel}
    assert wire.native_request("openai_chat", chat)["tool_choice"] == choice
    assert wire.native_request("anthropic_messages", chat)["tool_choice"] == messages
    sent = wire.native_request("openai_responses", chat)
    assert sent["tool_choice"] == responses and sent.get("parallel_tool_calls") == parallel
