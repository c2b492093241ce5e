"""POST /v1/messages with the official `anthropic` client: real recorded BFCL v1 answers from the replay server.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_messages.py

`messages.create`, streamed and not, with `model: "router"`, pool model names
(a prompt-style one and a native one) and an agreement cascade asked in the
body: the tool calls come back as `tool_use` blocks equal to the recorded
answer of the model that served, and usage and cost agree with the trace and
the spend ledger. A body shaped like Claude Code's (system prompt blocks with
cache_control, tools with input_schema, a tool_use / tool_result turn,
metadata.user_id, x-api-key) is routed. Hostile bodies get Anthropic's 4xx
error object naming the field, never a 5xx.
"""

from __future__ import annotations

import json
import re
import time

import anthropic
import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.serving.gateway.helpers import (A, B, HOSTILE, TOP, agrees_with_ledger, assert_overhead, expected, ledger,
                                           post_edited)
from tests.serving.helpers import AUTH, KEY

pytestmark = pytest.mark.integration
ERROR_TYPES = {"invalid_request_error", "authentication_error", "permission_error", "not_found_error",
               "request_too_large", "rate_limit_error", "api_error", "overloaded_error", "timeout_error"}


def sdk(url: str, **kw) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0, timeout=60, **kw)


def tools_of(ex) -> list[dict]:
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in ex.tools]


def messages_of(ex) -> dict:
    system = "\n".join(m.content for m in ex.messages if m.role == "system")
    out = {"messages": [{"role": m.role, "content": m.content} for m in ex.messages if m.role != "system"]}
    return {**out, "system": system} if system else out


def uses(content) -> list[tuple[str, dict]]:
    return [(b.name, b.input) for b in content if b.type == "tool_use"]


@pytest.mark.parametrize("model", ["router", A, B])
def test_create_returns_the_served_models_calls_as_tool_use_blocks(served, picked, model):
    url, good = served
    ex = picked["agree"]
    t0 = time.perf_counter()
    raw = sdk(url).messages.with_raw_response.create(model=model, max_tokens=512, tools=tools_of(ex),
                                                     **messages_of(ex))
    msg, headers = raw.parse(), raw.headers
    elapsed_ms = (time.perf_counter() - t0) * 1e3
    trace = msg.switchcraft
    assert_overhead(headers, elapsed_ms, trace)  # what the gateway added: routing, translation, the store
    assert msg.type == "message" and msg.role == "assistant" and msg.stop_reason == "tool_use"
    assert msg.model == headers["x-switchcraft-model"] == trace["answered_by"]
    assert trace["routed"] is (model == "router") and trace["api"] == "messages"
    if model != "router":
        assert msg.model == model and trace["strategy"]["source"] == "model"
    assert uses(msg.content) == expected(good, msg.model, ex) and uses(msg.content)
    assert all(b.id for b in msg.content if b.type == "tool_use")
    returned = next(c for c in trace["calls"] if c["returned"])
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (returned["usage"]["input_tokens"],
                                                                returned["usage"]["output_tokens"])
    assert msg.usage.input_tokens > 0
    agrees_with_ledger(url, headers, trace)


def test_a_cascade_asked_in_the_body_answers_from_the_cheaper_agreeing_model(served, picked):
    url, good = served
    ex = picked["agree"]
    raw = sdk(url).messages.with_raw_response.create(
        model="router", max_tokens=512, tools=tools_of(ex), **messages_of(ex),
        extra_body={"switchcraft": {"strategy": {"first": [A, B], "escalate": [TOP]}}})
    msg, headers = raw.parse(), raw.headers
    trace = msg.switchcraft
    assert trace["strategy"]["kind"] == "agree" and trace["strategy"]["source"] == "request"
    assert trace["agreement"]["verdict"] == "agree" and headers["x-switchcraft-models-called"] == f"{A},{B}"
    cheaper = min((A, B), key=lambda m: trace["decision"]["costs"][m])
    assert msg.model == cheaper and uses(msg.content) == expected(good, cheaper, ex)
    assert headers["x-switchcraft-strategy"] == f"agree({A}, {B} -> {TOP})"
    agrees_with_ledger(url, headers, trace)
    assert len(ledger(url, headers["x-request-id"])) == 2  # both first models were paid


@pytest.mark.parametrize("model", ["router", B])
def test_a_stream_is_the_messages_event_sequence_with_the_trace_last(served, picked, model):
    url, good = served
    ex = picked["agree"]
    with sdk(url).messages.with_streaming_response.create(model=model, max_tokens=512, tools=tools_of(ex),
                                                          stream=True, **messages_of(ex)) as raw:
        headers = raw.headers
        events = [json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    n_blocks = kinds.count("content_block_start")
    assert kinds[1:-2] == ["content_block_start", "content_block_delta", "content_block_stop"] * n_blocks
    served_by = events[0]["message"]["model"]
    assert served_by == headers["x-switchcraft-model"] and events[-2]["delta"]["stop_reason"] == "tool_use"
    calls = [(e["content_block"]["name"], json.loads(d["delta"]["partial_json"]))
             for e, d in zip(events, events[1:]) if e["type"] == "content_block_start"
             and e["content_block"]["type"] == "tool_use"]
    assert calls == expected(good, served_by, ex) and calls
    trace = events[-1]["switchcraft"]
    assert trace["answered_by"] == served_by and events[-2]["usage"]["output_tokens"] > 0
    agrees_with_ledger(url, headers, trace)
    # The client's own stream helper reads the same events into one Message.
    with sdk(url).messages.stream(model=model, max_tokens=512, tools=tools_of(ex), **messages_of(ex)) as s:
        final = s.get_final_message()
    assert uses(final.content) == expected(good, final.model, ex) and final.stop_reason == "tool_use"


CLAUDE_CODE_SYSTEM = [
    {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
    {"type": "text", "text": "You are an interactive CLI tool that helps users with software engineering tasks. "
                             "Use the instructions below and the tools available to you to assist the user.",
     "cache_control": {"type": "ephemeral"}}]
CLAUDE_CODE_TOOLS = [
    {"name": "Bash", "description": "Executes a given bash command in a persistent shell session.",
     "input_schema": {"type": "object", "properties": {
         "command": {"type": "string", "description": "The command to execute"},
         "timeout": {"type": "number", "description": "Optional timeout in milliseconds (max 600000)"},
         "description": {"type": "string", "description": "Clear, concise description of what this command does"}},
         "required": ["command"], "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}},
    {"name": "Read", "description": "Reads a file from the local filesystem.",
     "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}, "offset": {"type": "number"},
                                                       "limit": {"type": "number"}}, "required": ["file_path"]}}]


def claude_code_body(ex) -> dict:
    """What Claude Code sends mid-session: system blocks, its tools (plus the task's), a Bash call and its
    result, then the user's next request (with the system reminders Claude Code adds as text blocks)."""
    return {"model": "router", "max_tokens": 32000, "temperature": 1, "stream": True,
            "metadata": {"user_id": "user_3f1c_account__session_9b2e"},
            "system": CLAUDE_CODE_SYSTEM, "tools": CLAUDE_CODE_TOOLS + tools_of(ex), "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "<system-reminder>As you answer the user's questions, you can use the "
                                             "following context.</system-reminder>"},
                    {"type": "text", "text": "What is in this folder?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "I'll list the files."},
                    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "Bash",
                     "input": {"command": "ls", "description": "List files in the current directory"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                     "content": [{"type": "text", "text": "README.md\nsrc\ntests"}], "is_error": False},
                    {"type": "text", "text": ex.messages[-1].content, "cache_control": {"type": "ephemeral"}}]}]}


def test_a_claude_code_shaped_request_with_x_api_key_is_routed(served, picked):
    url, good = served
    ex = picked["agree"]
    with httpx.stream("POST", url + "/v1/messages", json=claude_code_body(ex), timeout=60,
                      headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"}) as r:
        assert r.status_code == 200, r.read()
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
        headers = r.headers
    trace = events[-1]["switchcraft"]
    calls = [e["content_block"]["name"] for e in events if e["type"] == "content_block_start"
             and e["content_block"]["type"] == "tool_use"]
    assert calls == [name for name, _ in expected(good, trace["answered_by"], ex)]
    agrees_with_ledger(url, headers, trace)
    # The same body through the client's stream helper: the key as a bearer token (`auth_token`) works too.
    body = {k: v for k, v in claude_code_body(ex).items() if k not in ("stream", "temperature")}
    with anthropic.Anthropic(base_url=url, auth_token=KEY, max_retries=0).messages.stream(
            **body, extra_body={"temperature": 1}) as s:  # this client no longer takes temperature as an argument
        msg = s.get_final_message()
    assert uses(msg.content) == expected(good, msg.model, ex)


@pytest.mark.parametrize("body, status, kind, field", [
    ({"model": "router", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}, 401,
     "authentication_error", None),
    ({"model": "mistral-large-9", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}, 404,
     "not_found_error", "model"),
    ({"model": "router", "messages": [{"role": "user", "content": "hi"}]}, 400, "invalid_request_error",
     "max_tokens"),
    ({"model": "router", "max_tokens": 10, "messages": [{"role": "user", "content": [{"type": "image"}]}]}, 400,
     "invalid_request_error", "messages[0].content[0].type"),
    ({"model": "router", "max_tokens": 10, "stop_sequences": ["a"] * 5, "messages": [
        {"role": "user", "content": "hi"}]}, 400, "invalid_request_error", "stop_sequences"),
    ({"model": "router", "max_tokens": 10, "tools": [{"name": "f", "input_schema": {"type": "dict"}}],
      "messages": [{"role": "user", "content": "hi"}]}, 400, "invalid_request_error", "tools[0].input_schema.type"),
    ({"model": "router", "max_tokens": 10, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "1"}]}]}, 400,
     "invalid_request_error", "messages[2].content[0].tool_use_id"),
])


def test_errors_are_anthropics_error_object_naming_the_callers_field(served, body, status, kind, field):
    url, _ = served
    headers = {} if status == 401 else {"x-api-key": KEY}
    r = httpx.post(url + "/v1/messages", json=body, headers=headers, timeout=30)
    assert r.status_code == status, r.text
    error = r.json()
    assert error["type"] == "error" and error["error"]["type"] == kind and error["error"]["message"]
    if field is not None:
        assert error["error"]["message"].startswith(f"{field}: "), error
    if status == 404:  # the client raises the matching exception
        with pytest.raises(anthropic.NotFoundError):
            sdk(url).messages.create(**body)


def test_an_unexpected_exception_is_a_500_in_anthropics_shape(plain_gateway):
    r = httpx.post(plain_gateway + "/v1/messages", headers=AUTH, timeout=30, json={
        "model": "router", "max_tokens": 10, "messages": [{"role": "user", "content": "BOOM"}]})
    assert r.status_code == 500 and r.json()["type"] == "error" and r.json()["error"]["type"] == "api_error"


# --- the property test -----------------------------------------------------------------------------------
def base_body(model: str) -> dict:
    return json.loads(json.dumps({
        "model": model, "max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}], "stop_sequences": ["\n\n"],
        "tools": [{"name": "get_weather", "description": "Weather in a city.", "input_schema": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}],
        "tool_choice": {"type": "auto"}, "metadata": {"user_id": "u1"}, "messages": [
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Checking."}, {
                "type": "tool_use", "id": "t0", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t0", "content": "12"}]}],
        "switchcraft": {"strategy": {"first": ["claude-3-haiku-20240307"]}}}))


PATHS = ["model", "max_tokens", "stream", "temperature", "top_p", "top_k", "stop_sequences", "metadata",
         "metadata.user_id", "system", "system.0", "system.0.type", "system.0.text", "tools", "tools.0",
         "tools.0.type", "tools.0.name", "tools.0.description", "tools.0.input_schema",
         "tools.0.input_schema.type", "tools.0.input_schema.properties", "tools.0.input_schema.properties.city",
         "tools.0.input_schema.required", "tool_choice", "tool_choice.type", "tool_choice.name",
         "tool_choice.disable_parallel_tool_use", "messages", "messages.0", "messages.0.role", "messages.0.content",
         "messages.1.content", "messages.1.content.0", "messages.1.content.1.type", "messages.1.content.1.id",
         "messages.1.content.1.name", "messages.1.content.1.input", "messages.2.content.0.tool_use_id",
         "messages.2.content.0.content", "messages.2.content.0.type", "messages.2.role", "switchcraft",
         "switchcraft.strategy"]
FIELD = re.compile(r"^([A-Za-z_]+)[\[.:]")


def assert_anthropic_error(r: httpx.Response, body_keys: set[str]) -> None:
    assert r.status_code < 500, r.text
    if r.status_code < 400:
        return
    error = r.json()
    assert error["type"] == "error" and error["error"]["type"] in ERROR_TYPES, error
    message = error["error"]["message"]
    assert isinstance(message, str) and message
    m = FIELD.match(message)
    assert m and m[1] in body_keys | {"body", "model", "messages", "max_tokens"}, message


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])


@given(model=st.sampled_from(["router", "claude-3-haiku-20240307", "gpt-4o-2024-08-06-FC"]),
       edits=st.lists(st.tuples(st.sampled_from(PATHS), HOSTILE), min_size=1, max_size=3))


@example(model="router", edits=[("messages.1.content.1.input", {"city": "\ud800"})])
@example(model="router", edits=[("messages.2.content.0.tool_use_id", "t9")])
@example(model="router", edits=[("tools.0.input_schema", None)])
def test_hostile_messages_bodies_never_get_a_5xx_and_errors_name_the_field(plain_gateway, model, edits):
    body = base_body(model)
    r = post_edited(plain_gateway + "/v1/messages", body, edits)
    assert_anthropic_error(r, set(body) if isinstance(body, dict) else set())
