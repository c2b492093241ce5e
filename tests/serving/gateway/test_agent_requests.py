"""What Claude Code and Codex CLI send, translated: the request shapes they were seen sending (captured from the
real clients pinned in node/package.json, trimmed), as the chat request the gateway routes, and the answers back.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_agent_requests.py

The end-to-end runs of the real clients are tests/serving/gateway/test_agent_clients.py.
"""

from __future__ import annotations

import json

import pytest

from serving.gateway.apis import Reply
from serving.gateway.apis import anthropic_messages as messages
from serving.gateway.apis import openai_responses as responses
from serving.core.errors import GatewayError
from serving.gateway.requests import check_chat_fields, to_tools

SCHEMA = {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}
CLAUDE_CODE = {  # Claude Code 2.1.332 `claude -p`: its top-level fields, a system turn, a deferred tool
    "model": "claude-opus-5-5", "max_tokens": 32000, "stream": True,
    "thinking": {"type": "adaptive", "display": "omitted"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "high"},
    "metadata": {"user_id": json.dumps({"device_id": "d", "account_uuid": "", "session_id": "s"})},
    "system": [{"type": "text", "text": "You are a Claude agent."},
               {"type": "text", "text": "Be careful.", "cache_control": {"type": "ephemeral"}}],
    "tools": [{"name": "Read", "description": "Reads a file.", "input_schema": SCHEMA},
              {"name": "ToolSearch", "description": "Fetches deferred tools.",
               "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}},
              {"name": "NotebookEdit", "description": "Edits a notebook.", "input_schema": SCHEMA,
               "defer_loading": True},
              {"name": "DeferredToolPlaceholder", "description": "never call this tool",
               "input_schema": {"type": "object", "properties": {}}, "defer_loading": True},
              {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "<system-reminder>hi</system-reminder>"},
                                              {"type": "text", "text": "read note.txt"}]},
                 {"role": "system", "content": [{"type": "text", "text": "# Environment\ncwd: /tmp/w",
                                                 "cache_control": {"type": "ephemeral"}}]}]}
TOOL_SEARCH_TURNS = [
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "", "signature": "x"},
                                      {"type": "tool_use", "id": "toolu_1", "name": "ToolSearch",
                                       "input": {"query": "select:NotebookEdit"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
        {"type": "tool_reference", "tool_name": "NotebookEdit"}]}]}]


def test_claude_codes_request_is_one_system_prompt_in_order_and_its_extra_fields_are_accepted():
    inbound = messages.to_internal(CLAUDE_CODE)
    body = inbound.body
    check_chat_fields(body)
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][0]["content"] == "You are a Claude agent.\n\nBe careful.\n\n# Environment\ncwd: /tmp/w"
    assert body["messages"][1]["content"] == "<system-reminder>hi</system-reminder>\nread note.txt"
    assert inbound.where == ["system", "messages[0]"]
    # Deferred tools are not offered before a tool_reference loads them; the server tool is not offered.
    assert [t["function"]["name"] for t in body["tools"]] == ["Read", "ToolSearch"]
    assert body["user"] == CLAUDE_CODE["metadata"]["user_id"] and body["max_tokens"] == 32000
    assert not {"thinking", "context_management", "output_config"} & set(body)


def test_a_tool_reference_is_the_tools_definition_and_offers_the_tool():
    body = messages.to_internal({**CLAUDE_CODE, "messages": CLAUDE_CODE["messages"] + TOOL_SEARCH_TURNS}).body
    check_chat_fields(body)
    result = body["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "toolu_1"
    assert result["content"] == '<function>{"description": "Edits a notebook.", "name": "NotebookEdit", ' \
                                f'"parameters": {json.dumps(SCHEMA)}}}</function>'
    assert [t["function"]["name"] for t in body["tools"]] == ["Read", "ToolSearch", "NotebookEdit"]
    assert body["messages"][-2]["tool_calls"][0]["function"]["name"] == "ToolSearch"  # thinking dropped


@pytest.mark.parametrize("edit, field, fragment", [
    ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools[0].type", "server tools"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "image", "source": {}}]}]}]}, "messages[0].content[0].content[0].type", "text and tool_reference"),
    ({"messages": [{"role": "system", "content": 3}]}, "messages[0].content", "string or a list of text blocks"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role", "'user', 'assistant' or 'system'"),
])
def test_what_messages_still_refuses_names_the_field_and_why(edit, field, fragment):
    with pytest.raises(GatewayError) as e:
        messages.to_internal({**CLAUDE_CODE, **edit})
    assert e.value.status == 400 and e.value.param == field and fragment in e.value.message


def reply(request: dict, message: dict) -> Reply:
    body = {"choices": [{"message": message, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3}}
    meta = {"answered_by": "m", "routed": True}
    return Reply(body, "m", meta, [], {}, False, request, "rid")


def test_the_messages_answer_names_the_server_tools_it_did_not_offer():
    msg = messages.message(reply(CLAUDE_CODE, {"role": "assistant", "content": "done"}))
    assert msg["switchcraft"]["dropped_tools"] == [
        {"tool": "web_search", "type": "web_search_20250305",
         "why": "a server tool Anthropic runs on its side; the pool's models cannot run it"}]
    assert msg["content"] == [{"type": "text", "text": "done"}]


FN = {"type": "function", "name": "exec_command", "description": "Runs a command.", "strict": False,
      "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}
CODEX = {  # Codex CLI 0.171.0 `codex exec` with `model = "router"`: its top-level fields and default tools
    "model": "router", "stream": True, "tool_choice": "auto", "parallel_tool_calls": True,
    "reasoning": {"summary": "auto"}, "store": False, "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "k", "client_metadata": {"thread_id": "t"}, "text": {"verbosity": "low"},
    "tools": [FN, {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [
        {"type": "function", "name": "spawn_agent", "description": "Spawn.", "strict": False,
         "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}]},
              {"type": "web_search", "external_web_access": False}, {"type": "local_shell"}],
    "input": [{"type": "message", "id": "msg_1", "role": "developer",
               "content": [{"type": "input_text", "text": "You are Codex."}]},
              {"type": "message", "id": "msg_2", "role": "user", "content": [{"type": "input_text", "text": "go"}]}]}
EXEC = {"type": "custom", "name": "exec", "description": "Run JavaScript.",
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: SOURCE"}}


def test_codexs_namespace_tools_are_flattened_and_hosted_tools_not_offered():
    body = responses.to_internal(CODEX).body
    check_chat_fields(body)
    assert [t["function"]["name"] for t in body["tools"]] == ["exec_command", "multi_agent_v1__spawn_agent"]
    assert body["tools"][1]["function"]["description"] == "Spawn."
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert not {"reasoning", "store", "include", "client_metadata", "prompt_cache_key"} & set(body)


def test_a_namespaced_call_comes_back_in_its_namespace_and_history_reads_it_back():
    call = {"id": "c1", "type": "function", "function": {"name": "multi_agent_v1__spawn_agent",
                                                         "arguments": '{"task": "t"}'}}
    done = responses.response(reply(CODEX, {"role": "assistant", "content": None, "tool_calls": [call]}))
    item = done["output"][0]
    assert (item["type"], item["name"], item["namespace"], item["call_id"]) == (
        "function_call", "spawn_agent", "multi_agent_v1", "c1")
    assert [d["tool"] for d in done["switchcraft"]["dropped_tools"]] == ["web_search", "local_shell"]
    later = {**CODEX, "input": CODEX["input"] + [{k: item[k] for k in ("type", "call_id", "name", "namespace",
                                                                        "arguments")},
                                                 {"type": "function_call_output", "call_id": "c1", "output": "ok"}]}
    body = responses.to_internal(later).body
    check_chat_fields(body)
    assert body["messages"][-2]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__spawn_agent"


def test_a_custom_tool_is_a_one_string_function_and_its_call_a_custom_tool_call():
    """Codex's default model declares its tools in an `additional_tools` item, a freeform `exec` among them."""
    request = {**CODEX, "tools": [], "input": [
        {"type": "additional_tools", "id": "at_1", "role": "developer",
         "tools": [{"type": "namespace", "name": "functions", "description": "", "tools": [EXEC]}]}, *CODEX["input"]]}
    body = responses.to_internal(request).body
    check_chat_fields(body)
    fn = body["tools"][0]["function"]
    assert fn["name"] == "functions__exec" and fn["parameters"]["required"] == ["input"]
    assert fn["description"].endswith("The input follows this lark grammar:\nstart: SOURCE")
    call = {"id": "c2", "type": "function", "function": {"name": "functions__exec",
                                                         "arguments": json.dumps({"input": "text('hi')"})}}
    done = responses.response(reply(request, {"role": "assistant", "content": None, "tool_calls": [call]}))
    item = done["output"][0]
    assert (item["type"], item["name"], item["namespace"], item["input"]) == (
        "custom_tool_call", "exec", "functions", "text('hi')")
    events = [e for e in b"".join(responses.events(done)).split(b"\n\n") if e]
    assert b"response.custom_tool_call_input.done" in b"".join(events)
    later = {**request, "input": request["input"] + [
        {"type": "custom_tool_call", "call_id": "c2", "name": "exec", "namespace": "functions", "input": "text('hi')"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "hi"}]}
    body = responses.to_internal(later).body
    check_chat_fields(body)
    assert json.loads(body["messages"][-2]["tool_calls"][0]["function"]["arguments"]) == {"input": "text('hi')"}
    assert body["messages"][-1] == {"role": "tool", "tool_call_id": "c2", "content": "hi"}


def internal_error(inbound) -> GatewayError:
    """The error the chat path finds in the translated request (its tools read as routing reads them), as the
    caller is told it."""
    check_chat_fields(inbound.body)
    with pytest.raises(GatewayError) as e:
        to_tools(inbound.body["tools"])
    return inbound.caller_error(e.value)


def test_an_error_in_a_tool_names_the_tool_where_the_caller_declared_it():
    """Tools left out (server, not yet loaded) or flattened shift the offered list: the error still names the
    caller's own path."""
    bad_tool = {"name": "f", "input_schema": {"type": "dict"}}
    tools = [{"type": "web_search_20250305", "name": "web_search"}, CLAUDE_CODE["tools"][2], bad_tool]
    e = internal_error(messages.to_internal({**CLAUDE_CODE, "tools": tools}))
    assert e.param == "tools[2].input_schema.type" and e.message.startswith("tools[2].input_schema.type: ")
    namespace = {"type": "namespace", "name": "ns", "description": "", "tools": [
        {"type": "function", "name": "ok", "parameters": {"type": "object"}},
        {"type": "function", "name": "broken", "parameters": {"type": "dict"}}]}
    e = internal_error(responses.to_internal({**CODEX, "tools": [{"type": "web_search"}, namespace]}))
    assert e.param == "tools[1].tools[1].parameters.type", e.param


def test_a_long_namespaced_name_is_offered_within_64_characters_and_mapped_back():
    ns, name = "mcp__a_server_with_a_rather_long_name", "read_multiple_files_with_options"
    request = {**CODEX, "tools": [{"type": "namespace", "name": ns, "description": "", "tools": [
        {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}]}]}
    body = responses.to_internal(request).body
    check_chat_fields(body)
    flat = body["tools"][0]["function"]["name"]
    assert len(flat) == 64 and flat.startswith(ns + "__read")
    call = {"id": "c3", "type": "function", "function": {"name": flat, "arguments": "{}"}}
    item = responses.response(reply(request, {"role": "assistant", "content": None, "tool_calls": [call]}))["output"][0]
    assert (item["name"], item["namespace"]) == (name, ns)
