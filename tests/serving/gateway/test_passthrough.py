"""A Messages or Responses body passed through to a pool model whose provider speaks that API: what the provider
receives is the caller's body byte for byte but for `model`, the reserved output cap and (with tool routing) the
routed tools, with the caller's version and beta headers; what the caller gets is the provider's answer as it
sent it, plus the `switchcraft` trace, charged its real usage.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_passthrough.py

The stand-in provider (native_upstream.py) answers a Message with a thinking block and its signature and a cited
text, a Response with an encrypted reasoning item. A prompt-style model, a model of another API and a cascade are
still asked translated.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from data.pool_runner.request import output_cap
from data.wire import chat_completion
from data.wire.raw import usage_from_wire
from serving.app import create_app
from serving.gateway.config import ServingConfig
from serving.gateway.tools import GatewayTools
from serving.tools.config import RetrievalConfig
from serving.tools.router import ToolRouter
from tests.catalogs import POLICY
from tests.serving.gateway.helpers import A, B, POOL, TOP, ledger, pool_env
from tests.serving.gateway.native_upstream import MESSAGE, RESPONSE, SIGNATURE, THINKING, NativeUpstream
from tests.serving.helpers import KEY, SECRET, Loopback, wait_for

pytestmark = pytest.mark.integration
MESSAGES_MODEL, RESPONSES_MODEL = TOP, B  # native models, here behind Messages and Responses
CHAT_MODEL = "open-mistral-nemo-2407-FC-Auto"  # native, behind Chat Completions
APIS = {MESSAGES_MODEL: "anthropic_messages", RESPONSES_MODEL: "openai_responses", A: "anthropic_messages"}
DEFAULT_CAP = ServingConfig().state.default_output_tokens
BETA = "interleaved-thinking-2025-05-14,context-management-2025-06-27"


def compact(body: dict) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def pool_behind(url: str):
    return POOL.model_copy(update={"models": [m.model_copy(update={"base_url": url + "/v1",
                                                                   "api": APIS.get(m.name, m.api)})
                                              for m in POOL.models]})


@pytest.fixture(scope="module")
def gateway(client):
    """(gateway URL, the stand-in): every pool model answered by the stand-in, in its API (APIS)."""
    upstream = NativeUpstream()
    mp = pytest.MonkeyPatch()
    pool_env(mp)
    with Loopback(upstream.app()) as up, Loopback(create_app(ServingConfig(), client=client,
                                                             pool=pool_behind(up))) as url:
        yield url, upstream
    mp.undo()


CLAUDE_CODE = {
    "model": MESSAGES_MODEL, "max_tokens": 1000,
    "system": [{"type": "text", "text": "You are Claude Code."},
               {"type": "text", "text": "Be brief, café ☕.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should look it up.", "signature": "EqQBCkgIAhistory=="},
            {"type": "redacted_thinking", "data": "EmwKAhistory-redacted"},
            {"type": "text", "text": "Looking.", "citations": None},
            {"type": "tool_use", "id": "toolu_01", "name": "ToolSearch", "input": {"query": "select:Weather"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01",
             "content": [{"type": "tool_reference", "tool_name": "Weather"}]},
            {"type": "text", "text": "Go on.", "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}],
    "tools": [{"name": "ToolSearch", "description": "Find deferred tools.",
               "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}},
              {"name": "Weather", "description": "Weather now.", "defer_loading": True,
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
               "cache_control": {"type": "ephemeral"}},
              {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}],
    "thinking": {"type": "enabled", "budget_tokens": 512}, "temperature": 1, "top_k": 5,
    "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
    "metadata": {"user_id": "user_abc_account_x_session_0b1c"}, "stream": False}

CODEX = {
    "model": RESPONSES_MODEL, "instructions": "You are Codex.",
    "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be careful."}]},
              {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is here?"}]},
              {"type": "reasoning", "id": "rs_0a1b", "summary": [], "encrypted_content": "gAAAAABo-opaque"},
              {"type": "function_call", "id": "fc_0a1b", "call_id": "call_Xy12", "name": "exec_command",
               "arguments": "{\"cmd\":\"ls\"}"},
              {"type": "function_call_output", "call_id": "call_Xy12", "output": "README.md"},
              {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And now?"}]}],
    "tools": [{"type": "function", "name": "exec_command", "description": "Runs a command.", "strict": False,
               "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}},
              {"type": "namespace", "name": "mcp__files", "description": "Files.", "tools": [
                  {"type": "function", "name": "read_text_file", "parameters": {"type": "object", "properties": {}}}]},
              {"type": "custom", "name": "apply_patch", "description": "Patch files.",
               "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
              {"type": "web_search", "external_web_access": False}],
    "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": {"effort": "medium", "summary": "auto"},
    "store": False, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "0198c3f2-session",
    "text": {"verbosity": "medium"}}


def test_a_messages_body_reaches_its_provider_byte_for_byte_but_the_model(gateway):
    url, upstream = gateway
    sent = compact(CLAUDE_CODE)
    r = httpx.post(url + "/v1/messages?beta=true", content=sent, timeout=60, headers={
        "x-api-key": KEY, "content-type": "application/json", "anthropic-version": "2023-06-01",
        "anthropic-beta": BETA, "x-stainless-lang": "js"})
    assert r.status_code == 200, r.text
    path, got, headers = upstream.seen[-1]
    assert path == "messages"
    assert got == compact({**CLAUDE_CODE, "model": POOL.get(MESSAGES_MODEL).model_id})  # the cap was the caller's
    assert headers["anthropic-beta"] == BETA and headers["anthropic-version"] == "2023-06-01"
    assert headers["x-api-key"] == SECRET and "x-stainless-lang" not in headers
    answer = r.json()
    trace = answer.pop("switchcraft")
    assert answer == MESSAGE  # thinking and its signature, the citation: as the provider sent them
    assert r.headers["x-switchcraft-model"] == MESSAGES_MODEL == trace["answered_by"]
    assert trace["passthrough"] == {"models": [MESSAGES_MODEL], "headers": ["anthropic-beta", "anthropic-version"]}
    cost = POOL.cost_usd(MESSAGES_MODEL, usage_from_wire(chat_completion("anthropic_messages", MESSAGE)["usage"]))
    assert cost > 0 and trace["charged_usd"] == pytest.approx(cost, abs=1e-10)
    assert float(r.headers["x-switchcraft-cost-usd"]) == pytest.approx(cost, abs=1e-8)
    rows = wait_for(lambda: ledger(url, r.headers["x-request-id"]))
    assert [(row["model"], row["kind"]) for row in rows] == [(MESSAGES_MODEL, "answer")]
    assert rows[0]["usd"] == pytest.approx(cost, abs=1e-10)


def test_thinking_blocks_and_cache_control_round_trip_through_the_anthropic_client(gateway):
    """The SDK gets the provider's thinking block with its signature; sent back in the next turn, it reaches the
    provider with the signature, beside cache_control breakpoints."""
    url, upstream = gateway
    client = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0)
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    asked = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.messages.create(model=MESSAGES_MODEL, max_tokens=2000, system=system, messages=asked,
                                   thinking={"type": "enabled", "budget_tokens": 1024})
    thinking = first.content[0]
    assert (thinking.type, thinking.thinking, thinking.signature) == ("thinking", THINKING, SIGNATURE)
    assert first.content[1].citations[0].cited_text == "sunny"
    turn = [*asked, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [{"type": "text", "text": "Thanks.", "cache_control": {"type": "ephemeral"}}]}]
    client.messages.create(model=MESSAGES_MODEL, max_tokens=2000, system=system, messages=turn,
                           thinking={"type": "enabled", "budget_tokens": 1024})
    got = json.loads(upstream.seen[-1][1])
    assert got["messages"][1]["content"][0] == {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE}
    assert got["system"] == system and got["messages"][2]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert got["thinking"] == {"type": "enabled", "budget_tokens": 1024}


@pytest.mark.parametrize("cap", [None, 333])
def test_a_responses_body_reaches_its_provider_byte_for_byte_but_the_model_and_the_cap(gateway, cap):
    """Codex gives no cap: the provider is sent the one the request's hold was priced at; a caller's cap is kept."""
    url, upstream = gateway
    body = CODEX if cap is None else {**CODEX, "max_output_tokens": cap}
    r = httpx.post(url + "/v1/responses", content=compact(body), timeout=60, headers={
        "authorization": f"Bearer {KEY}", "content-type": "application/json", "openai-beta": "responses=v1",
        "session-id": "0198c3f2-session", "originator": "codex_exec"})
    assert r.status_code == 200, r.text
    path, got, headers = upstream.seen[-1]
    m = POOL.get(RESPONSES_MODEL)
    reserved = output_cap({"max_tokens": cap} if cap else {}, m, DEFAULT_CAP)
    assert reserved == (cap or m.max_output_tokens or DEFAULT_CAP)
    assert path == "responses"
    assert got == compact({**body, "model": m.model_id, "max_output_tokens": reserved})
    assert headers["openai-beta"] == "responses=v1" and headers["authorization"] == f"Bearer {SECRET}"
    assert "originator" not in headers
    answer = r.json()
    trace = answer.pop("switchcraft")
    assert answer == RESPONSE and trace["answered_by"] == RESPONSES_MODEL
    assert trace["session"]["named_by"] == "session-id"  # sessions read the translated form, as before
    cost = POOL.cost_usd(RESPONSES_MODEL, usage_from_wire(chat_completion("openai_responses", RESPONSE)["usage"]))
    assert trace["charged_usd"] == pytest.approx(cost, abs=1e-10) and cost > 0


def test_the_openai_client_reads_a_passed_through_response(gateway):
    url, _ = gateway
    r = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0).responses.create(
        model=RESPONSES_MODEL, input="Weather in Paris?", include=["reasoning.encrypted_content"])
    assert r.output[0].type == "reasoning" and r.output[0].encrypted_content == "gAAAAABo-opaque-reasoning"
    assert r.output_text == "It is sunny." and r.usage.output_tokens_details.reasoning_tokens == 3
    assert r.model_extra["switchcraft"]["answered_by"] == RESPONSES_MODEL


@pytest.mark.parametrize("model, path", [(A, "messages"), (CHAT_MODEL, "chat/completions"),
                                         (RESPONSES_MODEL, "responses")])
def test_a_prompt_style_model_or_another_api_is_asked_translated(gateway, model, path):
    """A prompt-style model behind Messages (its functions go in its prompt) and a native model behind another
    API get the translated request: no thinking block, no beta header."""
    url, upstream = gateway
    r = httpx.post(url + "/v1/messages", json={**CLAUDE_CODE, "model": model}, timeout=60, headers={
        "x-api-key": KEY, "anthropic-beta": BETA})
    assert r.status_code == 200, r.text
    got_path, got, headers = upstream.seen[-1]
    assert got_path == path and "anthropic-beta" not in headers and b"signature" not in got
    assert "passthrough" not in r.json()["switchcraft"] and r.json()["content"][0]["type"] == "text"


def test_a_cascade_is_asked_translated(gateway):
    url, upstream = gateway
    since = len(upstream.seen)
    r = httpx.post(url + "/v1/messages", timeout=60, headers={"x-api-key": KEY}, json={
        **CLAUDE_CODE, "model": "router",
        "switchcraft": {"strategy": {"first": [MESSAGES_MODEL, CHAT_MODEL], "escalate": [RESPONSES_MODEL]}}})
    assert r.status_code == 200, r.text
    sent = {path: json.loads(raw) for path, raw, _ in upstream.seen[since:]}
    assert set(sent) >= {"messages", "chat/completions"} and "thinking" not in sent["messages"]
    assert r.json()["switchcraft"]["strategy"]["kind"] == "agree"


CARDS = """\
groups:
  - {name: weather, description: "use for weather and forecasts"}
  - {name: clock, description: "use for the time and alarms"}
tools:
  - {name: get_weather, group: weather, description: The weather now in a city, risk: read,
     parameters: {type: object, properties: {city: {type: string}}, required: [city]}}
  - {name: get_forecast, group: weather, description: The weather forecast for the next days in a city, risk: read}
  - {name: get_time, group: clock, description: The time now in a time zone, risk: read}
  - {name: set_alarm, group: clock, description: Set an alarm clock, risk: write}
"""


@pytest.fixture(scope="module")
def routed_gateway(client, encoder, tmp_path_factory):
    """(gateway URL, the stand-in, the catalog's names): tool routing over CARDS (names a provider takes as they
    are), `tools.rejected_calls: pass`."""
    from serving.tools.catalog import Catalog
    from serving.tools.index import ToolIndex
    from serving.tools.loaders import load_cards

    path = tmp_path_factory.mktemp("cards") / "cards.yaml"
    path.write_text(CARDS)
    cards, groups = load_cards(path)
    index = ToolIndex.build(Catalog(cards, groups), tmp_path_factory.mktemp("index"), encoder=encoder)
    tools = GatewayTools(ToolRouter(index, POLICY, RetrievalConfig(top_k=2)), rejected="pass")
    upstream = NativeUpstream()
    mp = pytest.MonkeyPatch()
    pool_env(mp)
    with Loopback(upstream.app()) as up, Loopback(create_app(ServingConfig(), client=client, pool=pool_behind(up),
                                                             tools=tools)) as url:
        yield url, upstream
    mp.undo()


@pytest.mark.parametrize("path, model, body", [("messages", MESSAGES_MODEL, CLAUDE_CODE),
                                               ("responses", RESPONSES_MODEL, {**CODEX, "max_output_tokens": 500})])
def test_with_tool_routing_the_provider_gets_the_routed_tools_and_the_rest_as_sent(routed_gateway, path, model,
                                                                                   body):
    url, upstream = routed_gateway
    body = {**body, "input": [*body["input"][:-1], {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "What is the weather forecast in Paris?"}]}]} if path == "responses" else {
        **body, "messages": [*body["messages"], {"role": "assistant", "content": "Ok."},
                             {"role": "user", "content": "What is the weather forecast in Paris?"}]}
    r = httpx.post(f"{url}/v1/{path}", content=compact(body), timeout=60, headers={
        "authorization": f"Bearer {KEY}", "content-type": "application/json"})
    assert r.status_code == 200, r.text
    got_path, got, _ = upstream.seen[-1]
    exposed = r.json()["switchcraft"]["tool_routing"]["exposed"]
    sent = json.loads(got)
    assert got_path == path and [t["name"] for t in sent["tools"]] == exposed and "get_weather" in exposed
    assert all(("input_schema" if path == "messages" else "parameters") in t for t in sent["tools"])
    assert compact({**sent, "tools": None}) == compact({**body, "model": POOL.get(model).model_id, "tools": None})
