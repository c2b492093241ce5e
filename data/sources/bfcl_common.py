"""What BFCL-layout sources share: ground truth → `Expected`, question → messages."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from data.errors import DataError
from data.pycall import PyCallError, parse_calls
from data.schema import Call, Expected, ExpectedArg, ExpectedCall, Message, Tool

_DEDUP_SUFFIX = re.compile(r"^(?P<base>.+?)(?:_| )\d+$")


def expected_from_ground_truth(
    gt: Any,
    *,
    tools: list[Tool] | None = None,
    repairs: list[str] | None = None,
    path: str | Path | None = None,
    line: int | None = None,
) -> Expected:
    """BFCL's `ground_truth` → Expected.

    Forms: `[{fn: {param: [acceptable values]}}, ...]`, or one dict of calls
    (v1 `parallel_multiple_function`, where a function called twice is keyed
    `fn_1`, `fn_2` — or `fn 1`, `fn 2` in some files: the suffix is removed when `fn` is a tool in scope and
    `fn_1` is not); `""` among the values means "may be omitted"; `[]` means
    no call. With `tools`, one known flaw of the v1 data is repaired (a
    parameter of the previous call written as a call of its own); each repair
    is described in `repairs`.
    """
    names = {t.name for t in tools or []}
    if isinstance(gt, dict):
        gt = [{k: v} for k, v in gt.items()]
    if not isinstance(gt, list):
        raise DataError(f"expected a list of calls, got {type(gt).__name__}", path=path, line=line, field="ground_truth")
    if not gt:
        return Expected.nothing()
    calls: list[ExpectedCall] = []
    for i, item in enumerate(gt):
        field = f"ground_truth[{i}]"
        if not isinstance(item, dict) or len(item) != 1:
            raise DataError("each call must be a one-key object {function: {param: [values]}}", path=path, line=line, field=field)
        ((name, params),) = item.items()
        if not isinstance(params, dict):
            prev = calls[-1] if calls else None
            prev_tool = next((t for t in tools or [] if prev and t.name == prev.name), None)
            if prev and prev_tool and name in (prev_tool.parameters.get("properties") or {}) and isinstance(params, list):
                prev.args[name] = _expected_arg(name, params, path=path, line=line, field=field)
                if repairs is not None:
                    repairs.append(f"{field}: {name!r} is a parameter of {prev.name!r}; moved into that call")
                continue
            raise DataError(f"arguments of {name!r} must be an object", path=path, line=line, field=field)
        m = _DEDUP_SUFFIX.match(name)
        if names and name not in names and m and m["base"] in names:
            name = m["base"]
        props = next((t.parameters.get("properties") or {} for t in tools or [] if t.name == name), {})
        args = {}
        for p, v in params.items():
            if v == [] and (props.get(p) or {}).get("type") == "array":
                # BFCL v4 live_simple writes `[]` (no acceptable value) where it means "the empty list".
                v = [[]]
                if repairs is not None:
                    repairs.append(f"{field}.{p}: no acceptable value; read as the empty list")
            args[p] = _expected_arg(f"{name}.{p}", v, path=path, line=line, field=f"{field}.{p}")
        calls.append(ExpectedCall(name=name, args=args))
    return Expected(alternatives=[calls])


def _expected_arg(what: str, values: Any, *, path: str | Path | None, line: int | None, field: str) -> ExpectedArg:
    if not isinstance(values, list):
        raise DataError(f"acceptable values of {what} must be a list, got {values!r}", path=path, line=line, field=field)
    if not values:
        raise DataError(f"no acceptable value for {what}", path=path, line=line, field=field)
    return ExpectedArg(values=[v for v in values if v != ""], optional="" in values)


def param_order(tools: list[Tool]) -> dict[str, list[str]]:
    return {t.name: list((t.parameters.get("properties") or {}).keys()) for t in tools}


def calls_from_strings(
    strings: list[str], tools: list[Tool], *, path: str | Path | None = None, line: int | None = None, field: str
) -> list[Call]:
    """BFCL's executable/multi-turn ground truth: Python call strings → calls."""
    order = param_order(tools)
    calls: list[Call] = []
    for i, s in enumerate(strings):
        try:
            calls.extend(parse_calls(s, order))
        except PyCallError as e:
            raise DataError(f"ground-truth call {s!r}: {e}", path=path, line=line, field=f"{field}[{i}]") from None
    return calls


def messages_from_question(q: Any, *, path: str | Path | None = None, line: int | None = None) -> list[Message]:
    """BFCL v1 `question` (a string) or v3/v4 (`[[{role, content}, ...]]`, one list per turn)."""
    if isinstance(q, str):
        return [Message(role="user", content=q)]
    if isinstance(q, list):
        turns = q if q and all(isinstance(t, list) for t in q) else [q]
        out = []
        for t in turns:
            for m in t:
                if not isinstance(m, dict) or "role" not in m:
                    raise DataError("each turn must be a list of {role, content}", path=path, line=line, field="question")
                out.append(Message(role=m["role"], content=m.get("content")))
        return out
    raise DataError(f"question must be a string or a list of turns, got {type(q).__name__}", path=path, line=line, field="question")


def id_and_tools(row: dict[str, Any], *, path: str | Path, line: int) -> tuple[str, list[Tool]]:
    """A BFCL question row's id and its function docs as Tools, or a DataError saying which is bad."""
    from data.tools import tools_from_docs

    qid = row.get("id")
    if not isinstance(qid, str):
        raise DataError("missing or non-string id", path=path, line=line, field="id")
    try:
        return qid, tools_from_docs(row.get("function"))
    except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"bad function doc: {e}", path=path, line=line, field="function") from None
