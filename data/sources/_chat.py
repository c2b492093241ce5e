"""What chat-log sources (Glaive, Hermes) share: a conversation → one Example per assistant turn.

Each assistant turn that answers a user or a tool result becomes an example
whose messages are the conversation before it. A turn that calls functions
expects exactly those calls; a turn that answers in text expects no call,
when tools were offered (with none offered, "no call" is the only possible
answer and teaches nothing: such turns are counted as skipped).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from typing import Any

from data.schema import Call, Example, Expected, Message, Tool
from data.sources import IngestReport


def loads_lenient(text: str) -> Any:
    """JSON, or a Python literal (Hermes and Glaive rows hold both: `{'name': 'f'}`)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return ast.literal_eval(text)  # literals only: never evaluates code


def turn_examples(
    source: str, conv_id: str, messages: list[Message], tools: list[Tool], report: IngestReport, meta: dict[str, Any]
) -> Iterator[Example]:
    """`messages`: the whole conversation, assistant calls as `tool_calls`."""
    k = -1
    for i, m in enumerate(messages):
        if m.role != "assistant":
            continue
        k += 1
        before = messages[i - 1].role if i else None
        if before not in ("user", "tool"):
            report.skip(source, f"assistant turn after {before or 'nothing'}, not after a user or tool turn")
            continue
        if not m.tool_calls and not tools:
            report.skip(source, "text reply with no tools offered")
            continue
        yield Example(
            id=f"{source}:{conv_id}:turn{k}",
            source=source,
            category="call" if m.tool_calls else "no_call",
            messages=messages[:i],
            tools=tools,
            expected=Expected.exact(m.tool_calls) if m.tool_calls else Expected.nothing(),
            meta={**meta, "turn": k, "after_tool_result": before == "tool"},
        )


def call_from_obj(obj: Any) -> Call:
    """`{name, arguments}` where arguments may be a JSON string (as OpenAI sends them)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise ValueError("a call must be an object with a string 'name'")
    args = obj.get("arguments", obj.get("parameters")) or {}
    if isinstance(args, str):
        args = loads_lenient(args) if args.strip() else {}
    if not isinstance(args, dict):
        raise ValueError(f"arguments of {obj['name']!r} must be an object")
    return Call(name=obj["name"], arguments=args)
