"""POST /v1/responses with the official `openai` client: real recorded BFCL v1 answers from the replay server.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_responses.py

`responses.create`, streamed and not, with `model: "router"`, pool model names
and an agreement cascade asked in the body: each call comes back as a
`function_call` item equal to the recorded answer of the model that served,
and usage and cost agree with the trace and the spend ledger. A body shaped
like Codex's (instructions, developer and environment messages, a reasoning
item, a function_call and its function_call_output, store: false, include,
prompt_cache_key) is routed. `previous_response_id` is a 400; hostile bodies
get OpenAI's 4xx error object naming the field, never a 5xx.
"""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.serving.gateway.helpers import (A, B, HOSTILE, TOP, agrees_with_ledger, assert_names_the_field,
                                           assert_overhead, expected, ledger, post_edited)
from tests.serving.helpers import AUTH, KEY

pytestmark = pytest.mark.integration


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=60)


def tools_of(ex) -> list[dict]:
    return [{"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}
            for t in ex.tools]


def input_of(ex) -> dict:
    system = "\n".join(m.content for m in ex.messages if m.role == "system")
    items = [{"role": m.role, "content": m.content} for m in ex.messages if m.role != "system"]
    return {"input": items, **({"instructions": system} if system else {})}


def calls(output) -> list[tuple[str, dict]]:
    return [(item.name, json.loads(item.arguments)) for item in output if item.type == "function_call"]


@pytest.mark.parametrize("model", ["router", A, B])
def test_create_returns_the_served_models_calls_as_function_call_items(served, picked, model):
    url, good = served
    ex = picked["agree"]
    t0 = time.perf_counter()
    raw = sdk(url).responses.with_raw_response.create(model=model, tools=tools_of(ex), **input_of(ex))
    resp, headers = raw.parse(), raw.headers
    elapsed_ms = (time.perf_counter() - t0) * 1e3
    trace = resp.switchcraft
    assert_overhead(headers, elapsed_ms, trace)  # what the gateway added: routing, translation, the store
    assert resp.object == "response" and resp.status == "completed" and resp.error is None
    assert resp.model == headers["x-switchcraft-model"] == trace["answered_by"] and trace["api"] == "responses"
    if model != "router":
        assert resp.model == model and trace["strategy"]["source"] == "model"
    assert calls(resp.output) == expected(good, resp.model, ex) and calls(resp.output)
    assert all(item.call_id and item.id.startswith("fc_") for item in resp.output if item.type == "function_call")
    returned = next(c for c in trace["calls"] if c["returned"])
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (returned["usage"]["input_tokens"],
                                                                  returned["usage"]["output_tokens"])
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens > 0
    agrees_with_ledger(url, headers, trace)


def test_a_cascade_asked_in_the_body_answers_from_the_cheaper_agreeing_model(served, picked):
    url, good = served
    ex = picked["agree"]
    raw = sdk(url).responses.with_raw_response.create(
        model="router", tools=tools_of(ex), **input_of(ex),
        extra_body={"switchcraft": {"strategy": {"first": [A, B], "escalate": [TOP]}}})
    resp, headers = raw.parse(), raw.headers
    trace = resp.switchcraft
    assert trace["strategy"]["kind"] == "agree" and trace["agreement"]["verdict"] == "agree"
    cheaper = min((A, B), key=lambda m: trace["decision"]["costs"][m])
    assert resp.model == cheaper and calls(resp.output) == expected(good, cheaper, ex)
    assert headers["x-switchcraft-models-called"] == f"{A},{B}" and len(ledger(url, headers["x-request-id"])) == 2
    agrees_with_ledger(url, headers, trace)


@pytest.mark.parametrize("model", ["router", B])
def test_a_stream_is_the_responses_event_sequence_with_the_trace_last(served, picked, model):
    url, good = served
    ex = picked["agree"]
    with sdk(url).responses.with_streaming_response.create(model=model, tools=tools_of(ex), stream=True,
                                                           **input_of(ex)) as raw:
        headers = raw.headers
        events = [json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    n = kinds.count("response.output_item.added")
    assert kinds[2:-1] == ["response.output_item.added", "response.function_call_arguments.delta",
                           "response.function_call_arguments.done", "response.output_item.done"] * n
    done = events[-1]["response"]
    assert done["model"] == headers["x-switchcraft-model"] and done["status"] == "completed"
    streamed = [(e["name"], json.loads(e["arguments"])) for e in events
                if e["type"] == "response.function_call_arguments.done"]
    assert streamed == expected(good, done["model"], ex) and streamed
    agrees_with_ledger(url, headers, done["switchcraft"])
    # The client's stream helper reads the same events into one Response.
    with sdk(url).responses.stream(model=model, tools=tools_of(ex), **input_of(ex)) as s:
        final = s.get_final_response()
    assert calls(final.output) == expected(good, final.model, ex)


def codex_body(ex) -> dict:
    """What Codex sends mid-task: its instructions, developer and environment messages, an encrypted reasoning
    item, a shell call and its output, then the user's next request; its tools (plus the task's)."""
    shell = {"type": "function", "name": "shell", "description": "Runs a shell command and returns its output.",
             "strict": False, "parameters": {"type": "object", "properties": {
                 "command": {"type": "array", "items": {"type": "string"}, "description": "The command to execute"},
                 "workdir": {"type": "string", "description": "The working directory to execute the command in"},
                 "timeout_ms": {"type": "number", "description": "The timeout for the command in milliseconds"}},
                 "required": ["command"], "additionalProperties": False}}
    return {"model": "router", "instructions": "You are Codex, based on GPT-5. You are running as a coding agent in "
                                               "the Codex CLI on a user's computer.",
            "input": [
                {"type": "message", "role": "developer", "content": [
                    {"type": "input_text", "text": "<permissions instructions>Approval policy is on-request."
                                                   "</permissions instructions>"}]},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "<environment_context>\n  <cwd>/home/user/project</cwd>\n"
                                                   "  <shell>bash</shell>\n</environment_context>"}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is here?"}]},
                {"type": "reasoning", "id": "rs_0a1b", "summary": [], "encrypted_content": "gAAAAABo-opaque"},
                {"type": "function_call", "id": "fc_0a1b", "call_id": "call_Xy12", "name": "shell",
                 "arguments": "{\"command\":[\"ls\"],\"workdir\":\"/home/user/project\"}"},
                {"type": "function_call_output", "call_id": "call_Xy12", "output": "README.md\nsrc"},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": ex.messages[-1].content}]}],
            "tools": [shell, *tools_of(ex)], "tool_choice": "auto", "parallel_tool_calls": False,
            "reasoning": {"effort": "medium", "summary": "auto"}, "store": False, "stream": True,
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": "0198c3f2-session",
            "text": {"verbosity": "medium"}}


def test_a_codex_shaped_request_is_routed(served, picked):
    url, good = served
    ex = picked["agree"]
    with httpx.stream("POST", url + "/v1/responses", json=codex_body(ex), headers=AUTH, timeout=60) as r:
        assert r.status_code == 200, r.read()
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
        headers = r.headers
    done = events[-1]["response"]
    got = [(item["name"], json.loads(item["arguments"])) for item in done["output"] if item["type"] == "function_call"]
    assert got == expected(good, done["model"], ex) and done["parallel_tool_calls"] is False
    agrees_with_ledger(url, headers, done["switchcraft"])


@pytest.mark.parametrize("body, status, param", [
    ({"model": "router", "input": "hi", "previous_response_id": "resp_1"}, 400, "previous_response_id"),
    ({"model": "router", "input": "hi", "conversation": "conv_1"}, 400, "conversation"),
    ({"model": "router", "input": [{"type": "item_reference", "id": "msg_1"}]}, 400, "input[0].type"),
    ({"model": "mistral-large-9", "input": "hi"}, 404, "model"),
    ({"model": "router"}, 400, "input"),
    ({"model": "router", "input": "hi", "tools": [{"type": "namespace", "name": "n", "tools": 3}]}, 400,
     "tools[0].tools"),
    ({"model": "router", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {"type": "dict"}}]},
     400, "tools[0].parameters.type"),
    ({"model": "router", "input": "hi", "max_output_tokens": 0}, 400, "max_output_tokens"),
    ({"model": "router", "input": [{"role": "user", "content": "hi"},
                                   {"type": "function_call_output", "call_id": "c9", "output": "1"}]},
     400, "input[1]"),  # an output answering no call: the item is named
    ({"model": "router", "input": [{"role": "user", "content": "hi"},
                                   {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                                   {"type": "function_call_output", "call_id": "c9", "output": "1"}]},
     400, "input[2].call_id"),
])


def test_errors_are_openais_error_object_naming_the_callers_field(served, body, status, param):
    url, _ = served
    r = httpx.post(url + "/v1/responses", json=body, headers=AUTH, timeout=30)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["message"] and error["code"] == status, error
    if param == "previous_response_id":
        assert "not stored" in error["message"]
        with pytest.raises(openai.BadRequestError):
            sdk(url).responses.create(model="router", input="hi", previous_response_id="resp_1")


# --- the property test -----------------------------------------------------------------------------------
def base_body(model: str) -> dict:
    return json.loads(json.dumps({
        "model": model, "instructions": "Be brief.", "max_output_tokens": 64, "tool_choice": "auto",
        "tools": [{"type": "function", "name": "get_weather", "description": "Weather in a city.", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}],
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather in Paris?"}]},
                  {"type": "function_call", "call_id": "c0", "name": "get_weather", "arguments": '{"city": "Paris"}'},
                  {"type": "function_call_output", "call_id": "c0", "output": "12"}],
        "metadata": {"k": "v"}, "switchcraft": {"strategy": {"first": ["claude-3-haiku-20240307"]}}}))


PATHS = ["model", "instructions", "max_output_tokens", "temperature", "top_p", "stream", "tool_choice",
         "tool_choice.name", "parallel_tool_calls", "metadata", "user", "text", "text.format", "text.format.type",
         "previous_response_id", "background", "tools", "tools.0", "tools.0.type", "tools.0.name",
         "tools.0.description", "tools.0.parameters", "tools.0.parameters.type", "tools.0.parameters.properties",
         "tools.0.parameters.required", "input", "input.0", "input.0.type", "input.0.role", "input.0.content",
         "input.0.content.0", "input.0.content.0.type", "input.0.content.0.text", "input.1", "input.1.type",
         "input.1.call_id", "input.1.name", "input.1.arguments", "input.2", "input.2.call_id", "input.2.output",
         "input.2.type", "switchcraft", "switchcraft.strategy"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])


@given(model=st.sampled_from(["router", "claude-3-haiku-20240307", "gpt-4o-2024-08-06-FC"]),
       edits=st.lists(st.tuples(st.sampled_from(PATHS), HOSTILE), min_size=1, max_size=3))


@example(model="router", edits=[("input.1.arguments", '{"city": "\\ud800"}')])
@example(model="router", edits=[("input.2.call_id", "c9")])
@example(model="router", edits=[("input.0.role", ["user"])])
def test_hostile_responses_bodies_never_get_a_5xx_and_errors_name_the_field(plain_gateway, model, edits):
    body = base_body(model)
    r = post_edited(plain_gateway + "/v1/responses", body, edits)
    assert_names_the_field(r, set(body) if isinstance(body, dict) else set())
