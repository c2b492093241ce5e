"""Each pool model served the way it was labelled: its request per prompt style, its answer as OpenAI tool_calls.

    payload = upstream_body(caller_body, tools, pool.get(model))   # prompt style: functions in the system prompt
    answer = read_answer(upstream_json, pool.get(model), tools, choice)    # answer.body carries OpenAI `tool_calls`
    answer.raw, answer.calls, answer.decoder, answer.usage          # what the model said, what it means
    answer.unmet, answer.dropped                                    # held to the caller's tool_choice

Requests come from the pool runner's own builder (`data.pool_runner.request.styled_request`):
a `prompt` model gets BFCL's system prompt listing the functions and no
`tools` (nor `tool_choice`), a `native` model gets the tools under OpenAI-legal
names (`math.factorial` → `math_factorial`; earlier calls in the conversation
and a named `tool_choice` renamed alike). The caller's other fields (temperature,
max_tokens, metadata, …) pass through.

Answers are decoded with the decoders that labelled the recorded outputs
(`data.decoders.decode`), names mapped back to the caller's tools. A prompt
model's text that reads as calls (`[f(a=1)]`) becomes `tool_calls`; a native
model's `tool_calls` pass as they came, only renamed back; a native model's
text is no call (the labelling rule: `data.labels`), returned as text.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from data.decoders import decode
from data.decoders.names import tool_name_index
from data.pool import PoolModel
from data.pool_runner.request import openai_function_name, styled_request
from data.wire.raw import raw_from_message, usage_from_wire
from data.schema import Call, Tool, Usage
from data.verify.batch import is_text
from serving.gateway.tool_choice import AUTO, ToolChoice

# Fields that only mean something next to native `tools`: a prompt-style model was labelled without them.
NATIVE_ONLY = ("tools", "tool_choice", "parallel_tool_calls", "functions", "function_call")


def upstream_body(body: dict[str, Any], tools: list[Tool], model: PoolModel) -> dict[str, Any]:
    """What goes to `model`'s endpoint for the caller's `body` (whose tools, parsed, are `tools`)."""
    payload = {k: v for k, v in body.items() if k != "switchcraft" and k not in NATIVE_ONLY}
    messages = body.get("messages") or []
    if model.prompt_style == "native":
        messages = [_legal_history(m) for m in messages]
        messages, native = styled_request(messages, tools, model.prompt_style)
    else:  # the functions it may call, and which call is required: it has no tool_choice field to read
        choice = ToolChoice.of(body)
        messages, native = styled_request(messages, choice.offered(tools), model.prompt_style, choice.instruction())
    if model.prompt_style == "native":
        if native is not None:
            # The builder's name, description and parameters; the caller's other fields (e.g. `strict`) kept.
            payload["tools"] = [{"type": "function", "function": {**(t.original or {}), **n["function"]}}
                                for t, n in zip(tools, native)]
        for key in ("tool_choice", "parallel_tool_calls"):
            if key in body:
                payload[key] = _legal_tool_choice(body[key]) if key == "tool_choice" else body[key]
        if payload.get("stream") is True:  # usage in the stream's last chunk: what the answer is charged
            options = payload.get("stream_options")
            payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    else:
        payload.pop("stream_options", None)
        payload.pop("stream", None)  # read whole: its calls exist only once the text is complete
    payload["model"] = model.endpoint_model
    payload["messages"] = messages
    return payload


def _legal_history(message: Any) -> Any:
    """An assistant turn's earlier tool calls under the names the native model is offered."""
    if not isinstance(message, dict) or not message.get("tool_calls"):
        return message
    calls = []
    for tc in message["tool_calls"]:
        fn = tc.get("function") if isinstance(tc, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            tc = {**tc, "function": {**fn, "name": openai_function_name(fn["name"])}}
        calls.append(tc)
    return {**message, "tool_calls": calls}


def _legal_tool_choice(choice: Any) -> Any:
    fn = choice.get("function") if isinstance(choice, dict) else None
    if isinstance(fn, dict) and isinstance(fn.get("name"), str):
        return {**choice, "function": {**fn, "name": openai_function_name(fn["name"])}}
    return choice


@dataclass
class Answer:
    """One model's answer: the chat completion to return, and what it said and means."""

    body: dict[str, Any]  # the completion with OpenAI `tool_calls`, under the caller's tool names
    raw: Any  # exactly what the model said (text, or its calls as sent)
    calls: list[Call]  # what it means as calls (agreement): [] for no call
    decoder: str | None
    decode_error: str | None
    usage: Usage
    unmet: str | None = None  # why the answer fails the caller's tool_choice (no call where one was required)
    dropped: list[dict[str, str]] | None = None  # calls the tool_choice took out: {name, why}

    def calls_json(self) -> list[dict[str, Any]]:
        return [{"name": c.name, "arguments": c.arguments} for c in self.calls]


def read_answer(data: dict[str, Any], model: PoolModel, tools: list[Tool], want: ToolChoice = AUTO) -> Answer:
    """Decode the upstream's chat completion `data`, held to the caller's tool choice `want`; raises `WireError`
    when its message is unreadable."""
    choices, dropped = [], []
    first: tuple[Any, list[Call], str | None, str | None] | None = None
    for choice in data.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        raw = raw_from_message(message)
        res = decode(raw, tools)
        calls, gone = want.keep(list(res.calls or []), lambda c: c.name)
        if model.prompt_style == "native":
            calls = [] if is_text(raw) else calls
            message = _obey(_names_back(message, tools), want)
        elif calls:
            message = {"role": "assistant", "content": None, "tool_calls": tool_calls(calls)}
        if not (message or {}).get("tool_calls") and choice.get("finish_reason") == "tool_calls":
            choice = {**choice, "finish_reason": "stop"}  # every call was dropped: the text is the answer
        elif (message or {}).get("tool_calls"):
            choice = {**choice, "finish_reason": "tool_calls"}
        choices.append({**choice, "message": message})
        if first is None:
            first, dropped = (raw, calls, res.decoder if calls else None, res.error), gone
    raw, calls, decoder, error = first or ("", [], None, "no_call: no choices")
    return Answer({**data, "choices": choices}, raw, calls, decoder, error, usage_from_wire(data.get("usage")),
                  want.unmet(calls, model.name), dropped or None)


def _obey(message: dict[str, Any], want: ToolChoice) -> dict[str, Any]:
    """A native answer's `tool_calls` without the calls `want` takes out (its text kept)."""
    if not want.constrained or not message.get("tool_calls"):
        return message
    kept, _ = want.keep(message["tool_calls"], lambda tc: ((tc or {}).get("function") or {}).get("name", ""))
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    return {**out, "tool_calls": kept} if kept else out


def tool_calls(calls: list[Call]) -> list[dict[str, Any]]:
    """Decoded calls as OpenAI `tool_calls` (arguments as a JSON string, fresh call ids)."""
    return [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
            for c in calls]


def _names_back(message: dict[str, Any], tools: list[Tool]) -> dict[str, Any]:
    """A native answer as it came, its tool names mapped back to the caller's (`math_factorial` → `math.factorial`)."""
    if not message.get("tool_calls") or not tools:
        return message
    index = tool_name_index(tools)
    out = []
    for tc in message["tool_calls"]:
        fn = tc.get("function") if isinstance(tc, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            tc = {**tc, "function": {**fn, "name": index.resolve(fn["name"]) or fn["name"]}}
        out.append(tc)
    return {**message, "tool_calls": out}


def caller_name(name: str, tools: list[Tool]) -> str:
    """The caller's name for a tool name a native model streamed (unchanged when no tool matches)."""
    if not tools:
        return name
    return tool_name_index(tools).resolve(name) or name
