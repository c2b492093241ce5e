"""NousResearch Hermes function-calling v1 (ShareGPT rows); one example per assistant turn (see `_chat`).

    switchcraft ingest --source hermes --path func-calling-singleturn.json
    switchcraft ingest --source hermes --path NousResearch/hermes-function-calling-v1   # hub, needs network

Rows: `id`, `conversations` (from ∈ system, human, gpt, tool), `category`,
`subcategory`, `task`. The system turn lists the tools between `<tools>` and
`</tools>` (a JSON list, or Python-literal dicts as some files write them);
gpt turns call as `<tool_call>{"name": …, "arguments": {…}}</tool_call>`,
one tag per call; tool turns wrap results in `<tool_response>…</tool_response>`.
The system turn is dropped: besides the tools it only teaches this XML call
format, which would contradict native tool calling. Rows without `<tools>`
(the json-mode files) are skipped, counted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from data.errors import DataError
from data.io import iter_rows
from data.schema import Example, Message
from data.sources import ADAPTERS, IngestReport
from data.sources._chat import call_from_obj, loads_lenient, turn_examples
from data.tools import tools_from_docs

SOURCE = "hermes"
ROLES = {"system": "system", "human": "user", "gpt": "assistant", "tool": "tool"}
_TOOLS = re.compile(r"<tools>(.*?)</tools>", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_TOOL_RESPONSE = re.compile(r"<tool_response>(.*?)</tool_response>", re.DOTALL)


@ADAPTERS.register(SOURCE)
def read_hermes(location: str, report: IngestReport) -> Iterator[Example]:
    for line, row in iter_rows(location):
        where = {"path": location, "line": line}
        turns = row.get("conversations")
        if not isinstance(turns, list) or not all(isinstance(t, dict) and t.get("from") in ROLES for t in turns):
            raise DataError(f"'conversations' must be a list of {{from, value}} with from in {sorted(ROLES)}", field="conversations", **where)
        system = next((t.get("value") or "" for t in turns if t["from"] == "system"), "")
        # The preamble itself mentions "<tools> </tools>": only non-blank blocks list tools.
        blocks = [b for b in _TOOLS.findall(system) if b.strip()]
        if not blocks:
            report.skip(SOURCE, "no <tools> in the system turn (not function calling)")
            continue
        tools = [t for b in blocks for t in _tools(b, where)]
        messages = [m for i, t in enumerate(turns) if t["from"] != "system" for m in _messages(t, i, where)]
        meta = {k: row[k] for k in ("category", "subcategory", "task") if row.get(k) is not None}
        yield from turn_examples(SOURCE, str(row.get("id", line)), messages, tools, report, meta)


def _tools(text: str, where: dict) -> list:
    try:
        docs: Any = loads_lenient(text.strip())
    except (ValueError, SyntaxError):
        # One JSON object after another, not a list.
        docs, dec, pos = [], json.JSONDecoder(), text.find("{")
        while pos != -1:
            try:
                doc, end = dec.raw_decode(text, pos)
            except json.JSONDecodeError as e:
                raise DataError(f"<tools> is neither JSON nor Python literals: {e.msg}", field="conversations[0].value", **where) from None
            docs.append(doc)
            pos = text.find("{", end)
    try:
        return tools_from_docs(docs)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DataError(f"bad function doc in <tools>: {e}", field="conversations[0].value", **where) from None


def _messages(turn: dict, i: int, where: dict) -> list[Message]:
    text, role, field = turn.get("value") or "", ROLES[turn["from"]], f"conversations[{i}].value"
    if role == "assistant":
        calls = []
        for body in _TOOL_CALL.findall(text):
            try:
                calls.append(call_from_obj(loads_lenient(body.strip())))
            except (ValueError, SyntaxError) as e:
                raise DataError(f"<tool_call> is not a {{name, arguments}} object: {e}", field=field, **where) from None
        rest = _TOOL_CALL.sub("", text).strip()
        return [Message(role="assistant", content=rest or None, tool_calls=calls)]
    if role == "tool":
        # One message per result, named by the function when the result says so.
        bodies = _TOOL_RESPONSE.findall(text) or [text]
        return [Message(role="tool", content=b.strip(), name=_result_name(b)) for b in bodies]
    return [Message(role=role, content=text)]


def _result_name(body: str) -> str | None:
    try:
        obj = loads_lenient(body.strip())
    except (ValueError, SyntaxError):
        return None
    return obj.get("name") if isinstance(obj, dict) and isinstance(obj.get("name"), str) else None
