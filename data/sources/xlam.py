"""Salesforce xLAM function-calling 60k (APIGen): one row = one query, its tools, its calls.

    switchcraft ingest --source xlam --path ../shared/data/xlam/rows.jsonl
    switchcraft ingest --source xlam --path Salesforce/xlam-function-calling-60k   # hub, needs network

`query` is text; `tools` and `answers` are JSON strings (tools:
`{name, description, parameters: {p: {type, description, default?}}}`,
answers: `[{name, arguments}]`). xLAM checks calls exactly, so Expected is
`Expected.exact` with argument values as given. Category follows BFCL's
naming from the row's shape: simple / multiple (one call; one or several
tools offered), parallel / parallel_multiple (several calls; one or several
distinct functions called).
"""

from __future__ import annotations

from collections.abc import Iterator

from data.errors import DataError
from data.io import iter_rows, parse_json_field
from data.schema import Call, Example, Expected, Message
from data.sources import ADAPTERS, IngestReport
from data.tools import json_type, tool_from_doc

SOURCE = "xlam"


@ADAPTERS.register(SOURCE)
def read_xlam(location: str, report: IngestReport) -> Iterator[Example]:
    for line, row in iter_rows(location):
        where = {"path": location, "line": line}
        if row.get("id") is None or not isinstance(row.get("query"), str) or not row["query"].strip():
            raise DataError("a row needs 'id' and a non-empty 'query'", field="id" if row.get("id") is None else "query", **where)
        docs = parse_json_field(row.get("tools"), field="tools", **where)
        try:
            tools = [tool_from_doc(_as_json_schema(d)).model_copy(update={"original": d}) for d in docs]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise DataError(f"bad function doc: {e}", field="tools", **where) from None
        answers = parse_json_field(row.get("answers"), field="answers", **where)
        if not isinstance(answers, list) or not all(_is_call(a) for a in answers):
            raise DataError("answers must be a list of {name: str, arguments: object}", field="answers", **where)
        calls = [Call(name=a["name"], arguments=a.get("arguments") or {}) for a in answers]
        if not calls:
            report.skip(SOURCE, "no answer calls")
            continue
        yield Example(
            id=f"{SOURCE}:{row['id']}",
            source=SOURCE,
            category=_category(calls, len(tools)),
            messages=[Message(role="user", content=row["query"])],
            tools=tools,
            expected=Expected.exact(calls),
        )


def _as_json_schema(doc: dict) -> dict:
    """xLAM parameters `{p: {type: "str, optional", ...}}` → a JSON Schema object.

    Done here, not by `tool_from_doc`'s guess, because a parameter may be
    named `type`; xLAM's type strings are Python annotations.
    """
    props, required = {}, []
    for name, spec in (doc.get("parameters") or {}).items():
        spec = dict(spec)
        original = spec.pop("type", "")
        base, *flags = [s.strip() for s in str(original).split(",")]
        # "List[int]" → list → array; "Callable[...]" has no JSON counterpart: no constraint.
        kind = json_type(base.split("[")[0]) or ""
        if kind:
            spec["type"] = kind
        if original != kind:
            spec["x-original-type"] = original
        props[name] = spec
        if not any(f.startswith("optional") for f in flags):
            required.append(name)
    return {**doc, "parameters": {"type": "object", "properties": props, "required": required}}


def _is_call(a: object) -> bool:
    return isinstance(a, dict) and isinstance(a.get("name"), str) and bool(a["name"]) and isinstance(a.get("arguments") or {}, dict)


def _category(calls: list[Call], n_tools: int) -> str:
    if len(calls) == 1:
        return "simple" if n_tools == 1 else "multiple"
    return "parallel" if len({c.name for c in calls}) == 1 else "parallel_multiple"
