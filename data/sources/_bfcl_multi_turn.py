"""BFCL v3/v4 multi-turn entries → one Example per user turn (used by `bfcl_v4`).

An entry holds `question` (one list of messages per turn), `involved_classes`
(whose function docs live in `multi_turn_func_doc/`), `excluded_function`,
`initial_config` (the backend state) and, in `miss_func`, `missed_function`
(`{"3": ["sort"]}`: `sort` is withheld until turn 3, whose question is empty
and stands for BFCL's "I have updated some more functions" message). The
answer file gives, per turn, the ground-truth calls as Python strings.

The example for turn k carries the earlier turns and their ground-truth calls
as history. BFCL executes those calls against live backends; their results
are not in the data, so the history has no tool results (`meta.history`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from data.errors import DataError
from data.io import iter_json_rows
from data.schema import Call, Example, Expected, Message, Tool
from data.sources import IngestReport
from data.sources.bfcl_common import calls_from_strings
from data.tools import tools_from_docs

# Class → doc file, as in bfcl_eval/constants/executable_backend_config.py.
FUNC_DOC_FILES = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
    "WebSearchAPI": "web_search.json",
}
# What BFCL sends (FC mode) in the turn where withheld functions come back.
ADDED_FUNCTIONS_PROMPT = "I have updated some more functions you can choose from. What about now?"


def multi_turn_examples(
    source: str, category: str, qfile: Path, afile: Path, doc_dir: Path, report: IngestReport
) -> Iterator[Example]:
    answers = {row.get("id"): (line, row.get("ground_truth")) for line, row in iter_json_rows(afile)}
    docs: dict[str, list[Tool]] = {}
    for line, row in iter_json_rows(qfile):
        qid = row.get("id")
        if qid not in answers:
            report.skip(source, f"{category}: no answer for id")
            continue
        ans_line, gt = answers[qid]
        turns, classes = row.get("question"), row.get("involved_classes")
        if not isinstance(turns, list) or not isinstance(gt, list) or len(gt) != len(turns):
            raise DataError("question and ground_truth must be lists with one item per turn", path=afile, line=ans_line, field="ground_truth")
        if not isinstance(classes, list):
            raise DataError("involved_classes must be a list", path=qfile, line=line, field="involved_classes")
        excluded = set(row.get("excluded_function") or [])
        every_tool = [t for c in classes for t in _class_tools(c, doc_dir, docs, qfile, line) if t.name not in excluded]
        withheld = {int(k): set(v) for k, v in (row.get("missed_function") or {}).items()}
        config = row.get("initial_config") or {}
        base_meta = {
            "multi_turn": True,
            "n_turns": len(turns),
            "involved_classes": classes,
            "excluded_functions": sorted(excluded),
            "long_context": "long_context" in category,
            # The state itself is large (file trees, bookings): keep where it is, say what it covers.
            "initial_config": {c: sorted(v) if isinstance(v, dict) else [] for c, v in config.items()},
            "history": "earlier user turns and their ground-truth calls; no tool results",
        }
        history: list[Message] = []
        for k, (msgs, calls_src) in enumerate(zip(turns, gt, strict=True)):
            field = f"ground_truth[{k}]"
            calls = calls_from_strings(calls_src, every_tool, path=afile, line=ans_line, field=field)
            missing = {n for t, names in withheld.items() if t > k for n in names}
            tools = [t for t in every_tool if t.name not in missing]
            user = _turn_messages(msgs, k, k in withheld, qfile, line)
            meta = dict(base_meta, turn=k)
            if missing:
                meta["missing_functions"] = sorted(missing)
            if k in withheld:
                meta["added_functions"] = sorted(withheld[k])
            unoffered = sorted({c.name for c in calls} - {t.name for t in tools})
            if unoffered:
                # An upstream flaw (miss_func_49 calls `tail` two turns before it is given back):
                # no answer could be right, so the turn would only add a wrong label.
                report.skip(source, f"{category}: ground truth calls a function not offered in that turn")
                report.notes.append(f"{source}:{qid}:turn{k}: ground truth calls {unoffered}, not offered then")
            else:
                yield Example(
                    id=f"{source}:{qid}:turn{k}",
                    source=source,
                    category=category,
                    messages=history + user,
                    tools=tools,
                    expected=Expected.exact(calls) if calls else Expected.nothing(),
                    meta=meta,
                )
            history = history + user + [_assistant(calls)]


def _class_tools(cls: str, doc_dir: Path, cache: dict[str, list[Tool]], qfile: Path, line: int) -> list[Tool]:
    if cls not in cache:
        if cls not in FUNC_DOC_FILES:
            raise DataError(f"unknown class {cls!r}; known: {', '.join(FUNC_DOC_FILES)}", path=qfile, line=line, field="involved_classes")
        path = doc_dir / FUNC_DOC_FILES[cls]
        cache[cls] = tools_from_docs([row for _, row in iter_json_rows(path)])
    return cache[cls]


def _turn_messages(msgs: Any, k: int, functions_added: bool, qfile: Path, line: int) -> list[Message]:
    if not isinstance(msgs, list) or not all(isinstance(m, dict) and "role" in m for m in msgs):
        raise DataError(f"turn {k} must be a list of {{role, content}}", path=qfile, line=line, field=f"question[{k}]")
    if not msgs:
        if not functions_added:
            raise DataError(f"turn {k} is empty but no functions are added in it", path=qfile, line=line, field=f"question[{k}]")
        return [Message(role="user", content=ADDED_FUNCTIONS_PROMPT)]
    return [Message(role=m["role"], content=m.get("content")) for m in msgs]


def _assistant(calls: list[Call]) -> Message:
    # A turn whose right answer is no call was answered in text BFCL does not record.
    return Message(role="assistant", tool_calls=calls) if calls else Message(role="assistant", content=None)
