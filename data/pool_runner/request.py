"""Build the chat-completion request for one (example, model), and the hash that names it;
`plan_calls` plans every call of a run.

Two prompt styles, as in BFCL:
- `native`: the tools go in the `tools` parameter (function names made
  OpenAI-legal: BFCL names such as `math.factorial` become `math_factorial`);
- `prompt`: no `tools` parameter; a system prompt lists the functions as JSON
  and asks for calls in Python syntax, `[f(a=1), g(b="x")]`.

The request hash covers everything that changes what the model is asked
(model id, messages, tools, sampling settings), never the key or the URL, so
a restarted run recognises the calls it already paid for and a changed prompt
is a new call.

    python -m pytest -q tests/data/pool_runner/test_request.py
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from data.pool import Pool, PoolModel
from data.wire import native_request
from data.schema import Example, Tool

# The function-doc prompt BFCL used for non-native models (paraphrased, same contract).
PROMPT_SYSTEM = (
    "You are an expert in composing functions. You are given a question and a set of possible functions. "
    "Based on the question, you will need to make one or more function/tool calls to achieve the purpose. "
    "If none of the functions can be used, point it out. If the given question lacks the parameters "
    "required by the function, also point it out. You should only return the function calls in your response.\n\n"
    "If you decide to invoke any of the function(s), you MUST put it in the format of "
    "[func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]\n"
    "You SHOULD NOT include any other text in the response.\n\n"
    "Here is a list of functions in JSON format that you can invoke.\n{functions}\n"
)

_ILLEGAL_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def openai_function_name(name: str) -> str:
    """OpenAI accepts ^[A-Za-z0-9_-]{1,64}$; BFCL replaced the rest (mostly '.') with '_'."""
    return _ILLEGAL_NAME_CHARS.sub("_", name)[:64]


def native_tools(tools: list[Tool]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": openai_function_name(t.name),
                "description": t.description,
                "parameters": t.parameters,
            },
        }
        for t in tools
    ]


def prompt_functions(tools: list[Tool]) -> str:
    # The original docs as the benchmark wrote them (BFCL's prompt models saw these).
    docs = [
        t.original or {"name": t.name, "description": t.description, "parameters": t.parameters}
        for t in tools
    ]
    return json.dumps(docs, ensure_ascii=False, indent=2)


def chat_messages(example: Example) -> list[dict[str, Any]]:
    """OpenAI chat messages. Assistant calls get ids and each tool turn answers the next
    unanswered call (OpenAI rejects a tool message without its `tool_call_id`)."""
    out: list[dict[str, Any]] = []
    unanswered: list[str] = []
    for turn, m in enumerate(example.messages):
        msg: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            ids = [f"call_{turn}_{i}" for i in range(len(m.tool_calls))]
            msg["tool_calls"] = [
                {
                    "id": i,
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": json.dumps(c.arguments, ensure_ascii=False),
                    },
                }
                for i, c in zip(ids, m.tool_calls)
            ]
            unanswered = ids
        if m.role == "tool":
            msg["tool_call_id"] = unanswered.pop(0) if unanswered else f"call_{turn}"
            msg["content"] = m.content or ""
        if m.name and m.role == "tool":
            msg["name"] = m.name
        if msg["content"] is None and m.role != "assistant":
            msg["content"] = ""
        out.append(msg)
    return out


def styled_request(
    messages: list[dict[str, Any]], tools: list[Tool], prompt_style: str, requirement: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(messages, `tools` parameter or None) as a model of this prompt style is asked.

    `prompt`: the function docs go in the system prompt (merged in front of the
    caller's own system message) and no `tools` parameter is sent; `native`: the
    messages as given and the tools with OpenAI-legal names. The pool runner and
    the gateway both build requests here, so a model is served the way it was labelled.
    `requirement`: a line the prompt adds after the functions (the gateway's tool_choice: which call is required).
    """
    if prompt_style == "prompt" and tools:
        messages = list(messages)
        system = PROMPT_SYSTEM.format(functions=prompt_functions(tools))
        if requirement:
            system += requirement + "\n"
        if messages and messages[0].get("role") in ("system", "developer"):
            messages[0] = {
                "role": "system",
                "content": system + "\n" + _text_of(messages[0].get("content")),
            }
        else:
            messages.insert(0, {"role": "system", "content": system})
        return messages, None
    return messages, native_tools(tools) if tools else None


def _text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of an OpenAI content list."""
    if isinstance(content, list):
        return "\n".join(p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content or ""


# OpenAI's reasoning models (o1, o3, o4-mini, gpt-5…) refuse `max_tokens` ("use 'max_completion_tokens'");
# every other Chat Completions server takes `max_tokens`, and not all take the newer field.
REASONING_MODEL = re.compile(r"(?:openai/)?(?:o[1-9]|gpt-5)(?:$|[-.:_])")
CAP_FIELDS = ("max_completion_tokens", "max_tokens")


def cap_field(model: PoolModel) -> str:
    """The Chat Completions field that caps `model`'s output: `max_completion_tokens` for OpenAI's reasoning
    models, `max_tokens` otherwise (Messages and Responses providers get theirs from it: apis.native_request)."""
    return "max_completion_tokens" if REASONING_MODEL.match(model.endpoint_model) else "max_tokens"


def output_cap(body: dict[str, Any], model: PoolModel, default_output_tokens: int) -> int:
    """The output tokens `model` may write for `body`, per answer: the caller's cap (the smaller of
    `max_completion_tokens` and `max_tokens` when both are given), else the pool's `max_output_tokens`, else
    `default_output_tokens`. `with_output_cap` sends exactly this, so a reservation priced at it holds."""
    caps = [v for v in (body.get(k) for k in CAP_FIELDS) if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return min(caps) if caps else model.max_output_tokens or default_output_tokens


def with_output_cap(body: dict[str, Any], model: PoolModel, default_output_tokens: int) -> dict[str, Any]:
    """`body` with its output cap (`output_cap`) in the one field `model` takes (`cap_field`): every call the
    gateway sends is capped, whether or not the caller asked for a cap."""
    out = {k: v for k, v in body.items() if k not in CAP_FIELDS}
    out[cap_field(model)] = output_cap(body, model, default_output_tokens)
    return out


def build_request(example: Example, model: PoolModel) -> dict[str, Any]:
    """The JSON body of POST {base_url}/chat/completions for this example and model."""
    messages, tools = styled_request(chat_messages(example), example.tools, model.prompt_style)
    body: dict[str, Any] = {"model": model.endpoint_model}
    if tools is not None:
        body["tools"] = tools
    body["messages"] = messages
    if model.temperature is not None:
        body["temperature"] = model.temperature
    if model.max_output_tokens is not None:
        body[cap_field(model)] = model.max_output_tokens
    if model.send_metadata:
        # Lets a replay server find the example without matching text. Not `store: true`:
        # asking a provider to keep our prompts is a separate decision.
        body["metadata"] = {"example_id": example.id}
    return body


@dataclass
class PlannedCall:
    """One (example, model) call of a run: the chat request body, and the hash of what is sent (the body in the
    model's API) that names it."""

    example: Example
    model: PoolModel
    body: dict
    request_hash: str


def plan_calls(pool: Pool, examples: list[Example]) -> dict[str, list[PlannedCall]]:
    """Every model's calls, in example order; an example listed twice is one call."""
    out: dict[str, list[PlannedCall]] = {}
    examples = list({ex.id: ex for ex in examples}.values())
    for m in pool.models:
        calls = []
        for ex in examples:
            body = build_request(ex, m)
            calls.append(PlannedCall(ex, m, body, request_hash(native_request(m.api, body))))
        out[m.name] = calls
    return out


def request_hash(body: dict[str, Any]) -> str:
    """sha256 of the canonical JSON body, minus fields that do not change the answer."""
    canon = {k: v for k, v in body.items() if k not in ("metadata", "store", "stream")}
    text = json.dumps(canon, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def idempotency_key(example_id: str, model: str, req_hash: str) -> str:
    """Stable across restarts: a call re-sent after a crash carries the same key, so a
    server that honours Idempotency-Key answers it without charging again."""
    return hashlib.sha256(f"{example_id}\x00{model}\x00{req_hash}".encode()).hexdigest()[:32]


def estimate_input_tokens(body: dict[str, Any]) -> int:
    """A deliberately high token estimate (3 bytes a token) for budget reservations."""
    return len(json.dumps(body.get("messages", [])) + json.dumps(body.get("tools", []))) // 3 + 8
