"""tool_choice and parallel calls held for prompt-style and native models, through all three inbound APIs, over an
upstream on loopback that misbehaves on purpose, with the official `openai` and `anthropic` clients.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_tool_choice.py

The stand-in upstream reads the user's words: `TWO` answers two calls (get_weather, get_time) whatever it was
told, `TEXT` answers text, `TEXT FROM PROMPT` answers text to a prompt-style model (no `tools` field) and a
get_time call to a native one. A prompt-style model answers calls as BFCL text (`[f(a=1)]`), a native one as
tool calls; each in its provider API (Chat Completions, and for the models in OUTBOUND Messages or Responses).
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from fastapi import FastAPI, Request

from data.wire.anthropic_messages import message_body
from data.wire.openai_responses import response_body
from data.pool_runner.request import PROMPT_SYSTEM
from serving.app import create_app
from serving.gateway.config import ServingConfig
from serving.core.errors import GatewayError
from serving.gateway.tool_choice import ToolChoice, check_tool_choice
from tests.serving.gateway.helpers import A, POOL, TOP, pool_env
from tests.serving.helpers import KEY, Loopback

pytestmark = pytest.mark.integration
PROMPT_MODEL, NATIVE_MODEL = A, TOP  # gpt-4o-mini (prompt style), gpt-4o FC (native)
WEATHER = {"name": "get_weather", "description": "Weather now.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TIME = {"name": "get_time", "description": "Time now.",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}
CALLS = {"get_weather": {"city": "Paris"}, "get_time": {"zone": "UTC"}}
USAGE = {"input": 50, "output": 10, "cached": 0, "written": 0}
# Models behind the other provider APIs: two native ones, and a prompt-style one behind Messages.
NATIVE_MESSAGES, NATIVE_RESPONSES = "gemini-1.5-flash-preview-0514", "open-mistral-nemo-2407-FC-Auto"
PROMPT_MESSAGES = "claude-3-haiku-20240307"
OUTBOUND = {NATIVE_MESSAGES: "anthropic_messages", NATIVE_RESPONSES: "openai_responses",
            PROMPT_MESSAGES: "anthropic_messages"}


def answer(request: dict) -> dict:
    """The misbehaving model's chat message for `request`, in any of the three APIs (see the module docstring)."""
    text = json.dumps([m for m in request.get("messages") or request.get("input") or [] if m.get("role") == "user"])
    said = next(s for s in ("TEXT FROM PROMPT", "TEXT", "TWO") if s in text)
    prompt_style = "tools" not in request
    names = {"TWO": ["get_weather", "get_time"], "TEXT": [],
             "TEXT FROM PROMPT": [] if prompt_style else ["get_time"]}[said]
    if not names:
        return {"role": "assistant", "content": "It is sunny."}
    if prompt_style:
        text = ", ".join(f"{n}({', '.join(f'{k}={v!r}' for k, v in CALLS[n].items())})" for n in names)
        return {"role": "assistant", "content": f"[{text}]"}
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(CALLS[n])}}
        for i, n in enumerate(names)]}


def in_api(path: str, message: dict, request: dict) -> dict:
    """`message` as the answer of the API at `path` (chat/completions, messages or responses)."""
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    if path == "messages":
        return message_body(message, finish, USAGE, request["model"])
    if path == "responses":
        return response_body(message, finish, USAGE, request["model"], request)
    return {"id": "c", "object": "chat.completion", "created": 0, "model": request["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}}


@pytest.fixture(scope="module")
def gateway(client):
    """(gateway URL, the request bodies the upstream got, in order); the pool's models behind OUTBOUND's APIs."""
    seen: list[dict] = []
    upstream = FastAPI()

    @upstream.post("/v1/{path:path}")
    async def complete(path: str, request: Request) -> dict:
        seen.append(await request.json())
        return in_api(path, answer(seen[-1]), seen[-1])

    mp = pytest.MonkeyPatch()
    pool_env(mp)
    with Loopback(upstream) as up:
        pool = POOL.model_copy(update={"models": [
            m.model_copy(update={"base_url": up + "/v1", "api": OUTBOUND.get(m.name, m.api)}) for m in POOL.models]})
        with Loopback(create_app(ServingConfig(), client=client, pool=pool)) as url:
            yield url, seen
    mp.undo()


def ask(url: str, api: str, model: str, said: str, choice: str, parallel: bool = True,
        strategy: dict | None = None) -> tuple[list[str], str, dict]:
    """(the answer's call names, its text, its `switchcraft` trace) from `api`'s official client; `choice`:
    auto | none | required | get_time."""
    extra = {"switchcraft": {"strategy": strategy}} if strategy else {}
    if api == "chat":
        kw = {} if parallel else {"parallel_tool_calls": False}
        r = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0).chat.completions.create(
            model=model, messages=[{"role": "user", "content": said}], extra_body=extra,
            tools=[{"type": "function", "function": t} for t in (WEATHER, TIME)],
            tool_choice=choice if choice in ("auto", "none", "required")
            else {"type": "function", "function": {"name": choice}}, **kw)
        msg = r.choices[0].message
        return [c.function.name for c in msg.tool_calls or []], msg.content or "", r.model_extra["switchcraft"]
    if api == "messages":
        kind = {"required": {"type": "any"}}.get(choice, {"type": choice} if choice in ("auto", "none")
                                                       else {"type": "tool", "name": choice})
        if not parallel:
            kind["disable_parallel_tool_use"] = True
        r = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0).messages.create(
            model=model, max_tokens=200, messages=[{"role": "user", "content": said}], tool_choice=kind,
            tools=[{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
                   for t in (WEATHER, TIME)], extra_body=extra)
        return ([b.name for b in r.content if b.type == "tool_use"],
                "".join(b.text for b in r.content if b.type == "text"), r.model_extra["switchcraft"])
    kw = {} if parallel else {"parallel_tool_calls": False}
    r = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0).responses.create(
        model=model, input=said, tools=[{"type": "function", **t} for t in (WEATHER, TIME)], extra_body=extra,
        tool_choice=choice if choice in ("auto", "none", "required") else {"type": "function", "name": choice}, **kw)
    return ([i.name for i in r.output if i.type == "function_call"], r.output_text,
            r.model_extra["switchcraft"])


APIS = ("chat", "messages", "responses")


@pytest.mark.parametrize("model", [PROMPT_MODEL, NATIVE_MODEL])
@pytest.mark.parametrize("api", APIS)
def test_tool_choice_none_returns_no_call_even_when_the_model_calls(gateway, api, model):
    url, seen = gateway
    names, text, trace = ask(url, api, model, "TWO", "none")
    assert names == []
    assert trace["dropped_calls"] == [{"name": "get_weather", "why": "tool_choice is none"},
                                      {"name": "get_time", "why": "tool_choice is none"}]
    sent = seen[-1]
    if model == PROMPT_MODEL:  # offered no functions at all; its call text is the answer's text
        assert "tools" not in sent and PROMPT_SYSTEM[:40] not in json.dumps(sent["messages"])
        assert text == "[get_weather(city='Paris'), get_time(zone='UTC')]"
    else:
        assert sent["tool_choice"] == "none" and text == ""


@pytest.mark.parametrize("model", [PROMPT_MODEL, NATIVE_MODEL])
@pytest.mark.parametrize("api", APIS)
def test_no_parallel_calls_keeps_the_first_call_and_says_so(gateway, api, model):
    url, seen = gateway
    names, _, trace = ask(url, api, model, "TWO", "auto", parallel=False)
    assert names == ["get_weather"]
    assert trace["dropped_calls"] == [{"name": "get_time",
                                       "why": "parallel tool calls are off: the first call is kept"}]
    sent = seen[-1]
    if model == PROMPT_MODEL:
        assert "Make exactly one function call." in sent["messages"][0]["content"]
    else:
        assert sent["parallel_tool_calls"] is False


@pytest.mark.parametrize("model", [PROMPT_MODEL, NATIVE_MODEL])
@pytest.mark.parametrize("api", APIS)
def test_a_named_tool_drops_other_calls_and_a_prompt_model_sees_only_that_tool(gateway, api, model):
    url, seen = gateway
    names, _, trace = ask(url, api, model, "TWO", "get_time")
    assert names == ["get_time"]
    assert trace["dropped_calls"] == [{"name": "get_weather", "why": "tool_choice names get_time"}]
    sent = seen[-1]
    if model == PROMPT_MODEL:
        system = sent["messages"][0]["content"]
        assert '"get_time"' in system and '"get_weather"' not in system
        assert "You MUST call the function get_time." in system
    else:
        assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}


@pytest.mark.parametrize("model", [PROMPT_MODEL, NATIVE_MODEL])
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("choice", ["required", "get_time"])
def test_an_answer_without_the_required_call_is_an_error_in_the_callers_shape(gateway, api, model, choice):
    url, _ = gateway
    with pytest.raises((openai.APIStatusError, anthropic.APIStatusError)) as e:
        ask(url, api, model, "TEXT", choice)
    assert e.value.status_code == 502
    body = e.value.body if api != "messages" else e.value.body["error"]
    message = body["message"]
    why = "without calling the required tool 'get_time'" if choice == "get_time" else \
        "without a tool call (tool_choice is required)"
    assert f"{model} answered {why}" in message
    if api == "messages":
        assert e.value.body["type"] == "error" and body["type"] == "api_error"
        assert message.startswith("tool_choice: no model answered as tool_choice asks")
    else:
        assert body["param"] == "tool_choice" and body["type"] == "upstream_error"


@pytest.mark.parametrize("api", APIS)
def test_a_prompt_model_without_the_required_call_escalates_to_the_next_model(gateway, api):
    url, _ = gateway
    names, _, trace = ask(url, api, "router", "TEXT FROM PROMPT", "get_time",
                          strategy={"first": [PROMPT_MODEL], "escalate": [NATIVE_MODEL]})
    assert names == ["get_time"] and trace["answered_by"] == NATIVE_MODEL
    first = trace["calls"][0]
    assert (first["model"], first["outcome"], first["returned"]) == (PROMPT_MODEL, "tool_choice_unmet", False)
    assert first["tool_choice_unmet"] == f"{PROMPT_MODEL} answered without calling the required tool 'get_time'"
    assert first["cost_usd"] > 0  # it was paid for, and is charged
    assert trace["cost_usd"] == pytest.approx(first["cost_usd"] + trace["calls"][1]["cost_usd"])


def test_a_named_tool_the_request_lacks_is_a_400_naming_the_field(gateway):
    url, _ = gateway
    with pytest.raises(openai.BadRequestError) as e:
        openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0).chat.completions.create(
            model=PROMPT_MODEL, messages=[{"role": "user", "content": "TEXT"}],
            tools=[{"type": "function", "function": WEATHER}],
            tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert e.value.body["param"] == "tool_choice.function.name"
    assert "'get_time' is not one of the request's tools ('get_weather')" in e.value.body["message"]


@pytest.mark.parametrize("tools", [5, "get_time", {"get_time": {}}, [None, {"function": {"name": 7}}]])
def test_a_named_tool_among_malformed_tools_is_a_400(tools):
    with pytest.raises(GatewayError) as e:
        check_tool_choice({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "get_time"}}})
    assert (e.value.status, e.value.param) == (400, "tool_choice.function.name")


def test_tool_choice_of_a_body_without_tools_asks_nothing():
    assert ToolChoice.of({"tool_choice": "required", "parallel_tool_calls": False}) == ToolChoice()
    assert ToolChoice.of({"tools": [{}], "tool_choice": "none"}).constrained


@pytest.mark.parametrize("model", [PROMPT_MODEL, NATIVE_MODEL])
def test_a_streamed_chat_answer_is_held_to_its_tool_choice_too(gateway, model):
    """A native model's stream is not passed through unread when a tool_choice asks something of its calls."""
    client = openai.OpenAI(base_url=gateway[0] + "/v1", api_key=KEY, max_retries=0)
    with client.chat.completions.stream(model=model, messages=[{"role": "user", "content": "TWO"}],
                                        tools=[{"type": "function", "function": t} for t in (WEATHER, TIME)],
                                        parallel_tool_calls=False) as stream:
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]


# What each provider API's request says, for (none, no parallel calls, the named tool get_time).
SENT = {NATIVE_MESSAGES: ({"type": "none"}, {"type": "auto", "disable_parallel_tool_use": True},
                          {"type": "tool", "name": "get_time"}),
        NATIVE_RESPONSES: ("none", "auto", {"type": "function", "name": "get_time"})}


@pytest.mark.parametrize("model", [NATIVE_MESSAGES, NATIVE_RESPONSES, PROMPT_MESSAGES])
def test_models_behind_messages_and_responses_are_held_to_the_tool_choice_too(gateway, model):
    url, seen = gateway
    cases = [("none", True, []), ("auto", False, ["get_weather"]), ("get_time", True, ["get_time"])]
    for i, (choice, parallel, want) in enumerate(cases):
        names, _, trace = ask(url, "chat", model, "TWO", choice, parallel=parallel)
        assert names == want and trace["dropped_calls"]
        sent = seen[-1]
        if model in SENT:
            assert sent["tool_choice"] == SENT[model][i]
            if model == NATIVE_RESPONSES:
                assert sent.get("parallel_tool_calls", True) is parallel
        else:
            assert "tools" not in sent and "tool_choice" not in sent
    with pytest.raises(openai.APIStatusError) as e:
        ask(url, "chat", model, "TEXT", "required")
    assert f"{model} answered without a tool call" in e.value.body["message"]

