"""Hostile input never gets a 5xx: each reported defect, a property test of the request parser, the 500 path.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_input.py

A real gateway on loopback (the tiny exported router of tests/conftest.py) in
front of an upstream that answers every request, so any 5xx is the gateway's.
The property test sends generated bodies (deep nesting, NaN, surrogates, huge
numbers, wrong types at every field, oversized arrays) to both endpoints and
asserts: never a 5xx, and every error is JSON naming the field. Under CI
(tests/conftest.py) hypothesis replays a fixed, derandomised set.
"""

from __future__ import annotations

import io
import json
import logging

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from data.pool import load_pool
from serving.core.errors import JsonLines, configure_json_logging
from tests.routers import REPO
from tests.serving.gateway.helpers import HOSTILE, TOOL, USER, assert_names_the_field, set_path
from tests.serving.helpers import AUTH, post

pytestmark = pytest.mark.integration
POOL = load_pool(REPO / "configs" / "pool.yaml")


def raw_post(url: str, path: str, raw: bytes) -> httpx.Response:
    return httpx.post(url + path, content=raw, headers={**AUTH, "content-type": "application/json"}, timeout=60)


# --- hostile bodies that once reached a 500, reproduced ----------------------------------------------------------
def test_deep_nesting_is_a_400_not_a_recursion_error(plain_gateway):
    for depth in (90_000, 5_000, 101):  # 100,000 is over this gateway's 200 KB body limit
        r = raw_post(plain_gateway, "/v1/chat/completions",
                     b'{"model":"router","messages":' + b"[" * depth + b"]" * depth + b"}")
        assert r.status_code == 400 and f"nested {depth + 1} levels deep; the limit is 100" in r.json()["error"]["message"]
    r = raw_post(plain_gateway, "/v1/chat/completions", b'{"model":"router","messages":[{"role":"user","content":"x"}],'
                 b'"metadata":{"a":' + b"[" * 200 + b"]" * 200 + b"}}")
    assert r.status_code == 400 and r.json()["error"]["param"] == "metadata.a[0][0][0][0]…"


@pytest.mark.parametrize("arguments, fragment", [
    ('{"number": ' + "7" * 5_000 + "}", "has more than 64 digits (at number)"),
    ("[" * 100_000, "nested 100000 levels deep; the limit is 100"),
    ('{"x": NaN}', "is not a JSON number"),
])


@pytest.mark.parametrize("endpoint", ["/v1/route", "/v1/chat/completions"])
def test_an_earlier_calls_hostile_arguments_are_a_400_naming_them(plain_gateway, endpoint, arguments, fragment):
    """`{"number": <5,000 digits>}` or 100,000 `[` in an earlier assistant turn's arguments: a 400 naming them."""
    messages = [USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "12"}, {"role": "user", "content": "and tomorrow?"}]
    r = post(plain_gateway + endpoint, json={"model": "router", "messages": messages, "tools": [TOOL]}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "messages[1].tool_calls[0].function.arguments"
    assert fragment in r.json()["error"]["message"]
    # Malformed (not hostile) arguments are a model's history: read as none, the request is routed.
    messages[1]["tool_calls"][0]["function"]["arguments"] = '{"city": "Par'
    assert post(plain_gateway + endpoint, json={"model": "router", "messages": messages, "tools": [TOOL]}, timeout=60).status_code == 200


@pytest.mark.parametrize("model, status", [("router-0.5\n", 400), ("router-0.5 ", 400), ("router-", 400),
                                           ("router\n", 400), ("router-0.5", 200), ("router", 200)])


def test_the_router_model_name_parses_strictly(plain_gateway, model, status):
    r = post(plain_gateway + "/v1/chat/completions", json={"model": model, "messages": [USER]}, timeout=60)
    assert r.status_code == status, r.text
    if status == 400:
        assert r.json()["error"]["param"] == "model"


@pytest.mark.parametrize("token, param", [("NaN", "temperature"), ("Infinity", "temperature"), ("-Infinity", "top_p"),
                                          ("1e999", "temperature"), ("1" * 80, "max_tokens")])


def test_nan_infinity_and_huge_numbers_are_a_400_naming_the_field(plain_gateway, token, param):
    raw = f'{{"model":"router","messages":[{{"role":"user","content":"hi"}}],"{param}":{token}}}'.encode()
    r = raw_post(plain_gateway, "/v1/chat/completions", raw)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert r.json()["error"]["message"].startswith(f"{param}: ")


def test_lone_surrogates_are_cleaned_and_routed(plain_gateway, plain_upstream):
    _, seen = plain_upstream
    tool = json.loads(json.dumps(TOOL))
    tool["function"]["description"] = "Weather \ud800 in a city."
    for model in ("router", "claude-3-haiku-20240307", "gpt-4o-2024-08-06-FC"):
        body = {"model": model, "messages": [{"role": "user", "content": "hi \ud800 there \udfff"}], "tools": [tool]}
        r = raw_post(plain_gateway, "/v1/chat/completions", json.dumps(body).encode())  # ensure_ascii: "\ud800" escapes
        assert r.status_code == 200, r.text
        forwarded = json.loads(seen[-1])
        assert "hi \ufffd there \ufffd" in json.dumps(forwarded, ensure_ascii=False)
    r = raw_post(plain_gateway, "/v1/route", json.dumps({"messages": [{"role": "user", "content": "\udbff!"}]}).encode())
    assert r.status_code == 200, r.text
    # A valid pair stays one character.
    r = raw_post(plain_gateway, "/v1/chat/completions", b'{"model":"claude-3-haiku-20240307","messages":[{"role":"user",'
                 b'"content":"\\ud83d\\ude00"}]}')
    assert r.status_code == 200 and "\U0001F600" in seen[-1].decode()


@pytest.mark.parametrize("messages, param, fragment", [
    ([USER, {"role": "tool", "tool_call_id": "c0", "content": "12"}], "messages[1].role", "must follow an assistant"),
    ([{"role": "tool", "content": "12"}, USER], "messages[0].role", "must follow an assistant"),
    ([USER, {"role": "assistant", "content": "hi"}, {"role": "tool", "tool_call_id": "c0", "content": "1"}],
     "messages[2].role", "must follow an assistant"),
    ([USER, {"role": "assistant", "content": None, "tool_calls": [{"id": "c0", "type": "function", "function": {
        "name": "get_weather", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "c9", "content": "1"}],
     "messages[2].tool_call_id", "'c9' is not the id of a call"),
    ([USER, {"role": "assistant", "tool_calls": [{"id": "c0", "function": {"name": "f"}}]},
      {"role": "tool", "tool_call_id": 3, "content": "1"}], "messages[2].tool_call_id", "must be a string"),
])


def test_a_tool_message_must_answer_a_call_before_it(plain_gateway, messages, param, fragment):
    r = post(plain_gateway + "/v1/chat/completions", json={"model": "router", "messages": messages})
    assert r.status_code == 400 and r.json()["error"]["param"] == param and fragment in r.json()["error"]["message"]


def test_a_tool_message_answering_a_call_is_accepted(plain_gateway):
    messages = [USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "12"}, {"role": "tool", "tool_call_id": "c1", "content": "14"}]
    r = post(plain_gateway + "/v1/chat/completions", json={"model": "router", "messages": messages, "tools": [TOOL]})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("schema, param", [
    ({"type": "array", "items": [{"type": "string"}, {"type": "bogus"}]}, "properties.x.items[1].type"),
    ({"type": "array", "items": 5}, "properties.x.items"),
    ({"anyOf": [{"type": "string"}, {"type": "dict"}]}, "properties.x.anyOf[1].type"),
    ({"type": "object", "additionalProperties": {"type": "float"}}, "properties.x.additionalProperties.type"),
    ({"type": [["string"]]}, "properties.x.type"),
])


def test_nested_schemas_are_checked_in_every_form(plain_gateway, schema, param):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": schema}}}}
    r = post(plain_gateway + "/v1/chat/completions", json={"model": "router", "messages": [USER], "tools": [tool]})
    assert r.status_code == 400 and r.json()["error"]["param"] == f"tools[0].function.parameters.{param}", r.text


def test_oversized_body_without_a_content_length_is_413(plain_gateway):
    def chunks():
        yield b'{"model": "router", "messages": [{"role": "user", "content": "'
        for _ in range(30):
            yield b"x" * 10_000
        yield b'"}]}'

    with httpx.Client(headers=AUTH, timeout=60) as http:
        r = http.post(plain_gateway + "/v1/chat/completions", content=chunks())
        assert r.status_code == 413 and "content-length" not in r.request.headers
        assert r.json()["error"]["param"] == "body" and "the limit is 200,000" in r.json()["error"]["message"]
        # The rest of the body was read and dropped: the same connection serves the next request.
        assert "connection" not in r.headers and http.post(plain_gateway + "/v1/route", json={"messages": [USER]}).status_code == 200
        big = b'{"messages": [{"role": "user", "content": "' + b"x" * 300_000 + b'"}]}'  # declared too large
        assert http.post(plain_gateway + "/v1/route", content=big).status_code == 413
        assert http.post(plain_gateway + "/v1/route", json={"messages": [USER]}).status_code == 200


# --- the 500 path ----------------------------------------------------------------------------------------
def test_an_unexpected_exception_is_a_clean_500_counted_and_logged_once(plain_gateway, caplog):
    boom = {"messages": [{"role": "user", "content": "BOOM"}]}
    ok = {"messages": [USER]}
    with caplog.at_level(logging.INFO, logger="switchcraft.gateway"), httpx.Client(headers=AUTH, timeout=60) as http:
        for _ in range(5):  # the same client, keep-alive: the next request must never meet a reset connection
            r = http.post(plain_gateway + "/v1/route", json=boom)
            assert r.status_code == 500 and r.headers["connection"] == "close"
            assert r.json()["error"] == {"message": r.json()["error"]["message"], "type": "server_error", "param": None,
                                         "code": 500}
            assert "RuntimeError" in r.json()["error"]["message"]
            assert http.post(plain_gateway + "/v1/route", json=ok).status_code == 200
    unhandled = [rec for rec in caplog.records if '"unhandled"' in rec.getMessage()]
    assert len(unhandled) == 5
    line = json.loads(unhandled[0].getMessage())
    assert line["error"] == "RuntimeError" and line["status"] == 500 and "selector" in line["traceback"]
    assert "\n" not in JsonLines().format(unhandled[0]) and "secret-text" not in caplog.text
    assert 'switchcraft_requests_total{endpoint="route",status="500"} 5.0' in httpx.get(plain_gateway + "/metrics", headers=AUTH).text


def test_every_log_line_is_one_json_object():
    root = logging.getLogger()
    saved = root.handlers[:], root.level, logging.getLogger("httpx").level
    try:
        handler = configure_json_logging("info")
        out = io.StringIO()
        handler.setStream(out)
        logging.getLogger("httpx").info('HTTP Request: POST http://x/v1/chat/completions "HTTP/1.1 200 OK"')
        logging.getLogger("httpx").warning("kept: a warning")
        logging.getLogger("switchcraft.gateway").info(json.dumps({"event": "chat", "status": 200}))
        try:
            raise ValueError("multi\nline")
        except ValueError:
            logging.getLogger("some.library").exception("Exception in ASGI application\n")
    finally:
        root.handlers, _, _ = saved
        root.setLevel(saved[1])
        logging.getLogger("httpx").setLevel(saved[2])
    lines = out.getvalue().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r.get("event", r.get("message")) for r in records] == [
        "kept: a warning", "chat", "Exception in ASGI application\n"]
    assert records[1]["status"] == 200 and records[2]["logger"] == "some.library" and "ValueError" in records[2]["traceback"]


# Values are copied into the body (a shared one edited twice could contain itself).
PATHS = ["model", "messages", "messages.0", "messages.0.role", "messages.0.content", "messages.0.name",
         "messages.0.tool_calls", "messages.1", "messages.1.role", "messages.1.tool_calls.0.function.arguments", "messages.1.tool_call_id", "messages.1.content",
         "tools", "tools.0", "tools.0.type", "tools.0.function", "tools.0.function.name",
         "tools.0.function.description", "tools.0.function.parameters", "tools.0.function.parameters.type",
         "tools.0.function.parameters.properties", "tools.0.function.parameters.properties.city",
         "tools.0.function.parameters.properties.days.items", "tools.0.function.parameters.required",
         "stream", "temperature", "top_p", "max_tokens", "n", "stop", "tool_choice", "metadata", "seed",
         "parallel_tool_calls", "switchcraft", "switchcraft.allowed_models", "switchcraft.max_cost_usd",
         "switchcraft.min_probability", "switchcraft.caller", "switchcraft.caller.roles", "switchcraft.strategy",
         "switchcraft.strategy.first", "switchcraft.strategy.tie_breaker", "threshold"]


def base_body(model: str) -> dict:
    """A fresh body each time: edits must never reach the module's USER and TOOL (they did once, through
    `messages.0`, and the bodies grew example after example to megabytes)."""
    return json.loads(json.dumps({"model": model, "tools": [TOOL], "messages": [
        USER, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "12"}],
        "switchcraft": {"caller": {"roles": []}, "strategy": {"first": ["claude-3-haiku-20240307"]}}}))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])


@given(model=st.sampled_from(["router", "router-0.4", "claude-3-haiku-20240307", "gpt-4o-2024-08-06-FC"]),
       edits=st.lists(st.tuples(st.sampled_from(PATHS), HOSTILE), min_size=1, max_size=3),
       endpoint=st.sampled_from(["/v1/chat/completions", "/v1/route"]))


@example(model="router", edits=[("tools", None), ("tools.0.type", [USER] * 7)], endpoint="/v1/chat/completions")
@example(model="router", edits=[("messages.1.tool_calls.0.function.arguments", '{"city": "\\ud800"}')],
         endpoint="/v1/chat/completions")


@example(model="router", edits=[("messages.1.tool_calls.0.function.arguments", '{"\\udfff": ["\\ud800x"]}')],
         endpoint="/v1/route")


def test_hostile_bodies_never_get_a_5xx_and_errors_name_the_field(plain_gateway, model, edits, endpoint):
    body = base_body(model)
    for path, value in edits:
        try:
            set_path(body, path, json.loads(json.dumps(value, allow_nan=True)))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            pass  # an earlier edit replaced a parent (e.g. with null): the body is hostile anyway
    if endpoint == "/v1/route" and isinstance(body, dict):
        body["constraints"] = body.pop("switchcraft", None)
    r = raw_post(plain_gateway, endpoint, json.dumps(body, allow_nan=True).encode())
    assert_names_the_field(r, set(body))


def test_the_property_tests_bodies_start_fresh():
    # An edit to one example's body must not reach the next one's (through the module's USER or TOOL).
    body = base_body("router")
    set_path(body, "messages.0.content", ["grown"] * 3)
    set_path(body, "tools.0.function.name", "other")
    fresh = base_body("router")
    assert fresh["messages"][0] == {"role": "user", "content": "weather in Paris?"} == USER
    assert fresh["tools"][0]["function"]["name"] == "get_weather" == TOOL["function"]["name"]
