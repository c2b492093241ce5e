"""The endpoints agent clients call besides their POSTs, and model aliases, with the official clients.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_agent_endpoints.py

POST /v1/messages/count_tokens and /v1/responses/input_tokens answer the
gateway's estimate (the translated request's messages and tools, bytes /
state.chars_per_token); GET /v1/models lists `router` and the pool in OpenAI's
and Anthropic's shapes; a model name the pool lacks that an alias matches
(Claude Code's `claude-*`, Codex's `gpt-*`) is routed, others are still a 404.
"""

from __future__ import annotations

import math

import anthropic
import httpx
import openai
import pytest

from serving.gateway.apis import anthropic_messages, openai_responses
from serving.core.budget import payload_size
from tests.serving.gateway.helpers import POOL, replay_app
from tests.serving.helpers import AUTH, KEY

pytestmark = pytest.mark.integration
SYSTEM = "You are a careful agent. " * 20
TOOLS = [{"name": "Read", "description": "Reads a file.", "input_schema": {
    "type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}}]
MESSAGES = [{"role": "user", "content": "read note.txt"},
            {"role": "system", "content": "cwd: /tmp/work"}]


def estimate(chat: dict) -> int:
    return math.ceil(payload_size({k: chat[k] for k in ("messages", "tools") if k in chat}) / 3.0)


def test_messages_count_tokens_is_the_gateways_estimate_of_the_translated_request(served):
    url, _ = served
    client = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0)
    got = client.messages.count_tokens(model="claude-opus-5-5", system=SYSTEM, messages=MESSAGES, tools=TOOLS)
    chat = anthropic_messages.to_internal({"max_tokens": 1, "system": SYSTEM, "messages": MESSAGES,
                                           "tools": TOOLS}).body
    assert got.input_tokens == estimate(chat) and got.input_tokens > len(SYSTEM) // 4
    longer = client.messages.count_tokens(model="router", system=SYSTEM * 2, messages=MESSAGES, tools=TOOLS)
    assert longer.input_tokens == got.input_tokens + math.ceil(len(SYSTEM) / 3) or \
        abs(longer.input_tokens - got.input_tokens - len(SYSTEM) / 3) <= 1
    r = httpx.post(url + "/v1/messages/count_tokens", headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
                   json={"model": "router", "messages": [{"role": "user", "content": [{"type": "image"}]}]})
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["message"].startswith("messages[0].content[0].type: ")


def test_responses_input_tokens_is_the_gateways_estimate_in_openais_shape(served):
    url, _ = served
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    got = client.responses.input_tokens.count(model="gpt-6.2-sol", instructions=SYSTEM, input="read note.txt")
    chat = openai_responses.to_internal({"instructions": SYSTEM, "input": "read note.txt"}).body
    assert got.object == "response.input_tokens" and got.input_tokens == estimate(chat)
    r = httpx.post(url + "/v1/responses/input_tokens", headers=AUTH, json={"input": [{"type": "item_reference"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[0].type"
    assert httpx.post(url + "/v1/responses/input_tokens", json={"input": "x"}).status_code == 401


def test_models_lists_router_and_the_pool_in_both_apis(served):
    url, _ = served
    names = ["router", *POOL.names]
    listed = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0).models.list()
    assert [m.id for m in listed.data] == names and {m.object for m in listed.data} == {"model"}
    page = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0).models.list()
    assert [m.id for m in page.data] == names and {m.type for m in page.data} == {"model"}
    assert page.has_more is False
    r = httpx.get(url + "/v1/models", headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 401 and r.json()["type"] == "error"


@pytest.mark.parametrize("model", ["claude-haiku-5-5", "claude-opus-5-5"])
def test_claude_codes_default_model_names_are_routed(served, picked, model):
    url, _ = served
    ex = picked["agree"]
    tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in ex.tools]
    msg = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0).messages.create(
        model=model, max_tokens=256, tools=tools, messages=[{"role": "user", "content": ex.messages[-1].content}])
    assert msg.switchcraft["routed"] is True and msg.model in POOL.names


def test_codexs_default_model_name_is_routed_and_an_unmatched_name_is_not(served, picked):
    url, _ = served
    ex = picked["agree"]
    tools = [{"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}
             for t in ex.tools]
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    raw = client.responses.with_raw_response.create(model="gpt-6.2-sol", input=ex.messages[-1].content, tools=tools)
    done = raw.parse()
    assert done.model in POOL.names and done.model_extra["switchcraft"]["routed"] is True
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="mistral-large-9", input="Say hi.")


def test_an_alias_to_a_model_outside_the_pool_is_refused_when_the_gateway_is_built(client):
    with pytest.raises(ValueError, match=r"aliases.claude-\*: 'opus' is neither 'router'"):
        replay_app(client, type("Replay", (), {"base_url": "http://127.0.0.1:9"})(), aliases={"claude-*": "opus"})
