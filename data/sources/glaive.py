"""Glaive function-calling v2, in either layout; one example per assistant turn (see `_chat`).

    switchcraft ingest --source glaive --path ../shared/data/glaive/glaive_toolcall_en_demo.json
    switchcraft ingest --source glaive --path glaiveai/glaive-function-calling-v2   # hub, needs network

- original: `system` ("SYSTEM: … Use them if required -" then JSON function
  docs one after another) and `chat` ("USER: … ASSISTANT: <functioncall>
  {"name": "f", "arguments": '{…}'} <|endoftext|> FUNCTION RESPONSE: … ASSISTANT: …").
  The arguments are a JSON string in single quotes, so the call is not JSON.
- LLaMA-Factory's conversion: `conversations` (from ∈ human, gpt,
  function_call, observation) and `tools` (a JSON string).
The system turn is dropped: it only lists the tools, which go into `tools`.
Ids are `glaive:<row number>:turn<k>` (k counts assistant turns from 0).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from data.errors import DataError
from data.io import iter_rows, parse_json_field
from data.schema import Call, Example, Message
from data.sources import ADAPTERS, IngestReport
from data.sources._chat import call_from_obj, loads_lenient, turn_examples
from data.tools import tools_from_docs

SOURCE = "glaive"
ROLES = {"human": "user", "gpt": "assistant", "function_call": "assistant", "observation": "tool"}
_SPEAKER = re.compile(r"(?:^|\n+)\s*(USER|ASSISTANT|FUNCTION RESPONSE):\s?")
_CALL_TAG = "<functioncall>"
_QUOTED_ARGS = re.compile(r'^\{\s*"name"\s*:\s*"(?P<name>[^"]+)"\s*,\s*"arguments"\s*:\s*\'(?P<args>.*)\'\s*\}$', re.DOTALL)


@ADAPTERS.register(SOURCE)
def read_glaive(location: str, report: IngestReport) -> Iterator[Example]:
    for line, row in iter_rows(location):
        where = {"path": location, "line": line}
        if "conversations" in row:
            tools = _tools(parse_json_field(row.get("tools") or "[]", field="tools", **where), where)
            messages = _converted(row["conversations"], where)
            layout = "sharegpt"
        elif "chat" in row:
            tools = _tools(_system_docs(row.get("system") or "", where), where)
            messages = _original(row["chat"], where)
            layout = "original"
        else:
            raise DataError("a row needs 'conversations' (converted) or 'system' + 'chat' (original)", field="chat", **where)
        yield from turn_examples(SOURCE, str(row.get("id", line)), messages, tools, report, {"layout": layout})


def _tools(docs: Any, where: dict) -> list:
    try:
        return tools_from_docs(docs)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DataError(f"bad function doc: {e}", field="tools", **where) from None


def _converted(turns: Any, where: dict) -> list[Message]:
    out: list[Message] = []
    for i, t in enumerate(turns if isinstance(turns, list) else [None]):
        field = f"conversations[{i}]"
        if not isinstance(t, dict) or t.get("from") not in ROLES or not isinstance(t.get("value"), str):
            raise DataError(f"each turn needs 'from' in {sorted(ROLES)} and a string 'value'", field=field, **where)
        if t["from"] == "function_call":
            out.append(Message(role="assistant", tool_calls=[_call(t["value"], field, where)]))
        else:
            out.append(_message(ROLES[t["from"]], t["value"], out))
    return out


def _original(chat: Any, where: dict) -> list[Message]:
    if not isinstance(chat, str):
        raise DataError("'chat' must be a string", field="chat", **where)
    parts = _SPEAKER.split(chat)
    out: list[Message] = []
    for j, (speaker, text) in enumerate(zip(parts[1::2], parts[2::2], strict=True)):
        text = text.replace("<|endoftext|>", "").strip()
        if speaker == "ASSISTANT" and _CALL_TAG in text:
            before, _, call = text.partition(_CALL_TAG)
            calls = [_call(call.strip(), f"chat turn {j}", where)]
            out.append(Message(role="assistant", content=before.strip() or None, tool_calls=calls))
        else:
            out.append(_message({"USER": "user", "ASSISTANT": "assistant"}.get(speaker, "tool"), text, out))
    return out


def _message(role: str, text: str, history: list[Message]) -> Message:
    # A tool result names the function of the call just before it.
    name = history[-1].tool_calls[-1].name if role == "tool" and history and history[-1].tool_calls else None
    return Message(role=role, content=text, name=name)


def _call(text: str, field: str, where: dict) -> Call:
    try:
        return call_from_obj(loads_lenient(text))
    except (ValueError, SyntaxError):
        pass
    m = _QUOTED_ARGS.match(text.strip())  # arguments holding an apostrophe defeat the literal parser
    try:
        if m:
            return Call(name=m["name"], arguments=json.loads(m["args"]))
    except (ValueError, TypeError):
        pass
    raise DataError(f"function call is neither JSON nor {{\"name\": …, \"arguments\": '…'}}: {text[:80]!r}", field=field, **where)


def _system_docs(system: str, where: dict) -> list[dict]:
    """JSON function docs written one after another after the system prompt's text."""
    docs, dec = [], json.JSONDecoder()
    pos = system.find("{")
    while pos != -1:
        try:
            doc, end = dec.raw_decode(system, pos)
        except json.JSONDecodeError as e:
            raise DataError(f"function doc in the system prompt is not JSON: {e.msg}", field="system", **where) from None
        docs.append(doc)
        pos = system.find("{", end)
    return docs
